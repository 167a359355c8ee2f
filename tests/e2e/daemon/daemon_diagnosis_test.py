"""Why a flow is slow, through the API (issue 13): WatchStalls, TraceFlow, Flow's limits and
stalls, the stall threshold's flags. The workload is tcpflow.py rr --split: each request in
two writes, the second (100 bytes) below one MSS, answered only once whole. Without
TCP_NODELAY Nagle holds the second write until the server's delayed ACK of the first (40 ms
on Linux): one stall per request, named nagle_delayed_ack; with it, none. The seed cases
with their numbers are tests/e2e/diagnosis; this suite checks the API's promises: sequence
numbers, filters, the flow record against the events, the trace's shape and bounds, errors.
"""
import subprocess
import time
import unittest

import grpc

from lab import config, traffic
from lab.config import main
from lab.daemon import DaemonTestCase, StreamReader, wait_until

P = 5460            # the request/response service
MS = 1000 * 1000
STALL_MIN_MS = 15   # --stall-min of this suite's daemon (default 10 ms)
STALL_RTTS = 3


class Diagnosis(DaemonTestCase):
    daemon_args = ("--stall-min", "%dms" % STALL_MIN_MS, "--stall-rtts", str(STALL_RTTS))

    def flt(self, port=P):
        return self.pb.EventFilter(port=self.pb.PortRange(lo=port, hi=port))

    def stalls(self, **req):
        r = StreamReader(self.d.obs.WatchStalls(self.pb.WatchStallsRequest(**req), timeout=120), "stalls")
        self.readers.append(r)
        return r

    def closes(self, port=P):
        """WatchFlows of the port; its closing summaries by local port."""
        r = StreamReader(self.d.obs.WatchFlows(self.pb.WatchFlowsRequest(filter=[self.flt(port)],
                                                                          interval_ns=100 * MS),
                                               timeout=120), "flows")
        self.readers.append(r)
        r.wait_for(lambda m: m, 20, "the snapshot")
        return r

    def rr(self, *args, port=P):
        """One rr connection A -> B (the client's JSON: requests, sport...)."""
        srv = traffic.rr_server(self.lab, self.lab.b, "0.0.0.0", port, conns=1)
        cli = self.lab.popen(self.lab.a, traffic.rr_cmd(self.lab.V4_B, port, "--request", 300, "--split", 100,
                                                        "--response", 100, "--no-latencies", *args),
                             stdout=subprocess.PIPE)
        out = traffic.finish(cli)
        traffic.finish(srv)
        return out

    @staticmethod
    def closed(reader, sport):
        return [f for m in reader.snapshot() for f in m.flows if f.closed and f.tuple.local_port == sport]

    def test_capabilities_report_the_threshold(self):
        t = self.d.sys.GetCapabilities(self.pb.GetCapabilitiesRequest(), timeout=10).stall_threshold
        self.assertEqual((t.min_ns, t.rtts), (STALL_MIN_MS * MS, STALL_RTTS))

    def test_nagle_stalls_stream_and_count_in_the_flow(self):
        allow = self.stalls(allow=[self.flt()])
        other = self.stalls(allow=[self.flt(P + 1)])   # another service: none of these
        denied = self.stalls(deny=[self.flt()])        # everything but this one: none either
        flows = self.closes()
        c = self.rr("--count", 12)
        self.assertEqual(c["requests"], 12, c)
        summary = flows.wait_for(lambda m: self.closed(flows, c["sport"]), 20, "the closing summary")
        f = self.closed(flows, c["sport"])[0]
        items = allow.wait_for(lambda m: len([i for i in m if i.HasField("event")]) >= f.stalls, 10,
                               "every stall of the flow")
        self.assertEqual([i.seq for i in items], list(range(1, len(items) + 1)), "stream seq")
        self.assertFalse([i for i in items if i.HasField("gap")], "gaps: %s" % items)
        ev = [i.event for i in items if i.event.tuple.local_port == c["sport"]]
        # One stall per request but (at most) the first two: the connection starts in quick-ACK mode.
        self.assertGreaterEqual(len(ev), 10, ev)
        self.assertLessEqual(len(ev), 12, ev)
        for e in ev:
            self.assertEqual(e.cause, self.pb.STALL_CAUSE_NAGLE_DELAYED_ACK, e)
            self.assertEqual(e.unsent_bytes, 100, e)  # the second write, held
            self.assertTrue(e.nagle, e)
            self.assertEqual(e.first_retransmit, self.pb.RETRANSMIT_TYPE_UNSPECIFIED, e)
            self.assertEqual(e.threshold_ns, max(STALL_MIN_MS * MS, STALL_RTTS * e.min_rtt_us * 1000), e)
            self.assertGreater(e.duration_ns, e.threshold_ns, e)
            # Linux's delayed ACK: 40 ms at least, well under the 200 ms maximum here.
            self.assertGreaterEqual(e.duration_ns, 35 * MS, e)
            self.assertLess(e.duration_ns, 200 * MS, e)
            self.assertEqual(e.cookie, f.cookie, e)
        # The flow's record counts exactly these events.
        self.assertEqual(f.stalls, len(ev), f)
        self.assertEqual(dict(f.stall_ns), {"nagle_delayed_ack": sum(e.duration_ns for e in ev)}, f)
        # The limits agree with the stalls about that time: the Nagle waits are not the
        # application's (before: app_limited 1.00 beside stalls all nagle_delayed_ack).
        nagle = sum(e.duration_ns for e in ev)
        self.assertGreater(f.limit_ns["busy"], 0, f)
        self.assertEqual(f.limit_ns["nagle_limited"], min(nagle, f.limit_ns["busy"] - f.limit_ns["rwnd_limited"]
                                                          - f.limit_ns["sndbuf_limited"]
                                                          - f.limit_ns["cwnd_limited"]), f)
        self.assertEqual(f.dominant_limit, "nagle_limited", f)
        self.assertEqual(sum(f.limit_ns[k] for k in ("rwnd_limited", "sndbuf_limited", "cwnd_limited",
                                                     "nagle_limited", "app_limited")), f.limit_ns["busy"], f)
        time.sleep(0.3)
        self.assertFalse([i for i in other.snapshot() if i.HasField("event")], "allow of another port")
        self.assertFalse([i for i in denied.snapshot() if i.HasField("event")
                          and i.event.tuple.remote_port == P], "deny of this port")

    def test_no_stall_with_nodelay(self):
        allow = self.stalls(allow=[self.flt()])
        flows = self.closes()
        c = self.rr("--count", 12, "--nodelay")
        flows.wait_for(lambda m: self.closed(flows, c["sport"]), 20, "the closing summary")
        f = self.closed(flows, c["sport"])[0]
        self.assertEqual(f.stalls, 0, f)
        self.assertEqual(dict(f.stall_ns), {}, f)
        time.sleep(0.3)
        self.assertFalse([i for i in allow.snapshot() if i.HasField("event")])

    def trace(self, **req):
        r = StreamReader(self.d.obs.TraceFlow(self.pb.TraceFlowRequest(**req), timeout=120), "trace")
        self.readers.append(r)
        return r

    def test_trace_of_a_flow_to_its_close(self):
        t = self.trace(flow=self.flt(), wait_ns=20000 * MS)
        c = self.rr("--count", 8)
        msgs = t.wait_for(lambda m: m and m[-1].HasField("closed"), 20, "the closing summary")
        t.done.wait(5)
        self.assertIsNone(t.error)
        kinds = [m.WhichOneof("msg") for m in msgs]
        self.assertEqual(kinds[0], "flow")
        self.assertEqual(kinds[-1], "closed")
        self.assertEqual([m.seq for m in msgs], list(range(1, len(msgs) + 1)))
        self.assertEqual(msgs[0].flow.tuple.local_port, c["sport"])
        closed = msgs[-1].closed
        self.assertTrue(closed.closed, closed)
        samples = [m.sample for m in msgs if m.HasField("sample")]
        # Every request gets its first write ACKed (after the stall) and the reply that ACKs the
        # second write: at least two ACKs a request.
        self.assertGreaterEqual(len(samples), 2 * 8, kinds)
        times = [s.time_mono_ns for s in samples]
        self.assertEqual(times, sorted(times))
        acks = [s.ack_seq for s in samples]
        self.assertTrue(all(((b - a) & 0xffffffff) < 1 << 31 for a, b in zip(acks, acks[1:])),
                        "ack_seq went back: %s" % acks)
        self.assertTrue(all(s.cwnd > 0 and s.snd_wnd > 0 for s in samples), samples[:3])
        stalls = [m.stall for m in msgs if m.HasField("stall")]
        self.assertEqual(len(stalls), closed.stalls, kinds)
        self.assertTrue(all(s.cookie == closed.cookie for s in stalls))
        # The trace ends with the flow: its samples stop.
        n = self.d.sys.GetHealth(self.pb.GetHealthRequest(), timeout=10)
        self.assertTrue(n.serving)

    def test_trace_ends_at_max_samples_with_the_flow_as_it_is(self):
        srv = traffic.rr_server(self.lab, self.lab.b, "0.0.0.0", P + 2, conns=1)
        cli = self.lab.popen(self.lab.a, traffic.rr_cmd(self.lab.V4_B, P + 2, "--count", 100000, "--seconds", 20,
                                                        "--nodelay", "--no-latencies"),
                             stdout=subprocess.PIPE)
        try:
            t = self.trace(flow=self.flt(P + 2), wait_ns=10000 * MS, max_samples=5)
            msgs = t.wait_for(lambda m: m and m[-1].HasField("closed"), 20, "the end of the trace")
            t.done.wait(5)
            self.assertIsNone(t.error)
            kinds = [m.WhichOneof("msg") for m in msgs]
            self.assertEqual(kinds.count("sample"), 5, kinds)
            self.assertFalse(msgs[-1].closed.closed, "the flow is still open: %s" % msgs[-1])
        finally:
            cli.kill()
            srv.kill()
            cli.wait()
            srv.wait()

    def test_trace_errors(self):
        bad = {
            grpc.StatusCode.INVALID_ARGUMENT: [
                self.pb.TraceFlowRequest(),
                self.pb.TraceFlowRequest(cookie=1, flow=self.flt()),
                self.pb.TraceFlowRequest(cookie=1, max_samples=2000000),
                self.pb.TraceFlowRequest(cookie=1, wait_ns=3601 * 1000 * MS),
                self.pb.TraceFlowRequest(flow=self.pb.EventFilter(types=[self.pb.RETRANSMIT_TYPE_RTO])),
            ],
            grpc.StatusCode.NOT_FOUND: [
                self.pb.TraceFlowRequest(cookie=123456789),
                self.pb.TraceFlowRequest(flow=self.flt(P + 3), wait_ns=200 * MS),
            ],
        }
        for code, reqs in bad.items():
            for req in reqs:
                with self.assertRaises(grpc.RpcError) as cm:
                    list(self.d.obs.TraceFlow(req, timeout=10))
                self.assertEqual(cm.exception.code(), code, (req, cm.exception.details()))
                self.assertTrue(cm.exception.details(), req)

    def test_at_most_16_flows_traced_at_once(self):
        srv = traffic.server(self.lab, self.lab.b, "0.0.0.0", P + 4, conns=17)
        cli = traffic.sender(self.lab, self.lab.a, self.lab.V4_B, P + 4, nbytes=1000, conns=17, hold=True,
                             acked=True, rate_mbit=0)
        try:
            fl = wait_until(lambda: (lambda x: x if len(x) >= 17 else None)(
                [f for f in self.d.obs.ListFlows(self.pb.ListFlowsRequest(filter=[self.flt(P + 4)]),
                                                 timeout=10).flows if f.tuple.remote_port == P + 4]),
                10, "17 flows")
            traces = [self.trace(cookie=f.cookie) for f in fl[:16]]
            for t in traces:
                t.wait_for(lambda m: m, 10, "the first message")
            with self.assertRaises(grpc.RpcError) as cm:
                list(self.d.obs.TraceFlow(self.pb.TraceFlowRequest(cookie=fl[16].cookie), timeout=10))
            self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, cm.exception.details())
            self.assertIn("16", cm.exception.details())
            # A second trace of a traced flow shares its samples: allowed.
            again = self.trace(cookie=fl[0].cookie, max_samples=1)
            again.wait_for(lambda m: m, 10, "the first message")
            # One trace ends: the 17th flow can be traced.
            traces[1].cancel()
            wait_until(lambda: self._traced(fl[16].cookie), 10, "a free trace slot")
        finally:
            cli.stdin.write("\n")
            cli.stdin.flush()
            traffic.finish(cli)
            traffic.finish(srv)

    def _traced(self, cookie):
        try:
            r = self.trace(cookie=cookie, max_samples=1)
            return r.wait_for(lambda m: m, 5, "the first message") and r.error is None
        except AssertionError:
            return False


class Flags(unittest.TestCase):
    def test_bad_stall_threshold_flags_are_refused(self):
        for args, text in [(["--stall-min", "0s"], "--stall-min"), (["--stall-min", "2min"], "--stall-min"),
                           (["--stall-min", "soon"], "--stall-min"), (["--stall-rtts", "0"], "--stall-rtts"),
                           (["--stall-rtts", "1001"], "--stall-rtts")]:
            p = subprocess.run([config.LOSSD, "--socket", "/nonexistent/lossd.sock"] + args,
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(text, p.stderr, args)


if __name__ == "__main__":
    main()
