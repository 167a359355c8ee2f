"""Messages -> friendly views (needs the stubs)."""

import unittest

import support
from lossd_client import types as t
from lossd_client.client import _align


class ViewsTest(support.StubsTestCase):
    def test_rule(self):
        pb2 = self.pb2
        m = pb2.Rule(id=3, state=pb2.RULE_STATE_FAILED, reason="no such device",
                     attachments=["tcx ingress to eth0"], created_unix_ns=5, expires_unix_ns=9)
        m.spec.interface = "eth0"
        m.spec.hook = pb2.HOOK_TC
        m.spec.direction = pb2.DIRECTION_EGRESS
        m.spec.match.dport.lo = 8080                # hi 0: one port (as the daemon reads it)
        m.spec.match.protocol = "tcp"
        m.spec.loss.bernoulli.rate = 0.01
        m.spec.loss.seed = 0
        m.spec.ttl_ns = 30 * 10**9
        m.spec.labels["a"] = "b"
        m.counters.matched_packets = 1000
        m.counters.dropped_packets = 10
        m.counters.matched_segments = 4000  # GSO packets of 4: the rate is of packets
        m.counters.dropped_segments = 40
        r = t.Rule.from_proto(m, pb2)
        self.assertEqual((r.id, r.state, r.reason, r.hook, r.direction), (3, "failed", "no such device", "tc", "egress"))
        self.assertEqual(r.match.dport, (8080, 8080))
        self.assertIsNone(r.match.sport)
        self.assertEqual(r.loss.kind, "bernoulli")
        self.assertEqual(r.loss.seed, 0)
        self.assertEqual(r.rate, 0.01)
        self.assertEqual(r.labels, {"a": "b"})
        self.assertEqual(r.attachments, ("tcx ingress to eth0",))
        self.assertEqual(r.counters.drop_rate, 0.01)
        self.assertIs(r.raw, m)
        self.assertEqual(str(r), "rule 3 failed: eth0 egress tcp dport 8080, 1% seed 0, ttl 30s (no such device)")

    def test_loss_models(self):
        pb2 = self.pb2
        ge = pb2.LossModel(gilbert_elliott=pb2.GilbertElliott(p=0.01, r=0.09, bad_loss=1.0, good_loss=0.0))
        lm = t.LossModel.from_proto(ge)
        self.assertAlmostEqual(lm.mean_rate, 0.1)
        self.assertIsNone(lm.seed)
        self.assertEqual(str(lm), "ge 1%,9%,100%,0%")
        self.assertEqual(t.LossModel.from_proto(pb2.LossModel(every_nth=4)).mean_rate, 0.25)
        self.assertIsNone(t.LossModel.from_proto(pb2.LossModel(first_k=2)).mean_rate)
        self.assertEqual(str(t.LossModel.from_proto(pb2.LossModel(first_k=2))), "first 2")
        self.assertEqual(t.LossModel.from_proto(pb2.LossModel()).kind, "")

    def test_type_names_normalised(self):
        pb2 = self.pb2
        e = pb2.RuleEffect(id=1)
        e.retransmitted_segments["fast"] = 3
        e.retransmitted_segments["RETRANSMIT_TYPE_FAST"] = 2
        e.retransmitted_segments["RTO"] = 1
        v = t.RuleEffect.from_proto(e)
        self.assertEqual(v.retransmitted_segments, {"fast": 5, "rto": 1})
        self.assertEqual(v.retransmitted_total, 6)
        self.assertEqual(v.types(), ["fast", "rto"])

    def test_event_and_unknown_enum_value(self):
        pb2 = self.pb2
        ev = pb2.RetransmitEvent(type=pb2.RETRANSMIT_TYPE_TLP, outcome=pb2.OUTCOME_FAILED, segments=2,
                                 seq=77, rule_ids=[1, 2],
                                 tuple=pb2.Tuple(local_addr="2001:db8::1", local_port=1,
                                                 remote_addr="2001:db8::2", remote_port=2))
        v = t.RetransmitEvent.from_proto(5, ev, pb2)
        self.assertEqual((v.seq, v.type, v.outcome, v.tcp_seq, v.rule_ids), (5, "tlp", "failed", 77, (1, 2)))
        self.assertTrue(v.counted)
        self.assertEqual(str(v.tuple), "[2001:db8::1]:1 -> [2001:db8::2]:2")
        ev.type = 42  # from a newer daemon
        self.assertEqual(t.RetransmitEvent.from_proto(6, ev, pb2).type, "42")

    def test_aggregate(self):
        pb2 = self.pb2
        a = pb2.Aggregate(seq=4, window_ns=10**9, gaps=[pb2.Gap(source=pb2.GAP_SOURCE_SUBSCRIBER, count=3)])
        a.retransmits_by_type["rto"] = 2
        a.retransmits_by_type["fast"] = 5
        a.retransmits_by_rule[7] = 6
        a.retransmits_by_flow[123] = 7
        v = t.Aggregate.from_proto(a, pb2)
        self.assertEqual(v.total, 7)
        self.assertEqual(v.types(), ["fast", "rto"])
        self.assertEqual(v.retransmits_by_rule, {7: 6})
        self.assertEqual(v.gaps, (t.Gap(4, "subscriber", 3),))

    def test_align_non_atomic(self):
        a, b = object(), object()
        self.assertEqual(_align([a, b], ["", "bad", ""], 3), [(a, ""), (None, "bad"), (b, "")])
        self.assertEqual(_align([a], [], 2), [(a, ""), (None, "no answer for this spec")])


if __name__ == "__main__":
    unittest.main()
