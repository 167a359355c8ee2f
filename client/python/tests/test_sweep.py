"""The sweep's pure parts: statistics, the workload report, the summary and outputs."""
import csv
import json
import os
import tempfile
import unittest

import support  # puts client/python on sys.path
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

    def test_contract_keys_become_the_runs_fields(self):
        rep = sweep.workload_report('{"latencies_ms": [1, 2, 3], "throughput_bps": 5e6, "retransmits": 4, '
                                    '"loss_rate": 0.01}\n')
        self.assertEqual(sweep.workload_fields(rep, 2.0),
                         {"latency_mean_ms": 2.0, "latency_p50_ms": 2, "latency_p99_ms": 2.98, "requests": 3,
                          "throughput_workload_bps": 5e6, "retransmits_workload": 4, "loss_rate_workload": 0.01})
        self.assertEqual(sweep.workload_fields({"bytes": 1000, "p99_ms": 7}, 2.0),
                         {"latency_p99_ms": 7.0, "throughput_workload_bps": 4000.0})
        self.assertEqual(sweep.workload_fields({}, 2.0), {})
        self.assertEqual(sweep.workload_report('{"error": "no route"}'), {"error": "no route"})


IPERF3 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "iperf3")


def iperf3_output(name):
    """iperf3 -J's stdout, captured from real runs in network namespaces (iperf3/capture.py)."""
    with open(os.path.join(IPERF3, name + ".json")) as f:
        return f.read()


class Iperf3(unittest.TestCase):
    """iperf3 -J's document read as is (iperf 3.12, Debian 12; vectors in iperf3/)."""

    def fields(self, name):
        rep = sweep.workload_report(iperf3_output(name))
        return rep, sweep.workload_fields(rep, 1.2)

    def test_tcp(self):
        rep, f = self.fields("tcp")
        doc = json.loads(iperf3_output("tcp"))["end"]
        # the receiver's bits/s, the sender's retransmits (2 % of the data dropped on the way)
        self.assertEqual(f, {"throughput_workload_bps": doc["sum_received"]["bits_per_second"],
                             "retransmits_workload": doc["sum_sent"]["retransmits"]})
        self.assertEqual(f["retransmits_workload"], 193)
        self.assertAlmostEqual(f["throughput_workload_bps"] / 1e6, 100.6, 1)
        self.assertEqual((rep["workload"], rep["protocol"], rep["directions"]), ("iperf3 -J", "TCP", 1))
        self.assertNotIn("error", rep)

    def test_udp(self):
        rep, f = self.fields("udp")
        # sum_received is the receiving side's (85 of 1,725 lost); sum_sent counts no loss
        self.assertEqual(f, {"throughput_workload_bps": 18990980.22006144, "loss_rate_workload": 85 / 1725})
        self.assertEqual((rep["lost_packets"], rep["packets"], rep["protocol"]), (85, 1725, "UDP"))
        self.assertAlmostEqual(rep["jitter_ms"], 0.00911322074801978)
        self.assertNotIn("retransmits", rep)

    def test_udp_with_one_sum(self):
        # iperf3 before sum_sent/sum_received in UDP: "sum" only, with the receiver's loss
        doc = json.loads(iperf3_output("udp"))
        for k in ("sum_sent", "sum_received"):
            del doc["end"][k]
        rep = sweep.iperf3_report(doc)
        self.assertEqual((rep["lost_packets"], rep["packets"]), (85, 1725))
        self.assertEqual(rep["throughput_bps"], doc["end"]["sum"]["bits_per_second"])

    def test_reverse_counts_the_servers_sending(self):
        # -R: the server sends; sum_sent is still the sender's (its "sender" flag false: not the
        # client), its retransmits from the server's results
        doc = json.loads(iperf3_output("reverse"))
        self.assertEqual(doc["start"]["test_start"]["reverse"], 1)
        self.assertFalse(doc["end"]["sum_sent"]["sender"])
        rep, f = self.fields("reverse")
        self.assertEqual(f, {"throughput_workload_bps": doc["end"]["sum_received"]["bits_per_second"],
                             "retransmits_workload": 150})

    def test_bidir_adds_both_directions(self):
        end = json.loads(iperf3_output("bidir"))["end"]
        rep, f = self.fields("bidir")
        self.assertEqual(rep["directions"], 2)
        self.assertEqual(f["retransmits_workload"], 194 + 184)
        self.assertEqual(f["throughput_workload_bps"], end["sum_received"]["bits_per_second"] +
                         end["sum_received_bidir_reverse"]["bits_per_second"])

    def test_error_document(self):
        rep, f = self.fields("refused")
        self.assertEqual(rep, {"error": "iperf3: unable to connect to server: Connection refused"})
        self.assertEqual(f, {})   # no throughput of 0

    def test_the_last_document_and_surrounding_lines(self):
        out = "starting\n" + iperf3_output("refused") + iperf3_output("tcp") + "done\n"
        self.assertEqual(sweep.workload_report(out)["retransmits"], 193)
        # a JSON-lines object after the document is the last one
        self.assertEqual(sweep.workload_report(iperf3_output("tcp") + '{"bytes": 5}\n'), {"bytes": 5})
        # an indented "{" is inside a document, not one's start
        self.assertEqual(sweep.workload_report('[\n {\n  "a": 1\n }\n]\n'), {})
        self.assertEqual(sweep.workload_report(iperf3_output("tcp")[:-40]), {})   # cut short: nothing


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


MS = 1000 * 1000


class Stalls(support.StubsTestCase):
    """GetRuleEffect's stall maps in the sweep: taken as the daemon reports them, '-' when it
    reports none, never a column of zeros."""

    def effect(self, on=None, caused=None):
        e = self.pb2.RuleEffect(id=1)
        for field, d in (("stalls_on_flows", on or {}), ("stalls_caused", caused or {})):
            for cause, (count, ns) in d.items():
                getattr(e, field)[cause].count = count
                getattr(e, field)[cause].time_ns = ns
        return e

    def run_(self, step, rep, effect):
        r = {"step": step, "rep": rep, "configured_rate": 0.01 * step, "ok": True, "retransmitted_by_type": {}}
        r.update(sweep.stall_fields(effect))
        return r

    def test_causes_are_the_enums_names(self):
        causes = sweep.stall_causes(self.pb2)
        self.assertEqual(causes[:3], ["unknown", "rto", "tlp"])
        self.assertIn("nagle_delayed_ack", causes)
        self.assertNotIn("unspecified", causes)
        self.assertEqual(len(causes), len(self.pb2.StallCause.DESCRIPTOR.values) - 1)

    def test_fields_of_one_run(self):
        f = sweep.stall_fields(self.effect(on={"rto": (2, 400 * MS), "tlp": (1, 30 * MS)},
                                           caused={"rto": (2, 400 * MS)}))
        self.assertEqual((f["stalls_reported"], f["stalls"], f["stall_ns"], f["stall_caused_ns"]),
                         (True, 3, 430 * MS, 400 * MS))
        self.assertEqual(f["stalls_on_flows"]["tlp"], {"count": 1, "time_ns": 30 * MS})
        # stalls on the flows, none linked to the rule's drops: linked is 0, not unknown
        f = sweep.stall_fields(self.effect(on={"cwnd_limited": (1, 20 * MS)}))
        self.assertEqual((f["stall_caused_ns"], f["stalls_caused"]), (0, {}))
        f = sweep.stall_fields(self.effect())
        self.assertEqual(f, {"stalls_reported": False, "stalls_on_flows": None, "stalls_caused": None,
                             "stalls": None, "stall_ns": None, "stall_caused_ns": None})

    def test_a_daemon_that_reports_none_shows_dashes(self):
        runs = [self.run_(0, 0, self.effect()), self.run_(1, 0, self.effect())]
        self.assertFalse(sweep.settle_stalls(runs))
        summ = sweep.summarize(runs, [0.0, 0.01])
        self.assertIsNone(summ[1]["stall_ns"])
        self.assertIsNone(summ[1]["stall_ns_by_cause_mean"])
        head, row0, row1 = [line.split() for line in sweep.table(summ).splitlines()]
        self.assertEqual(row1[-3:], ["-", "-", "-"])   # stall ms, by drops ms, by cause
        doc = {"runs": runs, "summary": summ, "stalls": {"causes": sweep.stall_causes(self.pb2), "reported": False}}
        with tempfile.TemporaryDirectory() as d:
            paths = sweep.write_outputs(d, doc, plot=False)
            rows = list(csv.DictReader(open(paths["csv"])))
            self.assertEqual({rows[1][k] for k in rows[1] if k.startswith("stall")}, {""})
            srows = list(csv.DictReader(open(paths["summary_csv"])))
            self.assertEqual({srows[1][k] for k in srows[1] if k.startswith("stall")}, {""})

    def test_once_reported_a_run_without_stalls_had_none(self):
        runs = [self.run_(0, 0, self.effect()),
                self.run_(1, 0, self.effect(on={"rto": (1, 300 * MS), "fast_recovery": (2, 40 * MS)},
                                            caused={"rto": (1, 300 * MS)})),
                self.run_(1, 1, self.effect(on={"rto": (1, 100 * MS)}))]
        self.assertTrue(sweep.settle_stalls(runs))
        self.assertEqual((runs[0]["stall_ns"], runs[0]["stalls_on_flows"], runs[0]["stalls_reported"]),
                         (0, {}, False))
        summ = sweep.summarize(runs, [0.0, 0.01])
        self.assertEqual(summ[0]["stall_ns"]["mean"], 0)
        self.assertEqual(summ[0]["stall_ns_by_cause_mean"], {})
        self.assertEqual(summ[1]["stall_ns"]["mean"], 220 * MS)
        self.assertEqual(summ[1]["stall_caused_ns"]["mean"], 150 * MS)
        self.assertEqual(summ[1]["stall_ns_by_cause_mean"], {"rto": 200 * MS, "fast_recovery": 20 * MS})
        self.assertEqual(summ[1]["stall_caused_ns_by_cause_mean"], {"rto": 150 * MS})
        lines = sweep.table(summ).splitlines()
        self.assertTrue(lines[0].rstrip().endswith("stall ms by cause"), lines[0])
        self.assertEqual(lines[1].split()[-3:], ["0.0", "0.0", "0"], lines[1])
        self.assertEqual(lines[2].split()[-6:], ["220.0", "150.0", "rto", "200,", "fast_recovery", "20"], lines[2])
        doc = {"runs": runs, "summary": summ, "stalls": {"causes": sweep.stall_causes(self.pb2), "reported": True}}
        with tempfile.TemporaryDirectory() as d:
            paths = sweep.write_outputs(d, doc, plot=False)
            rows = list(csv.DictReader(open(paths["csv"])))
            self.assertEqual([r["stall_ns_rto"] for r in rows], ["0", str(300 * MS), str(100 * MS)])
            self.assertEqual([r["stall_caused_ns_rto"] for r in rows], ["0", str(300 * MS), "0"])
            self.assertEqual(rows[1]["stall_ns"], str(340 * MS))
            srows = list(csv.DictReader(open(paths["summary_csv"])))
            self.assertEqual(float(srows[1]["stall_ns_mean_fast_recovery"]), 20 * MS)
            self.assertEqual(float(srows[0]["stall_ns_mean_rto"]), 0.0)


if __name__ == "__main__":
    unittest.main()
