"""The sweep's pure parts: statistics, the workload report, the summary and outputs."""
import json
import os
import tempfile
import unittest

import support  # noqa: F401  (puts client/python on sys.path)
from lossd_client import LossdInputError, sweep


class Stats(unittest.TestCase):
    def test_quantiles_interpolate_like_numpy(self):
        xs = [4, 1, 3, 2]
        self.assertEqual(sweep.quantile(xs, 0), 1)
        self.assertEqual(sweep.quantile(xs, 1), 4)
        self.assertAlmostEqual(sweep.quantile(xs, 0.5), 2.5)
        self.assertAlmostEqual(sweep.quantile(xs, 0.25), 1.75)
        self.assertIsNone(sweep.quantile([], 0.5))

    def test_describe_skips_missing_values(self):
        d = sweep.describe([1.0, None, 3.0])
        self.assertEqual((d["n"], d["mean"], d["min"], d["max"], d["median"]), (2, 2.0, 1.0, 3.0, 2.0))
        self.assertAlmostEqual(d["std"], 2 ** 0.5)
        self.assertEqual(sweep.describe([5.0])["std"], 0.0)
        self.assertIsNone(sweep.describe([None]))


class Steps(unittest.TestCase):
    def test_rates_and_gilbert_elliott_steps(self):
        st = sweep.parse_step("1%")
        self.assertEqual((st["label"], st["rate"], st["ge"]), ("1%", 0.01, None))
        st = sweep.parse_step(" ge:1%/9%/50%/0% ")
        self.assertEqual(st["label"], "ge:1%/9%/50%/0%")
        self.assertEqual(st["ge"], {"p": 0.01, "r": 0.09, "bad_loss": 0.5, "good_loss": 0.0})
        self.assertAlmostEqual(st["rate"], 0.1 * 0.5)          # in the bad state 10 % of the time
        self.assertAlmostEqual(sweep.parse_step("ge:1%/1%")["rate"], 0.5)  # defaults 100 %, 0 %
        self.assertEqual(sweep.parse_step("ge:0/0/100%/2%")["rate"], 0.02)  # never leaves good
        with self.assertRaises(LossdInputError):
            sweep.parse_step("ge:1%")
        with self.assertRaises(LossdInputError):
            sweep.parse_step("150%")


class Workload(unittest.TestCase):
    def test_last_json_object_line_wins(self):
        out = 'starting\n{"bytes": 1}\nnoise {"x"\n{"p99_ms": 7, "latencies_ms": [1, 2]}\n'
        self.assertEqual(sweep.workload_report(out), {"p99_ms": 7, "latencies_ms": [1, 2]})
        self.assertEqual(sweep.workload_report("no json here\n[1, 2]\n"), {})


class Summary(unittest.TestCase):
    RUNS = [
        {"step": 0, "rep": 0, "configured_rate": 0.0, "ok": True, "retransmitted_segments": 0,
         "retransmitted_by_type": {}, "throughput_obs_bps": 10e6, "latency_p99_ms": 1.0},
        {"step": 0, "rep": 1, "configured_rate": 0.0, "ok": True, "retransmitted_segments": 0,
         "retransmitted_by_type": {}, "throughput_obs_bps": 12e6, "latency_p99_ms": 1.2},
        {"step": 1, "rep": 0, "configured_rate": 0.01, "ok": True, "retransmitted_segments": 9,
         "retransmitted_by_type": {"fast": 8, "rto": 1}, "throughput_obs_bps": 5e6, "latency_p99_ms": 30.0},
        {"step": 1, "rep": 1, "configured_rate": 0.01, "ok": False, "error": "workload exited 1"},
    ]

    def test_failed_runs_are_left_out_of_the_statistics(self):
        s = sweep.summarize(self.RUNS, [0.0, 0.01])
        self.assertEqual([x["runs"] for x in s], [2, 1])
        self.assertEqual(s[0]["throughput_obs_bps"]["mean"], 11e6)
        self.assertEqual(s[1]["retransmitted_by_type_mean"], {"fast": 8, "rto": 1})
        self.assertIsNone(s[1]["cwnd_mean"])
        table = sweep.table(s).splitlines()
        self.assertEqual(len(table), 3)
        self.assertIn("1%", table[2])

    def test_outputs_without_plot(self):
        doc = {"runs": self.RUNS, "summary": sweep.summarize(self.RUNS, [0.0, 0.01])}
        with tempfile.TemporaryDirectory() as d:
            paths = sweep.write_outputs(d, doc, plot=False)
            self.assertEqual(json.load(open(paths["json"]))["runs"][2]["retransmitted_by_type"]["rto"], 1)
            rows = open(paths["csv"]).read().strip().splitlines()
            self.assertEqual(len(rows), 5)
            self.assertIn("rtx_fast", rows[0])
            self.assertEqual(len(open(paths["summary_csv"]).read().strip().splitlines()), 3)
            self.assertFalse(os.path.exists(os.path.join(d, "sweep.png")))


if __name__ == "__main__":
    unittest.main()
