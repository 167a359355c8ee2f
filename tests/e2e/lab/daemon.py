"""The lossd daemon (`lossd --socket`) inside a lab namespace, and gRPC helpers for it.

    ip netns exec NS lossd --json --state-dir TMP --socket /tmp/lossd-e2e-PID-xxx/lossd.sock

The socket and state directories are Lab temp dirs (unique per daemon, removed at the end).
The gRPC client is Python grpcio (Debian's /usr/bin/python3) with the stubs generated at
build time (--stubs <build>/python: load_stubs(), which main() calls); after it, the
module's grpc, pb (lossd_pb2) and pbg (lossd_pb2_grpc) are set.

    Daemon              the process, its socket and (with stubs) its gRPC stubs
    DaemonTestCase      a unittest base class: one Lab and one Daemon for the whole class
    rule_spec()         a RuleSpec from keywords
    StreamReader        a server stream read on a thread
"""

import json
import os
import subprocess
import re
import sys
import threading
import time
import unittest

from lab.lossd import Lossd
from lab.netns import Lab
from lab.stats import fdinfo

grpc = None
pb = None
pbg = None


def load_stubs(stubs):
    """Imports grpc and the generated lossd.v1 modules from the stubs directory."""
    global grpc, pb, pbg
    if os.path.abspath(stubs) not in sys.path:
        sys.path.insert(0, os.path.abspath(stubs))
    import grpc as _grpc
    from lossd.v1 import lossd_pb2 as _pb
    from lossd.v1 import lossd_pb2_grpc as _pbg
    grpc, pb, pbg = _grpc, _pb, _pbg


class Daemon:
    """`lossd --socket SOCK` (daemon mode) inside namespace ns; once ready, with gRPC stubs
    (inj, obs, sys) on a channel to its socket when the stubs are loaded and `connect`."""

    connect = True

    def __init__(self, lab, ns, extra=(), state_dir=None, sockdir=None, ready=True, ready_timeout=60,
                 lossd=None, wait_parts=True, http="127.0.0.1:0", nsenter=False, wrap=()):
        """http: the --http address (port 0: the kernel picks one, so that daemons sharing a
        namespace never clash; self.http_port once ready); None: lossd's default (--http not
        given); ignored when extra has --http. nsenter, wrap: as lab.lossd.Lossd's."""
        self.lab = lab
        self.ns = ns
        self.sockdir = sockdir or lab.tempdir()
        self.sock = os.path.join(self.sockdir, "lossd.sock")
        self.addr = "unix://" + self.sock
        self.state_dir = state_dir or lab.tempdir()
        self.t0 = time.monotonic()
        extra = list(extra)
        if http is not None and "--http" not in extra:
            extra += ["--http", http]
        self.http_port = None
        # nsenter: keeps the host's /sys (the cgroup v2 mount), which ip netns exec hides.
        self.p = Lossd(lab, ns, ["--socket", self.sock] + extra, state_dir=self.state_dir, lossd=lossd,
                       nsenter=nsenter, wrap=wrap)
        self.proc = self.p.proc
        self.pid = self.proc.pid
        self.channel = None
        if ready:
            self.wait_ready(ready_timeout, wait_parts=wait_parts)

    def wait_ready(self, timeout=60, wait_parts=True):
        """Until the socket serves (the "ready" line) and, with wait_parts, until no part of
        the daemon is still loading (GetHealth: the injector READY, the observer READY, FAILED
        or DISABLED): the daemon serves before its BPF programs are loaded."""
        self.ready = self.p.wait_ready(timeout)
        self.socket_secs = time.monotonic() - self.t0
        assert self.ready.get("socket") == self.sock, self.ready
        self.http_port = self.ready.get("http_port")
        if self.connect and pbg is not None:
            self.channel = self.new_channel()
            self.inj = pbg.InjectorStub(self.channel)
            self.obs = pbg.ObserverStub(self.channel)
            self.sys = pbg.SystemStub(self.channel)
        if wait_parts and pbg is not None:
            self.wait_parts(timeout)
        self.startup_secs = time.monotonic() - self.t0
        return self.ready

    def components(self, stub=None):
        """{name: (state name, message)} from GetHealth."""
        stub = stub or self.sys
        h = stub.GetHealth(pb.GetHealthRequest(), timeout=10)
        return {c.name: (pb.ComponentState.Name(c.state), c.message) for c in h.components}

    def wait_parts(self, timeout=60):
        """Until no component is LOADING; the injector must then be READY."""
        ch = None
        stub = self.sys if self.channel is not None else None
        if stub is None:
            ch = self.new_channel()
            stub = pbg.SystemStub(ch)
        try:
            parts = wait_until(lambda: (lambda c: c if all(s != "COMPONENT_STATE_LOADING" for s, _ in c.values())
                                        else None)(self.components(stub)),
                               timeout, "lossd's parts to load (GetHealth: none LOADING)", step=0.05)
        finally:
            if ch is not None:
                ch.close()
        assert parts.get("injector", ("",))[0] == "COMPONENT_STATE_READY", \
            "the injector did not start: %s\nstderr:\n%s" % (parts, self.stderr())
        self.parts = parts
        return parts

    def stderr(self):
        return self.p.stderr()

    # gRPC ------------------------------------------------------------------------
    def new_channel(self, options=()):
        ch = grpc.insecure_channel("unix:" + self.sock, options=list(options))
        grpc.channel_ready_future(ch).result(timeout=20)
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

    def clear(self):
        self.inj.ClearRules(pb.ClearRulesRequest(), timeout=30)

    def create(self, timeout=20, **spec):
        return self.inj.CreateRule(pb.CreateRuleRequest(spec=rule_spec(**spec)), timeout=timeout)

    def get(self, rid):
        return self.inj.GetRule(pb.GetRuleRequest(id=rid), timeout=10)

    def delete(self, rid):
        return self.inj.DeleteRule(pb.DeleteRuleRequest(id=rid), timeout=20).rule

    def effect(self, rid):
        return self.inj.GetRuleEffect(pb.GetRuleEffectRequest(id=rid), timeout=10)

    # lifecycle ---------------------------------------------------------------------
    def term(self, timeout=30):
        """SIGTERM; waits; returns the exit code."""
        try:
            return self.p.term(timeout)
        finally:
            self.close_channel()

    def kill9(self):
        self.p.kill9()
        self.close_channel()

    def close_channel(self):
        if self.channel is not None:
            self.channel.close()
            self.channel = None


def end_daemon_and_lab(d, lab):
    """SIGTERM to the daemon, which must exit 0; the Lab goes, whatever happened."""
    try:
        rc = d.term()
        assert rc == 0, "lossd exited %d; stderr:\n%s" % (rc, d.stderr())
    finally:
        lab.close()


class DaemonTestCase(unittest.TestCase):
    """One Lab and one daemon (in namespace `daemon_ns`, "a" or "b", started with
    `daemon_args`) for every test of the class; each test starts without rules (and no
    stream readers: add them to self.readers, they are cancelled after it), and the daemon
    must still be alive after it (check_alive). At the end the daemon must exit 0 on
    SIGTERM; the Lab goes, whatever happened."""

    daemon_class = Daemon
    daemon_ns = "a"
    lab_class = Lab   # or a subclass (RouterLab, DelayLab); lab_args: its arguments
    lab_args = ()
    daemon_args = ()
    daemon_nsenter = False  # True: nsenter --net (cgroup targets need the host's /sys)
    check_alive = True

    @classmethod
    def setUpClass(cls):
        cls.lab = cls.lab_class(*cls.lab_args)
        try:
            cls.d = cls.daemon_class(cls.lab, getattr(cls.lab, cls.daemon_ns), cls.daemon_args,
                                     nsenter=cls.daemon_nsenter)
        except BaseException:
            cls.lab.close()
            raise

    @classmethod
    def tearDownClass(cls):
        end_daemon_and_lab(cls.d, cls.lab)

    def setUp(self):
        self.pb = pb
        self.readers = []
        self.d.clear()

    def tearDown(self):
        for r in self.readers:
            r.cancel()
        if self.check_alive:
            self.assertTrue(self.d.alive(), "daemon died:\n" + self.d.stderr())

    def watch(self, name, stub=None, **req):
        """A WatchRetransmits stream (on stub, default the daemon's) read by a StreamReader,
        cancelled after the test."""
        stub = stub or self.d.obs
        r = StreamReader(stub.WatchRetransmits(self.pb.WatchRetransmitsRequest(**req), timeout=180), name)
        self.readers.append(r)
        return r

    def egress_rule(self, lo=5201, hi=None, rate=0.1):
        """A rule on A's egress (clsact) dropping TCP data segments to ports lo..hi."""
        return self.d.create(interface=self.lab.IF_A, direction="egress", protocol="tcp",
                             dport=(lo, lo if hi is None else hi), payload="only", rate=rate)


def rule_spec(interface="", direction="ingress", hook="auto", src="", dst="", sport=None, dport=None,
              protocol="", payload="any", rate=None, every_nth=None, first_k=None, ge=None, seed=None,
              ttl_ns=0, labels=None, priority=0, force=False, family=0, tcp_flags="", cgroup="",
              per_segment=False, reattach=False, pid=0, unit="", container="", pod="", schedule=None,
              guard=None, ramp=None, action="drop", markov=None, police=None):
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
    elif ramp is not None:  # [(rate, duration_ns), ...]
        loss.ramp.CopyFrom(pb.Ramp(steps=[pb.RampStep(rate=x, duration_ns=ns) for x, ns in ramp]))
    elif markov is not None:  # (p13, p31, p32, p23, p14)
        loss.markov.CopyFrom(pb.Markov4(p13=markov[0], p31=markov[1], p32=markov[2], p23=markov[3],
                                        p14=markov[4]))
    elif police is not None:  # (rate_bps, burst_bytes)
        loss.police.CopyFrom(pb.Police(rate_bps=police[0], burst_bytes=police[1]))
    if seed is not None:
        loss.seed = seed
    m = pb.Match(src=src, dst=dst, protocol=protocol, family=family, tcp_flags=tcp_flags,
                 payload={"any": pb.PAYLOAD_ANY, "only": pb.PAYLOAD_ONLY, "none": pb.PAYLOAD_NONE}[payload])
    if sport is not None:
        m.sport.CopyFrom(pr(sport))
    if dport is not None:
        m.dport.CopyFrom(pr(dport))
    s = pb.RuleSpec(interface=interface, cgroup=cgroup, pid=pid, unit=unit, container=container, pod=pod,
                    match=m, priority=priority, ttl_ns=ttl_ns,
                    force=force, per_segment=per_segment, reattach=reattach,
                    hook={"auto": pb.HOOK_AUTO, "xdp": pb.HOOK_XDP, "tc": pb.HOOK_TC,
                          "cgroup": pb.HOOK_CGROUP}[hook],
                    direction={"ingress": pb.DIRECTION_INGRESS, "egress": pb.DIRECTION_EGRESS,
                               "both": pb.DIRECTION_BOTH}[direction])
    if any(m is not None for m in (rate, every_nth, first_k, ge, ramp, markov, police)):
        s.loss.CopyFrom(loss)
    s.action = getattr(pb, "ACTION_" + action.upper().replace("-", "_"))
    for k, v in (labels or {}).items():
        s.labels[k] = v
    if schedule:  # dict of lossd.v1 Schedule fields
        s.schedule.CopyFrom(pb.Schedule(**schedule))
    if guard:  # dict of lossd.v1 Guard fields
        s.guard.CopyFrom(pb.Guard(**guard))
    return s


# ---- streams -----------------------------------------------------------------------

class StreamReader:
    """Reads a server stream on a thread into a list (optionally paused: go.clear())."""

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
                    if m.DESCRIPTOR.name in ("RetransmitStreamBatch", "StallStreamBatch"):
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
    """pred()'s first true value, polled every step seconds; AssertionError after timeout."""
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


def effect_reaching(d, rid, segs, timeout):
    """GetRuleEffect of rule rid once it counts `segs` retransmitted segments (the observer
    reports a flow's last ones a little late), or as it is at the timeout."""
    def settled():
        e = d.effect(rid)
        return e if sum(e.retransmitted_segments.values()) >= segs else None
    try:
        return wait_until(settled, timeout, "rule %s's effect to count %d retransmitted segments"
                          % (rid, segs))
    except AssertionError:
        return d.effect(rid)


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


# ---- kernel-side inspection ----------------------------------------------------------------

def tc_egress_filters(lab, ns, ifname):
    """`tc filter show dev IF egress` and the program ids of lossd's filters there."""
    out = lab.run(ns, "tc", "filter", "show", "dev", ifname, "egress", check=False).stdout
    return out, [int(m.group(1)) for m in re.finditer(r"lossd_tc_out.*? id (\d+)", out)]


def active_rule_slots(pid):
    """The live entries of lossd pid's loss_rules map (bpftool, by the map ids in the
    process's fds): [{'slot', 'dport_lo', ...}] of the slots whose flags say ACTIVE."""
    LOSS_RULE_ACTIVE = 1
    for mid in {int(kv["map_id"]) for kv in fdinfo(pid) if "map_id" in kv}:
        info = json.loads(subprocess.check_output(["bpftool", "-j", "map", "show", "id", str(mid)]))
        if info.get("name") != "loss_rules":
            continue
        dump = json.loads(subprocess.check_output(["bpftool", "-j", "map", "dump", "id", str(mid)]))
        out = []
        for e in dump:
            v = e["formatted"]["value"]
            if v["flags"] & LOSS_RULE_ACTIVE:
                out.append(dict(slot=e["formatted"]["key"], dport_lo=v["m"]["dport_lo"]))
        return out
    raise AssertionError("lossd %d holds no loss_rules map" % pid)


def pids_programs(pid):
    """BPF programs that process pid holds open (fdinfo prog_id)."""
    return {int(kv["prog_id"]) for kv in fdinfo(pid) if "prog_id" in kv}
