"""Building rule specs and event filters (pure), and their messages (stubs)."""

import os
import tempfile
import unittest

import support
import lossd_client.types as t
from lossd_client import Filter, LossdInputError, event_filter, normalize_target, rule_spec
from lossd_client.spec import filters, parse_direction, parse_retransmit_type, short_name, to_proto


class RuleSpecTest(unittest.TestCase):
    def test_minimal(self):
        self.assertEqual(rule_spec(iface="eth0", rate="1%"), {
            "interface": "eth0", "hook": "HOOK_AUTO", "direction": "DIRECTION_INGRESS",
            "loss": {"bernoulli": {"rate": 0.01}}})

    def test_everything(self):
        s = rule_spec("eth0", cgroup="/sys/fs/cgroup/svc", direction="egress", hook="tc",
                      src="10.0.0.0/8", dst="2001:db8::1", sport="1000-2000", dport=8080,
                      protocol="TCP", family=6, tcp_flags=["SYN", "!ack"], payload="only",
                      rate="0.005%", seed=7, priority=3, ttl="30s", per_segment=True,
                      labels="team=storage", force=True)
        self.assertEqual(s, {
            "interface": "eth0", "cgroup": "/sys/fs/cgroup/svc", "hook": "HOOK_TC",
            "direction": "DIRECTION_EGRESS",
            "match": {"src": "10.0.0.0/8", "dst": "2001:db8::1", "sport": {"lo": 1000, "hi": 2000},
                      "dport": {"lo": 8080, "hi": 8080}, "protocol": "tcp", "family": 6,
                      "tcp_flags": "syn,!ack", "payload": "PAYLOAD_ONLY"},
            "loss": {"bernoulli": {"rate": 5e-05}, "seed": 7},
            "priority": 3, "ttl_ns": 30 * 10**9, "per_segment": True,
            "labels": {"team": "storage"}, "force": True})

    def test_cgroup_only(self):
        s = rule_spec(cgroup="/sys/fs/cgroup/x", every=10)
        self.assertNotIn("interface", s)
        self.assertEqual(s["loss"], {"every_nth": 10})

    def test_models(self):
        self.assertEqual(rule_spec("e", first=2)["loss"], {"first_k": 2})
        self.assertEqual(rule_spec("e", rate=0)["loss"], {"bernoulli": {"rate": 0.0}})
        ge = {"p": 0.01, "r": 0.2, "bad_loss": 1.0, "good_loss": 0.0}
        self.assertEqual(rule_spec("e", ge="1%,20%,100%,0%")["loss"], {"gilbert_elliott": ge})
        self.assertEqual(rule_spec("e", ge=("1%", "20%"))["loss"], {"gilbert_elliott": ge})
        self.assertEqual(rule_spec("e", ge={"p": 0.01, "r": "20%"})["loss"], {"gilbert_elliott": ge})
        self.assertEqual(rule_spec("e", ge=(0.01, 0.2, 0.5, 0.001))["loss"]["gilbert_elliott"],
                         {"p": 0.01, "r": 0.2, "bad_loss": 0.5, "good_loss": 0.001})

    def test_ttl_unset_is_the_daemons_default_and_zero_is_forever(self):
        self.assertNotIn("ttl_ns", rule_spec("e", rate=0.1, ttl=None))  # --default-ttl applies
        for forever in (0, "0s", "none", " Forever "):  # asked for: until deleted
            self.assertEqual(rule_spec("e", rate=0.1, ttl=forever)["ttl_ns"], 0, forever)
        self.assertEqual(rule_spec("e", rate=0.1, ttl=1.5)["ttl_ns"], 1500 * 10**6)

    def test_enum_aliases(self):
        for v in ("ingress", "IN", "DIRECTION_INGRESS", "Ingress"):
            self.assertEqual(parse_direction(v), "DIRECTION_INGRESS")
        self.assertEqual(parse_direction("out"), "DIRECTION_EGRESS")
        self.assertEqual(rule_spec("e", rate=0.1, hook="XDP")["hook"], "HOOK_XDP")
        self.assertEqual(rule_spec("e", rate=0.1, payload="none")["match"], {"payload": "PAYLOAD_NONE"})
        self.assertEqual(rule_spec("e", rate=0.1, protocol=17)["match"], {"protocol": "17"})
        self.assertEqual(rule_spec("e", rate=0.1, family="ipv4")["match"], {"family": 4})

    def test_refused(self):
        cases = [
            ({"rate": 0.1}, "target"),
            ({"iface": "eth0"}, "exactly one of rate"),
            ({"iface": "eth0", "rate": 0.1, "every": 2}, "exactly one"),
            ({"iface": "bad name", "rate": 0.1}, "iface"),
            ({"iface": "a" * 16, "rate": 0.1}, "iface"),
            ({"iface": "e", "rate": 2}, "rate"),
            ({"iface": "e", "rate": 0.1, "direction": "sideways"}, "direction: expected one of both, egress, ingress"),
            ({"iface": "e", "rate": 0.1, "hook": "tcx"}, "hook"),
            ({"iface": "e", "rate": 0.1, "src": "10.0.0.300"}, "src"),
            ({"iface": "e", "rate": 0.1, "dst": "example.com"}, "dst"),
            ({"iface": "e", "rate": 0.1, "dport": 0}, "dport"),
            ({"iface": "e", "rate": 0.1, "protocol": "sctp"}, "protocol"),
            ({"iface": "e", "rate": 0.1, "protocol": 256}, "protocol"),
            ({"iface": "e", "rate": 0.1, "family": 5}, "family"),
            ({"iface": "e", "rate": 0.1, "tcp_flags": "syn,bogus"}, "unknown flag"),
            ({"iface": "e", "rate": 0.1, "tcp_flags": "syn,!syn"}, "twice"),
            ({"iface": "e", "rate": 0.1, "tcp_flags": "syn", "protocol": "udp"}, "only for TCP"),
            ({"iface": "e", "rate": 0.1, "payload": "some"}, "payload"),
            ({"iface": "e", "every": 0}, "every"),
            ({"iface": "e", "first": -1}, "first"),
            ({"iface": "e", "rate": 0.1, "seed": 1 << 64}, "seed"),
            ({"iface": "e", "rate": 0.1, "seed": -1}, "seed"),
            ({"iface": "e", "rate": 0.1, "priority": -1}, "priority"),
            ({"iface": "e", "rate": 0.1, "priority": 1.5}, "priority"),
            ({"iface": "e", "ge": (0.1,)}, "ge"),
            ({"iface": "e", "ge": {"p": 0.1}}, "p and r"),
            ({"iface": "e", "ge": {"p": 0.1, "r": 0.1, "h": 1}}, "unknown keys"),
            ({"iface": "e", "ge": "1%,200%"}, "ge.r"),
            ({"iface": "e", "rate": 0.1, "labels": "nolabel"}, "labels"),
        ]
        for kw, msg in cases:
            with self.subTest(kw=kw):
                with self.assertRaises(LossdInputError) as cm:
                    rule_spec(**kw)
                self.assertIn(msg, str(cm.exception))

    def test_unknown_argument_is_a_type_error(self):
        with self.assertRaises(TypeError):
            rule_spec("e", rate=0.1, port=80)


class EventFilterTest(unittest.TestCase):
    def test_fields(self):
        f = event_filter(addr="192.0.2.0/24", port="8000-8100", types=["fast", "RTO"], rule=3)
        self.assertEqual(f.to_json(), {
            "addr": "192.0.2.0/24", "port": {"lo": 8000, "hi": 8100},
            "types": ["RETRANSMIT_TYPE_FAST", "RETRANSMIT_TYPE_RTO"], "rule_id": 3})

    def test_single_type_and_rule_object(self):
        class R:
            id = 9
        f = event_filter(types="tlp", rule=R())
        self.assertEqual(f.to_json(), {"types": ["RETRANSMIT_TYPE_TLP"], "rule_id": 9})

    def test_cgroup_path_is_its_inode(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(event_filter(cgroup=d).cgroup_id, os.stat(d).st_ino)
        self.assertEqual(event_filter(cgroup=1234).to_json(), {"cgroup_id": 1234})
        with self.assertRaisesRegex(LossdInputError, "cannot stat"):
            event_filter(cgroup="/nonexistent/cgroup")

    def test_service_fields(self):
        # a service as rule_spec() names one; the daemon resolves it when the stream starts
        self.assertEqual(event_filter(pid=4242).to_json(), {"pid": 4242})
        self.assertEqual(event_filter(unit="web", port=80).to_json(),
                         {"unit": "web", "port": {"lo": 80, "hi": 80}})
        self.assertEqual(event_filter(container="3f2a", pod="9c1b").to_json(),
                         {"container": "3f2a", "pod": "9c1b"})
        self.assertEqual(Filter.of(pid=7), event_filter(pid=7))

    def test_refused(self):
        for kw in ({}, {"addr": "x"}, {"port": 0}, {"types": "slow"}, {"types": ["fast", 3]},
                   {"rule": 0}, {"rule": "3"}, {"cgroup": 0}, {"cgroup": True},
                   {"pid": 0}, {"pid": True}, {"pid": "12"}, {"unit": ""}, {"pod": "x" * 257}):
            with self.subTest(kw=kw):
                with self.assertRaises(LossdInputError):
                    event_filter(**kw)

    def test_filters_normalisation(self):
        f = event_filter(port=80)
        self.assertEqual(filters(None), [])
        self.assertEqual(filters(f), [f])
        self.assertEqual(filters({"port": 80}), [f])
        self.assertEqual(filters([{"port": 80}, f]), [f, f])
        self.assertEqual(Filter.of(port=80), f)
        with self.assertRaisesRegex(LossdInputError, "keys: addr, port"):
            filters({"dport": 80})
        with self.assertRaises(LossdInputError):
            filters([80])

    def test_type_names(self):
        self.assertEqual(parse_retransmit_type("RETRANSMIT_TYPE_SYNACK"), "RETRANSMIT_TYPE_SYNACK")
        self.assertEqual(short_name("RETRANSMIT_TYPE_PROBE0", "RETRANSMIT_TYPE_"), "probe0")
        self.assertEqual(short_name("fast", "RETRANSMIT_TYPE_"), "fast")


class TargetTest(unittest.TestCase):
    def test_targets(self):
        self.assertEqual(normalize_target(None), "unix:///run/lossd/lossd.sock")
        self.assertEqual(normalize_target("/tmp/x.sock"), "unix:///tmp/x.sock")
        self.assertEqual(normalize_target("x.sock"), "unix://" + os.path.abspath("x.sock"))
        self.assertEqual(normalize_target("./run/sock"), "unix://" + os.path.abspath("run/sock"))
        self.assertEqual(normalize_target("unix:/tmp/s"), "unix:/tmp/s")
        self.assertEqual(normalize_target("localhost:50051"), "localhost:50051")
        self.assertEqual(normalize_target("[::1]:50051"), "[::1]:50051")
        self.assertEqual(normalize_target("10.0.0.1:1"), "10.0.0.1:1")
        self.assertEqual(normalize_target("dns:///lossd:50051"), "dns:///lossd:50051")
        for bad in ("localhost", "host:port", "a:b:c"):
            with self.subTest(bad=bad):
                with self.assertRaises(LossdInputError):
                    normalize_target(bad)


class ProtoTest(support.StubsTestCase):
    """The built dicts become the messages they should (needs the stubs)."""

    def test_rule_spec_message(self):
        pb2 = self.pb2
        m = to_proto(rule_spec("eth0", direction="both", hook="xdp", dport="80-90", protocol="tcp",
                               tcp_flags="syn,!ack", payload="none", rate="1%", seed=0, ttl="1m",
                               labels={"a": "b"}, per_segment=True, priority=2),
                     pb2.RuleSpec())
        self.assertEqual(m.interface, "eth0")
        self.assertEqual(m.direction, pb2.DIRECTION_BOTH)
        self.assertEqual(m.hook, pb2.HOOK_XDP)
        self.assertEqual((m.match.dport.lo, m.match.dport.hi), (80, 90))
        self.assertFalse(m.match.HasField("sport"))
        self.assertEqual(m.match.tcp_flags, "syn,!ack")
        self.assertEqual(m.match.payload, pb2.PAYLOAD_NONE)
        self.assertEqual(m.loss.WhichOneof("model"), "bernoulli")
        self.assertEqual(m.loss.bernoulli.rate, 0.01)
        self.assertTrue(m.loss.HasField("seed"))   # seed 0 is a seed, not "random"
        self.assertEqual(m.loss.seed, 0)
        self.assertEqual(m.ttl_ns, 60 * 10**9)
        self.assertEqual(dict(m.labels), {"a": "b"})
        self.assertTrue(m.per_segment)
        self.assertEqual(m.priority, 2)

    def test_no_seed_is_unset(self):
        m = to_proto(rule_spec("e", rate=0.1), self.pb2.RuleSpec())
        self.assertFalse(m.loss.HasField("seed"))

    def test_zero_rate_sets_the_model(self):
        m = to_proto(rule_spec("e", rate=0), self.pb2.RuleSpec())
        self.assertEqual(m.loss.WhichOneof("model"), "bernoulli")

    def test_other_models(self):
        pb2 = self.pb2
        m = to_proto(rule_spec("e", ge="1%,20%"), pb2.RuleSpec())
        self.assertEqual(m.loss.WhichOneof("model"), "gilbert_elliott")
        self.assertEqual(m.loss.gilbert_elliott.bad_loss, 1.0)
        self.assertEqual(to_proto(rule_spec("e", every=5), pb2.RuleSpec()).loss.every_nth, 5)
        self.assertEqual(to_proto(rule_spec("e", first=2), pb2.RuleSpec()).loss.first_k, 2)

    def test_ramp_and_guard_messages(self):
        pb2 = self.pb2
        m = to_proto(rule_spec("e", ramp=[("0.1%", "2s"), (0.05, 0.5)], guard="stall>500ms,rtos>5/2s"),
                     pb2.RuleSpec())
        self.assertEqual(m.loss.WhichOneof("model"), "ramp")
        self.assertEqual([(st.rate, st.duration_ns) for st in m.loss.ramp.steps],
                         [(0.001, 2_000_000_000), (0.05, 500_000_000)])
        self.assertEqual((m.guard.stall_ns, m.guard.rtos, m.guard.rtos_window_ns),
                         (500_000_000, 5, 2_000_000_000))
        lm = t.LossModel.from_proto(m.loss)
        self.assertEqual(lm.kind, "ramp")
        self.assertAlmostEqual(lm.mean_rate, (0.001 * 2 + 0.05 * 0.5) / 2.5)

    def test_big_values(self):
        m = to_proto(rule_spec("e", rate=0.1, seed=(1 << 64) - 1, ttl="5000h"), self.pb2.RuleSpec())
        self.assertEqual(m.loss.seed, (1 << 64) - 1)
        self.assertEqual(m.ttl_ns, 5000 * 3600 * 10**9)

    def test_filter_message(self):
        pb2 = self.pb2
        m = to_proto(event_filter(addr="2001:db8::/32", port=443, types=["syn", "synack"], rule=4,
                                  cgroup=77).to_json(), pb2.EventFilter())
        self.assertEqual(m.addr, "2001:db8::/32")
        self.assertEqual((m.port.lo, m.port.hi), (443, 443))
        self.assertEqual(list(m.types), [pb2.RETRANSMIT_TYPE_SYN, pb2.RETRANSMIT_TYPE_SYNACK])
        self.assertEqual(m.rule_id, 4)
        self.assertEqual(m.cgroup_id, 77)
        m = to_proto(event_filter(pid=99, unit="web.service").to_json(), pb2.EventFilter())
        self.assertEqual((m.pid, m.unit), (99, "web.service"))

    def test_every_enum_name_exists(self):
        """The names the builders emit are the proto's (catches a renamed enum)."""
        from lossd_client import spec
        pb2 = self.pb2
        for table, enum in ((spec.DIRECTIONS, pb2.Direction), (spec.HOOKS, pb2.Hook),
                            (spec.PAYLOADS, pb2.Payload)):
            for name in table.values():
                enum.Value(name)
        for t in spec.RETRANSMIT_TYPES:
            pb2.RetransmitType.Value(parse_retransmit_type(t))
        self.assertEqual(len(spec.RETRANSMIT_TYPES), len(pb2.RetransmitType.keys()) - 1)


if __name__ == "__main__":
    unittest.main()
