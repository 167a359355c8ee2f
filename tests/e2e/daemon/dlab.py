"""Shared helpers for the lossd daemon e2e tests (real gRPC over the real Unix socket).

Every test builds a netlab.Lab (two fresh namespaces A and B joined by a veth
pair, documentation addresses only, everything removed by Lab.close() from
with/try-finally, atexit and SIGTERM/SIGINT/SIGHUP) and starts the daemon
inside one of them:

    ip netns exec NS lossd --json --state-dir TMP --socket /tmp/lossd-e2e-PID-xxx/lossd.sock

The socket directory and the state directory are Lab temp dirs (unique per
daemon, removed at the end). The client is Python grpcio (Debian's
/usr/bin/python3) with the stubs generated at build time (--stubs
<build>/python).
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/e2e: netlab.py

import netlab  # noqa: E402

DFLOW = os.path.join(HERE, "dflow.py")
PY = "/usr/bin/python3"

grpc = None
pb = None
pbg = None
log = netlab.log
measured = netlab.measured


def _load_stubs(stubs):
    global grpc, pb, pbg
    sys.path.insert(0, os.path.abspath(stubs))
    import grpc as _grpc
    from lossd.v1 import lossd_pb2 as _pb
    from lossd.v1 import lossd_pb2_grpc as _pbg
    grpc, pb, pbg = _grpc, _pb, _pbg


def main():
    """Entry point of every script: --lossd PATH --stubs DIR, then unittest's own arguments."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--lossd", required=True)
    ap.add_argument("--stubs", required=True, help="<build>/python (generated lossd_pb2*.py)")
    args, rest = ap.parse_known_args()
    netlab.LOSSD = os.path.abspath(args.lossd)
    if os.geteuid() != 0:
        print("skipped: the e2e tests need root (network namespaces, BPF)")
        sys.exit(77)
    _load_stubs(args.stubs)
    import unittest
    unittest.main(module="__main__", argv=[sys.argv[0]] + rest, verbosity=2)


# ---- the daemon ---------------------------------------------------------------

class Daemon:
    """`lossd --socket ...` (daemon mode) inside namespace ns, with gRPC stubs."""

    def __init__(self, lab, ns, extra=(), state_dir=None, ready=True):
        self.lab = lab
        self.ns = ns
        self.sockdir = lab.tempdir()
        self.sock = os.path.join(self.sockdir, "lossd.sock")
        self.state_dir = state_dir or lab.tempdir()
        self.proc_wrap = netlab.Lossd(lab, ns, ["--socket", self.sock] + list(extra), netlab.LOSSD,
                                      state_dir=self.state_dir)
        self.proc = self.proc_wrap.proc
        self.channel = None
        if ready:
            self.wait_ready()

    def wait_ready(self, timeout=60):
        self.ready = self.proc_wrap.wait_ready(timeout)
        assert self.ready["socket"] == self.sock, self.ready
        self.channel = self.new_channel()
        self.inj = pbg.InjectorStub(self.channel)
        self.obs = pbg.ObserverStub(self.channel)
        self.sys = pbg.SystemStub(self.channel)
        return self.ready

    def new_channel(self, options=()):
        ch = grpc.insecure_channel("unix:" + self.sock, options=list(options))
        grpc.channel_ready_future(ch).result(timeout=10)
        return ch

    def stubs(self, options=()):
        ch = self.new_channel(options)
        return ch, pbg.InjectorStub(ch), pbg.ObserverStub(ch), pbg.SystemStub(ch)

    def health(self):
        return self.sys.GetHealth(pb.GetHealthRequest(), timeout=10)

    def alive(self):
        """The process runs and answers GetHealth with serving=true."""
        if self.proc.poll() is not None:
            return False
        return self.health().serving

    def stderr(self):
        return self.proc_wrap.stderr()

    def create(self, timeout=20, **spec):
        return self.inj.CreateRule(pb.CreateRuleRequest(spec=rule_spec(**spec)), timeout=timeout)

    def get(self, rid):
        return self.inj.GetRule(pb.GetRuleRequest(id=rid), timeout=10)

    def delete(self, rid):
        return self.inj.DeleteRule(pb.DeleteRuleRequest(id=rid), timeout=20).rule

    def effect(self, rid):
        return self.inj.GetRuleEffect(pb.GetRuleEffectRequest(id=rid), timeout=10)

    def term(self, timeout=30):
        """SIGTERM; waits; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("lossd did not exit on SIGTERM; stderr:\n" + self.stderr())
        self.close_channel()
        return self.proc.returncode

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.close_channel()

    def close_channel(self):
        if self.channel is not None:
            self.channel.close()
            self.channel = None


def rule_spec(interface="", direction="ingress", hook="auto", src="", dst="", sport=None, dport=None,
              protocol="", payload="any", rate=None, every_nth=None, first_k=None, ge=None, seed=None,
              ttl_ns=0, labels=None, priority=0, force=False, family=0, tcp_flags="", cgroup="",
              per_segment=False):
    def pr(p):
        if p is None:
            return None
        if isinstance(p, tuple):
            return pb.PortRange(lo=p[0], hi=p[1])
        return pb.PortRange(lo=p, hi=p)

    loss = pb.LossModel()
    if rate is not None:
        loss.bernoulli.rate = rate
    elif every_nth is not None:
        loss.every_nth = every_nth
    elif first_k is not None:
        loss.first_k = first_k
    elif ge is not None:
        loss.gilbert_elliott.CopyFrom(pb.GilbertElliott(p=ge[0], r=ge[1], bad_loss=ge[2], good_loss=ge[3]))
    if seed is not None:
        loss.seed = seed
    m = pb.Match(src=src, dst=dst, protocol=protocol, family=family, tcp_flags=tcp_flags,
                 payload={"any": pb.PAYLOAD_ANY, "only": pb.PAYLOAD_ONLY, "none": pb.PAYLOAD_NONE}[payload])
    if sport is not None:
        m.sport.CopyFrom(pr(sport))
    if dport is not None:
        m.dport.CopyFrom(pr(dport))
    s = pb.RuleSpec(interface=interface, cgroup=cgroup, match=m, priority=priority, ttl_ns=ttl_ns,
                    force=force, per_segment=per_segment,
                    hook={"auto": pb.HOOK_AUTO, "xdp": pb.HOOK_XDP, "tc": pb.HOOK_TC,
                          "cgroup": pb.HOOK_CGROUP}[hook],
                    direction={"ingress": pb.DIRECTION_INGRESS, "egress": pb.DIRECTION_EGRESS,
                               "both": pb.DIRECTION_BOTH}[direction])
    if rate is not None or every_nth is not None or first_k is not None or ge is not None:
        s.loss.CopyFrom(loss)
    for k, v in (labels or {}).items():
        s.labels[k] = v
    return s


# ---- streams -----------------------------------------------------------------------

class StreamReader:
    """Reads a server stream on a thread into a list (optionally paused)."""

    def __init__(self, call, name="stream"):
        self.call = call
        self.name = name
        self.msgs = []
        self.error = None
        self.done = threading.Event()
        self.go = threading.Event()
        self.go.set()
        self.lock = threading.Lock()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        try:
            for m in self.call:
                self.go.wait()
                with self.lock:
                    if m.DESCRIPTOR.name == "RetransmitStreamBatch":
                        self.msgs.extend(m.items)  # the stream's items, in order
                    else:
                        self.msgs.append(m)
        except grpc.RpcError as e:
            self.error = e
        finally:
            self.done.set()

    def snapshot(self):
        with self.lock:
            return list(self.msgs)

    def wait_for(self, pred, timeout, what="condition"):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pred(self.snapshot()):
                return self.snapshot()
            if self.done.is_set():
                break
            time.sleep(0.05)
        if pred(self.snapshot()):
            return self.snapshot()
        raise AssertionError("%s: no %s within %ss (%d messages, error %r)"
                             % (self.name, what, timeout, len(self.msgs), self.error))

    def cancel(self, join=5):
        self.call.cancel()
        self.go.set()
        self.t.join(join)


def wait_until(pred, timeout, what="condition", step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    v = pred()
    if v:
        return v
    raise AssertionError("no %s within %ss" % (what, timeout))


# A channel whose HTTP/2 stream window is small: a subscriber that stops reading backs the
# daemon's writes up into its queue quickly.
SLOW_OPTIONS = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024)]


def events_of(msgs):
    return [m.event for m in msgs if m.HasField("event")]


def gaps_of(msgs):
    return [m.gap for m in msgs if m.HasField("gap")]


def key(e):
    """Identity of a RetransmitEvent across streams."""
    return (e.cookie, e.time_mono_ns, e.seq, e.type, e.segments)


def check_seq(tc, msgs, what):
    """seq is 1, 2, 3, ... (strictly increasing by one per message)."""
    seqs = [m.seq for m in msgs]
    tc.assertEqual(seqs, list(range(1, len(seqs) + 1)), "%s: sequence numbers not 1..n" % what)


# ---- traffic ---------------------------------------------------------------------------

class TcpFlow:
    """dflow.py: a paced TCP transfer (client in client_ns) that stays open until release().

    The receiver reads until EOF; the sender writes nbytes, then waits for release()
    (a line on stdin) before it shuts down and waits for the receiver's EOF, so the
    flow closes only when the test says so.
    """

    def __init__(self, lab, server_ns, client_ns, dst, port, nbytes, rate_mbit, hold=False, conns=1):
        self.srv = lab.popen(server_ns, [PY, DFLOW, "tcp-recv", "--bind", "::" if ":" in dst else "0.0.0.0",
                                         "--port", str(port), "--conns", str(conns)], stdout=subprocess.PIPE)
        line = self.srv.stdout.readline()
        if not line.startswith("READY"):
            raise AssertionError("tcp receiver did not start: %r" % line)
        self.cli = lab.popen(client_ns, [PY, DFLOW, "tcp-send", "--dst", dst, "--port", str(port),
                                         "--bytes", str(int(nbytes)), "--rate-mbit", str(rate_mbit),
                                         "--conns", str(conns)]
                             + (["--hold"] if hold else []),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.hold = hold

    def wait_sent(self, timeout=120):
        """Waits until the sender wrote everything and every byte was acknowledged."""
        line = self._readline(self.cli, timeout)
        if not line.startswith("SENT"):
            raise AssertionError("tcp sender: %r" % line)
        return json.loads(line[4:])

    @staticmethod
    def _readline(p, timeout):
        out = []
        t = threading.Thread(target=lambda: out.append(p.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        if not out:
            raise AssertionError("tcp flow: no output within %ss" % timeout)
        return out[0]

    def release(self, timeout=120):
        """Closes the flow; returns (sender json, receiver json)."""
        if self.hold:
            self.cli.stdin.write("go\n")
            self.cli.stdin.flush()
        # Read through the file objects: readline() above may have buffered the rest.
        cout = self._read_rest(self.cli, timeout)
        sout = self._read_rest(self.srv, 30)
        if self.cli.returncode != 0 or self.srv.returncode != 0 or not cout.strip() or not sout.strip():
            raise AssertionError("tcp flow failed: sender %r receiver %r" % (cout, sout))
        return json.loads(cout.strip().splitlines()[-1]), json.loads(sout.strip().splitlines()[-1])

    @staticmethod
    def _read_rest(p, timeout):
        out = []
        t = threading.Thread(target=lambda: out.append(p.stdout.read()), daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            p.kill()
            t.join(5)
        p.wait(timeout=10)
        return out[0] if out else ""


def udp_count(lab, tx_ns, rx_ns, dst, port, flow, count, pps=20000):
    """Sends `count` numbered datagrams; returns (sent, unique received)."""
    ((sent, got),) = netlab.udp_flows(lab, [dict(rx_ns=rx_ns, tx_ns=tx_ns, dst=dst, port=port, flow=flow,
                                                 count=count, pps=pps)], settle=0.3)
    return sent["sent"], got["unique"]


# ---- kernel-side inspection ----------------------------------------------------------------

def tc_egress_filters(lab, ns, ifname):
    out = lab.run(ns, "tc", "filter", "show", "dev", ifname, "egress", check=False).stdout
    return out, [int(m.group(1)) for m in re.finditer(r"lossd_tc_out.*? id (\d+)", out)]


def pids_programs(pid):
    """BPF programs that process pid holds open (fdinfo prog_id)."""
    ids = set()
    fddir = "/proc/%d/fdinfo" % pid
    try:
        for fd in os.listdir(fddir):
            try:
                with open(os.path.join(fddir, fd)) as f:
                    for line in f:
                        if line.startswith("prog_id:"):
                            ids.add(int(line.split()[1]))
            except OSError:
                pass
    except OSError:
        pass
    return ids
