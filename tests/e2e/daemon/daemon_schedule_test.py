"""Daemon e2e: schedules in the data plane (issue 22). The daemon runs in namespace A, a
numbered UDP stream goes A -> B, and each datagram's send time is recorded before and after
its sendto (udpflow.py --times): the rule's tc egress program decides it in between, on the
same clock (CLOCK_MONOTONIC) as the rule's schedule_start_mono_ns.

  test_pulse_edges_on_the_kernels_clock
      A 100 % rule on A's egress, starting 2 s after its creation, pulsing 200 ms active /
      800 ms dormant for 10 cycles, under 2,000 datagrams a second from before its start to
      after its end (one every 0.5 ms): every datagram
      sent wholly inside an active window was lost, none sent wholly outside was (the few
      whose sendto straddles an edge are not judged: within it, either is right); each of
      the 10 windows lost datagrams; the lost count equals the rule's dropped packets and its
      matched packets (dormant, it matches nothing); after the 10th window the rule is
      EXPIRED by itself. The edge accuracy (the first and last loss of each window against
      the window's edges) is reported. `lossctl rule get` shows the schedule.
  test_the_page_shows_the_schedule
      The live page's rules table shows a scheduled rule's loss with its schedule ("5.00 % after
      2.0 s, pulse 200.0 ms / 800.0 ms ×3"). Screenshot: live_schedule.png.
  test_ramp_steps_each_within_their_interval
      A ramp 0.1 % -> 1 % -> 5 %, 2 s each, under 5,000 numbered datagrams a second: each
      step's measured rate holds its rate (its own 99.9 % interval, GetRuleEffect.steps), each
      step's drops are the datagrams lost that were sent in it (one straddling an edge may
      count on either side), the steps add up to the rule's counters, and it ends (EXPIRED)
      after the last step; `lossctl rule effect` prints the steps.
  test_bad_schedules_are_refused
      A pulse of 0.5 ms, cycles without a pulse, a schedule longer than 30 years, a ramp
      with a pulse, a ramp of 17 steps: INVALID_ARGUMENT, each naming what is wrong.
"""
import array
import bisect
import os
import subprocess
import time

import grpc

from lab import config, traffic
from lab.browser import Browser
from lab.clients import run_client
from lab.config import artifact, main
from lab.daemon import DaemonTestCase, wait_until
from lab.netns import measured

PORT = 9071
ON, OFF, CYCLES, START_AFTER = 200_000_000, 800_000_000, 10, 2_000_000_000
PPS = 2000


class Schedule(DaemonTestCase):
    daemon_args = ("--http", "127.0.0.1:0")

    def timed_stream(self, rx, port, flow, count, pps):
        """`count` numbered datagrams A -> B to rx, one sendto each, timed before and after
        (udpflow.py --times): (the sender's summary, the times [before0, after0, ...]
        on CLOCK_MONOTONIC, the set of sequence numbers lost)."""
        lab = self.lab
        times_path = os.path.join(lab.tempdir(), "times-%d" % flow)
        tx = lab.popen(lab.a, traffic.udp_send_cmd(lab.V4_B, port, flow, count, pps)
                       + ["--batch", "1", "--times", times_path], stdout=subprocess.PIPE)
        sent = traffic.finish_sender(tx, count, pps)
        time.sleep(0.3)
        got = rx.finish()
        t = array.array("Q")
        with open(times_path, "rb") as fh:
            t.frombytes(fh.read())
        self.assertEqual(len(t), 2 * count)
        return sent, t, set(got["missing"]) | set(range(got["max_seq"] + 1, count))

    def test_pulse_edges_on_the_kernels_clock(self):
        lab, d, pb = self.lab, self.d, self.pb
        period = ON + OFF
        rx = traffic.UdpReceiver(lab, lab.b, lab.V4_B, PORT, 7, list_missing=True)
        r = d.create(interface=lab.IF_A, direction="egress", protocol="udp", dport=PORT, rate=1.0,
                     schedule=dict(start_after_ns=START_AFTER, active_ns=ON, dormant_ns=OFF, cycles=CYCLES))
        start = r.schedule_start_mono_ns
        self.assertGreater(start, 0, r)
        end = start + CYCLES * period - OFF
        self.assertEqual(r.expires_unix_ns - r.schedule_start_unix_ns, CYCLES * period - OFF, r)
        # From now (before the start) to 0.7 s past the last window.
        count = int(PPS * ((end - time.monotonic_ns()) / 1e9 + 0.7))
        sent, t, lost = self.timed_stream(rx, PORT, 7, count, PPS)
        self.assertLess(t[0], start, "the stream began after the schedule's start: no test of its first edge")

        def phase(ns):
            """(window index, ns into its period) of a moment; index -1 before the start."""
            if ns < start:
                return -1, 0
            return (ns - start) // period, (ns - start) % period

        def active(ns):
            i, ph = phase(ns)
            return 0 <= i < CYCLES and ph < ON

        judged_in = judged_out = 0
        wrong = []
        windows = set()  # the windows that lost datagrams
        for seq in range(count):
            b, a = t[2 * seq], t[2 * seq + 1]
            ia, ib = active(b), active(a)
            same = phase(b)[0] == phase(a)[0]
            if ia and ib and same:
                judged_in += 1
                if seq not in lost:
                    wrong.append(("delivered inside", seq, phase(b)))
            elif not ia and not ib and same:
                judged_out += 1
                if seq in lost:
                    wrong.append(("lost outside", seq, phase(b)))
            if seq in lost:
                windows.add(phase(b)[0])
        # Each edge as the data plane drew it, from the datagrams around it: those decided the
        # old way began their sendto at lo at the latest, those decided the new way ended theirs
        # at hi at the earliest. The configured edge must lie in [lo, hi]; hi - lo is how
        # finely the stream locates it (its spacing, 0.5 ms, and the sendto's own time).
        # Near an edge: the datagrams sent within half the shorter part of the cycle of it
        # (by time: a sender the host stalled for 100 ms must not bring in the next edge's).
        befores = t[0::2]
        half = min(ON, OFF) // 2
        edges = []
        for i in range(CYCLES):
            for edge, now_lost in ((start + i * period, True), (start + i * period + ON, False)):
                k = bisect.bisect_left(befores, edge - half)
                near = [q for q in range(k, count) if t[2 * q] < edge + half]
                lo = max((t[2 * q] for q in near if (q in lost) != now_lost), default=None)
                hi = min((t[2 * q + 1] for q in near if (q in lost) == now_lost), default=None)
                edges.append(None if lo is None or hi is None else (lo - edge, hi - edge))
        info = wait_until(lambda: (lambda g: g if pb.RuleState.Name(g.state) == "RULE_STATE_EXPIRED" else None)(
            d.get(r.id)), 10, "the rule to end after its cycles")
        ctl = run_client(lab, [config.LOSSCTL, "--addr", d.addr, "rule", "get", str(r.id)]) \
            if config.LOSSCTL else None
        c = info.counters
        widths = sorted((hi - lo) / 1e6 for lo, hi in filter(None, edges))
        nums = dict(count=count, sent=sent["sent"], lost=len(lost), dropped=c.dropped_packets,
                    matched=c.matched_packets, judged_in=judged_in, judged_out=judged_out,
                    not_judged=count - judged_in - judged_out, wrong=wrong[:20], windows=sorted(windows),
                    edges_ms=[None if e is None else (round(e[0] / 1e6, 3), round(e[1] / 1e6, 3)) for e in edges],
                    edge_bracket_ms=dict(median=widths[len(widths) // 2] if widths else None,
                                         max=widths[-1] if widths else None),
                    lossctl=ctl.out if ctl else None)
        measured("schedule_pulse", **nums)
        self.assertEqual(sent["sent"], count, nums)
        self.assertEqual(wrong, [], nums)
        self.assertEqual(sorted(windows), list(range(CYCLES)), "a window without losses: %s" % nums)
        self.assertEqual(len(lost), c.dropped_packets, nums)
        self.assertEqual(c.matched_packets, c.dropped_packets, nums)
        self.assertGreater(judged_in, CYCLES * 0.15 * PPS, nums)
        self.assertGreater(judged_out, CYCLES * 0.7 * PPS, nums)
        # Every edge found, and where the configured one is (exact, as judged above).
        for e in edges:
            self.assertIsNotNone(e, nums)
            self.assertLessEqual(e[0], 0, nums)
            self.assertGreaterEqual(e[1], 0, nums)
        if ctl:
            self.assertEqual(ctl.rc, 0, ctl)
            self.assertRegex(ctl.out, r"^rule %d  expired\n" % r.id, ctl.out)
            self.assertRegex(ctl.out, r"schedule +start after 2s, pulse 200ms on / 800ms off x10, from ", ctl.out)

    def test_the_page_shows_the_schedule(self):
        d, lab = self.d, self.lab
        r = d.create(interface=lab.IF_A, direction="egress", protocol="udp", dport=PORT + 1, rate=0.05,
                     schedule=dict(start_after_ns=2 * 10**9, active_ns=ON, dormant_ns=OFF, cycles=3))
        b = Browser(lab, lab.a, width=1400, height=900)
        b.open("http://127.0.0.1:%d/" % d.ready["http_port"])
        row = "#rules tbody tr[data-rule-id='%d']" % r.id
        text = b.wait(lambda: b.text(row), 20, "the rule's row")
        b.driver.execute_script("document.getElementById('rules').scrollIntoView()")
        shot = b.screenshot(artifact("live_schedule.png"))
        measured("schedule_page", row=text, screenshot=shot)
        self.assertIn("5.00 % after 2.0 s, pulse 200.0 ms / 800.0 ms ×3", text)
        self.assertEqual(b.console_errors(), [])

    def test_ramp_steps_each_within_their_interval(self):
        """A ramp 0.1 % -> 1 % -> 5 %, 2 s each, under a numbered UDP stream (5,000 a
        second, each datagram's sendto timed): each step's measured rate holds its rate
        (GetRuleEffect.steps: the step's own 99.9 % interval), each step's drops are the
        datagrams lost that were sent in it (a datagram whose sendto straddles an edge may
        count on either side), and the rule ends after its last step."""
        lab, d, pb = self.lab, self.d, self.pb
        port, pps, step = PORT + 2, 5000, 2_000_000_000
        rates = (0.001, 0.01, 0.05)
        rx = traffic.UdpReceiver(lab, lab.b, lab.V4_B, port, 8, list_missing=True)
        # From 1 s after creation (a ramp takes a schedule's start_after): the stream is
        # under way by then, however loaded the machine.
        r = d.create(interface=lab.IF_A, direction="egress", protocol="udp", dport=port,
                     ramp=[(x, step) for x in rates], schedule=dict(start_after_ns=10**9))
        start = r.schedule_start_mono_ns
        self.assertGreater(start, 0, r)
        end = start + len(rates) * step
        self.assertEqual(r.expires_unix_ns - r.schedule_start_unix_ns, len(rates) * step, r)
        count = int(pps * ((end - time.monotonic_ns()) / 1e9 + 0.5))
        sent, t, lost = self.timed_stream(rx, port, 8, count, pps)
        self.assertLess(t[0], start, "the stream began after the ramp: its first step not all tested")

        def step_of(ns):
            return -1 if ns < start else min((ns - start) // step, len(rates))

        sure, either = [0] * len(rates), [0] * len(rates)
        for seq in lost:
            a, b = step_of(t[2 * seq]), step_of(t[2 * seq + 1])
            self.assertTrue(0 <= a < len(rates) or 0 <= b < len(rates),
                            "datagram %d lost outside the ramp (steps %d..%d)" % (seq, a, b))
            if a == b:
                sure[a] += 1
            else:
                for k in (a, b):
                    if 0 <= k < len(rates):
                        either[k] += 1
        info = wait_until(lambda: (lambda g: g if pb.RuleState.Name(g.state) == "RULE_STATE_EXPIRED" else None)(
            d.get(r.id)), 10, "the rule to end after its last step")
        e = d.inj.GetRuleEffect(pb.GetRuleEffectRequest(id=r.id), timeout=10)
        steps = list(e.steps)
        nums = dict(count=count, lost=len(lost), sure=sure, either=either,
                    steps=[dict(rate=s_.configured_rate, matched=s_.matched_packets, dropped=s_.dropped_packets,
                                measured=round(s_.measured_rate, 5), ci=(round(s_.rate_ci_low, 5), round(s_.rate_ci_high, 5)),
                                ok=s_.configured_within_ci) for s_ in steps])
        ctl = run_client(lab, [config.LOSSCTL, "--addr", d.addr, "rule", "effect", str(r.id)]) \
            if config.LOSSCTL else None
        measured("schedule_ramp", lossctl=ctl.out if ctl else None, **nums)
        self.assertEqual(sent["sent"], count, nums)
        self.assertEqual(len(steps), len(rates), nums)
        self.assertEqual(len(lost), info.counters.dropped_packets, nums)
        self.assertEqual(sum(s_.dropped_packets for s_ in steps), info.counters.dropped_packets, nums)
        self.assertEqual(sum(s_.matched_packets for s_ in steps), info.counters.matched_packets, nums)
        for i, s_ in enumerate(steps):
            self.assertAlmostEqual(s_.configured_rate, rates[i])
            self.assertEqual(s_.start_offset_ns, i * step)
            self.assertEqual(s_.duration_ns, step)
            self.assertGreater(s_.matched_packets, 0.8 * pps * step / 1e9, nums)
            self.assertTrue(s_.configured_within_ci, nums)
            self.assertLessEqual(sure[i], s_.dropped_packets, nums)
            self.assertLessEqual(s_.dropped_packets, sure[i] + either[i], nums)
        self.assertTrue(e.configured_within_ci, nums)
        if ctl:
            self.assertEqual(ctl.rc, 0, ctl)
            self.assertIn("every step's rate within its 99.9% CI", ctl.out)
            self.assertRegex(ctl.out, r"\n +STEP +FROM +FOR +RATE +MATCHED +DROPPED +MEASURED +99\.9% CI", ctl.out)
            self.assertRegex(ctl.out, r"\n +3 +\+4s +2s +5% +\d+ +\d+ +[0-9.]+% +[0-9.]+% \.\. [0-9.]+% +ok\n", ctl.out)

    def test_bad_schedules_are_refused(self):
        d, lab = self.d, self.lab
        for sched, want in ((dict(active_ns=500_000, dormant_ns=10**9), "active time must lie between 1ms and 1d"),
                            (dict(cycles=3), "give a pulse too"),
                            (dict(active_ns=86400 * 10**9, dormant_ns=86400 * 10**9, cycles=1_000_000),
                             "longer than")):
            with self.assertRaises(grpc.RpcError) as cm:
                d.create(interface=lab.IF_A, direction="egress", protocol="udp", dport=PORT, rate=1.0,
                         schedule=sched)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, sched)
            self.assertIn(want, cm.exception.details(), sched)
        for kw, want in ((dict(ramp=[(0.01, 10**9)], schedule=dict(active_ns=ON, dormant_ns=OFF)), "no pulse"),
                         (dict(ramp=[(0.01, 10**9)] * 17), "1 to 16 steps (got 17)"),
                         (dict(ramp=[(0.01, 500_000)]), "between 1ms and 1d")):
            with self.assertRaises(grpc.RpcError) as cm:
                d.create(interface=lab.IF_A, direction="egress", protocol="udp", dport=PORT, **kw)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, kw)
            self.assertIn(want, cm.exception.details(), kw)


if __name__ == "__main__":
    main()
