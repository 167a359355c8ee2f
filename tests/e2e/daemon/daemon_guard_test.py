"""Daemon e2e: guards, rules that stop themselves when TCP says enough (issue 22). The daemon
runs in namespace A with its observer; a paced TCP transfer goes A -> B, and the rule drops
its data on A's egress. A guard is decided in the kernel: the observer's sock_ops program,
at a resend of a segment the rule dropped (the drop log's link), counts it and, or its own
timer at a stall's limit, stops the rule; the injector's programs pass from then on. The
daemon then shows it STOPPED with the evidence (Rule.guard_stop).

  test_stall_guard_stops_a_blackhole
      A 100 % rule with guard stall>500ms: the flow stalls (no delivery), the guard stops
      the rule at the stall's 500 ms, the flow recovers and delivers every byte. The rule's
      last drop was before the stop (nothing dropped after it: its counters stay frozen),
      the evidence names the flow (its sender's port), and the observer's own stall event
      for that flow starts when the guard says the stall started, lasts past 500 ms and
      was an RTO stall caused by the rule's drop. The rule's WatchRuleCounters stream, /metrics
      (lossd_rules{state="stopped"}, lossd_guard_stops_total), the live page ("stopped
      (stall)", screenshot live_guard.png) and `lossctl rule get` say STOPPED and why.
  test_rto_guard_fires_under_heavy_loss
      30 % loss with guard rtos>5/2s: stopped by the 6th RTO within 2 s of the first of
      them, each an RTO resend of that flow the observer streamed (WatchRetransmits, type
      RTO) between the evidence's first RTO and the stop.
  test_rto_guard_holds_under_light_loss
      The same guard (and misbehaves: lossd's check of the rule's own loss against its rate's
      99.9 % interval) on a 0.1 % per-segment rule over a 10 s transfer (about 86,000 wire
      segments: about 86 drops), the flow recovering by fast retransmit: the guard never
      fires (the rule is ACTIVE at the end).
  Conditions.test_reset_guard_counts_flows_ending_in_an_error
      resets>0/20s on a 20 % rule: a flow it dropped from that closes normally is not
      counted (ACTIVE); one whose receiver aborts it (an RST) stops it, the evidence naming
      that flow. resets>0/20s on a blackhole: a sender aborted by its TCP_USER_TIMEOUT of
      1 s (ETIMEDOUT) stops it.
  Conditions.test_retrans_guard_judges_a_flows_share
      retrans>5%/1s on a 10 % per-segment rule: stopped, the evidence's share above 5 % over
      at least 50 segments and the window (the kernel's samples reach it back); retrans>50%/1s
      on the same loss holds over a 3 s transfer.
  Conditions.test_stall_guard_by_cause
      Two blackholes: stall(rto)>300ms stops its rule (its flow's stall is an RTO one),
      stall(fast_recovery)>300ms on the other holds while its flow's RTO stall passes 800 ms.
  Conditions.test_watch_guard_judges_the_named_flows
      A blackhole on port 9081 with stall>300ms,watch=9082: its own flow's stall (1.5 s) does
      not stop it; the "health check" on 9082 stalling (another rule's blackhole) does, the
      evidence naming the health check's flow; the 9081 flow then recovers.
  test_bad_guards_are_refused
      A stall under 1 ms, an RTO window over 1 h, more than 63 RTOs, a count without its
      window, two count conditions, a watched port past 65535 or without a condition, a
      share of 100 % or without its window, misbehaves on a Gilbert-Elliott or every-n-th
      model: INVALID_ARGUMENT, each naming what is wrong.
  DaemonGuard.test_one_flow_stalled_stops_every_rule
      lossd --guard-all stall>500ms, a 50 % UDP rule on other traffic and a TCP blackhole:
      the blackholed flow's stall stops both rules, in the kernel, on its evidence (the
      other one drops nothing more), the flow recovers, and a rule created after drops
      (the guard is armed again).
  OneShot.test_one_shot_rule_stops_by_its_guard
      one-shot lossd --guard stall>500ms: refused without --observe (exit 2, saying why);
      with it, a blackhole's stall stops the rule, the flow completes, and the final report
      shows it STOPPED with its guard's evidence.
"""
import json
import subprocess
import time
import unittest

import grpc

from lab import config, prom, traffic, web
from lab.browser import Browser
from lab.clients import run_client
from lab.config import artifact, main
from lab.daemon import DaemonTestCase, StreamReader, wait_until
from lab.netns import Lab, measured

PORT = 9081
PORT_HC = 9082  # the "health check" a watching guard judges
MS = 1_000_000

# One TCP connection for the resets guard, run in a namespace: `recv PORT N` accepts, reads N
# bytes and aborts it (SO_LINGER 0: an RST); `send DST PORT USER_TIMEOUT_MS` writes until the
# connection fails (TCP_USER_TIMEOUT when not 0), printing its port first and the error last.
PEER = r"""
import errno, json, socket, struct, sys
if sys.argv[1] == "recv":
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", int(sys.argv[2]))); ls.listen(1); print("READY", flush=True)
    c, _ = ls.accept(); left = int(sys.argv[3])
    while left > 0:
        b = c.recv(min(left, 65536))
        if not b: break
        left -= len(b)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)); c.close()
    print(json.dumps({"read": int(sys.argv[3]) - left}), flush=True)
else:
    s = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=60)
    if int(sys.argv[4]): s.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(sys.argv[4]))
    print("STARTED %d" % s.getsockname()[1], flush=True)
    buf, sent = b"x" * 65536, 0
    try:
        while True: sent += s.send(buf)
    except OSError as e:
        print(json.dumps({"sent": sent, "error": errno.errorcode.get(e.errno, str(e))}), flush=True)
"""


class GuardHelpers:
    def stopped(self, rid):
        g = self.d.get(rid)
        return g if self.pb.RuleState.Name(g.state) == "RULE_STATE_STOPPED" else None

    def stopped_by_count(self, r, condition, count, window_ns, timeout):
        """Waits for rule r's count guard (rtos or resends) to stop it; checks the evidence
        (count events within the window, stopped after, no drop after the stop)."""
        info = wait_until(lambda: self.stopped(r.id), timeout, "the guard to stop the rule")
        g = info.guard_stop
        self.assertEqual(g.condition, condition, info)
        self.assertEqual(g.rtos, count, info)
        self.assertLessEqual(g.crossed_mono_ns - g.evidence_start_mono_ns, window_ns, info)
        self.assertGreaterEqual(g.stopped_mono_ns, g.crossed_mono_ns, info)
        self.assertLessEqual(g.last_drop_mono_ns, g.stopped_mono_ns, "a drop after the stop: %s" % info)
        return info, g

    def live_row(self, r, png):
        """Rule r's row on the live page (the daemon runs with --http), scrolled into view and
        saved as png; the page logged no error. Returns (its text, the screenshot's path)."""
        b = Browser(self.lab, self.lab.a, width=1400, height=900)
        b.open("http://127.0.0.1:%d/" % self.d.http_port)
        row = "#rules tbody tr[data-rule-id='%d']" % r.id
        text = b.wait(lambda: b.text(row), 20, "the rule's row")
        b.driver.execute_script("document.getElementById('rules').scrollIntoView()")
        shot = b.screenshot(artifact(png))
        self.assertEqual(b.console_errors(), [])
        return text, shot

    def blackhole_flow(self, nbytes, rate_mbit, rule_first=False, port=PORT, **rule):
        """A transfer A -> B and the rule on its data (rule_first: the rule before the flow
        connects, as per_segment needs: a socket takes its GSO size at connect)."""
        lab = self.lab

        def create():
            return self.d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=port,
                                 payload="only", **rule)
        r = create() if rule_first else None
        flow = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, port, nbytes, rate_mbit, hold=False,
                               acked=False)
        self.addCleanup(flow.close)
        if r is None:
            time.sleep(0.3)  # under way
            r = create()
        return flow, r


class Guards(GuardHelpers, DaemonTestCase):
    daemon_args = ("--http", "127.0.0.1:0")

    def test_stall_guard_stops_a_blackhole(self):
        lab, d, pb = self.lab, self.d, self.pb
        stalls = self.watch_stalls()
        nbytes = 20_000_000
        flow, r = self.blackhole_flow(nbytes, 100, rate=1.0, guard=dict(stall_ns=500 * MS))
        self.assertEqual(r.spec.guard.stall_ns, 500 * MS, r)
        counters = StreamReader(d.inj.WatchRuleCounters(
            pb.WatchRuleCountersRequest(ids=[r.id], interval_ns=100 * MS), timeout=60), "counters")
        self.readers.append(counters)
        info = wait_until(lambda: self.stopped(r.id), 15, "the guard to stop the rule")
        g = info.guard_stop
        sport = flow.cli.sports[0]
        # The rule's counter stream says so too, with the evidence.
        upd = counters.wait_for(lambda ms: any(pb.RuleState.Name(x.state) == "RULE_STATE_STOPPED"
                                               for m in ms for x in m.rules), 5, "STOPPED in the stream")
        streamed = [x for m in upd for x in m.rules if pb.RuleState.Name(x.state) == "RULE_STATE_STOPPED"][0]
        self.assertEqual(streamed.guard_stop.stopped_mono_ns, g.stopped_mono_ns)
        self.assertEqual(g.condition, "stall", info)
        self.assertEqual(g.flow, "%s:%d -> %s:%d" % (lab.V4_A, sport, lab.V4_B, PORT), info)
        self.assertEqual(g.crossed_mono_ns - g.evidence_start_mono_ns, 500 * MS, info)
        self.assertGreaterEqual(g.stopped_mono_ns, g.crossed_mono_ns, info)
        self.assertGreater(g.last_drop_mono_ns, 0, info)
        self.assertLessEqual(g.last_drop_mono_ns, g.stopped_mono_ns, "a drop after the stop: %s" % info)
        self.assertIn("stall", info.reason)
        self.assertIn(":%d -> " % sport, info.reason)
        self.assertGreater(info.counters.dropped_packets, 0, info)

        # The flow recovers: every byte delivered.
        sent, got = flow.wait()
        self.assertEqual(sent["bytes"], nbytes, sent)
        self.assertEqual(got["bytes"], nbytes, got)
        # Nothing dropped after the stop: the counters as the stop left them.
        self.assertEqual(d.get(r.id).counters.dropped_packets, info.counters.dropped_packets)

        # The observer's own view of that stall: it began when the guard says, lasted past
        # 500 ms, and was an RTO stall caused by this rule's drop.
        def ours(ms):
            return [m.event for m in ms if m.WhichOneof("msg") == "event" and m.event.cookie == g.socket_cookie
                    and m.event.start_mono_ns == g.evidence_start_mono_ns]
        ev = stalls.wait_for(lambda ms: ours(ms), 10, "the flow's stall")
        st = ours(ev)[0]
        self.assertGreater(st.duration_ns, 500 * MS, st)
        self.assertEqual(pb.StallCause.Name(st.cause), "STALL_CAUSE_RTO", st)
        self.assertEqual(st.caused_by.rule_id, r.id, st)

        if config.LOSSCTL:
            out = run_client(lab, [config.LOSSCTL, "--addr", d.addr, "rule", "get", str(r.id)]).out
            self.assertRegex(out, r"^rule %d  stopped\n" % r.id, out)
            self.assertRegex(out, r"guard +stop on a stall > 500ms\n", out)
            self.assertRegex(out, r"reason +stopped by its guard \(stall>500ms\): flow %s:%d -> " % (lab.V4_A, sport), out)
        # /metrics and the live page say so too.
        r_http = web.request(d.ns, "127.0.0.1", d.http_port, "/metrics")
        samples = prom.parse(r_http.text())
        self.assertEqual(prom.one(samples, "lossd_rules", state="stopped"), 1)
        self.assertGreaterEqual(prom.one(samples, "lossd_guard_stops_total"), 1)
        text, shot = self.live_row(r, "live_guard.png")
        self.assertIn("stopped (stall)", text)
        self.assertIn("stop on stall > 500.0 ms", text)
        measured("guard stall stop", stall_ms=round(st.duration_ns / 1e6, 3),
                 stop_after_limit_us=round((g.stopped_mono_ns - g.crossed_mono_ns) / 1e3, 1),
                 last_drop_before_stop_ms=round((g.stopped_mono_ns - g.last_drop_mono_ns) / 1e6, 3),
                 dropped=info.counters.dropped_packets, reason=info.reason, row=text, screenshot=shot)

    def test_rto_guard_fires_under_heavy_loss(self):
        lab, pb = self.lab, self.pb
        rtx = self.watch("rtx")
        flow, r = self.blackhole_flow(60_000_000, 100, rate=0.3,
                                      guard=dict(rtos=5, rtos_window_ns=2000 * MS))
        info, g = self.stopped_by_count(r, "rtos", 6, 2000 * MS, 60)
        sport = flow.cli.sports[0]
        self.assertIn(":%d -> %s:%d" % (sport, lab.V4_B, PORT), g.flow)
        sent, got = flow.wait()
        self.assertEqual(got["bytes"], sent["bytes"])

        # The observer streamed those RTOs (the guard counts only RTOs resending the rule's
        # drops, so at most all of the flow's).
        def rtos(ms):
            return [m.event for m in ms if m.WhichOneof("msg") == "event"
                    and pb.RetransmitType.Name(m.event.type) == "RETRANSMIT_TYPE_RTO"
                    and g.evidence_start_mono_ns <= m.event.time_mono_ns <= g.crossed_mono_ns]
        seen = rtx.wait_for(lambda ms: len(rtos(ms)) >= 6, 10, "the RTOs in the stream")
        self.assertLessEqual(g.rtos, len(rtos(seen)))
        measured("guard rto stop", rtos_in_window=len(rtos(seen)),
                 window_ms=round((g.crossed_mono_ns - g.evidence_start_mono_ns) / 1e6, 1),
                 stop_after_rto_us=round((g.stopped_mono_ns - g.crossed_mono_ns) / 1e3, 1),
                 dropped=info.counters.dropped_packets)

    def test_resend_guard_counts_every_type(self):
        pb = self.pb
        rtx = self.watch("rtx")
        # Per segment: one drop, one resend event (a GSO skb's drop is resent as a few
        # events of many segments, and a guard counts events).
        flow, r = self.blackhole_flow(30_000_000, 100, rate=0.03, per_segment=True, rule_first=True,
                                      guard=dict(resends=10, resends_window_ns=500 * MS))
        info, g = self.stopped_by_count(r, "resends", 11, 500 * MS, 30)
        self.assertIn("resends of its drops within", info.reason)
        sport = flow.cli.sports[0]
        sent, got = flow.wait()
        self.assertEqual(got["bytes"], sent["bytes"])

        # The observer streamed those resends of that flow, of any type (fast ones mostly:
        # 3 % recovers without timeouts).
        def ours(ms):
            return [m.event for m in ms if m.WhichOneof("msg") == "event" and m.event.tuple.local_port == sport
                    and g.evidence_start_mono_ns <= m.event.time_mono_ns <= g.crossed_mono_ns]
        seen = rtx.wait_for(lambda ms: len(ours(ms)) >= 11, 10, "the resends in the stream")
        types = sorted({pb.RetransmitType.Name(e.type) for e in ours(seen)})
        self.assertNotEqual(types, ["RETRANSMIT_TYPE_RTO"], types)  # not only RTOs counted
        measured("guard resend stop", resends_in_window=len(ours(seen)), types=types,
                 window_ms=round((g.crossed_mono_ns - g.evidence_start_mono_ns) / 1e6, 1),
                 stop_after_resend_us=round((g.stopped_mono_ns - g.crossed_mono_ns) / 1e3, 1))

    def test_rto_guard_holds_under_light_loss(self):
        d, pb = self.d, self.pb
        # 125 MB at 100 Mbit/s: 10 s.
        # misbehaves too: lossd judges its own loss against the 99.9 % interval every lease
        # period, from 1,000 matched on; it must not fire on a rule that does what it says.
        flow, r = self.blackhole_flow(125_000_000, 100, rate=0.001, per_segment=True, rule_first=True,
                                      guard=dict(rtos=5, rtos_window_ns=2000 * MS, misbehaves=True))
        sent, got = flow.wait()
        self.assertEqual(got["bytes"], 125_000_000)
        info = d.get(r.id)
        self.assertEqual(pb.RuleState.Name(info.state), "RULE_STATE_ACTIVE", info)
        self.assertFalse(info.HasField("guard_stop"), info)
        self.assertGreater(info.counters.dropped_packets, 30, info)  # ~86 expected: one per 1,000 segments
        measured("guard rto holds", dropped=info.counters.dropped_packets, retrans=sent["total_retrans"])

    def test_bad_guards_are_refused(self):
        for guard, want in ((dict(stall_ns=500_000), "between 1ms and 1h"),
                            (dict(rtos=5, rtos_window_ns=3601 * 1000 * MS), "between 1ms and 1h"),
                            (dict(rtos=64, rtos_window_ns=1000 * MS), "between 0 and 63"),
                            (dict(rtos=5), "with its window"),
                            (dict(resends=64, resends_window_ns=1000 * MS), "between 0 and 63"),
                            (dict(rtos=1, rtos_window_ns=1000 * MS, resends=5, resends_window_ns=1000 * MS),
                             "one of RTOs, resends or resets, not two"),
                            (dict(resets=1, resets_window_ns=1000 * MS, resends=5, resends_window_ns=1000 * MS),
                             "one of RTOs, resends or resets, not two"),
                            (dict(resets=64, resets_window_ns=1000 * MS), "between 0 and 63"),
                            (dict(stall_ns=1000 * MS, watch_port=65536), "between 1 and 65535"),
                            (dict(watch_port=80), "needs a condition"),
                            (dict(retrans=1.0, retrans_window_ns=1000 * MS), "between 1ppm and 100%"),
                            (dict(retrans=0.05), "needs its window"),
                            (dict(misbehaves=True, watch_port=80), "needs a condition")):
            with self.subTest(guard=guard):
                with self.assertRaises(grpc.RpcError) as cm:
                    self.d.create(interface=self.lab.IF_A, direction="egress", protocol="tcp", dport=PORT,
                                  rate=1.0, guard=guard)
                self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn("guard", cm.exception.details())
                self.assertIn(want, cm.exception.details())
        # misbehaves judges a binomial: not a bursty model's drops
        for model in (dict(ge=(0.01, 0.3, 1.0, 0.0)), dict(every_nth=10)):
            with self.subTest(model=model):
                with self.assertRaises(grpc.RpcError) as cm:
                    self.d.create(interface=self.lab.IF_A, direction="egress", protocol="tcp", dport=PORT,
                                  guard=dict(misbehaves=True), **model)
                self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn("guard: misbehaves judges a Bernoulli rate or a ramp's steps",
                              cm.exception.details())

    def watch_stalls(self):
        r = StreamReader(self.d.obs.WatchStalls(self.pb.WatchStallsRequest(), timeout=180), "stalls")
        self.readers.append(r)
        return r



class Conditions(GuardHelpers, DaemonTestCase):
    """The conditions beyond a stall and RTOs: resets, the retransmit share, a watched port
    (ctest e2e_daemon_guard_conditions: run beside e2e_daemon_guard)."""
    daemon_args = ("--http", "127.0.0.1:0")

    def peer(self, ns, *args):
        p = self.lab.popen(ns, [config.PY, "-c", PEER] + [str(a) for a in args], stdout=subprocess.PIPE)
        first = p.stdout.readline()
        self.assertRegex(first, "^(READY|STARTED)", first)
        p.first = first
        return p

    def test_reset_guard_counts_flows_ending_in_an_error(self):
        lab, d = self.lab, self.d
        resets = dict(resets=0, resets_window_ns=20_000 * MS)
        # A flow the rule drops from, closed normally: not an error, not counted.
        flow, r = self.blackhole_flow(5_000_000, 50, rate=0.2, rule_first=True, guard=resets)
        sent, got = flow.wait()
        self.assertEqual(got["bytes"], 5_000_000)
        time.sleep(1.2)  # past a lease period: a stop would show
        info = d.get(r.id)
        self.assertEqual(self.pb.RuleState.Name(info.state), "RULE_STATE_ACTIVE", info)
        self.assertGreater(info.counters.dropped_packets, 0, info)
        # One whose receiver aborts it while it sends: an RST, the sender's ECONNRESET.
        rx = self.peer(lab.b, "recv", PORT, 4_000_000)
        tx = self.peer(lab.a, "send", lab.V4_B, PORT, 0)
        sport = int(tx.first.split()[1])
        out = json.loads(tx.communicate(timeout=60)[0].strip().splitlines()[-1])
        self.assertIn(out["error"], ("ECONNRESET", "EPIPE"), out)
        rx.communicate(timeout=30)
        info, g = self.stopped_by_count(r, "resets", 1, 20_000 * MS, 10)
        self.assertEqual(g.flow, "%s:%d -> %s:%d" % (lab.V4_A, sport, lab.V4_B, PORT), info)
        self.assertIn("was reset or aborted: 1 of the flows it dropped from ended in an error", info.reason)

        # A blackhole whose sender gives up after 1 s (TCP_USER_TIMEOUT): ETIMEDOUT.
        r2 = d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=PORT_HC,
                      payload="only", rate=1.0, guard=resets)
        rx = self.peer(lab.b, "recv", PORT_HC, 1 << 30)
        self.addCleanup(rx.kill)
        tx = self.peer(lab.a, "send", lab.V4_B, PORT_HC, 1000)
        sport = int(tx.first.split()[1])
        out = json.loads(tx.communicate(timeout=60)[0].strip().splitlines()[-1])
        self.assertEqual(out["error"], "ETIMEDOUT", out)
        info2, g2 = self.stopped_by_count(r2, "resets", 1, 20_000 * MS, 10)
        self.assertEqual(g2.flow, "%s:%d -> %s:%d" % (lab.V4_A, sport, lab.V4_B, PORT_HC), info2)
        self.assertGreater(info2.counters.dropped_packets, 0, info2)
        measured("guard resets stop", reset_reason=info.reason, abort_reason=info2.reason,
                 stop_after_close_us=round((g2.stopped_mono_ns - g2.crossed_mono_ns) / 1e3, 1))

    def test_retrans_guard_judges_a_flows_share(self):
        lab, d, pb = self.lab, self.d, self.pb
        flow, r = self.blackhole_flow(20_000_000, 100, rate=0.1, per_segment=True, rule_first=True,
                                      guard=dict(retrans=0.05, retrans_window_ns=1000 * MS))
        info = wait_until(lambda: self.stopped(r.id), 30, "the retransmit share to stop the rule")
        g = info.guard_stop
        self.assertEqual(g.condition, "retrans", info)
        self.assertGreaterEqual(g.segs, 50, info)
        self.assertGreater(g.rtos / g.segs, 0.05, info)
        self.assertLess(g.rtos / g.segs, 0.5, info)  # about the rule's 10 %
        # judged over the window (the newest sample at least 1 s old: up to 1/16 more, and a
        # resend's gap), or since the flow opened while its samples do not reach that far back
        span = g.crossed_mono_ns - g.evidence_start_mono_ns
        opened = [f for f in self.d.obs.ListFlows(pb.ListFlowsRequest()).flows
                  if f.cookie == g.socket_cookie]
        if opened and opened[0].opened_mono_ns == g.evidence_start_mono_ns:
            self.assertLess(span, 1000 * MS, info)
        else:
            self.assertGreaterEqual(span, 1000 * MS, info)
            self.assertLessEqual(span, 1000 * MS * 17 // 16 + 200 * MS, info)
        self.assertLessEqual(g.last_drop_mono_ns, g.stopped_mono_ns, "a drop after the stop: %s" % info)
        self.assertIn(":%d -> %s:%d resent " % (flow.cli.sports[0], lab.V4_B, PORT), info.reason)
        sent, got = flow.wait()
        self.assertEqual(got["bytes"], sent["bytes"])
        # The same loss under a share it never reaches: 3 s, still ACTIVE.
        flow2, r2 = self.blackhole_flow(15_000_000, 40, rate=0.1, per_segment=True, rule_first=True,
                                        guard=dict(retrans=0.5, retrans_window_ns=1000 * MS))
        sent2, got2 = flow2.wait()
        self.assertEqual(got2["bytes"], 15_000_000)
        info2 = d.get(r2.id)
        self.assertEqual(pb.RuleState.Name(info2.state), "RULE_STATE_ACTIVE", info2)
        self.assertGreater(info2.counters.dropped_packets, 1000, info2)
        measured("guard retrans stop", share=round(g.rtos / g.segs, 4), segs=g.segs,
                 span_ms=round(span / 1e6, 1), reason=info.reason,
                 stop_after_resend_us=round((g.stopped_mono_ns - g.crossed_mono_ns) / 1e3, 1),
                 held_dropped=info2.counters.dropped_packets, held_retrans=sent2["total_retrans"])

    def test_stall_guard_by_cause(self):
        lab, d, pb = self.lab, self.d, self.pb
        # The rules before the flows: 1 MB at 20 Mbit/s is sent in 0.4 s, and a rule made 0.3 s
        # into it on a loaded CI host once came after the last byte (it dropped nothing).
        fast, r_fast = self.blackhole_flow(1_000_000, 20, rate=1.0, rule_first=True,
                                           guard=dict(stall_ns=300 * MS, stall_cause="STALL_CAUSE_FAST_RECOVERY"))
        rto, r_rto = self.blackhole_flow(1_000_000, 20, port=PORT_HC, rate=1.0, rule_first=True,
                                         guard=dict(stall_ns=300 * MS, stall_cause="STALL_CAUSE_RTO"))
        self.assertEqual(pb.StallCause.Name(r_rto.spec.guard.stall_cause), "STALL_CAUSE_RTO", r_rto)
        info = wait_until(lambda: self.stopped(r_rto.id), 15, "the RTO stall to stop its rule")
        g = info.guard_stop
        self.assertEqual(g.condition, "stall", info)
        self.assertEqual(g.flow, "%s:%d -> %s:%d" % (lab.V4_A, rto.cli.sports[0], lab.V4_B, PORT_HC), info)
        self.assertIn("stall(rto)>300ms", info.reason)
        # The other flow's stall is an RTO stall too, past 300 ms by now: not the cause it counts.
        time.sleep(0.5)
        other = d.get(r_fast.id)
        self.assertEqual(pb.RuleState.Name(other.state), "RULE_STATE_ACTIVE", other)
        self.assertGreater(other.counters.dropped_packets, 0, other)
        d.delete(r_fast.id)
        for flow in (fast, rto):
            sent, got = flow.release()
            self.assertEqual(got["bytes"], 1_000_000)
        measured("guard stall by cause", reason=info.reason)

    def test_watch_guard_judges_the_named_flows(self):
        lab, d, pb = self.lab, self.d, self.pb
        nbytes = 5_000_000
        flow, r = self.blackhole_flow(nbytes, 20, rate=1.0,
                                      guard=dict(stall_ns=300 * MS, watch_port=PORT_HC))
        self.assertEqual(r.spec.guard.watch_port, PORT_HC, r)
        # Its own flow stalls well past 300 ms: not what it watches.
        time.sleep(1.5)
        info = d.get(r.id)
        self.assertEqual(pb.RuleState.Name(info.state), "RULE_STATE_ACTIVE", info)
        self.assertGreater(info.counters.dropped_packets, 0, info)
        # The health check stalls (another rule, unguarded, blackholes it): that stops it.
        other = d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=PORT_HC,
                         payload="only", rate=1.0)
        hc = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, PORT_HC, 1_000_000, 1, hold=False, acked=False)
        self.addCleanup(hc.close)
        info = wait_until(lambda: self.stopped(r.id), 15, "the watched flow's stall to stop the rule")
        g = info.guard_stop
        self.assertEqual(g.condition, "stall", info)
        self.assertEqual(g.flow, "%s:%d -> %s:%d" % (lab.V4_A, hc.cli.sports[0], lab.V4_B, PORT_HC), info)
        self.assertEqual(g.crossed_mono_ns - g.evidence_start_mono_ns, 300 * MS, info)
        self.assertLessEqual(g.last_drop_mono_ns, g.stopped_mono_ns, "a drop after the stop: %s" % info)
        self.assertIn("watched flow", info.reason)
        self.assertEqual(pb.RuleState.Name(d.get(other.id).state), "RULE_STATE_ACTIVE")
        # The rule stopped: its own flow recovers; the health check when its blackhole goes
        # (release(): wait() waits for every socket in the lab, a browser's of an earlier test too).
        d.delete(other.id)
        sent, got = flow.release()
        self.assertEqual(got["bytes"], nbytes)
        self.assertEqual(d.get(r.id).counters.dropped_packets, info.counters.dropped_packets)
        sent, got = hc.release()
        self.assertEqual(got["bytes"], 1_000_000)
        if config.LOSSCTL:
            out = run_client(lab, [config.LOSSCTL, "--addr", d.addr, "rule", "get", str(r.id)]).out
            self.assertRegex(out, r"guard +stop on a stall > 300ms of port %d's flows\n" % PORT_HC, out)
        # The live page's rules table says what it watched and why it stopped.
        text, shot = self.live_row(r, "live_guard_watch.png")
        self.assertIn("stopped (stall)", text)
        self.assertIn("stop on stall > 300.0 ms of port %d's flows" % PORT_HC, text)
        measured("guard watch stop", reason=info.reason, row=text, screenshot=shot,
                 stop_after_limit_us=round((g.stopped_mono_ns - g.crossed_mono_ns) / 1e3, 1))


class DaemonGuard(GuardHelpers, DaemonTestCase):
    """lossd --guard-all stall>500ms: the daemon's guard over every rule."""
    daemon_args = ("--guard-all", "stall>500ms")

    def test_one_flow_stalled_stops_every_rule(self):
        lab, d, pb = self.lab, self.d, self.pb
        # Another rule, on other traffic, that nothing stalls.
        other = d.create(interface=lab.IF_A, direction="egress", protocol="udp", dport=PORT + 1,
                         rate=0.5)
        for _ in range(3):
            traffic.udp_count(lab, lab.a, lab.b, lab.V4_B, PORT + 1, 3, 200, pps=2000)
        before = d.get(other.id).counters.dropped_packets
        self.assertGreater(before, 0)
        flow, r = self.blackhole_flow(20_000_000, 100, rate=1.0)
        info = wait_until(lambda: self.stopped(r.id), 15, "the daemon's guard to stop the rule")
        g = info.guard_stop
        self.assertEqual(g.condition, "stall", info)
        self.assertTrue(g.daemon_guard, info)
        self.assertEqual(g.evidence_rule_id, r.id, info)
        self.assertEqual(g.crossed_mono_ns - g.evidence_start_mono_ns, 500 * MS, info)
        self.assertGreater(g.last_drop_mono_ns, 0, info)  # any rule's last drop
        self.assertLessEqual(g.last_drop_mono_ns, g.stopped_mono_ns, info)
        self.assertIn("stopped by the daemon's guard (--guard-all stall>500ms)", info.reason)
        self.assertIn("(rule %d's drop)" % r.id, info.reason)
        # Every rule stopped on that evidence, the other one too, and it drops no more.
        o = self.stopped(other.id)
        self.assertIsNotNone(o, d.get(other.id))
        self.assertEqual(o.guard_stop.stopped_mono_ns, g.stopped_mono_ns, o)
        self.assertEqual(o.guard_stop.evidence_rule_id, r.id, o)
        sent_after, got_after = traffic.udp_count(lab, lab.a, lab.b, lab.V4_B, PORT + 1, 4, 200, pps=2000)
        self.assertEqual((sent_after, got_after), (200, 200), "a stopped rule still dropped")
        self.assertEqual(d.get(other.id).counters.dropped_packets, o.counters.dropped_packets)
        sent, got = flow.wait()
        self.assertEqual(got["bytes"], 20_000_000)
        # Armed again: a rule created now drops.
        again = d.create(interface=lab.IF_A, direction="egress", protocol="udp", dport=PORT + 1, rate=1.0)
        res = traffic.udp_count(lab, lab.a, lab.b, lab.V4_B, PORT + 1, 5, 100, pps=2000)
        a = d.get(again.id)
        self.assertEqual(pb.RuleState.Name(a.state), "RULE_STATE_ACTIVE", a)
        self.assertEqual(a.counters.dropped_packets, 100, (a, res))
        measured("guard all stop", reason=info.reason, other_dropped=o.counters.dropped_packets)



class OneShot(unittest.TestCase):
    """One-shot lossd: the rule's guard with --observe (the observer decides it)."""

    def test_one_shot_rule_stops_by_its_guard(self):
        lab = Lab()
        self.addCleanup(lab.close)
        cmd = [config.LOSSD, "--iface", lab.IF_A, "--dir", "egress", "--proto", "tcp", "--dport", str(PORT),
               "--payload", "only", "--rate", "100%", "--guard", "stall>500ms", "--json", "--interval", "500ms",
               "--state-dir", lab.tempdir()]
        # Without --observe it is refused: nothing would decide the guard.
        r = lab.run(lab.a, *cmd, check=False)
        self.assertEqual(r.returncode, 2, r)
        self.assertIn("--guard: it is decided by the TCP observer's program: add --observe", r.stderr)
        p = lab.popen(lab.a, cmd + ["--observe"], stdout=subprocess.PIPE)
        self.assertIn('"ready"', p.stdout.readline())
        flow = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, PORT, 20_000_000, 100, hold=False, acked=False)
        self.addCleanup(flow.close)
        sent, got = flow.wait()
        self.assertEqual(got["bytes"], 20_000_000)
        time.sleep(1.2)  # a report after the reaper's period
        p.terminate()
        out, _ = p.communicate(timeout=30)
        final = [json.loads(line) for line in out.splitlines() if '"final"' in line]
        self.assertEqual(len(final), 1, out)
        rule = final[0]["rules"][0]
        self.assertEqual(rule["state"], "RULE_STATE_STOPPED", rule)
        self.assertIn("stopped by its guard (stall>500ms)", rule["reason"])
        self.assertEqual(rule["guard_stop"]["condition"], "stall", rule)


if __name__ == "__main__":
    main()
