"""The live page's flow view with a real flow's trace, in a real browser (headless Chromium in
the daemon's namespace A, driven by selenium).

A request/response client in A (tcpflow.py rr: 14,480-byte requests, answered by 100 bytes
from B) through a rule on A's egress dropping 10 % of the data segments that carry PSH (the
tail of each request): lost block tails, each a ~200 ms stall (tail loss probe or RTO)
against a veth RTT of microseconds.

  test_flow_trace_view
    1. The flow's row in the flows table shows its limit ("app 97 %") and stalls; clicked,
       the page follows it: GET /api/v1/events?flow=COOKIE carries its TraceFlow as "trace"
       events. The flow view's time-sequence chart fills: snd_una points non-decreasing
       (relative bytes), snd_nxt >= snd_una, retransmission and drop markers, cwnd / in
       flight points; at least two stalls shaded and listed with a network cause (tlp or
       rto) and their evidence; the flow's limit ("... % of busy time") and stalls shown.
    2. After the client ends, the page shows the trace complete (the closing summary came)
       and its counts reconcile: the retransmitted segments marked == the closing summary's
       minus the first trace message's (the flow when the page began tracing it); the summary's
       is what a WatchRetransmits stream of namespace A carried for the flow, and with the
       other flows' of A (the browser's loopback connections), the namespace's TcpRetransSegs
       delta exactly; the stalls listed likewise.
       No console errors. Screenshot: <build>/e2e-artifacts/live_trace.png.
  test_stalls_before_the_trace
    A flow whose RTO stalls (a 0.6 s blackhole) all ended before the page traces it, then
    idle: the flow's stalls line says "N (rto ...), 0 in this trace" and the empty stall
    table says the flow's N earlier stalls ended before the trace began (before: "stalls 3"
    above an empty table). Screenshot: live_trace_before.png.
"""
import os
import re
import subprocess
import time

from lab import traffic
from lab.browser import Browser
from lab.config import artifact, main
from lab.daemon import DaemonTestCase, events_of, wait_until
from lab.netns import measured

PORT = 5461
REQUESTS = 600


class LiveTraceTest(DaemonTestCase):
    daemon_args = ("--http", "127.0.0.1:0")

    def js(self, b, expr):
        return b.driver.execute_script("return " + expr)

    def test_flow_trace_view(self):
        d, lab = self.d, self.lab
        url = "http://127.0.0.1:%d/" % d.ready["http_port"]
        d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=(PORT, PORT),
                 payload="only", tcp_flags="psh", rate=0.1)
        b = Browser(lab, lab.a, height=2300)
        b.open(url)
        b.wait(lambda: b.text("#conn") == "live", 20, "the page live")

        # Every retransmission of namespace A (the daemon sees all of the host's): what is not
        # the flow's must be another flow's, to the segment.
        subs = d.health().subscribers
        rtx = self.watch("rtx", allow=[self.pb.EventFilter(netns_ino=os.stat("/run/netns/" + lab.a).st_ino)])
        wait_until(lambda: d.health().subscribers > subs, 10, "the retransmit stream to subscribe")
        c0 = lab.counters(lab.a)
        srv = traffic.rr_server(lab, lab.b, "0.0.0.0", PORT, conns=1)
        cli = lab.popen(lab.a, traffic.rr_cmd(lab.V4_B, PORT, "--request", 14480, "--response", 100,
                                              "--count", REQUESTS, "--gap-ms", 20, "--no-latencies"),
                        stdout=subprocess.PIPE)
        self.addCleanup(lambda: [p.kill() for p in (cli, srv) if p.poll() is None])

        # 1. the flow's row (limit and stalls), clicked
        sel = "#flows tbody tr"
        b.click_row(sel, "192.0.2.2:%d" % PORT, "the flow in the flows table", timeout=15)
        b.wait(lambda: "192.0.2.2:%d" % PORT in (b.text("#trace-title") or ""), 15, "the trace view's title")
        b.wait(lambda: self.js(b, "state.trace.samples") > 100 and self.js(b, "state.trace.stalls.length") >= 2
               and self.js(b, "state.trace.retransmits") >= 1, 40,
               "samples, two stalls and a retransmission in the trace view")
        b.wait(lambda: re.match(r"^(rwnd|sndbuf|cwnd|app) \d+ % of busy time$", b.text("#flow-limit") or ""),
               10, "the flow's limit")
        b.wait(lambda: re.match(r"^[1-9]\d* \(", b.text("#flow-stalls") or ""), 10, "the flow's stalls")
        row = b.texts(sel + ".selected td")
        self.assertTrue(row, "the followed flow's row is selected")
        self.assertTrue(any(re.match(r"^(rwnd|sndbuf|cwnd|app) \d+ %$", c) for c in row), row)
        self.assertTrue(any(re.match(r"^\d+ / [\d.]+ (ms|s)", c) for c in row), row)
        una = self.js(b, "traceChart.data.datasets[0].data.map(p => p.y)")
        nxt = self.js(b, "traceChart.data.datasets[1].data.map(p => p.y)")
        xs = self.js(b, "traceChart.data.datasets[0].data.map(p => p.x)")
        self.assertEqual(una, sorted(una), "snd_una went backwards on the chart")
        self.assertEqual(xs, sorted(xs), "samples out of time order")
        self.assertTrue(all(n >= u for u, n in zip(una, nxt)), "snd_nxt below snd_una")
        self.assertGreater(len(self.js(b, "traceChart.data.datasets[2].data")), 0, "no retransmission marker")
        self.assertGreater(len(self.js(b, "traceCwndChart.data.datasets[0].data")), 100, "no cwnd points")
        stalls = b.texts("#stalls tbody tr")
        self.assertGreaterEqual(len(stalls), 2, stalls)
        # The rule's lost tails make tlp / rto stalls; a busy machine adds the odd other one
        # (e.g. app limited: a delayed ACK of a request when nothing more was queued).
        self.assertTrue([s for s in stalls if re.search(r"(tlp|rto) .*(tail loss probe|rto backoff \d+)", s)],
                        stalls)
        for s in stalls:  # start, cause, duration, the evidence that decided it
            self.assertRegex(s, r"^-?[\d.]+ s \S.* [\d.]+ (µs|us|ms|s) \S", s)  # a stall may start before the trace

        # 2. the end: the closing summary, reconciled
        rr = traffic.finish(cli, timeout=180)
        traffic.finish(srv, timeout=30)
        self.assertEqual(rr["requests"], REQUESTS, rr)
        lab.wait_idle(port=PORT)
        retrans = (lab.counters(lab.a) - c0)["Tcp.RetransSegs"]
        b.wait(lambda: b.text("#trace-state") == "the flow closed: trace complete", 15, "the trace complete")
        time.sleep(1.0)  # one more redraw
        closed = self.js(b, "state.trace.closed")
        first = self.js(b, "state.trace.flow")  # the flow when the page began tracing it
        segs = lambda f: sum(int(v) for v in f["retransmitted_segments"].values())
        nums = dict(page_rtx_segments=self.js(b, "state.trace.rtxSegments"),
                    page_retransmits=self.js(b, "state.trace.retransmits"),
                    flow_retransmitted=segs(closed), before_trace=segs(first),
                    kernel_retrans_segs=retrans, page_stalls=self.js(b, "state.trace.stalls.length"),
                    flow_stalls=closed.get("stalls", 0), stalls_before_trace=first.get("stalls", 0), page_samples=self.js(b, "state.trace.samples"),
                    page_drops=self.js(b, "state.trace.drops"), counts=b.text("#trace-counts"),
                    limit=b.text("#flow-limit"), time=b.text("#flow-time"), stalls=b.text("#flow-stalls"))
        b.driver.execute_script("document.getElementById('card-trace').scrollIntoView()")
        time.sleep(0.5)
        nums["screenshot"] = b.screenshot(artifact("live_trace.png"))
        sent = (self.pb.OUTCOME_SENT, self.pb.OUTCOME_FAILED)

        def stream_segs():
            evs = [e for e in events_of(rtx.snapshot()) if e.outcome in sent]
            mine = sum(e.segments for e in evs if e.tuple.remote_port == PORT)
            return mine, sum(e.segments for e in evs) - mine
        try:
            wait_until(lambda: sum(stream_segs()) >= retrans, 10, "the stream to carry %d segments" % retrans)
        except AssertionError:
            pass  # the equalities below say what is missing
        nums["flow_events"], nums["other_flows"] = stream_segs()
        measured("live_trace", **nums)
        self.assertEqual(nums["page_rtx_segments"], nums["flow_retransmitted"] - nums["before_trace"], nums)
        # The namespace's kernel count is this flow's and, now and then, one of another flow
        # (the browser's loopback connections): exactly, by the stream's events.
        self.assertEqual(nums["flow_events"], nums["flow_retransmitted"], nums)
        self.assertEqual(nums["flow_retransmitted"] + nums["other_flows"], retrans, nums)
        self.assertEqual(nums["page_stalls"], nums["flow_stalls"] - nums["stalls_before_trace"], nums)
        errors = b.console_errors()
        self.assertEqual(errors, [], errors)

    def test_stalls_before_the_trace(self):
        d, lab = self.d, self.lab
        port = PORT + 1
        # A blackhole for 0.6 s: the flow's data waits out RTOs, then it is delivered and the
        # flow holds open, idle: its stalls all ended before the page traces it.
        d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=(port, port),
                 payload="only", rate=1.0, ttl_ns=600_000_000)
        flow = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, port, 200_000, 20, hold=True)
        self.addCleanup(flow.close)
        flow.wait_sent()
        b = Browser(lab, lab.a, height=2300)
        b.open("http://127.0.0.1:%d/" % d.ready["http_port"])
        b.wait(lambda: b.text("#conn") == "live", 20, "the page live")
        b.click_row("#flows tbody tr", "192.0.2.2:%d" % port, "the flow in the flows table", timeout=15)
        b.wait(lambda: "192.0.2.2:%d" % port in (b.text("#trace-title") or ""), 15, "the trace view's title")
        head = b.wait(lambda: re.match(r"^([1-9]\d*) \((.*)\), 0 in this trace$", b.text("#flow-stalls") or ""),
                      10, "the flow's stalls, none in this trace")
        n = int(head.group(1))
        time.sleep(1.0)  # a stall of the trace would show by now (the flow is idle: none may)
        b.driver.execute_script("document.getElementById('card-trace').scrollIntoView()")
        nums = dict(header=b.text("#flow-stalls"), empty=b.text("#stalls-empty"), rows=b.texts("#stalls tbody tr"),
                    screenshot=b.screenshot(artifact("live_trace_before.png")))
        measured("live_trace_stalls_before", **nums)
        self.assertIn("rto", head.group(2), nums)
        self.assertEqual(nums["rows"], [], nums)
        self.assertEqual(nums["header"], head.group(0), nums)
        self.assertEqual(nums["empty"], "no stalls in the trace (the flow's %d earlier stall%s ended before it began)"
                         % (n, "" if n == 1 else "s"), nums)
        flow.release()
        self.assertEqual(b.console_errors(), [])


if __name__ == "__main__":
    main()
