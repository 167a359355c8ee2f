"""A rule's action and the markov and police models: rule_spec's spellings and refusals
(pure), their messages and views (stubs), and how scenarios and sweeps pass them on."""

import contextlib
import io
import threading
import unittest

import support
from lossd_client import LossdInputError, rule_spec
from lossd_client import scenario as sc
from lossd_client import sweep
from lossd_client import types as t
from lossd_client.spec import loss_model, markov4, parse_action, policer, to_proto
from lossd_client.units import format_bit_rate, format_police, format_size


def refused(test, words, **kw):
    with test.assertRaises(LossdInputError) as cm:
        rule_spec(**kw)
    test.assertIn(words, str(cm.exception))
    return str(cm.exception)


class ActionTest(unittest.TestCase):
    def test_spellings(self):
        for given, want in (("drop", "ACTION_DROP"), (None, "ACTION_DROP"), ("", "ACTION_DROP"),
                            (" Drop ", "ACTION_DROP"), ("corrupt", "ACTION_CORRUPT"),
                            ("CORRUPT", "ACTION_CORRUPT"), ("corrupt-payload", "ACTION_CORRUPT_PAYLOAD"),
                            ("corrupt_payload", "ACTION_CORRUPT_PAYLOAD"),
                            ("ACTION_CORRUPT_PAYLOAD", "ACTION_CORRUPT_PAYLOAD"),
                            ("duplicate", "ACTION_DUPLICATE"), ("ecn", "ACTION_ECN"),
                            ("action_ecn", "ACTION_ECN"), ("Ecn-Pass", "ACTION_ECN_PASS"),
                            ("ecn_pass", "ACTION_ECN_PASS")):
            self.assertEqual(parse_action(given), want, given)
        for bad in ("bogus", "ACTION_", "ecn pass", 3, True):
            with self.assertRaises(LossdInputError, msg=bad):
                parse_action(bad)

    def test_in_the_spec(self):
        self.assertNotIn("action", rule_spec("eth0", rate="1%", action="drop"))
        self.assertEqual(rule_spec("eth0", rate="1%", action="corrupt-payload")["action"],
                         "ACTION_CORRUPT_PAYLOAD")
        s = rule_spec(cgroup="/sys/fs/cgroup/x", direction="egress", rate="1%", action="ecn")
        self.assertEqual(s["action"], "ACTION_ECN")
        # drop: anywhere
        self.assertNotIn("action", rule_spec(cgroup="/x", hook="cgroup", rate="1%", action="drop"))

    def test_refused_where_tc_does_not_run(self):
        refused(self, "action: corrupt changes or copies the packet, which XDP cannot",
                iface="eth0", rate="1%", hook="xdp", action="corrupt")
        refused(self, "a cgroup target's ingress", cgroup="/x", rate="1%", action="ecn")
        refused(self, "a cgroup target's ingress", unit="web.service", rate="1%", action="duplicate",
                direction="both")
        refused(self, "action: expected one of", iface="eth0", rate="1%", action="mark")


class MarkovTest(unittest.TestCase):
    def test_netem_defaults_and_forms(self):
        self.assertEqual(markov4("1%"), {"p13": 0.01, "p31": 0.99, "p32": 0.0, "p23": 1.0, "p14": 0.0})
        full = {"p13": 0.01, "p31": 0.3, "p32": 0.1, "p23": 0.4, "p14": 0.001}
        self.assertEqual(markov4("1%,30%,10%,40%,0.1%"), full)
        self.assertEqual(markov4(("1%", 0.3, "10%", "40%", "1000ppm")), full)
        self.assertEqual(markov4({"p13": "1%", "p31": "30%", "p32": 0.1, "p23": 0.4, "p14": 0.001}), full)
        self.assertEqual(markov4({"p13": 0.05})["p31"], 0.95)
        self.assertEqual(rule_spec("e", markov="1%,30%", seed=7)["loss"],
                         {"markov": {"p13": 0.01, "p31": 0.3, "p32": 0.0, "p23": 1.0, "p14": 0.0}, "seed": 7})

    def test_refusals(self):
        for value, words in (("1%,2%,3%,4%,5%,6%", "p13[,p31[,p32[,p23[,p14]]]]"),
                             ("150%", "'150%'"), ("x", "'x'"), ("1%,,2%", "''"),
                             ("60%,30%,0%,100%,50%", "p13 + p14 must not exceed 100%"),
                             ("1%,60%,50%", "p31 + p32 must not exceed 100%"),
                             ("1%,0%", "the burst state must be left: p13 > 0 needs p31 > 0"),
                             ("100%", "needs p31 > 0"),
                             ("1%,50%,10%,0%", "p32 > 0 needs p23 > 0"),
                             ({"p31": 0.5}, "p13 is required"), ({"p13": 0.1, "q": 1}, "unknown keys"),
                             ((), "expected p13"), (0.01, "expected p13")):
            with self.subTest(value=value):
                msg = refused(self, words, iface="e", markov=value)
                self.assertIn("markov", msg)
        self.assertIn("exactly one of", refused(self, "markov=", iface="e", rate="1%", markov="1%"))


class PoliceTest(unittest.TestCase):
    def test_units(self):
        for text, want in (("50mbit,64kib", (50000000, 65536)), ("50Mbit/64KiB", (50000000, 65536)),
                           (" 50 mbit , 64 kib ", (50000000, 65536)), ("1.5mbit,1.5k", (1500000, 1536)),
                           ("1gbps,1m", (8000000000, 1048576)), ("10kbps,1500", (80000, 1500)),
                           ("12.5gbps,1G", (100000000000, 1 << 30)), ("8bit,1", (8, 1)),
                           ("1e3kbit,10kb", (1000000, 10240)), ("10.5bit,2.5b", (10, 2)),
                           ("11.5bit,1.5", (12, 2)), ("0.1tbit,1gib", (100000000000, 1 << 30))):
            p = policer(text)
            self.assertEqual((p["rate_bps"], p["burst_bytes"]), want, text)
        self.assertEqual(policer(("50mbit", 1500)), {"rate_bps": 50000000, "burst_bytes": 1500})
        self.assertEqual(policer({"rate_bps": 8, "burst_bytes": 1}), {"rate_bps": 8, "burst_bytes": 1})
        self.assertEqual(rule_spec("e", police="50mbit,64kib", action="ecn"),
                         {"interface": "e", "hook": "HOOK_AUTO", "direction": "DIRECTION_INGRESS",
                          "loss": {"police": {"rate_bps": 50000000, "burst_bytes": 65536}},
                          "action": "ACTION_ECN"})

    def test_refusals(self):
        for value, words in (("50000,64kib", "the rate '50000' needs a unit: bit, kbit"),
                             ((50000, "1k"), "needs a unit"),
                             ("50mb,64kib", "unknown unit 'mb'"), ("50mbit,64kbit", "unknown unit 'kbit'"),
                             ("-5mbit,1k", "'-5mbit' is not a number with a unit"),
                             ("5ebit,1k", "not a number"), ("1e1234bit,1k", "not a number"),
                             ("50mbit", "expected RATE,BURST"), ("1mbit,1k,1", "expected RATE,BURST"),
                             ("7bit,1k", "a policer's rate must lie between 8bit and 100gbit"),
                             ("101gbit,1k", "between 8bit and 100gbit"),
                             ("99999999999999999999999tbit,1k", "between 8bit and 100gbit"),
                             ("1mbit,0", "a policer's burst must lie between 1b and 1gib"),
                             ("1mbit,1073741825", "between 1b and 1gib"),
                             ({"rate_bps": 0, "burst_bytes": 1}, "between 8bit and 100gbit"),
                             ({"rate": "1mbit"}, "rate_bps and burst_bytes"),
                             ("1" * 300 + "bit,1", "expected RATE,BURST")):
            with self.subTest(value=value):
                msg = refused(self, words, iface="e", police=value)
                self.assertIn("police", msg)

    def test_seed_refused(self):
        refused(self, "seed: a policer draws nothing", iface="e", police="1mbit,1k", seed=1)
        refused(self, "seed: a policer draws nothing", iface="e", police="1mbit,1k,flow", seed=1)
        self.assertNotIn("seed", loss_model(police="1mbit,1k"))

    def test_per_flow(self):
        want = {"rate_bps": 50000000, "burst_bytes": 65536, "per_flow": True}
        for value in ("50mbit,64kib,flow", "50Mbit/64KiB/FLOW", " 50mbit , 64kib , Flow ",
                      ("50mbit", "64kib", "flow"), ["50mbit", 65536, "flow"],
                      {"rate_bps": 50000000, "burst_bytes": 65536, "per_flow": True}):
            with self.subTest(value=value):
                self.assertEqual(policer(value), want)
        for value in ("50mbit,64kib,rule", "50mbit,64kib,RULE", ("50mbit", "64kib", "rule"),
                      {"rate_bps": 50000000, "burst_bytes": 65536, "per_flow": False}):
            with self.subTest(value=value):
                self.assertEqual(policer(value), {"rate_bps": 50000000, "burst_bytes": 65536})
        # The keyword: says it for a value that does not, agrees with one that does.
        self.assertEqual(policer("50mbit,64kib", per_flow=True), want)
        self.assertEqual(policer("50mbit,64kib,flow", per_flow=True), want)
        self.assertNotIn("per_flow", policer("50mbit,64kib", per_flow=False))
        self.assertEqual(rule_spec("e", police="50mbit,64kib,flow")["loss"], {"police": want})
        for value, kw, words in (("50mbit,64kib,flows", {}, "the third part 'flows' must be flow"),
                                 ("50mbit,64kib,", {}, "the third part '' must be flow"),
                                 ("50mbit,64kib,flow,rule", {}, "expected RATE,BURST[,flow|rule]"),
                                 ("50mbit,flow", {}, "the burst 'flow' is not a number"),
                                 ("101gbit,1k,flow", {}, "between 8bit and 100gbit"),
                                 ("1mbit,0,flow", {}, "between 1b and 1gib"),
                                 ({"rate_bps": 8, "burst_bytes": 1, "per_flow": "yes"}, {},
                                  "police.per_flow: expected True or False"),
                                 ("50mbit,64kib,rule", {"per_flow": True}, "per_flow=True contradicts"),
                                 ("50mbit,64kib", {"per_flow": 1}, "per_flow: expected True or False")):
            with self.subTest(value=value, kw=kw):
                with self.assertRaises(LossdInputError) as cm:
                    policer(value, **kw)
                self.assertIn(words, str(cm.exception))
                self.assertIn("police", str(cm.exception))

    def test_text_reads_back(self):
        self.assertEqual(format_bit_rate(50000000), "50mbit")
        self.assertEqual(format_bit_rate(1500), "1500bit")
        self.assertEqual(format_bit_rate(2 * 10**12), "2tbit")
        self.assertEqual(format_size(65536), "64kib")
        self.assertEqual(format_size(1500), "1500b")
        self.assertEqual(format_size(1 << 30), "1gib")
        for bps in (8, 999, 1000, 1234567, 12500000000, 100 * 10**9):
            for size in (1, 1023, 1024, 1536, 5 << 20, 1 << 30):
                p = policer("%s,%s" % (format_bit_rate(bps), format_size(size)))
                self.assertEqual((p["rate_bps"], p["burst_bytes"]), (bps, size))
                for per_flow in (False, True):
                    text = format_police(bps, size, per_flow)
                    p = policer(text)
                    self.assertEqual((p["rate_bps"], p["burst_bytes"], p.get("per_flow", False)),
                                     (bps, size, per_flow), text)
        self.assertEqual(format_police(50000000, 65536), "50mbit,64kib")
        self.assertEqual(format_police(50000000, 65536, True), "50mbit,64kib,flow")


def stationary_loss(m):
    """The 4-state chain's loss by iterating its transition matrix (not the closed form)."""
    p = [[1 - m["p13"] - m["p14"], 0, m["p13"], m["p14"]],
         [0, 1 - m["p23"], m["p23"], 0],
         [m["p31"], m["p32"], 1 - m["p31"] - m["p32"], 0],
         [1, 0, 0, 0]]
    pi = [1.0, 0.0, 0.0, 0.0]
    for _ in range(20000):
        pi = [sum(pi[i] * p[i][j] for i in range(4)) for j in range(4)]
    return sum(pi[i] * (p[i][2] + p[i][3]) for i in range(4))


class ViewsTest(support.StubsTestCase):
    def test_messages(self):
        pb2 = self.pb2
        m = to_proto(rule_spec("e", markov="1%,30%,10%,40%,0.1%", seed=3, action="corrupt-payload"),
                     pb2.RuleSpec())
        self.assertEqual(m.loss.WhichOneof("model"), "markov")
        self.assertEqual((m.loss.markov.p13, m.loss.markov.p14, m.loss.seed), (0.01, 0.001, 3))
        self.assertEqual(m.action, pb2.ACTION_CORRUPT_PAYLOAD)
        m = to_proto(rule_spec("e", police="50mbit,64kib", action="ecn-pass"), pb2.RuleSpec())
        self.assertEqual((m.loss.police.rate_bps, m.loss.police.burst_bytes), (50000000, 65536))
        self.assertFalse(m.loss.HasField("seed"))
        self.assertEqual(m.action, pb2.ACTION_ECN_PASS)
        self.assertEqual(to_proto(rule_spec("e", rate="1%"), pb2.RuleSpec()).action, pb2.ACTION_DROP)

    def test_loss_model_views(self):
        pb2 = self.pb2
        mk = {"p13": 0.01, "p31": 0.3, "p32": 0.1, "p23": 0.4, "p14": 0.001}
        lm = t.LossModel.from_proto(pb2.LossModel(markov=pb2.Markov4(**mk)))
        self.assertEqual((lm.kind, lm.p13, lm.p31, lm.p32, lm.p23, lm.p14), ("markov", 0.01, 0.3, 0.1, 0.4, 0.001))
        self.assertAlmostEqual(lm.mean_rate, stationary_loss(mk), places=12)
        self.assertAlmostEqual(lm.mean_rate, 0.0329283887468, places=12)
        self.assertEqual(str(lm), "markov 1%,30%,10%,40%,0.1%")
        for text in ("1%", "5%,20%", "0.1%,50%,30%,10%", "0%,0%,0%,0%,5%"):
            mk = markov4(text)
            self.assertAlmostEqual(t.LossModel("markov", **mk).mean_rate, stationary_loss(mk), places=12)
        self.assertIsNone(t.LossModel("markov", p13=0.1).mean_rate)  # refused by lossd: no rate
        lm = t.LossModel.from_proto(pb2.LossModel(police=pb2.Police(rate_bps=50000000, burst_bytes=65536)))
        self.assertEqual((lm.kind, lm.rate_bps, lm.burst_bytes), ("police", 50000000, 65536))
        self.assertIsNone(lm.mean_rate)
        self.assertEqual(str(lm), "police 50mbit,64kib")
        self.assertFalse(lm.per_flow)
        lm = t.LossModel.from_proto(pb2.LossModel(police=pb2.Police(rate_bps=20000000, burst_bytes=32768,
                                                                    per_flow=True)))
        self.assertEqual((lm.kind, lm.rate_bps, lm.burst_bytes, lm.per_flow), ("police", 20000000, 32768, True))
        self.assertIsNone(lm.mean_rate)
        self.assertEqual(str(lm), "police 20mbit,32kib,flow")
        m = to_proto(rule_spec("e", police="20mbit,32kib,flow"), pb2.RuleSpec())
        self.assertEqual((m.loss.police.rate_bps, m.loss.police.burst_bytes, m.loss.police.per_flow),
                         (20000000, 32768, True))
        self.assertFalse(to_proto(rule_spec("e", police="20mbit,32kib"), pb2.RuleSpec()).loss.police.per_flow)

    def test_rule_action_and_counters(self):
        pb2 = self.pb2
        m = pb2.Rule(id=4, state=pb2.RULE_STATE_ACTIVE)
        m.spec.interface = "eth0"
        m.spec.direction = pb2.DIRECTION_EGRESS
        m.spec.action = pb2.ACTION_ECN
        m.spec.loss.police.rate_bps = 1000000
        m.spec.loss.police.burst_bytes = 1500
        for name, v in (("matched_packets", 100), ("dropped_packets", 5), ("marked_packets", 20),
                        ("marked_segments", 30), ("marked_bytes", 3000), ("corrupted_packets", 1),
                        ("duplicated_bytes", 9), ("unacted_packets", 2)):
            setattr(m.counters, name, v)
        r = t.Rule.from_proto(m, pb2)
        self.assertEqual(r.action, "ecn")
        c = r.counters
        self.assertEqual((c.marked_packets, c.marked_segments, c.marked_bytes, c.unacted_packets),
                         (20, 30, 3000, 2))
        self.assertEqual((c.corrupted_packets, c.duplicated_bytes), (1, 9))
        self.assertEqual(c.picked_packets, 5 + 20 + 1 + 2)
        self.assertEqual(c.drop_rate, 0.05)
        self.assertEqual(c.picked_rate, 0.28)
        self.assertEqual(str(r), "rule 4 active: eth0 egress all, police 1mbit,1500b, action ecn")
        m.spec.action = pb2.ACTION_CORRUPT_PAYLOAD
        self.assertEqual(t.Rule.from_proto(m, pb2).action, "corrupt-payload")
        m.spec.action = pb2.ACTION_DROP
        self.assertEqual(t.Rule.from_proto(m, pb2).action, "drop")
        self.assertNotIn("action", str(t.Rule.from_proto(m, pb2)))

    def test_policer_effect_has_no_configured_rate(self):
        e = t.RuleEffect.from_proto(self.pb2.RuleEffect(id=2, configured_rate=-1, measured_rate=0.1,
                                                        rate_ci_low=0.05, rate_ci_high=0.2))
        self.assertTrue(str(e).startswith("rule 2: no configured rate (a policer), measured 10% [5%, 20%]"),
                        str(e))


class ScenarioTest(unittest.TestCase):
    def test_rules_pass_through_and_read_back(self):
        pb2 = support.stubs().pb2
        m = sc.to_proto({"name": "x", "steps": [{"duration": "1s", "rules": [
            {"iface": "eth0", "police": "50mbit,64kib", "action": "ecn"},
            {"iface": "eth0", "markov": "1%,30%", "action": "corrupt-payload"}]}]}, pb2)
        r0, r1 = m.steps[0].rules
        self.assertEqual((r0.loss.police.rate_bps, r0.action), (50000000, pb2.ACTION_ECN))
        self.assertEqual((r1.loss.markov.p31, r1.action), (0.3, pb2.ACTION_CORRUPT_PAYLOAD))
        self.assertEqual(sc._rule_text(sc.plain(r0)), "police 50mbit,64kib ecn eth0 ingress")
        m = sc.to_proto({"name": "x", "steps": [{"duration": "1s", "rules": [
            {"iface": "eth0", "police": "50mbit,64kib,flow"}]}]}, pb2)
        (r2,) = m.steps[0].rules
        self.assertTrue(r2.loss.police.per_flow)
        self.assertEqual(sc._rule_text(sc.plain(r2)), "police 50mbit,64kib,flow eth0 ingress")
        self.assertEqual(sc._rule_text(sc.plain(r1)), "markov 1%,30%,0%,100%,0% corrupt-payload eth0 ingress")
        with self.assertRaises(LossdInputError) as cm:
            sc.to_proto({"name": "x", "steps": [{"duration": "1s", "rules": [
                {"iface": "eth0", "police": "50mbit,64kib", "seed": 1}]}]}, pb2)
        self.assertIn("step 1: rule 1: seed: a policer draws nothing", str(cm.exception))


class SweepStepsTest(unittest.TestCase):
    def test_markov_steps(self):
        st = sweep.parse_step(" markov:1%/30%/10%/40%/0.1% ")
        self.assertEqual(st["label"], "markov:1%/30%/10%/40%/0.1%")
        self.assertEqual(st["markov"], markov4("1%,30%,10%,40%,0.1%"))
        self.assertIsNone(st["ge"])
        self.assertAlmostEqual(st["rate"], stationary_loss(st["markov"]), places=12)
        self.assertEqual(sweep.step_model(st), ({"markov": st["markov"]}, "markov"))
        self.assertEqual(sweep.step_model(sweep.parse_step("1%")), ({"rate": 0.01}, "bernoulli"))
        self.assertIsNone(sweep.parse_step("1%")["markov"])
        with self.assertRaises(LossdInputError):
            sweep.parse_step("markov:1%/0%")

    def test_action_argument(self):
        a = sweep.parse_args(["--iface", "eth0", "--rates", "1%", "--action", "ECN_PASS"])
        self.assertEqual(a.action, "ecn-pass")
        self.assertEqual(sweep.parse_args(["--iface", "eth0", "--rates", "1%"]).action, "drop")
        err = io.StringIO()
        with self.assertRaises(SystemExit), contextlib.redirect_stderr(err):
            sweep.parse_args(["--iface", "eth0", "--rates", "1%", "--action", "mark"])
        self.assertIn("action: expected one of", err.getvalue())


class SweepRunTest(support.FakeLossdTestCase):
    def test_a_sweep_over_rates_with_action_ecn(self):
        a = sweep.parse_args(["--iface", "eth0", "--rates", "1%,markov:1%/30%", "--action", "ecn",
                              "--duration", "10ms", "--grace", "1s"])
        target_kw = {"iface": "eth0", "direction": a.dir, "action": a.action}
        stop = threading.Event()
        for step, st in enumerate(a.steps):
            r = sweep.one_run(self.c, a, target_kw, st, step, 0, stop)
            self.assertTrue(r["ok"], r)
            self.assertIn("picked_packets", r)
        specs = [req.spec for req in self.fake.calls("CreateRule")]
        self.assertEqual([s.action for s in specs], [self.pb2.ACTION_ECN] * 2)
        self.assertEqual(specs[0].loss.bernoulli.rate, 0.01)
        self.assertEqual((specs[1].loss.markov.p13, specs[1].loss.markov.p31), (0.01, 0.3))


if __name__ == "__main__":
    unittest.main()
