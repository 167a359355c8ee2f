"""Network lab for lossd end-to-end tests (stdlib only).

A Lab is two network namespaces with unique names (pid + random suffix), a
veth pair between them and addresses from the documentation ranges
(192.0.2.0/24, 2001:db8::/32) that exist only inside them: traffic never
leaves the namespaces. Everything a Lab creates (namespaces, cgroups,
processes it started) is removed by Lab.close(), which runs from
try/finally, atexit and the SIGTERM/SIGINT/SIGHUP handlers. Children get
PR_SET_PDEATHSIG(SIGKILL) so a test killed outright takes them along, and
each new Lab first removes namespaces and cgroups that a dead earlier run of
these tests left behind (their names carry its pid).
"""

import argparse
import atexit
import ctypes
import json
import math
import os
import queue
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

PREFIX = "lossd-e2e"
HERE = os.path.dirname(os.path.abspath(__file__))
UDPFLOW = os.path.join(HERE, "udpflow.py")
TCPFLOW = os.path.join(HERE, "tcpflow.py")
PY = sys.executable or "/usr/bin/python3"

_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def _die_with_parent():
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def log(*a):
    print("[e2e %s]" % time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def sh(*cmd, check=True, capture=True, timeout=60):
    r = subprocess.run(list(cmd), stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.PIPE if capture else None, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s%s" % (" ".join(cmd), r.returncode,
                                                    r.stdout or "", r.stderr or ""))
    return r


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


def softnet_dropped():
    """Host-wide backlog drops (/proc/net/softnet_stat column 2), for diagnostics."""
    total = 0
    with open("/proc/net/softnet_stat") as f:
        for line in f:
            total += int(line.split()[1], 16)
    return total


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
    """Removes namespaces/cgroups of earlier runs of these tests whose process is gone."""
    r = sh("ip", "netns", "list", check=False)
    pat = re.compile(r"^(%s-(\d+)-[0-9a-f]+-[ab])\b" % PREFIX)
    for line in r.stdout.splitlines():
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
    root = cgroup2_mount()
    if root and os.path.isdir(root):
        for name in os.listdir(root):
            m = re.match(r"^%s-(\d+)-[0-9a-f]+$" % PREFIX, name)
            if m and not pid_alive(int(m.group(1))):
                _remove_cgroup(os.path.join(root, name))
                log("removed stale cgroup", name)


def _remove_cgroup(path):
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


# ---- statistics ------------------------------------------------------------

def binom_interval(n, p, conf=0.999):
    """Exact central interval [lo, hi] holding `conf` of Binomial(n, p)."""
    if p <= 0:
        return 0, 0
    if p >= 1:
        return n, n
    tail = (1 - conf) / 2
    mean = n * p
    sd = math.sqrt(n * p * (1 - p))
    k0 = max(0, int(mean - 12 * sd - 10))
    k1 = min(n, int(mean + 12 * sd + 10))
    lp, lq = math.log(p), math.log1p(-p)
    lgn = math.lgamma(n + 1)

    def pmf(k):
        return math.exp(lgn - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lp + (n - k) * lq)

    cdf, lo, hi = 0.0, None, None
    for k in range(k0, k1 + 1):
        cdf += pmf(k)
        if lo is None and cdf > tail:
            lo = k
        if hi is None and cdf >= 1 - tail:
            hi = k
            break
    return lo, (hi if hi is not None else k1)


# ---- kernel counters -------------------------------------------------------

def _parse_pairs(text):
    out = {}
    lines = text.splitlines()
    for i in range(0, len(lines) - 1, 2):
        h, v = lines[i].split(), lines[i + 1].split()
        if not h or h[0] != v[0]:
            continue
        pre = h[0].rstrip(":")
        for k, x in zip(h[1:], v[1:]):
            out[pre + "." + k] = int(x)
    return out


class Counters(dict):
    def __sub__(self, other):
        return Counters({k: v - other.get(k, 0) for k, v in self.items()})

    def __missing__(self, k):
        return 0


# ---- processes ---------------------------------------------------------------

class Lossd:
    """A lossd process: JSON lines on stdout collected by a thread."""

    def __init__(self, lab, ns, args, lossd, nsenter=False, state_dir=None):
        self.lab = lab
        self.ns = ns
        self.state_dir = state_dir or lab.tempdir()
        self.stderr_path = os.path.join(lab.tempdir(), "lossd-stderr.log")
        cmd = [lossd, "--json", "--state-dir", self.state_dir] + list(args)
        with open(self.stderr_path, "w") as err:
            self.proc = lab.popen(ns, cmd, stdout=subprocess.PIPE, stderr=err, nsenter=nsenter)
        self.events = []
        self._q = queue.Queue()
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()
        self.ready = None
        self.final = None

    def _read(self):
        for line in self.proc.stdout:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            self.events.append(ev)
            self._q.put(ev)
        self._q.put(None)

    def stderr(self):
        try:
            with open(self.stderr_path) as f:
                return f.read()
        except OSError:
            return ""

    def wait_event(self, kind, timeout=30):
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError("lossd: no %s event in %ss; stderr:\n%s" % (kind, timeout, self.stderr()))
            try:
                ev = self._q.get(timeout=left)
            except queue.Empty:
                continue
            if ev is None:
                self.proc.wait()
                raise AssertionError("lossd exited (%s) before %s; stderr:\n%s"
                                     % (self.proc.returncode, kind, self.stderr()))
            if ev.get("event") == kind:
                return ev

    def wait_ready(self, timeout=30):
        self.ready = self.wait_event("ready", timeout)
        return self.ready

    def last_counters(self):
        for ev in reversed(self.events):
            if ev.get("event") in ("counters", "final"):
                return ev
        return None

    def stop(self, timeout=30, expect_final=True):
        """SIGTERM, wait, return the final event (a lossd without a rule prints none)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("lossd did not exit on SIGTERM; stderr:\n" + self.stderr())
        self._t.join(5)
        finals = [e for e in self.events if e.get("event") == "final"]
        self.final = finals[-1] if finals else None
        if self.proc.returncode != 0:
            raise AssertionError("lossd exited %d; stderr:\n%s" % (self.proc.returncode, self.stderr()))
        if self.final is None and expect_final:
            raise AssertionError("lossd printed no final event; stderr:\n" + self.stderr())
        return self.final

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._t.join(5)


class UdpReceiver:
    def __init__(self, lab, ns, bind, port, flow, cgroup=None, rcvbuf=32 << 20, list_missing=False):
        cmd = [PY, UDPFLOW, "recv", "--bind", bind, "--port", str(port), "--flow", str(flow),
               "--rcvbuf", str(rcvbuf)] + (["--list-missing"] if list_missing else [])
        self.proc = lab.popen(ns, cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cgroup=cgroup)
        line = self.proc.stdout.readline()
        if not line.startswith("READY"):
            self.proc.kill()
            raise AssertionError("udp receiver did not start: %r" % line)

    def finish(self, timeout=30):
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        out, _ = self.proc.communicate(timeout=timeout)
        if self.proc.returncode != 0:
            raise AssertionError("udp receiver failed: %r" % out)
        return json.loads(out.strip().splitlines()[-1])


def udp_send(lab, ns, dst, port, flow, count, pps, cgroup=None, wait=True):
    cmd = [PY, UDPFLOW, "send", "--dst", dst, "--port", str(port), "--flow", str(flow),
           "--count", str(count), "--pps", str(pps)]
    p = lab.popen(ns, cmd, stdout=subprocess.PIPE, cgroup=cgroup)
    if not wait:
        return p
    return finish_sender(p, count, pps)


def udp_flows(lab, flows, settle=0.3):
    """Runs UDP flows at once. Each flow: dict(rx_ns, tx_ns, dst, port, flow, count, pps,
    [rx_cgroup], [tx_cgroup]). Returns [(sender result, receiver result)]."""
    rxs = [UdpReceiver(lab, f["rx_ns"], f["dst"], f["port"], f["flow"], cgroup=f.get("rx_cgroup"),
                       list_missing=f.get("list_missing", False))
           for f in flows]
    txs = [udp_send(lab, f["tx_ns"], f["dst"], f["port"], f["flow"], f["count"], f["pps"],
                    cgroup=f.get("tx_cgroup"), wait=False) for f in flows]
    sent = [finish_sender(p, f["count"], f["pps"]) for p, f in zip(txs, flows)]
    time.sleep(settle)
    return list(zip(sent, [r.finish() for r in rxs]))


def finish_sender(p, count=0, pps=1):
    out, _ = p.communicate(timeout=60 + 3 * count / pps)
    if p.returncode != 0:
        raise AssertionError("udp sender failed: %r" % out)
    return json.loads(out.strip().splitlines()[-1])


# ---- the lab ---------------------------------------------------------------------

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

    def __init__(self):
        reap_stale()
        tag = "%s-%d-%s" % (PREFIX, os.getpid(), "%06x" % random.getrandbits(24))
        self.tag = tag
        self.a, self.b = tag + "-a", tag + "-b"
        self.procs = []
        self.cgroups = []
        self.tempdirs = []
        self.closed = False
        _live_labs.append(self)
        try:
            self._setup()
        except BaseException:
            self.close()
            raise

    def _setup(self):
        sh("ip", "netns", "add", self.a)
        sh("ip", "netns", "add", self.b)
        # Created inside A with its peer inside B: the pair never exists in the host namespace.
        sh("ip", "-n", self.a, "link", "add", self.IF_A, "type", "veth", "peer", "name", self.IF_B,
           "netns", self.b)
        for ns, ifn, v4, v6 in ((self.a, self.IF_A, self.V4_A, self.V6_A),
                                (self.b, self.IF_B, self.V4_B, self.V6_B)):
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", v4 + "/24", "dev", ifn)
            sh("ip", "-n", ns, "-6", "addr", "add", v6 + "/64", "dev", ifn, "nodad")
            sh("ip", "-n", ns, "link", "set", ifn, "up")
        # Permanent neighbour entries: no ARP/ND resolution (and no packet queued
        # behind one) in any counted flow.
        mac = {}
        for ns, ifn in ((self.a, self.IF_A), (self.b, self.IF_B)):
            mac[ns] = json.loads(sh("ip", "-n", ns, "-j", "link", "show", "dev", ifn).stdout)[0]["address"]
        for ns, ifn, peer, v4, v6 in ((self.a, self.IF_A, self.b, self.V4_B, self.V6_B),
                                      (self.b, self.IF_B, self.a, self.V4_A, self.V6_A)):
            for addr in (v4, v6):
                sh("ip", "-n", ns, "neigh", "replace", addr, "lladdr", mac[peer], "dev", ifn,
                   "nud", "permanent")
        log("lab up:", self.a, self.b)

    def tempdir(self):
        d = tempfile.mkdtemp(prefix="%s-%d-" % (PREFIX, os.getpid()))
        self.tempdirs.append(d)
        return d

    # -- processes
    def popen(self, ns, cmd, cgroup=None, nsenter=False, **kw):
        """Starts cmd inside ns (ip netns exec, or nsenter --net: keeps the host's /sys mounts)."""
        def pre():
            _die_with_parent()
            if cgroup:
                with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
        if nsenter:
            full = ["nsenter", "--net=/run/netns/" + ns, "--"] + list(cmd)
        else:
            full = ["ip", "netns", "exec", ns] + list(cmd)
        kw.setdefault("text", True)
        p = subprocess.Popen(full, preexec_fn=pre, **kw)
        self.procs.append(p)
        return p

    def run(self, ns, *cmd, check=True, timeout=120):
        return sh("ip", "netns", "exec", ns, *cmd, check=check, timeout=timeout)

    def lossd(self, ns, args, nsenter=False, ready=True, state_dir=None):
        """Starts lossd --json in ns with args; waits for its ready event."""
        d = Lossd(self, ns, args, LOSSD, nsenter=nsenter, state_dir=state_dir)
        if ready:
            d.wait_ready()
        return d

    def counters(self, ns):
        c = Counters()
        for f in ("/proc/net/snmp", "/proc/net/netstat"):
            c.update(_parse_pairs(self.run(ns, "cat", f).stdout))
        for line in self.run(ns, "cat", "/proc/net/snmp6").stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                c["Snmp6." + parts[0]] = int(parts[1])
        return c

    def link_stats(self, ns, ifname):
        j = json.loads(self.run(ns, "ip", "-s", "-j", "link", "show", "dev", ifname).stdout)[0]
        s = j.get("stats64", {})
        return {"rx_packets": s.get("rx", {}).get("packets"), "rx_dropped": s.get("rx", {}).get("dropped"),
                "tx_packets": s.get("tx", {}).get("packets"), "tx_dropped": s.get("tx", {}).get("dropped")}

    def features(self, ns, ifname):
        """Every `ethtool -k` feature of ifname: name -> "on"/"off"."""
        out = self.run(ns, "ethtool", "-k", ifname).stdout
        return {m.group(1): m.group(2) for m in re.finditer(r"^\s*([\w-]+): (on|off)", out, re.M)}

    def make_cgroup(self):
        root = cgroup2_mount()
        if not root:
            raise AssertionError("no cgroup v2 mount in /proc/mounts")
        path = os.path.join(root, "%s-%d-%06x" % (PREFIX, os.getpid(), random.getrandbits(24)))
        os.mkdir(path)
        self.cgroups.append(path)
        return path

    def tcp_flow(self, server_ns, client_ns, dst, port=5201, mbytes=150, rate_mbit=500,
                 cgroup=None, timeout=60):
        """One paced TCP bulk transfer that ends only after the receiver read every byte.

        Returns (sender json, receiver json) once both ends are closed and no
        TCP socket but TIME-WAIT/LISTEN is left in either namespace, so the
        kernel counters read afterwards are final.
        """
        srv = self.popen(server_ns, [PY, TCPFLOW, "recv", "--bind", "::" if ":" in dst else "0.0.0.0",
                                     "--port", str(port)], stdout=subprocess.PIPE)
        line = srv.stdout.readline()
        if not line.startswith("READY"):
            srv.kill()
            raise AssertionError("tcp receiver did not start: %r" % line)
        cli = self.popen(client_ns, [PY, TCPFLOW, "send", "--dst", dst, "--port", str(port),
                                     "--bytes", str(int(mbytes * 1e6)), "--rate-mbit", str(rate_mbit),
                                     "--timeout", str(timeout)],
                         stdout=subprocess.PIPE, cgroup=cgroup)
        cout, _ = cli.communicate(timeout=timeout + 30)
        sout, _ = srv.communicate(timeout=30)
        if cli.returncode != 0 or srv.returncode != 0:
            raise AssertionError("tcp flow failed: sender %r receiver %r" % (cout, sout))
        self.wait_tcp_idle()
        return json.loads(cout.strip().splitlines()[-1]), json.loads(sout.strip().splitlines()[-1])

    def tcp_loss_run(self, lossd_ns, lossd_args, dst, mbytes=187.5, rate_mbit=500, cgroup=None,
                     nsenter=False):
        """A paced TCP transfer A -> B under a lossd rule (or none when lossd_args is None).

        Returns dict(sender, receiver, final (lossd's final event), ready, da/db (kernel
        counter deltas in A/B, read after every socket closed)).
        """
        d = self.lossd(lossd_ns, lossd_args, nsenter=nsenter) if lossd_args is not None else None
        a0, b0 = self.counters(self.a), self.counters(self.b)
        s, r = self.tcp_flow(self.b, self.a, dst, mbytes=mbytes, rate_mbit=rate_mbit, cgroup=cgroup)
        da, db = self.counters(self.a) - a0, self.counters(self.b) - b0
        f = d.stop() if d else None
        return dict(sender=s, receiver=r, final=f, ready=d.ready if d else None, da=da, db=db)

    def wait_tcp_idle(self, timeout=20):
        end = time.monotonic() + timeout
        busy = []
        while time.monotonic() < end:
            busy = [l for ns in (self.a, self.b)
                    for l in self.run(ns, "ss", "-Htan").stdout.splitlines()
                    if not l.startswith(("TIME-WAIT", "LISTEN"))]
            if not busy:
                return
            time.sleep(0.05)
        raise AssertionError("TCP sockets still busy: %s" % busy)

    def close(self):
        if self.closed:
            return
        self.closed = True
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
        for ns in (self.a, self.b):
            _kill_pids(_ns_pids(ns))
            sh("ip", "netns", "del", ns, check=False)
        for cg in self.cgroups:
            _remove_cgroup(cg)
        for d in self.tempdirs:
            shutil.rmtree(d, ignore_errors=True)
        if self in _live_labs:
            _live_labs.remove(self)
        log("lab down:", self.tag)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


LOSSD = None  # path of the lossd binary under test (set by main)


def main():
    """Entry point of every e2e script: --lossd PATH, then unittest's own arguments."""
    global LOSSD
    ap = argparse.ArgumentParser()
    ap.add_argument("--lossd", required=True)
    args, rest = ap.parse_known_args()
    LOSSD = os.path.abspath(args.lossd)
    if os.geteuid() != 0:
        print("skipped: the e2e tests need root (network namespaces, BPF)")
        sys.exit(77)
    import unittest
    unittest.main(module="__main__", argv=[sys.argv[0]] + rest, verbosity=2)


TCP_KEYS = ("Tcp.RetransSegs", "Tcp.OutSegs", "TcpExt.TCPOrigDataSent", "TcpExt.TCPDSACKRecvSegs",
            "TcpExt.TCPLossProbes", "TcpExt.TCPFastRetrans", "TcpExt.TCPSlowStartRetrans",
            "TcpExt.TCPTimeouts", "TcpExt.TCPLostRetransmit", "TcpExt.TCPRetransFail",
            "TcpExt.TCPSynRetrans", "TcpExt.TCPSpuriousRTOs", "Tcp.OutRsts")


def tcp_summary(run):
    """The numbers of a tcp_loss_run worth reporting."""
    out = {"sender_" + k.split(".")[1]: run["da"][k] for k in TCP_KEYS}
    out["receiver_OutRsts"] = run["db"]["Tcp.OutRsts"]
    f = run["final"] or {}
    for k in ("matched_pkts", "matched_segs", "dropped_pkts", "dropped_segs"):
        if k in f:
            out[k] = f[k]
    out["bytes"] = run["receiver"]["bytes"]
    out["send_secs"] = run["sender"]["secs"]
    out["socket_total_retrans"] = run["sender"]["total_retrans"]
    out["send_errors"] = run["sender"]["errors"]
    return out


def measured(test, **numbers):
    """Logs the numbers a test measured (for reports), one line."""
    log("MEASURED %s %s" % (test, json.dumps(numbers, sort_keys=True)))
