"""The REAL clients against the REAL daemon: lossctl and the Python examples
(client/python/examples).

The clients run in the host namespace and reach the daemon through its Unix socket only
(`lossctl --addr unix://SOCK`, `inject.py --socket SOCK`); every client process is
registered with the Lab, so Lab.close() kills it too, and dies with this process
(PR_SET_PDEATHSIG). Traffic flows only between the lab's namespaces.

    ClientDaemon        lab.daemon.Daemon seen through lossctl (no gRPC channel of its own)
    ClientTestCase      lab.daemon.DaemonTestCase with a ClientDaemon
    client_popen(), run_client()    a client process, and its Result
"""

import json
import os
import re
import subprocess
import time

from lab import config
from lab.daemon import Daemon, DaemonTestCase, wait_until
from lab.netns import die_with_parent

EXAMPLES = os.path.join(config.PYCLIENT, "examples")


def client_popen(lab, cmd, **kw):
    """Starts a client in the host namespace; the Lab kills it on close, and it dies with us."""
    kw.setdefault("text", True)
    env = dict(os.environ)
    env.pop("LOSSD_ADDR", None)
    env["PYTHONPATH"] = config.PYCLIENT
    env["LOSSD_PYTHON_STUBS"] = config.STUBS
    env.update(kw.pop("env", {}))
    p = subprocess.Popen(cmd, preexec_fn=die_with_parent, env=env, **kw)
    lab.procs.append(p)
    return p


class Result:
    def __init__(self, cmd, rc, out, err, secs):
        self.cmd, self.rc, self.out, self.err, self.secs = cmd, rc, out, err, secs

    def json(self):
        return json.loads(self.out)

    def lines(self):
        return [json.loads(l) for l in self.out.splitlines() if l.strip()]

    def __repr__(self):
        return "$ %s\n-> exit %s after %.2fs\nstdout:\n%s\nstderr:\n%s" % (
            " ".join(self.cmd), self.rc, self.secs, self.out, self.err)


def run_client(lab, cmd, timeout=30, stdin=None):
    t0 = time.monotonic()
    p = client_popen(lab, cmd, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError("timed out after %ss: %s\nstdout:\n%s\nstderr:\n%s"
                             % (timeout, " ".join(cmd), out, err))
    return Result(cmd, p.returncode, out, err, time.monotonic() - t0)


class ClientDaemon(Daemon):
    """The daemon, and lossctl pointed at it: health(), effect() and clear() go through
    lossctl here (-o json), the client these suites test."""

    connect = False

    def ctl_cmd(self, *args, addr=None):
        return [config.LOSSCTL, "--addr", addr or self.addr] + [str(a) for a in args]

    def ctl(self, *args, timeout=30, stdin=None, addr=None):
        return run_client(self.lab, self.ctl_cmd(*args, addr=addr), timeout=timeout, stdin=stdin)

    def ctl_ok(self, *args, **kw):
        r = self.ctl(*args, **kw)
        assert r.rc == 0, r
        return r

    def ctlj(self, *args, **kw):
        """`lossctl -o json ARGS`, exit 0, stdout parsed as one JSON object."""
        r = self.ctl_ok("-o", "json", *args, **kw)
        try:
            return r.json()
        except ValueError:
            raise AssertionError("not one JSON object: %r" % r)

    def ctl_popen(self, *args, **kw):
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("stdin", subprocess.DEVNULL)
        return client_popen(self.lab, self.ctl_cmd(*args), **kw)

    def add_rule(self, *flags):
        """lossctl -o json rule add FLAGS -> the Rule (dict)."""
        return self.ctlj("rule", "add", *flags)

    def effect(self, rid):
        return self.ctlj("rule", "effect", rid)

    def health(self):
        return self.ctlj("status")["health"]

    def clear(self):
        self.ctl_ok("rule", "clear")

    def example_cmd(self, script, *args):
        """A Python example (client/python/examples) pointed at this daemon."""
        return [config.PY, os.path.join(EXAMPLES, script), "--socket", self.sock, "--stubs", config.STUBS] + \
            [str(a) for a in args]


class ClientTestCase(DaemonTestCase):
    daemon_class = ClientDaemon
    check_alive = False


# ---- values -------------------------------------------------------------------------

def u64(x):
    """A 64-bit integer from -o json (a string), or an absent field (0)."""
    return int(x) if x not in (None, "") else 0


def counters(rule_or_effect):
    """Every lossd.v1 RuleCounters field of a rule's or effect's JSON (proto3 JSON leaves zeros
    out) as an int."""
    from lab.lossd import COUNTERS
    c = rule_or_effect.get("counters", {})
    return {k: u64(c.get(k)) for k in COUNTERS}


def retrans_by_type(effect):
    return {k: u64(v) for k, v in effect.get("retransmitted_segments", {}).items()}


def table_rows(text):
    """A lossctl table (columns 2+ spaces apart) as [dict(header -> cell)]."""
    lines = [l for l in text.splitlines() if l.strip()]
    head = re.split(r"\s{2,}", lines[0].strip())
    rows = []
    for l in lines[1:]:
        cells = re.split(r"\s{2,}", l.strip())
        rows.append(dict(zip(head, cells)))
    return head, rows


def settled_effect(d, rid, want=None, timeout=10):
    """`lossctl -o json rule effect ID` once its retransmitted segments stop changing (or equal
    `want`): the observer reports a closed flow's last retransmissions a little late."""
    last = [None]

    def ok():
        e = d.effect(rid)
        tot = sum(retrans_by_type(e).values())
        if want is not None and tot == want:
            return e
        if last[0] is not None and last[0][0] == tot and time.monotonic() - last[0][1] >= 1.0:
            return e
        if last[0] is None or last[0][0] != tot:
            last[0] = (tot, time.monotonic())
        return None
    try:
        return wait_until(ok, timeout, "rule %s's effect to settle" % rid, step=0.2)
    except AssertionError:
        return d.effect(rid)


# ---- attachments ---------------------------------------------------------------------

def attachments(lab, ns, ifname):
    """What is attached to ifname in ns: XDP (ip link), tc filters (egress/ingress), bpftool net
    (XDP and tc)."""
    out = {}
    link = json.loads(lab.run(ns, "ip", "-d", "-j", "link", "show", "dev", ifname).stdout)[0]
    out["xdp"] = link.get("xdp")
    out["tc_egress"] = lab.run(ns, "tc", "filter", "show", "dev", ifname, "egress", check=False).stdout.strip()
    out["tc_ingress"] = lab.run(ns, "tc", "filter", "show", "dev", ifname, "ingress", check=False).stdout.strip()
    r = lab.run(ns, "bpftool", "-j", "net", "show", "dev", ifname, check=False)
    try:
        net = json.loads(r.stdout)[0] if r.returncode == 0 else {}
    except (ValueError, IndexError):
        net = {}
    out["bpftool"] = {k: v for k, v in net.items() if v}
    # tcx links are not listed here: bpftool 7.1 neither shows them under `net` nor tells
    # their interface or namespace in `link show` (type 11, no ifindex), and other lossd
    # processes on the host may hold some. Tests check tcx by traffic instead.
    return out


def nothing_attached(att):
    return not att["xdp"] and not att["tc_egress"] and not att["tc_ingress"] and not att["bpftool"]
