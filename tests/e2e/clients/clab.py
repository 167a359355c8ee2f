"""Shared helpers for the client e2e tests: the REAL lossd daemon driven by the REAL clients
(lossctl, the Python examples in client/python/examples).

Every test builds a netlab.Lab (two fresh namespaces A and B joined by a veth pair,
documentation addresses only, removed by Lab.close() from with/try-finally, atexit and
SIGTERM/SIGINT/SIGHUP) and starts the daemon inside one of them:

    ip netns exec NS lossd --json --state-dir TMP --socket /tmp/lossd-e2e-PID-xxx/lossd.sock

The socket and state directories are Lab temp dirs (unique per daemon, removed at the end).
The clients run in the host namespace and reach the daemon through its Unix socket only
(`lossctl --addr unix://SOCK`, `inject.py --socket SOCK`); every client process is
registered with the Lab, so Lab.close() kills it too, and dies with this process
(PR_SET_PDEATHSIG). Traffic flows only between the two namespaces.

Entry point of every script: --lossd PATH --lossctl PATH --stubs DIR (<build>/python), then
unittest's own arguments.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.dirname(HERE)
sys.path.insert(0, E2E)  # tests/e2e: netlab.py, tcpflow.py, udpflow.py (read-only: no .pyc there)
sys.dont_write_bytecode = True

import netlab  # noqa: E402

PY = "/usr/bin/python3"
REPO = os.path.dirname(os.path.dirname(E2E))
PYCLIENT = os.path.join(REPO, "client", "python")
EXAMPLES = os.path.join(PYCLIENT, "examples")
CFLOW = os.path.join(HERE, "cflow.py")

LOSSCTL = None
STUBS = None
log = netlab.log
measured = netlab.measured


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lossd", required=True)
    ap.add_argument("--lossctl", required=True)
    ap.add_argument("--stubs", required=True, help="<build>/python (generated lossd_pb2*.py)")
    args, rest = ap.parse_known_args()
    global LOSSCTL, STUBS
    netlab.LOSSD = os.path.abspath(args.lossd)
    LOSSCTL = os.path.abspath(args.lossctl)
    STUBS = os.path.abspath(args.stubs)
    if os.geteuid() != 0:
        print("skipped: the e2e tests need root (network namespaces, BPF)")
        sys.exit(77)
    import unittest
    unittest.main(module="__main__", argv=[sys.argv[0]] + rest, verbosity=2)


# ---- processes outside the namespaces (clients) -------------------------------------

def client_popen(lab, cmd, **kw):
    """Starts a client in the host namespace; the Lab kills it on close, and it dies with us."""
    kw.setdefault("text", True)
    env = dict(os.environ)
    env.pop("LOSSD_ADDR", None)
    env["PYTHONPATH"] = PYCLIENT
    env["LOSSD_PYTHON_STUBS"] = STUBS
    env.update(kw.pop("env", {}))
    p = subprocess.Popen(cmd, preexec_fn=netlab._die_with_parent, env=env, **kw)
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


# ---- the daemon ---------------------------------------------------------------------

class Daemon:
    """`lossd --socket SOCK` (daemon mode) in namespace ns, and lossctl pointed at it."""

    def __init__(self, lab, ns, extra=(), state_dir=None, sockdir=None):
        self.lab = lab
        self.ns = ns
        self.sockdir = sockdir or lab.tempdir()
        self.sock = os.path.join(self.sockdir, "lossd.sock")
        self.addr = "unix://" + self.sock
        self.state_dir = state_dir or lab.tempdir()
        t0 = time.monotonic()
        self.p = netlab.Lossd(lab, ns, ["--socket", self.sock] + list(extra), netlab.LOSSD,
                              state_dir=self.state_dir)
        self.proc = self.p.proc
        self.ready = self.p.wait_ready(60)
        self.startup_secs = time.monotonic() - t0
        assert self.ready.get("socket") == self.sock, self.ready

    def stderr(self):
        return self.p.stderr()

    # lossctl ------------------------------------------------------------------
    def ctl_cmd(self, *args, addr=None):
        return [LOSSCTL, "--addr", addr or self.addr] + [str(a) for a in args]

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

    # python examples ------------------------------------------------------------
    def example_cmd(self, script, *args):
        return [PY, os.path.join(EXAMPLES, script), "--socket", self.sock, "--stubs", STUBS] + \
            [str(a) for a in args]

    # lifecycle ------------------------------------------------------------------
    def term(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("lossd did not exit on SIGTERM; stderr:\n" + self.stderr())
        return self.proc.returncode

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


# ---- values -------------------------------------------------------------------------

def u64(x):
    """A 64-bit integer from -o json (a string), or an absent field (0)."""
    return int(x) if x not in (None, "") else 0


def counters(rule_or_effect):
    c = rule_or_effect.get("counters", {})
    return {k: u64(c.get(k)) for k in ("matched_packets", "matched_segments", "matched_bytes",
                                       "dropped_packets", "dropped_segments", "dropped_bytes")}


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


def wait_until(pred, timeout, what, step=0.1):
    end = time.monotonic() + timeout
    last = None
    while True:
        last = pred()
        if last:
            return last
        if time.monotonic() > end:
            raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))
        time.sleep(step)


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


# ---- traffic ------------------------------------------------------------------------

class TcpFlow:
    """cflow.py in the background: C paced TCP connections client_ns -> server_ns (one
    listener). wait() returns the sender's and the receiver's JSON once every byte was read,
    both ends closed and no socket but TIME-WAIT/LISTEN is left."""

    def __init__(self, lab, server_ns, client_ns, dst, port, nbytes, rate_mbit, conns=1, timeout=60):
        self.lab = lab
        self.timeout = timeout
        bind = "::" if ":" in dst else "0.0.0.0"
        self.srv = lab.popen(server_ns, [PY, CFLOW, "recv", "--bind", bind, "--port", str(port),
                                         "--conns", str(conns)], stdout=subprocess.PIPE)
        line = self.srv.stdout.readline()
        if not line.startswith("READY"):
            self.srv.kill()
            raise AssertionError("tcp receiver did not start: %r" % line)
        self.cli = lab.popen(client_ns, [PY, CFLOW, "send", "--dst", dst, "--port", str(port),
                                         "--bytes", str(int(nbytes)), "--rate-mbit", str(rate_mbit),
                                         "--conns", str(conns), "--timeout", str(timeout)],
                             stdout=subprocess.PIPE)
        self.t0 = time.monotonic()

    def running(self):
        return self.cli.poll() is None

    def close(self):
        """Kills both ends if still running (test cleanup after a failure)."""
        for p in (self.cli, self.srv):
            if p.poll() is None:
                p.kill()
                p.wait()

    def wait(self):
        cout, _ = self.cli.communicate(timeout=self.timeout + 30)
        sout, _ = self.srv.communicate(timeout=30)
        if self.cli.returncode != 0 or self.srv.returncode != 0:
            raise AssertionError("tcp flow failed: sender %r receiver %r" % (cout, sout))
        self.secs = time.monotonic() - self.t0
        self.lab.wait_tcp_idle()
        return json.loads(cout.strip().splitlines()[-1]), json.loads(sout.strip().splitlines()[-1])


def udp_count(lab, flows):
    """netlab.udp_flows: [(sent, received)] of counted, sequence-numbered UDP flows."""
    return netlab.udp_flows(lab, flows, settle=0.3)


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
