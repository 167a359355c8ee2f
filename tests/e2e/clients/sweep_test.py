"""Client e2e 6: the loss sweep (lossctl sweep / python3 -m lossd_client.sweep) against the
real daemon and a real workload.

One daemon in the sender's namespace A; a TCP request/response server (tests/e2e/lab/
tcpflow.py rr-server) in B; the sweep's workload is its rr client in A (1,448-byte requests,
14,480-byte replies, 300 per run), run once per repetition. The rule drops A's data segments to the
server at A's egress (clsact, seen by A's TCP as network loss).

  test_1_sweep_steps_outputs_and_physics
      `lossctl sweep --rates 0,2%,10% --repeat 2 --workload ...`: exit 0; runs in order
      (step 0,0,1,1,2,2 at the configured rates); sweep.json/.csv/summary.csv/.png/.svg
      written and non-empty (PNG and SVG by their magic); at 0 % nothing dropped and
      nothing retransmitted; retransmitted segments and p99 latency grow with the rate;
      every run's measured loss inside the 99.9 % interval the sweep reports, that
      interval containing the configured rate; every dropped segment retransmitted
      (retransmitted >= dropped); no rule left. Stalls as GetRuleEffect reports them: when no
      run reported any, every run's stall fields null, the JSON says so and the table shows
      '-' (never zeros); otherwise causes from the StallCause names, the time linked to the
      rule's drops within each cause's time on its flows, and none linked at 0 %.
  test_2_interrupted_sweep_restores
      SIGINT while a step holds its rule: exit 130 within seconds, the rule deleted, the
      partial results written.
  test_3_killed_sweep_rule_expires
      SIGKILL (the client dies, no cleanup): the rule's TTL (hold + grace) expires it.
  test_4_gilbert_elliott_step
      a step given as a Gilbert-Elliott model (ge:5%/45%/50%/0%) runs with that model,
      reported at its mean loss rate (5 %), drops, and every drop is retransmitted.
  test_5_iperf3_json_workload
      the workload a real `iperf3 -c B -J -t 1` (paced in the kernel at 100 Mbit/s, --fq-rate:
      with iperf3's own -b pacing, bursts lost segments in the veth backlog at 0 %, 3 and 48
      retransmits in two runs here; its data connection from a fixed client port, the rule on
      that one flow, per segment: a bulk flow's GSO skbs would make the drops a few bursts, 3
      segments of 8,740 at 1 % in one run), read with no wrapper, at 0, 1 %, 3 %: every
      run has the workload's throughput and retransmits; at 0 % none dropped, none retransmitted;
      at 1 % and 3 % segments dropped, every one retransmitted (lossd's count on the rule's flow),
      and the workload's retransmits > 0 and reconciling with lossd's and the kernel's: iperf3
      reads the socket's tcpi_total_retrans when its test ends, so it counts at most what lossd
      counts on the flow, short by the last window's resends only (measured: 65 of 66, 47 of 47,
      98 of 99 (an RTO), 218 of 220; allowed: 10 + 5 %), and the sweep's lossd counts add up to at
      most the namespace's TcpRetransSegs over the sweep (measured: equal).
  test_6_iperf3_error_fails_the_run
      iperf3 -J to a port nothing listens on (it prints its "error" document and exits 0): the
      sweep exits 1, the run failed with iperf3's text, and no throughput is recorded.
"""
import json
import os
import signal
import subprocess
import time

from lab import config, traffic
from lab.config import main
from lab.netns import measured
from lab.daemon import wait_until
from lab.clients import ClientTestCase, client_popen
from lossd_client.units import wilson_interval as wilson  # client/python, stdlib only


PORT = 5301
IPERF_PORT, IPERF_CPORT, CLOSED_PORT = 5302, 40001, 5399


class Sweep(ClientTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        try:
            cls.srv = traffic.rr_server(cls.lab, cls.lab.b, "0.0.0.0", PORT)
            cls.iperf_srv = traffic.iperf_server(cls.lab, cls.lab.b, IPERF_PORT)
        except BaseException:
            cls.lab.close()
            raise

    def active_rules(self):
        return [r for r in self.d.ctlj("rule", "ls").get("rules", []) if r.get("state") == "RULE_STATE_ACTIVE"]

    def sweep_args(self, out, rates, extra=()):
        workload = "ip netns exec %s %s" % (self.lab.a, " ".join(traffic.rr_cmd(
            self.lab.V4_B, PORT, "--count", 300, "--response", 14480, "--timeout", 120)))
        return ["--iface", self.lab.IF_A, "--dir", "egress", "--dport", str(PORT), "--payload", "only",
                "--rates", rates, "--out", out, "--settle", "300ms", "--workload", workload] + list(extra)

    def test_1_sweep_steps_outputs_and_physics(self):
        out = os.path.join(self.lab.tempdir(), "sweep")
        r = self.d.ctl("sweep", *self.sweep_args(out, "0,2%,10%", ["--repeat", "2", "--title", "e2e"]),
                       timeout=300)
        self.assertEqual(r.rc, 0, r)
        doc = json.load(open(os.path.join(out, "sweep.json")))
        runs = doc["runs"]
        measured("sweep", summary=[{k: s[k] for k in ("configured_rate", "runs")} |
                                   {m: (s[m] or {}).get("mean") for m in
                                    ("measured_rate", "retransmitted_segments", "latency_p99_ms",
                                     "throughput_obs_bps", "cwnd_mean", "dropped_segments")}
                                   for s in doc["summary"]])
        self.assertTrue(doc["complete"], doc)
        self.assertEqual([(x["step"], x["rep"]) for x in runs], [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)])
        self.assertEqual([x["configured_rate"] for x in runs], [0.0, 0.0, 0.02, 0.02, 0.1, 0.1])
        for name, magic in (("sweep.json", b"{"), ("sweep.csv", b"step"), ("summary.csv", b"label,configured_rate"),
                            ("sweep.png", b"\x89PNG"), ("sweep.svg", b"<?xml")):
            path = os.path.join(out, name)
            self.assertGreater(os.path.getsize(path), 100, path)
            with open(path, "rb") as f:
                self.assertEqual(f.read(len(magic)), magic, path)
        with open(os.path.join(out, "sweep.csv")) as f:
            self.assertEqual(len(f.read().strip().splitlines()), 1 + len(runs))
        for x in runs:
            self.assertTrue(x["ok"], x)
            self.assertEqual(x["requests"], 300, x)
            self.assertGreater(x["matched_segments"], 0, x)
            self.assertGreater(x["flows"], 0, x)
            self.assertLessEqual(x["rate_ci_low"], x["configured_rate"], x)
            self.assertGreaterEqual(x["rate_ci_high"], x["configured_rate"], x)
            # One trial unit, the daemon's (docs/architecture.md#measured-rate): skbs. Before,
            # the sweep counted segments, and its interval was overconfident with GSO.
            k, n = x["dropped_packets"], x["matched_packets"]
            self.assertEqual(x["measured_rate"], k / n, x)
            lo, hi = wilson(k, n)
            self.assertAlmostEqual(x["rate_ci_low"], lo, places=12, msg=x)
            self.assertAlmostEqual(x["rate_ci_high"], hi, places=12, msg=x)
            self.assertGreaterEqual(x["retransmitted_segments"], x["dropped_segments"], x)
            if x["configured_rate"] == 0:
                self.assertEqual((x["dropped_segments"], x["retransmitted_segments"]), (0, 0), x)
        s = doc["summary"]
        rtx = [st["retransmitted_segments"]["mean"] for st in s]
        p99 = [st["latency_p99_ms"]["mean"] for st in s]
        self.assertLess(rtx[0], rtx[1], rtx)
        self.assertLess(rtx[1], rtx[2], rtx)
        self.assertLess(p99[0], p99[2], p99)
        for st in s:
            for k in ("mean", "std", "min", "q1", "median", "q3", "max"):
                self.assertIn(k, st["latency_p50_ms"])
        self.assertIn("rate", r.out.splitlines()[0])   # the table
        self.assertEqual(len(r.out.strip().splitlines()), 1 + 3)
        st = doc["stalls"]
        measured("sweep_stalls", reported=st["reported"], threshold=st["threshold"],
                 stall_ms=[x["stall_ns"]["mean"] / 1e6 if x["stall_ns"] else None for x in s],
                 caused_ms=[x["stall_caused_ns"]["mean"] / 1e6 if x["stall_caused_ns"] else None for x in s],
                 by_cause=[x["stall_ns_by_cause_mean"] for x in s])
        self.assertIn("rto", st["causes"])
        if not st["reported"]:
            self.assertIn("reported no stalls", st["note"])
            for x in runs:
                self.assertEqual([x[k] for k in ("stalls", "stall_ns", "stall_caused_ns", "stalls_on_flows")],
                                 [None] * 4, x)
            for row in r.out.strip().splitlines()[1:]:
                self.assertEqual(row.split()[-3:], ["-", "-", "-"], row)
        else:
            for x in runs:
                on, caused = x["stalls_on_flows"], x["stalls_caused"]
                self.assertLessEqual(set(on) | set(caused), set(st["causes"]), x)
                for c, v in caused.items():
                    self.assertLessEqual(v["time_ns"], on.get(c, {}).get("time_ns", 0), x)
                if x["configured_rate"] == 0:
                    self.assertEqual(x["stall_caused_ns"], 0, x)
        self.assertEqual(self.active_rules(), [])

    def test_4_gilbert_elliott_step(self):
        out = os.path.join(self.lab.tempdir(), "sweep")
        r = self.d.ctl("sweep", *self.sweep_args(out, "ge:5%/45%/50%/0%", ["--no-plot"]), timeout=300)
        self.assertEqual(r.rc, 0, r)
        run = json.load(open(os.path.join(out, "sweep.json")))["runs"][0]
        measured("sweep_ge", **{k: run.get(k) for k in ("label", "configured_rate", "matched_segments",
                                                        "dropped_segments", "retransmitted_segments")})
        self.assertEqual((run["label"], run["model"]), ("ge:5%/45%/50%/0%", "ge"), run)
        # in the bad state 5/(5+45) of the time, losing half there: 5 %. P(never entering it in
        # ~300 segments) ~ 2e-7. (With 100 % loss in the bad state a retransmission could be
        # lost 8 times running, 1 - 2 % of runs, and the client's 30 s timeout ended one run.)
        self.assertAlmostEqual(run["configured_rate"], 0.05)
        self.assertTrue(run["ok"], run)
        self.assertGreater(run["dropped_segments"], 0, run)
        self.assertGreaterEqual(run["retransmitted_segments"], run["dropped_segments"], run)
        rule = self.d.ctlj("rule", "get", run["rule"]) if self.d.ctl("rule", "get", run["rule"]).rc == 0 else None
        self.assertTrue(rule is None or rule.get("state") != "RULE_STATE_ACTIVE", rule)

    def iperf3_workload(self, port):
        return "ip netns exec %s iperf3 -c %s -p %d --cport %d -t 1 --fq-rate 100M -J" % (
            self.lab.a, self.lab.V4_B, port, IPERF_CPORT)

    def test_5_iperf3_json_workload(self):
        out = os.path.join(self.lab.tempdir(), "sweep")
        before, before_b = self.lab.counters(self.lab.a), self.lab.counters(self.lab.b)
        r = self.d.ctl("sweep", "--iface", self.lab.IF_A, "--dir", "egress", "--sport", str(IPERF_CPORT),
                       "--dport", str(IPERF_PORT), "--payload", "only", "--per-segment", "--rates", "0,1%,3%",
                       "--out", out, "--no-plot", "--settle", "1s", "--workload", self.iperf3_workload(IPERF_PORT),
                       timeout=120)
        da, db = self.lab.counters(self.lab.a) - before, self.lab.counters(self.lab.b) - before_b
        kernel = da["Tcp.RetransSegs"]
        # iperf3's server closes the data socket with data still arriving, and resets it
        # (measured: B's TCPAbortOnClose and A's EstabResets, one a run): the sender's
        # unacknowledged segments go with it, never resent.
        resets = db["TcpExt.TCPAbortOnClose"]
        self.assertEqual(r.rc, 0, r)
        runs = json.load(open(os.path.join(out, "sweep.json")))["runs"]
        measured("sweep_iperf3", kernel_retrans_segs=kernel, resets=resets, runs=[
            {k: x.get(k) for k in ("configured_rate", "dropped_segments", "matched_segments",
                                   "retransmitted_segments", "retransmits_workload", "throughput_workload_bps",
                                   "throughput_obs_bps")} for x in runs])
        self.assertEqual([x["configured_rate"] for x in runs], [0.0, 0.01, 0.03])
        for x in runs:
            self.assertTrue(x["ok"], x)
            self.assertEqual(x["workload_report"]["workload"], "iperf3 -J", x)
            # iperf3's own number was read (a floor, not a speed goal: 3 % loss on a loaded
            # 2-core CI host gave 9.9 Mbit/s once).
            self.assertGreater(x["throughput_workload_bps"], 1e6, x)
            self.assertLess(x["throughput_workload_bps"], 150e6, x)   # paced at 100 Mbit/s
            self.assertIsInstance(x["retransmits_workload"], int, x)
            # The data connection (the control one is not matched). Every run's data connection
            # has the same ports (--cport): 1 s between runs lets the last one's socket close
            # first (300 ms did not on a loaded CI host: its socket was still sending, 2 flows).
            self.assertEqual(x["flows"], 1, x)
            self.assertLessEqual(x["rate_ci_low"], x["configured_rate"], x)
            self.assertGreaterEqual(x["rate_ci_high"], x["configured_rate"], x)
            if x["configured_rate"] == 0:
                # Nothing dropped; a resend only where the loaded host delayed an ACK past the
                # probe timer (a TLP: 1 in one CI run), not a loss.
                self.assertEqual(x["dropped_segments"], 0, x)
                self.assertLessEqual(x["retransmits_workload"], 2, x)
            else:
                self.assertGreater(x["dropped_segments"], 0, x)
                self.assertGreater(x["retransmits_workload"], 0, x)
            # Every drop is resent but those the server's reset took (a few at the end of a run:
            # CI saw 79 resent for 80 dropped at 3 %); the sweep reads a run once its flows have
            # closed, so a resend after the workload exited is counted.
            short = x["dropped_segments"] - x["retransmitted_segments"]
            self.assertLessEqual(short, 3 if resets else 0, dict(x, resets=resets))
            # the socket's tcpi_total_retrans at the test's end, and lossd's count of the flow
            gap = x["retransmitted_segments"] - x["retransmits_workload"]
            self.assertGreaterEqual(gap, 0, x)
            self.assertLessEqual(gap, 10 + 0.05 * x["retransmitted_segments"], x)
        self.assertLessEqual(sum(x["retransmitted_segments"] for x in runs), kernel, runs)
        head, *rows = r.out.strip().splitlines()
        self.assertIn("rtx wl", head)
        self.assertEqual(len(rows), 3)
        self.assertEqual(self.active_rules(), [])

    def test_6_iperf3_error_fails_the_run(self):
        out = os.path.join(self.lab.tempdir(), "sweep")
        r = self.d.ctl("sweep", "--iface", self.lab.IF_A, "--dir", "egress", "--dport", str(CLOSED_PORT),
                       "--rates", "1%", "--out", out, "--no-plot", "--workload", self.iperf3_workload(CLOSED_PORT),
                       timeout=60)
        self.assertEqual(r.rc, 1, r)
        self.assertIn("Connection refused", r.err)
        run = json.load(open(os.path.join(out, "sweep.json")))["runs"][0]
        measured("sweep_iperf3_error", exit=r.rc, workload_exit=run["workload_exit"], error=run["error"])
        self.assertFalse(run["ok"], run)
        # iperf3 3.12 exits 0 here ("workload reported an error: ..."); one that exits 1 is failed too
        self.assertIn("iperf3: unable to connect to server: Connection refused", run["error"], run)
        self.assertNotIn("throughput_workload_bps", run)
        self.assertEqual(self.active_rules(), [])

    def _start(self, out, hold):
        cmd = [config.PY, "-m", "lossd_client.sweep", "--socket", self.d.sock, "--iface", self.lab.IF_A,
               "--dir", "egress", "--dport", str(PORT), "--rates", "1%,2%", "--duration", hold,
               "--grace", "2s", "--out", out, "--no-plot"]
        p = client_popen(self.lab, cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_until(lambda: self.active_rules(), 20, "the sweep's rule")
        return p

    def test_2_interrupted_sweep_restores(self):
        out = os.path.join(self.lab.tempdir(), "sweep")
        p = self._start(out, "60s")
        rules = self.active_rules()
        self.assertEqual(len(rules), 1, rules)
        self.assertEqual(rules[0]["spec"]["labels"].get("client"), "sweep", rules)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        sout, serr = p.communicate(timeout=30)
        measured("sweep_sigint", exit=p.returncode, secs=round(time.monotonic() - t0, 3))
        self.assertEqual(p.returncode, 130, serr)
        self.assertLess(time.monotonic() - t0, 10)
        self.assertIn("interrupted", serr)
        self.assertEqual(self.active_rules(), [])
        self.assertEqual(self.d.ctlj("rule", "ls").get("rules", []), [])

    def test_3_killed_sweep_rule_expires(self):
        out = os.path.join(self.lab.tempdir(), "sweep")
        p = self._start(out, "2s")  # TTL 2 s + 2 s grace
        rid = self.active_rules()[0]["id"]
        p.kill()
        p.wait(timeout=10)
        t0 = time.monotonic()
        wait_until(lambda: not self.active_rules(), 15, "the killed sweep's rule to expire")
        measured("sweep_sigkill_rule_gone_after_s", secs=round(time.monotonic() - t0, 3))
        got = self.d.ctl("-o", "json", "rule", "get", rid)
        if got.rc == 0:
            self.assertNotEqual(got.json().get("state"), "RULE_STATE_ACTIVE", got)


if __name__ == "__main__":
    main()
