"""HTTP e2e 3: what GET /metrics holds, against gRPC and the kernel, in namespaces A and B.

One daemon in A with --metrics-max-rules 3 --metrics-top-flows 1.

  test_rule_cap_and_gone_series   5 rules: per-rule series for 3 (live ones by id), and
                                  lossd_metrics_rules_omitted 2; a deleted rule's series are
                                  gone at the next scrape; lossd_rules{state="live"} 5
  test_tcp_through_a_rule         paced TCP A -> B through a 1 % egress rule on A: the rule's
                                  counters equal GetRule's, its retransmits by type equal
                                  GetRuleEffect's, and lossd_retransmitted_segments_total grew
                                  by A's TcpRetransSegs delta; the per-hook totals equal the
                                  rule's drops, lossd_injector_attached lists its clsact
                                  filter; with kernel.bpf_stats_enabled on for the run (restored
                                  after), lossd_bpf_program_runs_total of the egress program
                                  grew by at least the packets the rule matched;
                                  lossd_events_lost_total is 0 (no "recursion" source: the
                                  kernel's skipped nested runs are lossd_bpf_runs_skipped_total)
  test_top_flows                  two open flows, one retransmitting: the top-1 series names it
                                  (its tuple), flow="other" holds the rest; without the flag
                                  (the default) no flow label exists at all (another daemon)
"""
import re
import subprocess

from lab import daemon, prom, traffic, web
from lab.prom import one, parse, values
from lab.config import main
from lab.daemon import Daemon, DaemonTestCase, wait_until
from lab.netns import measured

class BpfStats:
    """kernel.bpf_stats_enabled=1 for a while, restored after (it is host-wide)."""

    def __enter__(self):
        self.old = open("/proc/sys/kernel/bpf_stats_enabled").read().strip()
        subprocess.run(["sysctl", "-q", "-w", "kernel.bpf_stats_enabled=1"], check=True)
        return self

    def __exit__(self, *exc):
        subprocess.run(["sysctl", "-q", "-w", "kernel.bpf_stats_enabled=" + self.old], check=True)


class Metrics(DaemonTestCase):
    daemon_args = ["--metrics-max-rules", "3", "--metrics-top-flows", "1"]

    def scrape(self, d=None):
        d = d or self.d
        r = web.request(d.ns, "127.0.0.1", d.http_port, "/metrics")
        self.assertEqual(r.status, 200, r)
        rc, out = prom.promtool_check_metrics(r.text())
        self.assertEqual(rc, 0, out)
        return parse(r.text())

    def test_rule_cap_and_gone_series(self):
        ids = [self.d.create(interface=self.lab.IF_A, protocol="udp", dport=9000 + i, rate=0.5).id
               for i in range(5)]
        s = self.scrape()
        shown = sorted(int(l["rule"]) for l, _ in values(s, "lossd_rule_info"))
        self.assertEqual(shown, sorted(ids)[:3])
        self.assertEqual(one(s, "lossd_metrics_rules_omitted"), 2)
        self.assertEqual(one(s, "lossd_rules", state="live"), 5)
        for name in ("lossd_rule_matched_packets_total", "lossd_rule_dropped_segments_total",
                     "lossd_rule_configured_loss_ratio", "lossd_rule_live"):
            self.assertEqual(sorted(int(l["rule"]) for l, _ in values(s, name)), shown, name)
        self.assertEqual(len(values(s, "lossd_rule_retransmitted_segments_total")), 3 * 8)
        # Deleted, it is kept (its final counters), no longer live; deleted again, forgotten.
        self.d.delete(ids[0])
        s = self.scrape()
        self.assertEqual(one(s, "lossd_rule_live", rule=str(ids[0])), 0)
        self.assertEqual(one(s, "lossd_rules", state="deleted"), 1)
        self.assertEqual(one(s, "lossd_rules", state="live"), 4)
        self.d.delete(ids[0])
        s = self.scrape()
        gone = [(n, l) for n, l, _ in s if l.get("rule") == str(ids[0])]
        self.assertEqual(gone, [], "a forgotten rule's series stayed")
        self.assertEqual(sorted(int(l["rule"]) for l, _ in values(s, "lossd_rule_info")), sorted(ids)[1:4])
        self.assertEqual(one(s, "lossd_metrics_rules_omitted"), 1)

    def test_tcp_through_a_rule(self):
        lab, d = self.lab, self.d
        r = d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=5201, payload="only",
                     rate=0.01, labels={"team": "e2e"})
        s0 = self.scrape()
        a0 = lab.counters(lab.a)
        rtx0 = sum(v for _, v in values(s0, "lossd_retransmitted_segments_total"))
        with BpfStats():
            runs0 = {l["program"]: v for l, v in values(self.scrape(), "lossd_bpf_program_runs_total")}
            traffic.tcp_flow(lab, lab.b, lab.a, lab.V4_B, mbytes=60, rate_mbit=300)
            runs1 = {l["program"]: v for l, v in values(self.scrape(), "lossd_bpf_program_runs_total")}
            enabled = one(self.scrape(), "lossd_bpf_stats_enabled")
        kernel = (lab.counters(lab.a) - a0)["Tcp.RetransSegs"]

        e = daemon.effect_reaching(d, r.id, kernel, 10)
        c = d.get(r.id).counters
        s = self.scrape()
        rid = str(r.id)
        prom_rtx = {l["type"]: v for l, v in values(s, "lossd_rule_retransmitted_segments_total", rule=rid)}
        numbers = dict(kernel_retrans=kernel, dropped_segs=c.dropped_segments, matched_pkts=c.matched_packets,
                       prom_rtx={k: v for k, v in prom_rtx.items() if v},
                       grpc_rtx={k: v for k, v in e.retransmitted_segments.items() if v},
                       runs_tc_out=[runs0.get("lossd_tc_out"), runs1.get("lossd_tc_out")], stats_enabled=enabled)
        measured("metrics_tcp_rule", **numbers)
        self.assertGreater(c.dropped_segments, 0, numbers)
        info = values(s, "lossd_rule_info", rule=rid)
        self.assertEqual([l for l, _ in info], [{"rule": rid, "interface": lab.IF_A, "cgroup": "",
                                                   "direction": "egress", "hook": "tc", "model": "bernoulli",
                                                   "labels": "team=e2e"}])
        for f in ("matched_packets", "matched_segments", "matched_bytes", "dropped_packets", "dropped_segments",
                  "dropped_bytes"):
            self.assertEqual(one(s, "lossd_rule_%s_total" % f, rule=rid), getattr(c, f), f)
        self.assertEqual(one(s, "lossd_rule_configured_loss_ratio", rule=rid), 0.01)
        self.assertAlmostEqual(one(s, "lossd_rule_measured_loss_ratio", rule=rid), e.measured_rate, places=9)
        self.assertAlmostEqual(one(s, "lossd_rule_measured_loss_low_ratio", rule=rid), e.rate_ci_low, places=9)
        self.assertEqual(prom_rtx, {k: float(v) for k, v in e.retransmitted_segments.items()}, numbers)
        rtx1 = sum(v for _, v in values(s, "lossd_retransmitted_segments_total"))
        self.assertEqual(rtx1 - rtx0, kernel, numbers)
        self.assertEqual(one(s, "lossd_hook_dropped_packets_total", hook="tc_egress"), c.dropped_packets)
        self.assertEqual(one(s, "lossd_injector_attached", attachment="clsact egress on " + lab.IF_A), 1)
        self.assertEqual(enabled, 1)
        self.assertGreaterEqual(runs1.get("lossd_tc_out", 0) - runs0.get("lossd_tc_out", 0), c.matched_packets,
                                numbers)
        # No event was lost in this ordinary flow: lossd_events_lost_total says 0 (the kernel's
        # skipped nested runs of the tracing programs rose by 1-9 per flow and were counted
        # as lost; they are lossd_bpf_runs_skipped_total, by program, and the totals above
        # equal the kernel's whatever they are).
        lost = {l["source"]: v for l, v in values(s, "lossd_events_lost_total")}
        skipped = {l["program"]: v for l, v in values(s, "lossd_bpf_runs_skipped_total")}
        measured("metrics_lost_and_skipped", lost=lost, skipped=skipped)
        self.assertEqual(lost, {"ring": 0, "effects": 0})
        self.assertIn("obs_probe", skipped)
        self.assertNotIn("obs_sockops", skipped)  # never skipped: not listed

    def test_top_flows(self):
        lab, d = self.lab, self.d
        d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=5202, payload="only", rate=0.02)
        lossy = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, 5202, 20e6, 200, hold=True)
        clean = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, 5203, 5e6, 200, hold=True)
        try:
            lossy.wait_sent()
            clean.wait_sent()
            s = self.scrape()
            flows = values(s, "lossd_flow_retransmitted_segments")
            measured("metrics_top_flows", flows=flows)
            named = [(l["flow"], v) for l, v in flows if l["flow"] != "other"]
            self.assertEqual(len(named), 1, flows)
            self.assertRegex(named[0][0], r"^%s:\d+->%s:5202$" % (re.escape(lab.V4_A), re.escape(lab.V4_B)))
            self.assertGreater(named[0][1], 0)
            self.assertEqual([l for l, _ in flows if l["flow"] == "other"], [{"flow": "other"}])
            plain = Daemon(lab, lab.b, wait_parts=True)
            try:
                self.assertEqual(values(self.scrape(plain), "lossd_flow_retransmitted_segments"), [])
                self.assertFalse(any("flow" in l for _, l, _ in self.scrape(plain)))
            finally:
                self.assertEqual(plain.term(), 0, plain.stderr())
        finally:
            lossy.release()
            clean.release()
            lab.wait_idle()


if __name__ == "__main__":
    main()
