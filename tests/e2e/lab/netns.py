"""Network namespaces for the e2e tests and benchmarks (stdlib only).

A Lab is a set of network namespaces with unique names (lossd-e2e-<pid>-<hex>-<x>), by
default two, A and B, joined by a veth pair (IF_A in A, IF_B in B) with addresses from the
documentation ranges (192.0.2.0/24, 2001:db8:e2e::/64, nodad) that exist only inside them,
and permanent neighbour entries (no ARP/ND resolution, and no packet queued behind one, in
any counted flow): traffic never leaves the namespaces. Benchmarks with other topologies
start from Lab(pair=False) and add namespaces (netns()) and veth pairs (veth()).

Everything a Lab creates (namespaces, cgroups, users and groups, temp dirs, processes it started) is removed
by Lab.close(), which runs from with/try-finally, atexit and the SIGTERM/SIGINT/SIGHUP
handlers. Children get PR_SET_PDEATHSIG(SIGKILL) so a test killed outright takes them
along, and each new Lab first removes the namespaces, cgroups and temp dirs that a dead
earlier run left behind (their names carry its pid).
"""

import atexit
import ctypes
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from lab import config, stats
from lab.lossd import Lossd

PREFIX = "lossd-e2e"

_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def die_with_parent():
    """preexec_fn of every child: SIGKILL when this process dies."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def log(*a):
    print("[e2e %s]" % time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def measured(name, **numbers):
    """Logs the numbers a test measured (for reports), one line."""
    log("MEASURED %s %s" % (name, json.dumps(numbers, sort_keys=True)))


def sh(*cmd, check=True, timeout=60, **kw):
    """Runs cmd, output captured as text; with check, a failure raises with its output."""
    r = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s%s" % (" ".join(cmd), r.returncode, r.stdout, r.stderr))
    return r


_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000


def _setns_net(path):
    """This (single-threaded, forked) process into the network namespace at path."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, "setns %s: %s" % (path, os.strerror(e)))
    finally:
        os.close(fd)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def cgroup2_mount():
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "cgroup2":
                return parts[1]
    return None


def _kill_pids(pids):
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _ns_pids(ns):
    r = sh("ip", "netns", "pids", ns, check=False)
    return [int(x) for x in r.stdout.split()] if r.returncode == 0 else []


def reap_stale():
    """Removes namespaces, temp dirs and cgroups of earlier runs whose process is gone."""
    pat = re.compile(r"^(%s-(\d+)-[0-9a-f]+-[a-z0-9]+)\b" % PREFIX)
    for line in sh("ip", "netns", "list", check=False).stdout.splitlines():
        m = pat.match(line.strip())
        if m and not pid_alive(int(m.group(2))):
            _kill_pids(_ns_pids(m.group(1)))
            sh("ip", "netns", "del", m.group(1), check=False)
            log("removed stale namespace", m.group(1))
    tmp = tempfile.gettempdir()
    for name in os.listdir(tmp):
        m = re.match(r"^%s-(\d+)-\w+$" % PREFIX, name)
        if m and not pid_alive(int(m.group(1))) and os.path.isdir(os.path.join(tmp, name)):
            shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
    for kind, db in (("user", "/etc/passwd"), ("group", "/etc/group")):
        for name in _account_names(db):
            m = re.match(r"^%s-(\d+)-[0-9a-f]+$" % PREFIX, name)
            if m and not pid_alive(int(m.group(1))):
                sh(kind + "del", name, check=False)
                log("removed stale", kind, name)
    root = cgroup2_mount()
    if root and os.path.isdir(root):
        for name in os.listdir(root):
            m = re.match(r"^%s-(\d+)-[0-9a-f]+$" % PREFIX, name)
            if m and not pid_alive(int(m.group(1))):
                _remove_cgroup(os.path.join(root, name))
                log("removed stale cgroup", name)


def _account_names(db):
    try:
        with open(db) as f:
            return [line.split(":", 1)[0] for line in f if line.startswith(PREFIX + "-")]
    except OSError:
        return []


def _remove_cgroup(path):
    """Removes the cgroup and every cgroup below it (deepest first), killing what runs there."""
    try:
        subs = [e.path for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return
    for sub in subs:
        _remove_cgroup(sub)
    for _ in range(50):
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = [int(x) for x in f.read().split()]
        except FileNotFoundError:
            return
        _kill_pids(pids)
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
    log("could not remove cgroup", path)


_live_labs = []


def _close_all():
    for lab in list(_live_labs):
        lab.close()


def _on_signal(sig, _frame):
    _close_all()
    os._exit(128 + sig)


atexit.register(_close_all)
for _s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(_s, _on_signal)


class Lab:
    IF_A, IF_B = "e2ea", "e2eb"
    V4_A, V4_B = "192.0.2.1", "192.0.2.2"
    V6_A, V6_B = "2001:db8:e2e::1", "2001:db8:e2e::2"

    def __init__(self, pair=True):
        reap_stale()
        self.tag = "%s-%d-%06x" % (PREFIX, os.getpid(), random.getrandbits(24))
        self.namespaces = []
        self.procs = []
        self.cgroups = []
        self.tempdirs = []
        self.users, self.groups = [], []
        self.finalizers = []  # callables run first by close() (e.g. a tmux server's kill)
        self.closed = False
        _live_labs.append(self)
        try:
            if pair:
                self.a, self.b = self.netns("a"), self.netns("b")
                self.veth(self.a, self.IF_A, self.b, self.IF_B)
                self.addresses(self.a, self.IF_A, self.V4_A + "/24", self.V6_A + "/64")
                self.addresses(self.b, self.IF_B, self.V4_B + "/24", self.V6_B + "/64")
                self.neighbours((self.a, self.IF_A, (self.V4_A, self.V6_A)),
                                (self.b, self.IF_B, (self.V4_B, self.V6_B)))
                log("lab up:", self.a, self.b)
        except BaseException:
            self.close()
            raise

    # -- topology
    def netns(self, suffix):
        """A new namespace <tag>-<suffix> with lo up; removed by close()."""
        ns = "%s-%s" % (self.tag, suffix)
        sh("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        return ns

    def veth(self, ns1, if1, ns2, if2):
        """A veth pair created inside ns1 with its peer inside ns2: it never exists in the
        host namespace."""
        sh("ip", "-n", ns1, "link", "add", if1, "type", "veth", "peer", "name", if2, "netns", ns2)

    def addresses(self, ns, ifname, *cidrs):
        """Adds the addresses (IPv6 ones nodad) and sets the link up."""
        for c in cidrs:
            if ":" in c:
                sh("ip", "-n", ns, "-6", "addr", "add", c, "dev", ifname, "nodad")
            else:
                sh("ip", "-n", ns, "addr", "add", c, "dev", ifname)
        sh("ip", "-n", ns, "link", "set", ifname, "up")

    def neighbours(self, end1, end2):
        """Permanent neighbour entries between the two ends (ns, ifname, addresses) of a link."""
        mac = {ns: json.loads(sh("ip", "-n", ns, "-j", "link", "show", "dev", ifn).stdout)[0]["address"]
               for ns, ifn, _ in (end1, end2)}
        for (ns, ifn, _), (peer, _, addrs) in ((end1, end2), (end2, end1)):
            for addr in addrs:
                sh("ip", "-n", ns, "neigh", "replace", addr, "lladdr", mac[peer], "dev", ifn,
                   "nud", "permanent")

    def tempdir(self):
        d = tempfile.mkdtemp(prefix="%s-%d-" % (PREFIX, os.getpid()))
        self.tempdirs.append(d)
        return d

    def make_group(self):
        """A new group with a unique name (groupadd); removed by close(). Returns its name."""
        name = "%s-%d-%06x" % (PREFIX, os.getpid(), random.getrandbits(24))
        sh("groupadd", name)
        self.groups.append(name)
        return name

    def make_user(self, groups=()):
        """A new unprivileged user (useradd: no home, no login shell, its own primary group),
        member of `groups`; removed by close(). Returns (name, uid, gid)."""
        name = "%s-%d-%06x" % (PREFIX, os.getpid(), random.getrandbits(24))
        cmd = ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group"]
        if groups:
            cmd += ["--groups", ",".join(groups)]
        sh(*(cmd + [name]))
        self.users.append(name)
        import pwd
        pw = pwd.getpwnam(name)
        return name, pw.pw_uid, pw.pw_gid

    def make_cgroup(self, *below):
        """A new cgroup at the top of the cgroup v2 tree with a unique name; with `below`,
        the cgroup <top>/<below[0]>/<below[1]>/... (each created if missing) under a new
        top one. Returns its path; close() removes the whole tree."""
        root = cgroup2_mount()
        if not root:
            raise AssertionError("no cgroup v2 mount in /proc/mounts")
        path = os.path.join(root, "%s-%d-%06x" % (PREFIX, os.getpid(), random.getrandbits(24)))
        os.mkdir(path)
        self.cgroups.append(path)
        for name in below:
            path = os.path.join(path, name)
            os.makedirs(path, exist_ok=True)
        return path

    def sub_cgroup(self, parent, *names):
        """<parent>/<names...> (each created if missing) in a cgroup this lab made."""
        path = os.path.join(parent, *names)
        os.makedirs(path, exist_ok=True)
        return path

    # -- processes
    def popen(self, ns, cmd, cgroup=None, nsenter=False, **kw):
        """Starts cmd inside ns (ip netns exec, or nsenter --net: keeps the host's /sys
        mounts), or in the host namespace when ns is None; close() kills it."""
        def pre():
            die_with_parent()
            if cgroup:
                # Into the namespace before the cgroup: a process of a cgroup target is never
                # seen in the host's namespace (lossd would decide its egress on the host's
                # devices until it moved).
                if ns is not None:
                    _setns_net("/run/netns/" + ns)
                with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
        if ns is None:
            full = list(cmd)
        elif nsenter:
            full = ["nsenter", "--net=/run/netns/" + ns, "--"] + list(cmd)
        else:
            full = ["ip", "netns", "exec", ns] + list(cmd)
        kw.setdefault("text", True)
        p = subprocess.Popen(full, preexec_fn=pre, **kw)
        self.procs.append(p)
        return p

    def run(self, ns, *cmd, check=True, timeout=120, **kw):
        return sh("ip", "netns", "exec", ns, *cmd, check=check, timeout=timeout, **kw)

    def lossd(self, ns, args, nsenter=False, ready=True, state_dir=None):
        """Starts lossd --json in ns with args (lab.lossd.Lossd); waits for its ready event."""
        d = Lossd(self, ns, args, nsenter=nsenter, state_dir=state_dir)
        if ready:
            d.wait_ready()
        return d

    def udp_rule_at_b(self, port, rate):
        """A one-shot lossd on B's interface dropping `rate` ("1%") of the UDP
        datagrams to `port` that arrive there."""
        return self.lossd(self.b, ["--iface", self.IF_B, "--proto", "udp", "--dport", str(port),
                                   "--rate", rate])

    def start(self, *specs):
        """Starts several lossd at once ((ns, args) pairs) and waits until all are ready."""
        ds = [Lossd(self, ns, args) for ns, args in specs]
        for d in ds:
            d.wait_ready()
        return ds

    # -- state of a namespace
    def counters(self, ns):
        """The namespace's MIB counters (stats.Counters: "Tcp.RetransSegs", ...)."""
        return stats.mib(lambda path: self.run(ns, "cat", path).stdout)

    def link_stats(self, ns, ifname):
        j = json.loads(self.run(ns, "ip", "-s", "-j", "link", "show", "dev", ifname).stdout)[0]
        s = j.get("stats64", {})
        return {"rx_packets": s.get("rx", {}).get("packets"), "rx_dropped": s.get("rx", {}).get("dropped"),
                "tx_packets": s.get("tx", {}).get("packets"), "tx_dropped": s.get("tx", {}).get("dropped")}

    def path_drops(self):
        """What the A-B veth pair's two ends count as dropped (rx + tx; a total to take
        deltas of): a loss on the path that no rule made."""
        return sum((s[k] or 0) for s in (self.link_stats(self.a, self.IF_A), self.link_stats(self.b, self.IF_B))
                   for k in ("rx_dropped", "tx_dropped"))

    def features(self, ns, ifname):
        """Every `ethtool -k` feature of ifname: name -> "on"/"off"."""
        out = self.run(ns, "ethtool", "-k", ifname).stdout
        return {m.group(1): m.group(2) for m in re.finditer(r"^\s*([\w-]+): (on|off)", out, re.M)}

    def wait_idle(self, *nss, port=None, timeout=30, check=True):
        """Until no TCP socket (of `port`, if given) but LISTEN/TIME-WAIT is left in the
        namespaces (default A and B): the kernel counters read after are final. False (or,
        with check, AssertionError) if some still are after timeout seconds."""
        end = time.monotonic() + timeout
        busy = []
        while time.monotonic() < end:
            busy = [l for ns in (nss or (self.a, self.b))
                    for l in self.run(ns, "ss", "-Htan").stdout.splitlines()
                    if not l.startswith(("TIME-WAIT", "LISTEN")) and (port is None or ":%d " % port in l)]
            if not busy:
                return True
            time.sleep(0.05)
        if check:
            raise AssertionError("TCP sockets still busy: %s" % busy)
        return False

    # -- the end
    def close(self):
        if self.closed:
            return
        self.closed = True
        for fn in reversed(self.finalizers):
            try:
                fn()
            except Exception as e:
                log("lab close: %r failed: %s" % (fn, e))
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.kill()
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except Exception:
                pass
            for f in (p.stdin, p.stdout, p.stderr):
                try:
                    if f:
                        f.close()
                except Exception:
                    pass
        for ns in self.namespaces:
            _kill_pids(_ns_pids(ns))
            sh("ip", "netns", "del", ns, check=False)
        for cg in self.cgroups:
            _remove_cgroup(cg)
        for d in self.tempdirs:
            shutil.rmtree(d, ignore_errors=True)
        for u in self.users:  # userdel also removes the user's own primary group
            sh("userdel", u, check=False)
        for g in self.groups:
            sh("groupdel", g, check=False)
        if self in _live_labs:
            _live_labs.remove(self)
        log("lab down:", self.tag)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class RouterLab(Lab):
    """Client c -- router r -- server s (c0 -- r0 on 192.0.2.0/25, r1 -- s0 on
    198.51.100.0/25), routed through r: the seed experiments' router path."""
    C_IP, R_IP0, R_IP1, S_IP = "192.0.2.1", "192.0.2.126", "198.51.100.126", "198.51.100.1"

    def __init__(self):
        super().__init__(pair=False)
        self.c, self.r, self.s = (self.netns(x) for x in "crs")
        self.veth(self.c, "c0", self.r, "r0")
        self.veth(self.r, "r1", self.s, "s0")
        for ns, ifn, addr in ((self.c, "c0", self.C_IP + "/25"), (self.r, "r0", self.R_IP0 + "/25"),
                              (self.r, "r1", self.R_IP1 + "/25"), (self.s, "s0", self.S_IP + "/25")):
            self.addresses(ns, ifn, addr)
        self.run(self.c, "ip", "route", "add", "198.51.100.0/25", "via", self.R_IP0)
        self.run(self.s, "ip", "route", "add", "192.0.2.0/25", "via", self.R_IP1)
        self.run(self.r, "sysctl", "-qw", "net.ipv4.ip_forward=1")


class DelayLab(Lab):
    """Client c -- delay d -- server s, with rtt_ms added to the round trip (c0 -- d0 on
    192.0.2.0/25, d1 -- s0 on 198.51.100.0/25): d routes both directions through a tun
    device whose reader (bench/delay_line.py) writes every packet back rtt_ms/2 later
    (this kernel has no qdisc that delays: no netem, fq or etf). rtt_ms 0: c0 -- s0 directly,
    no d. delay_report() stops the delay line and returns its JSON (packets carried, the
    largest lateness)."""
    C_IP, D_IP0, D_IP1, S_IP = "192.0.2.1", "192.0.2.126", "198.51.100.126", "198.51.100.1"
    DELAY_LINE = os.path.join(config.REPO, "bench", "delay_line.py")

    def __init__(self, rtt_ms):
        super().__init__(pair=False)
        self.rtt_ms = rtt_ms
        self.dl = None
        try:
            self.c, self.s = self.netns("c"), self.netns("s")
            if rtt_ms > 0:
                self.d = self.netns("d")
                self.veth(self.c, "c0", self.d, "d0")
                self.veth(self.d, "d1", self.s, "s0")
                addrs = ((self.c, "c0", self.C_IP), (self.d, "d0", self.D_IP0), (self.d, "d1", self.D_IP1),
                         (self.s, "s0", self.S_IP))
            else:
                self.d = None
                self.veth(self.c, "c0", self.s, "s0")
                addrs = ((self.c, "c0", self.C_IP), (self.s, "s0", self.S_IP))
            for ns, ifn, ip in addrs:
                self.addresses(ns, ifn, ip + "/25")
            if rtt_ms > 0:
                sh("ip", "-n", self.c, "route", "add", "198.51.100.0/25", "via", self.D_IP0)
                sh("ip", "-n", self.s, "route", "add", "192.0.2.0/25", "via", self.D_IP1)
                self.run(self.d, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
                         "net.ipv4.conf.default.rp_filter=0")
                self.dl = self.popen(self.d, [config.PY, self.DELAY_LINE, "--dev", "dl0", "--delay-ms", str(rtt_ms / 2.0)],
                                     stdout=subprocess.PIPE)
                if not self.dl.stdout.readline().startswith("READY"):
                    raise RuntimeError("delay line did not start")
                sh("ip", "-n", self.d, "link", "set", "dl0", "up")
                for ifn in ("d0", "d1"):
                    sh("ip", "-n", self.d, "rule", "add", "iif", ifn, "lookup", "100")
                sh("ip", "-n", self.d, "route", "add", "default", "dev", "dl0", "table", "100")
            else:
                sh("ip", "-n", self.c, "route", "add", "198.51.100.0/25", "dev", "c0")
                sh("ip", "-n", self.s, "route", "add", "192.0.2.0/25", "dev", "s0")
            log("lab up:", " ".join(self.namespaces), "rtt +%g ms" % rtt_ms)
        except BaseException:
            self.close()
            raise

    def delay_report(self):
        """Stops the delay line; its JSON line (None without one)."""
        if self.dl is None:
            return None
        self.dl.send_signal(signal.SIGTERM)
        out = self.dl.communicate(timeout=30)[0]
        self.dl = None
        return json.loads(out.strip().splitlines()[-1])
