"""Diagnosis 2 (issue 13, the seed's case 3): lost block tails.

The daemon runs in namespace A with the server (lab.stalls.tails): 100-byte requests from B,
each answered by 14,480 bytes (10 segments) in one write; a rule on A's egress drops 10 % of
the reply segments that carry PSH (the last of each write), per segment (clsact: network
loss for A's TCP). The server's TCP is CUBIC (lab.stalls.tails says why not BBR). Nothing follows a lost tail, so no duplicate ACK can announce it: the
sender waits for a tail loss probe (2 RTT + the 200 ms delayed-ACK allowance while one segment
is out) or, when the probe is lost too, the retransmission timer.

  test_tail_stalls   every stall named tlp or rto (rto whenever the timer backed off), at
                     least one per request that waited for a timer, each ended by a resend,
                     the kernel's resends the rule's drops (+ D-SACKed spurious ones); each
                     linked to the rule's drop it waited for (caused_by: the rule, the
                     first resend's seq, at the hole or the segment after); their total
                     equal to the flow's closing summary (Flow.stall_ns) and to
                     GetRuleEffect's stalls_caused
  test_no_rule       the same service without the rule: no tlp/rto stall
"""

from lab import stalls
from lab.config import main
from lab.daemon import DaemonTestCase
from lab.netns import measured

COUNT = 300
RATE = 0.1


class Tails(DaemonTestCase):
    def test_tail_stalls(self):
        c = stalls.tails(self.lab, self.d, rate=RATE, count=COUNT)
        n = c.numbers()
        fin = c.rule_final.counters
        measured("tails", **n)
        self.assertEqual(c.errors, {}, "lossd's streams failed")
        self.assertEqual(c.gaps, [], "stall events lost")
        self.assertEqual(len(c.flows), 1)
        self.assertEqual(c.workload["requests"], COUNT)
        self.assertGreater(fin.dropped_segments, 0, n)
        causes = [stalls.cause_name(s.cause) for s in c.stalls]
        self.assertTrue(c.stalls, n)
        self.assertEqual([x for x in causes if x not in ("tlp", "rto")], [], n)
        # Each request that waited for a timer (>= 200 ms) had a stall, and each stall a drop.
        # A request can have two: when the segment before the lost tail was still out, the
        # receiver's delayed ACK of it (40 ms) ends the first stall, and the tail's wait (its
        # TLP lost too: the timer) is a second.
        lat = c.workload["latencies_ms"]
        self.assertLessEqual(len([x for x in lat if x > 200]), len(c.stalls), n)
        self.assertLessEqual(len(c.stalls), fin.dropped_segments, n)
        # The kernel's side: every dropped segment was resent once (per segment, one segment
        # outstanding: an RTO resends only it), plus spurious resends the receiver D-SACKed.
        rtx, dsack = c.sender["Tcp.RetransSegs"], c.sender["TcpExt.TCPDSACKRecvSegs"]
        self.assertEqual(rtx - dsack, fin.dropped_segments, n)
        # Each stall ended with a resend of its hole; no stall has more resends than the
        # kernel made, nor more TLPs (a probe sent within 10 ms of the loss, when ACKs came
        # late, recovers below the stall threshold: no stall).
        for s in c.stalls:
            self.assertGreaterEqual(s.retransmits, 1, s)
        self.assertLessEqual(sum(s.retransmits for s in c.stalls), rtx, n)
        tlp_first = [s for s in c.stalls if stalls.rtype_name(s.first_retransmit) == "tlp"]
        self.assertLessEqual(len(tlp_first), c.sender["TcpExt.TCPLossProbes"], n)
        # A stall whose TLP was dropped too ended by the retransmission timer: rto.
        for s in c.stalls:
            if s.backoff:
                self.assertEqual(stalls.cause_name(s.cause), "rto", s)
        # Cause and effect: the rule's drop made each stall: the drop of its hole (snd_una),
        # or, when the hole was the segment before the tail, still out, the tail's drop that
        # the stall's first resend repaired.
        for s in c.stalls:
            self.assertEqual(s.caused_by.rule_id, c.extra["rule_id"], s)
            self.assertEqual(s.caused_by.seq, s.first_retransmit_seq, s)
            self.assertIn((s.caused_by.seq - s.snd_una) & 0xFFFFFFFF, (0, 1448), s)
            self.assertEqual(s.caused_by.segments, 1, s)
            self.assertIn(c.extra["rule_id"], list(s.rule_ids), s)
        total = sum(s.duration_ns for s in c.stalls)
        self.assertEqual(sum(c.flow_stall_ns().values()), total, n)
        self.assertEqual(sum(f.stalls for f in c.flows), len(c.stalls), n)
        eff = c.effect.stalls_caused
        self.assertEqual(sum(v.count for v in eff.values()), len(c.stalls), n)
        self.assertEqual(sum(v.time_ns for v in eff.values()), total, n)

    def test_no_rule(self):
        c = stalls.tails(self.lab, self.d, rate=0, count=COUNT, trace=False)
        n = c.numbers()
        measured("tails_norule", **n)
        self.assertEqual(c.errors, {}, "lossd's streams failed")
        self.assertEqual(len(c.flows), 1)
        self.assertEqual([s for s in c.stalls if stalls.cause_name(s.cause) in ("tlp", "rto")], [], n)


if __name__ == "__main__":
    main()
