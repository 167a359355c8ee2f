"""Scenario files into lossd.v1.Scenario (stubs), their refusals, and the report's table."""

import os
import tempfile
import unittest

import support
from lossd_client import LossdInputError
from lossd_client import scenario as sc

YAML = """
name: brownout
guard: stall>2s
continue-on-guard: true
steps:
  - name: baseline
    duration: 5s
  - name: light
    duration: 20s
    rules:
      - {iface: eth0, direction: egress, dport: 8080, rate: 1%, start-after: 1s}
      - {iface: eth0, dport: 8443, ramp: "1%/2s,5%/2s", guard: "rtos>5/2s"}
"""


class ScenarioFileTest(unittest.TestCase):
    def setUp(self):
        self.pb2 = support.stubs().pb2

    def load(self, text, name="s.yaml"):
        d = tempfile.mkdtemp()
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(text)
        self.addCleanup(lambda: (os.remove(path), os.rmdir(d)))
        return path

    def test_yaml_to_proto(self):
        m = sc.to_proto(self.load(YAML), self.pb2)
        self.assertEqual(m.name, "brownout")
        self.assertEqual(m.guard.stall_ns, 2 * 10**9)
        self.assertTrue(m.continue_on_guard)
        self.assertEqual([(s.name, s.duration_ns, len(s.rules)) for s in m.steps],
                         [("baseline", 5 * 10**9, 0), ("light", 20 * 10**9, 2)])
        a, b = m.steps[1].rules
        self.assertEqual((a.interface, a.direction, a.match.dport.lo), ("eth0", self.pb2.DIRECTION_EGRESS, 8080))
        self.assertEqual(a.loss.bernoulli.rate, 0.01)
        self.assertEqual(a.schedule.start_after_ns, 10**9)
        self.assertEqual([(x.rate, x.duration_ns) for x in b.loss.ramp.steps], [(0.01, 2 * 10**9), (0.05, 2 * 10**9)])
        self.assertEqual((b.guard.rtos, b.guard.rtos_window_ns), (5, 2 * 10**9))

    def test_json_and_dict_agree(self):
        import json
        import yaml
        doc = yaml.safe_load(YAML)
        from_json = sc.to_proto(self.load(json.dumps(doc), "s.json"), self.pb2)
        self.assertEqual(from_json, sc.to_proto(doc, self.pb2))
        self.assertEqual(from_json, sc.to_proto(self.load(YAML), self.pb2))

    def test_refusals_name_the_place(self):
        cases = [
            ("steps: []\nname: x\n", "steps: a list"),
            ("name: x\nsteps:\n  - {}\n", "step 1: duration"),
            ("name: x\nsteps:\n  - {duration: 1s, wait: 2}\n", "step 1: unknown field 'wait'"),
            ("name: x\nsteps:\n  - {name: a, duration: soon}\n", "step 1 (a): duration"),
            ("name: x\nsteps:\n  - {duration: 1s}\n  - {name: b, duration: 1s, rules: [{iface: e, rate: 5}]}\n",
             "step 2 (b): rule 1: rate"),
            ("name: x\nsteps:\n  - {duration: 1s, rules: [{iface: e, rate: 1%, colour: red}]}\n",
             "step 1: rule 1: got an unexpected keyword argument 'colour'"),
            ("name: x\nguard: stall>\nsteps:\n  - {duration: 1s}\n", "guard"),
            ("steps:\n  - {duration: 1s}\n", "name:"),
            ("- a\n- b\n", "expected a mapping"),
            ("name: [unclosed\n", "s.yaml: "),
        ]
        for text, needle in cases:
            with self.subTest(text=text):
                path = self.load(text)
                with self.assertRaises(LossdInputError) as cm:
                    sc.to_proto(path, self.pb2)
                self.assertIn(needle, cm.exception.message)
                self.assertTrue(cm.exception.message.startswith(path + ": "), cm.exception.message)

    def test_a_big_file_is_refused(self):
        with self.assertRaises(LossdInputError) as cm:
            sc.to_proto(self.load("#" * (sc.MAX_FILE_BYTES + 1)), self.pb2)
        self.assertIn("larger than", cm.exception.message)


class ReportTest(unittest.TestCase):
    RUN = {
        "id": 4, "state": "stopped", "reason": "step 2 (heavy): rule 9 stopped by its guard",
        "scenario": {"name": "demo"},
        "steps": [
            {"index": 1, "name": "pause", "duration_ns": 10**9, "started_unix_ns": 1, "ended_unix_ns": 2,
             "outcome": "done"},
            {"index": 2, "name": "heavy", "duration_ns": 10**9, "started_unix_ns": 3, "ended_unix_ns": 4,
             "outcome": "stopped: rule 9 stopped by its guard",
             "rules": [{"id": 9, "state": "RULE_STATE_STOPPED", "reason": "stopped by its guard (stall>500ms)",
                        "guard_stop": {"condition": "stall"},
                        "spec": {"interface": "veth0", "direction": "DIRECTION_EGRESS",
                                 "match": {"protocol": "tcp", "dport": {"lo": 80, "hi": 80}},
                                 "loss": {"bernoulli": {"rate": 1.0}}, "guard": {"stall_ns": 500 * 10**6}},
                        "counters": {"matched_packets": 50, "dropped_packets": 50}}],
             "effects": [{"configured_rate": 1.0, "measured_rate": 1.0, "rate_ci_low": 0.87, "rate_ci_high": 1.0,
                          "configured_within_ci": True, "counters": {"matched_packets": 50, "dropped_packets": 50},
                          "retransmitted_segments": {"rto": 3}, "stalls_on_flows": {"rto": {"count": 1}},
                          "limit_ns": {"cwnd": 600, "rwnd": 200, "app": 200}}]},
            {"index": 3, "name": "never", "duration_ns": 10**9,
             "rules": [{"spec": {"interface": "veth0", "loss": {"bernoulli": {"rate": 0.05}}}}]},
        ]}

    def test_table(self):
        text = sc.table(self.RUN)
        lines = text.splitlines()
        self.assertEqual(lines[0], "scenario 4 (demo): stopped: step 2 (heavy): rule 9 stopped by its guard")
        self.assertRegex(text, r"\n1 +pause +- +\(pause\) +done")
        self.assertRegex(text, r"\n2 +heavy +9 +100% veth0 egress tcp dport 80 guard stall>500ms +50 +50 +"
                               r"100% \[87%, 100%\] +rto 3 +rto 1 +cwnd 60% +stall +stopped: rule 9")
        self.assertRegex(text, r"\n3 +never +- +5% veth0 ingress +-$|\n3 +never +- +5% veth0 ingress +-\n")
        self.assertIn("\nguard: rule 9 stopped by its guard (stall>500ms)", text)

    def test_exit_status(self):
        self.assertEqual([sc.exit_status({"state": s}) for s in ("done", "stopped", "aborted", "failed")],
                         [0, 3, 1, 1])

    def test_scenario_id(self):
        self.assertEqual(sc.scenario_id(3), 3)
        self.assertEqual(sc.scenario_id({"id": 5}), 5)
        for bad in (0, -1, "3", True, None):
            with self.assertRaises(LossdInputError):
                sc.scenario_id(bad)


if __name__ == "__main__":
    unittest.main()
