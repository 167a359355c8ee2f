"""The seed's stall cases (issue 13; docs/experiments.md section 3): four workloads between lab
namespaces, each watched by a lossd daemon in the namespace of the data's sender, and what lossd
and the kernel said about them. The e2e suite tests/e2e/diagnosis/ asserts on them; the
benchmark bench/seed_stalls.py prints them beside a same-run baseline.

    nagle(lab, d, ...)        requests in two writes (the second < MSS) answered only whole:
                              Nagle holds the second write until the peer's delayed ACK
    tails(lab, d, ...)        request/response, a rule dropping the last segment (PSH) of
                              replies: tail loss probe or RTO waits
    rwnd(lab, d, ...)         bulk transfer to a receiver with a small SO_RCVBUF (DelayLab)
    zero_window(lab, d, ...)  bulk transfer to a receiver that stops reading for a while

Each returns a Case: the workload's JSON, the kernel's MIB deltas of both ends, the port's
StallEvents (WatchStalls), closing Flow summaries (WatchFlows) and the first flow's trace
(TraceFlow), with errors of those streams kept (e.g. UNIMPLEMENTED by an older lossd), and
numbers() for a report.
"""

import json
import re
import subprocess
import time

from lab import daemon as dmn
from lab import traffic
from lab.config import PY
from lab.daemon import StreamReader, wait_until

# The kernel counters each case reads, in the sender's and the receiver's namespace.
KEYS = ("Tcp.RetransSegs", "TcpExt.TCPLossProbes", "TcpExt.TCPLossProbeRecovery", "TcpExt.TCPTimeouts",
        "TcpExt.TCPFastRetrans", "TcpExt.DelayedACKs", "TcpExt.TCPWinProbe", "TcpExt.TCPToZeroWindowAdv",
        "TcpExt.TCPFromZeroWindowAdv", "TcpExt.TCPWantZeroWindowAdv", "TcpExt.TCPDSACKRecvSegs")


def cause_name(c):
    """"nagle_delayed_ack" for STALL_CAUSE_NAGLE_DELAYED_ACK (the daemon's own spelling)."""
    return dmn.pb.StallCause.Name(c)[len("STALL_CAUSE_"):].lower()


def rtype_name(t):
    return dmn.pb.RetransmitType.Name(t)[len("RETRANSMIT_TYPE_"):].lower() if t else ""


class Watch:
    """lossd's view of the flows of one port while a workload runs: WatchStalls and WatchFlows
    (every 100 ms) filtered to the port, and TraceFlow of the first flow of it. Start it
    before the workload (it waits for the flows stream's first message: subscribed), then
    finish(n) once the workload ended: waits for n closing summaries and the trace's end."""

    def __init__(self, d, port, trace=True, max_samples=100000):
        pb = dmn.pb
        self.port = port
        flt = pb.EventFilter(port=pb.PortRange(lo=port, hi=port))
        self.flows = StreamReader(d.obs.WatchFlows(pb.WatchFlowsRequest(filter=[flt], interval_ns=100_000_000),
                                                   timeout=600), "flows")
        self.stalls = StreamReader(d.obs.WatchStalls(pb.WatchStallsRequest(allow=[flt]), timeout=600), "stalls")
        self.trace = (StreamReader(d.obs.TraceFlow(pb.TraceFlowRequest(flow=flt, wait_ns=120_000_000_000,
                                                                       max_samples=max_samples), timeout=600),
                                   "trace") if trace else None)
        self.flows.wait_for(lambda m: m, 20, "the flows stream's snapshot")
        time.sleep(0.3)  # the stall stream and the trace subscribe on the daemon's threads

    def closed(self):
        return [f for m in self.flows.snapshot() for f in m.flows if f.closed]

    def finish(self, nflows, timeout=15):
        """Waits for nflows closing summaries and the trace's end; cancels the streams."""
        try:
            wait_until(lambda: len(self.closed()) >= nflows or self.flows.done.is_set(), timeout,
                       "%d closing flow summaries of port %d" % (nflows, self.port))
            time.sleep(0.3)  # the stall event of a flow that closed stalled comes with its close
            if self.trace is not None:
                end = time.monotonic() + timeout
                while time.monotonic() < end and not self.trace.done.is_set() and \
                        not any(m.HasField("closed") for m in self.trace.snapshot()):
                    time.sleep(0.05)
        finally:
            for r in (self.flows, self.stalls, self.trace):
                if r is not None:
                    r.cancel()

    def errors(self):
        """{stream: gRPC status name} of the streams that failed (not cancelled by us)."""
        out = {}
        for r in (self.flows, self.stalls, self.trace):
            if r is not None and r.error is not None and r.error.code() != dmn.grpc.StatusCode.CANCELLED:
                out[r.name] = "%s: %s" % (r.error.code().name, r.error.details())
        return out


class Case:
    """One run of a case: workload (the traffic tool's JSON), sender/receiver (MIB deltas),
    stalls (StallEvents, gaps left out), gaps (Gap messages), flows (closing Flow
    summaries), trace (TraceMessages), errors (failed streams), extra (case-specific)."""

    def __init__(self, name, workload, sender, receiver, watch, **extra):
        self.name = name
        self.workload = workload
        self.sender, self.receiver = sender, receiver
        msgs = watch.stalls.snapshot()
        self.stalls = [m.event for m in msgs if m.HasField("event")]
        self.gaps = [m.gap for m in msgs if m.HasField("gap")]
        self.flows = watch.closed()
        self.trace = watch.trace.snapshot() if watch.trace is not None else []
        self.errors = watch.errors()
        self.extra = extra

    def stall_ns_by_cause(self):
        out = {}
        for s in self.stalls:
            out[cause_name(s.cause)] = out.get(cause_name(s.cause), 0) + s.duration_ns
        return out

    def share(self, *causes):
        """The stall time of these causes over all stall time (None: no stall)."""
        by = self.stall_ns_by_cause()
        total = sum(by.values())
        return sum(by.get(c, 0) for c in causes) / total if total else None

    def flow_stall_ns(self):
        """Stall time by cause summed over the closing summaries (Flow.stall_ns)."""
        out = {}
        for f in self.flows:
            for k, v in f.stall_ns.items():
                out[k] = out.get(k, 0) + v
        return out

    def limits(self):
        """Flow.limit_ns summed over the closing summaries, and the dominant limit of each."""
        out = {}
        for f in self.flows:
            for k, v in f.limit_ns.items():
                out[k] = out.get(k, 0) + v
        return out

    def samples(self):
        return [m.sample for m in self.trace if m.HasField("sample")]

    def numbers(self):
        """What a report shows of this run (JSON-able)."""
        durs = sorted(s.duration_ns for s in self.stalls)
        w = dict(self.workload)
        lat = w.pop("latencies_ms", None)
        out = {"workload": w, "sender_mib": {k: self.sender[k] for k in KEYS if self.sender[k]},
               "receiver_mib": {k: self.receiver[k] for k in KEYS if self.receiver[k]},
               "stalls": len(self.stalls), "stall_gaps": len(self.gaps),
               "stall_ms_by_cause": {k: round(v / 1e6, 3) for k, v in sorted(self.stall_ns_by_cause().items())},
               "stall_ms_median": round(durs[len(durs) // 2] / 1e6, 3) if durs else None,
               "stall_ms_max": round(durs[-1] / 1e6, 3) if durs else None,
               "flows_closed": len(self.flows),
               "flow_stall_ms": {k: round(v / 1e6, 3) for k, v in sorted(self.flow_stall_ns().items())},
               "flow_stalls": sum(f.stalls for f in self.flows),
               "limit_ms": {k: round(v / 1e6, 3) for k, v in sorted(self.limits().items())},
               "dominant": [(f.dominant_limit, round(f.dominant_share, 4)) for f in self.flows],
               "trace_samples": len(self.samples()), "stream_errors": self.errors}
        if lat:
            s = sorted(lat)
            out["latency_ms"] = {"p50": s[len(s) // 2], "p90": s[9 * len(s) // 10], "p99": s[99 * len(s) // 100],
                                 "max": s[-1]}
        out.update(self.extra)
        return out


def _run(lab, snd_ns, rcv_ns, fn):
    s0, r0 = lab.counters(snd_ns), lab.counters(rcv_ns)
    res = fn()
    lab.wait_idle(snd_ns, rcv_ns)
    return res, lab.counters(snd_ns) - s0, lab.counters(rcv_ns) - r0


def _ss(lab, ns, dst):
    """`ss -tin` of the namespace's connections to dst (the kernel's own view of a flow)."""
    return lab.run(ns, "ss", "-tinH", "dst", dst).stdout


def nagle(lab, d, port=5311, nodelay=False, seconds=3.0, request=400, split=100, response=100, trace=True):
    """Client in d's namespace lab.a, server in lab.b: each request `request` bytes in two
    writes (the last `split` in the second), the server (TCP_NODELAY) answering `response`
    bytes only to a whole request; for `seconds`, one connection."""
    srv = traffic.rr_server(lab, lab.b, "0.0.0.0", port)
    w = Watch(d, port, trace=trace)
    try:
        args = ["--request", request, "--split", split, "--response", response, "--seconds", seconds,
                "--count", 0] + (["--nodelay"] if nodelay else [])
        res, ds, dr = _run(lab, lab.a, lab.b,
                           lambda: json.loads(lab.run(lab.a, *traffic.rr_cmd(lab.V4_B, port, *args),
                                                      timeout=seconds + 60).stdout.splitlines()[-1]))
        w.finish(1)
    finally:
        srv.kill()
    res["requests_per_s"] = res["requests"] / res["secs"]
    return Case("nagle" + ("_nodelay" if nodelay else ""), res, ds, dr, w, nodelay=nodelay)


def tails(lab, d, port=5312, rate=0.1, count=300, response=14480, cc="cubic", trace=True):
    """Server in d's namespace lab.a (the replies' sender, congestion control cc), client in
    lab.b: `count` 100-byte requests, each answered by `response` bytes in one write; with
    rate > 0, a rule of d on A's egress drops that fraction of the replies' segments that
    carry PSH (the last of each write), per segment. extra: rule_id, rule_dropped_segments,
    effect_stalls_caused; .effect, .rule_final: the RuleEffect and the deleted Rule.
    CUBIC, not this machine's default BBR: after a recovery BBR's pacing sends one segment at
    a time for a while, each waiting for the receiver's delayed ACK (stalls of no listed
    cause, not the tail's)."""
    srv = traffic.rr_server(lab, lab.a, "0.0.0.0", port, cc=cc)
    rule = None
    try:
        if rate > 0:
            rule = d.create(interface=lab.IF_A, direction="egress", protocol="tcp", sport=port, payload="only",
                            tcp_flags="psh", per_segment=True, rate=rate)
        w = Watch(d, port, trace=trace)
        args = ["--request", 100, "--response", response, "--count", count, "--nodelay"]
        res, ds, dr = _run(lab, lab.a, lab.b,
                           lambda: json.loads(lab.run(lab.b, *traffic.rr_cmd(lab.V4_A, port, *args),
                                                      timeout=count + 60).stdout.splitlines()[-1]))
        w.finish(1)
        effect = final = None
        extra = {"rate": rate}
        if rule is not None:
            effect, final = d.effect(rule.id), d.delete(rule.id)
            extra.update(rule_id=rule.id, rule_dropped_segments=final.counters.dropped_segments,
                         effect_stalls_caused={k: {"count": v.count, "ms": v.time_ns / 1e6}
                                               for k, v in effect.stalls_caused.items()})
    finally:
        srv.kill()
    res["requests_per_s"] = res["requests"] / res["secs"]
    c = Case("tails" if rate else "tails_norule", res, ds, dr, w, **extra)
    c.effect, c.rule_final = effect, final  # the RuleEffect and the deleted Rule (protos)
    return c


def rwnd(lab, d, port=5313, rcvbuf=28672, seconds=5.0, cc="cubic", trace=True):
    """DelayLab: sender in d's namespace lab.c, receiver in lab.s with SO_RCVBUF rcvbuf (the
    kernel doubles it and stops tuning it; 0: the kernel's own autotuning), unpaced, for
    `seconds`. extra: ss (the kernel's `ss -tin` of the flow near its end), snd_wnd (bytes,
    from it), mbit."""
    srv = lab.popen(lab.s, [PY, traffic.TCPFLOW, "recv", "--bind", "0.0.0.0", "--port", str(port),
                            "--rcvbuf", str(rcvbuf)], stdout=subprocess.PIPE)
    if not srv.stdout.readline().startswith("READY"):
        raise AssertionError("receiver did not start")
    w = Watch(d, port, trace=trace)
    ss = [""]

    def go():
        cli = traffic.sender(lab, lab.c, lab.S_IP, port, until_stdin=True, rate_mbit=0, cc=cc, timeout=seconds + 60)
        time.sleep(seconds - 0.2)
        ss[0] = _ss(lab, lab.c, lab.S_IP)
        s = traffic.finish(cli, stop=True)
        traffic.finish(srv)
        return s

    res, ds, dr = _run(lab, lab.c, lab.s, go)
    w.finish(1)
    m = re.search(r"snd_wnd:(\d+)", ss[0])
    res["mbit"] = 8 * res["bytes"] / res["secs"] / 1e6
    return Case("rwnd_%d" % rcvbuf, res, ds, dr, w, rcvbuf=rcvbuf, ss=ss[0].strip(),
                snd_wnd=int(m.group(1)) if m else None)


def zero_window(lab, d, port=5314, pause_secs=3.0, nbytes=8 << 20, pause_after=2 << 20, rcvbuf=256 << 10,
                trace=True):
    """Sender in d's namespace lab.a, nbytes paced at 100 Mbit/s to a receiver in lab.b (SO_RCVBUF
    rcvbuf: its buffer fills in a known time) that stops reading after pause_after bytes for
    pause_secs (0: never stops): its buffer fills, its window goes to 0, the sender probes it."""
    srv = lab.popen(lab.b, [PY, traffic.TCPFLOW, "recv", "--bind", "0.0.0.0", "--port", str(port),
                            "--rcvbuf", str(rcvbuf),
                            "--pause-after", str(pause_after if pause_secs else 0), "--pause-secs",
                            str(pause_secs)], stdout=subprocess.PIPE)
    if not srv.stdout.readline().startswith("READY"):
        raise AssertionError("receiver did not start")
    w = Watch(d, port, trace=trace)

    def go():
        cli = traffic.sender(lab, lab.a, lab.V4_B, port, nbytes=nbytes, rate_mbit=100, timeout=pause_secs + 60)
        s = traffic.finish(cli, timeout=pause_secs + 90)
        traffic.finish(srv)
        return s

    res, ds, dr = _run(lab, lab.a, lab.b, go)
    w.finish(1)
    return Case("zero_window" if pause_secs else "zero_window_none", res, ds, dr, w, pause_secs=pause_secs)
