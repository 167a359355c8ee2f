"""The live page's event stream (GET /api/v1/events) read with a plain HTTP client.

One daemon (--http 127.0.0.1:0) in namespace A; a rule on A's egress drops 2 % of one paced
flow's data segments (A -> B).

  test_1_framing      text/event-stream, no-cache; every message is exactly id/event/data, data
                      one JSON line; ids 1, 2, 3 ... without holes; hello first (the daemon's
                      clocks); an aggregate, flows, rules, health, kernel at least once a second;
                      no retransmit events without ?flow / ?rule (never the firehose) although
                      the flow retransmits; the aggregates' sums equal the namespace's
                      TcpRetransSegs delta.
  test_2_bad_input    400 for a malformed / unknown / repeated parameter (the message names it,
                      quoted bounded), 404 for a flow or rule that does not exist.
  test_3_slow_reader  (a per-segment rule at 5 %: one event per dropped segment)
                      ?rule=ID&queue=64 with a 4 KiB receive buffer, not read for 3 s while the
                      flow retransmits: gap messages (stream "retransmit") appear, ids stay
                      1..n, and the accounting is exact: the retransmit events received plus
                      the gaps' counts equal the events a gRPC WatchRetransmits of the same
                      rule received (no gap of its own). A gRPC stream of the same daemon kept
                      its pace meanwhile (the slow reader slowed nobody).
"""
import json
import time

from lab import traffic
from lab.browser import SseStream
from lab.config import main
from lab.daemon import DaemonTestCase, events_of, gaps_of, wait_until
from lab.netns import measured

PORT = 5351


class LiveEvents(DaemonTestCase):
    daemon_args = ("--http", "127.0.0.1:0")

    def stream(self, path, **kw):
        s = SseStream(self.lab.a, self.d.ready["http_port"], path, **kw)
        self.addCleanup(s.close)
        return s

    def read_all(self, s, secs):
        out = []
        end = time.monotonic() + secs
        while time.monotonic() < end:
            out += s.read(min(0.5, max(0.01, end - time.monotonic())))
        return out

    def check_ids(self, msgs):
        self.assertEqual([m.id for m in msgs], list(range(1, len(msgs) + 1)), "SSE ids not 1..n")

    def test_1_framing(self):
        d, lab = self.d, self.lab
        rid = self.egress_rule(lo=PORT, rate=0.02).id
        s = self.stream("/api/v1/events")
        self.assertEqual(s.status, 200)
        self.assertTrue(s.headers["content-type"].startswith("text/event-stream"), s.headers)
        self.assertEqual(s.headers.get("cache-control"), "no-cache")
        first = self.read_all(s, 2.5)
        self.assertEqual(first[0].event, "hello", first[:3])
        hello = first[0].json()
        self.assertGreater(int(hello["mono_ns"]), 0)
        self.assertGreater(int(hello["unix_ns"]), 0)
        c0 = lab.counters(lab.a)
        flow = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, PORT, 60e6, 200)
        self.addCleanup(flow.close)
        t0 = time.monotonic()
        during = []
        while flow.running():
            during += s.read(0.5)
        flow.release()
        lab.wait_idle(port=PORT)  # (this stream is a TCP connection in A too)
        secs = time.monotonic() - t0
        retrans = (lab.counters(lab.a) - c0)["Tcp.RetransSegs"]
        after = self.read_all(s, 3.0)
        msgs = first + during + after
        self.check_ids(msgs)
        for m in msgs:
            m.json()  # every data line is JSON
        kinds = {}
        for m in msgs:
            kinds[m.event] = kinds.get(m.event, 0) + 1
        total_secs = 2.5 + secs + 3.0
        for k in ("aggregate", "flows", "rules", "health", "kernel"):
            # at least once a second (the first second may pass before the first window)
            self.assertGreaterEqual(kinds.get(k, 0), int(total_secs) - 2, (k, kinds, total_secs))
        self.assertNotIn("retransmit", kinds, "retransmit events without ?flow/?rule")
        self.assertNotIn("gap", kinds)
        aggs = [m.json() for m in msgs if m.event == "aggregate"]
        seqs = [int(a["seq"]) for a in aggs]
        self.assertEqual(seqs, list(range(seqs[0], seqs[0] + len(seqs))), "aggregate seq")
        # The windows after the page opened hold every retransmission of the flow.
        seen = sum(int(n) for a in aggs for n in a["retransmits_by_type"].values())
        measured("live_events_framing", messages=len(msgs), kinds=kinds, retrans_segs=retrans,
                 aggregate_segments=seen)
        self.assertGreater(retrans, 0)
        self.assertEqual(seen, retrans)
        rules = [m.json() for m in msgs if m.event == "rules"][-1]
        self.assertEqual([r["id"] for r in rules["rules"]], [rid])
        effects = [m.json() for m in msgs if m.event == "effect"]
        self.assertEqual(effects[-1]["id"], rid)
        kernel = [m.json() for m in msgs if m.event == "kernel"]
        k_delta = int(kernel[-1]["counters"]["Tcp.RetransSegs"]) - int(kernel[0]["counters"]["Tcp.RetransSegs"])
        self.assertEqual(k_delta, retrans)

    def test_2_bad_input(self):
        port = self.d.ready["http_port"]
        for path, code, word in (("/api/v1/events?flow=abc", 400, "flow"),
                                 ("/api/v1/events?queue=0", 400, "queue"),
                                 ("/api/v1/events?bogus=1", 400, "bogus"),
                                 ("/api/v1/events?rule=1&rule=2", 400, "rule"),
                                 ("/api/v1/events?flow=" + "9" * 300, 400, "flow"),
                                 ("/api/v1/events?flow=123456789", 404, "123456789"),
                                 ("/api/v1/events?rule=4242", 404, "4242")):
            s = SseStream(self.lab.a, port, path)
            try:
                self.assertEqual(s.status, code, (path, s.error_body))
                self.assertIn(word, s.error_body, path)
                self.assertLess(len(s.error_body), 300, s.error_body)
            finally:
                s.close()

    def test_3_slow_reader(self):
        d, lab = self.d, self.lab
        # per_segment: one retransmit event per dropped segment (not per GSO skb): enough
        # events to fill a stalled reader's window and its queue.
        rid = d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=(PORT + 1, PORT + 1),
                       payload="only", rate=0.05, per_segment=True).id
        ref = self.watch("reference", allow=[self.pb.EventFilter(rule_id=rid)])
        pace = d.obs.WatchAggregates(self.pb.WatchAggregatesRequest(window_ns=500_000_000), timeout=120)
        from lab.daemon import StreamReader
        pace_r = StreamReader(pace, "pace")
        self.readers.append(pace_r)
        # Small TCP send buffers in A (this test's namespace; restored after), so that a reader
        # that stops reading blocks the daemon's writes within moments, not after megabytes.
        old = lab.run(lab.a, "sysctl", "-n", "net.ipv4.tcp_wmem").stdout.split()
        lab.run(lab.a, "sysctl", "-qw", "net.ipv4.tcp_wmem=4096 16384 65536")
        self.addCleanup(lab.run, lab.a, "sysctl", "-qw", "net.ipv4.tcp_wmem=" + " ".join(old))
        s = self.stream("/api/v1/events?rule=%d&queue=64" % rid, rcvbuf=4096)
        msgs = s.read(1.0)
        wait_until(lambda: d.health().subscribers >= 4, 10, "the page's retransmit subscriber")
        flow = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, PORT + 1, 40e6, 200)
        self.addCleanup(flow.close)
        time.sleep(1.0)
        n_pace = len(pace_r.snapshot())
        time.sleep(3.0)  # the reader reads nothing: its window closes, the daemon's queue fills
        pace_during = len(pace_r.snapshot()) - n_pace
        while flow.running():
            msgs += s.read(0.5)
        flow.release()
        lab.wait_idle(port=PORT + 1)
        msgs += self.read_all(s, 3.5)  # the last gap reports (once a second)
        self.check_ids(msgs)
        events = [m.json() for m in msgs if m.event == "retransmit"]
        gaps = [m.json() for m in msgs if m.event == "gap"]
        rtx_gaps = sum(int(g["count"]) for g in gaps if g["stream"] == "retransmit")
        ref_msgs = ref.snapshot()
        ref_events = events_of(ref_msgs)
        nums = dict(sse_events=len(events), sse_retransmit_gaps=rtx_gaps,
                    gaps_by_stream={g["stream"]: 0 for g in gaps}, reference_events=len(ref_events),
                    reference_gaps=len(gaps_of(ref_msgs)), pace_windows_in_3s=pace_during)
        for g in gaps:
            nums["gaps_by_stream"][g["stream"]] += int(g["count"])
        measured("live_events_slow_reader", **nums)
        self.assertGreater(len(ref_events), 0, nums)
        self.assertEqual(gaps_of(ref_msgs), [], nums)
        self.assertGreater(rtx_gaps, 0, "the slow reader saw no gap: %s" % nums)
        for g in gaps:
            self.assertEqual(g["source"], "GAP_SOURCE_SUBSCRIBER", g)
        self.assertEqual(len(events) + rtx_gaps, len(ref_events), nums)
        for e in events:
            self.assertIn(rid, e["event"]["rule_ids"], e)
        # 0.5 s windows kept coming on gRPC while the SSE reader stalled.
        self.assertGreaterEqual(pace_during, 5, nums)


if __name__ == "__main__":
    main()
