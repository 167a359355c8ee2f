"""Client e2e 4: the Python examples (client/python/examples) against the real daemon.

One daemon in the sender's namespace A; paced TCP traffic A -> B port 5201 (cflow.py); the
scripts run with Debian's /usr/bin/python3, PYTHONPATH=client/python, --socket SOCK and
--stubs <build>/python. lossctl is the independent witness.

  test_1_inject_runs_and_removes_its_rule
      inject.py --iface e2ea --dir egress --addr 192.0.2.2 --port 5201 --rate 2% --duration
      4s under a flow: while it runs `lossctl rule ls` shows its rule (labels
      client=inject.py, TTL = duration + 10 s grace, egress clsact); it prints a line per
      second (at least one with drops), deletes the rule, prints the final effect, exits 0;
      afterwards `lossctl rule ls` shows no rule.
      Its final effect: the measured rate over packets and the 99.9 % interval, as the
      deleted rule's GetRuleEffect gives them (lossctl -o json rule effect).
  test_4_inject_names_the_fix_when_nothing_matched
      inject.py with --dir ingress for traffic A sends (a daemon with --unmatched-hint 1s):
      "dropped 0 of 0 packets" and, instead of an interval, the daemon's hint naming the fix
      (--dir egress).
  test_2_inject_sigterm_midrun
      the same with --duration 60s, SIGTERM after two per-second lines: it deletes the rule
      and exits 143 within seconds; `lossctl rule ls` shows no rule.
  test_3_effect_table_matches_lossctl
      two rules made with lossctl (1 % with traffic, 5 % on an idle port); after the flow,
      effect_table.py (table and --json) prints one row per rule whose numbers (dropped and
      matched segments, flows, retransmitted segments by type, rates) are those of
      `lossctl -o json rule effect ID`. subTest: the rule's retransmitted segments == the
      namespace's TcpRetransSegs delta (fails now and then: a retransmission lossd saw no event
      for, see lossctl_observe_test / slow_subscriber_test).
"""
import json
import re
import signal
import subprocess
import threading
import time

from lab import traffic
from lab.config import main
from lab.netns import measured
from lab.daemon import wait_until
from lossd_client import format_rate  # client/python (stdlib only): the script's rounding
from lab.clients import (ClientTestCase, client_popen, counters, retrans_by_type, run_client, settled_effect,
                         table_rows, u64)


PORT = 5201
LINE = re.compile(r"^\s*(\d+\.\d)s\s+(\d+|\?)\s{2}(.*)$")


class Lines:
    """A child's stdout, line by line, collected by a thread."""

    def __init__(self, p):
        self.p = p
        self.lines = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for l in self.p.stdout:
            self.lines.append(l.rstrip("\n"))

    def ticks(self):
        return [LINE.match(l) for l in list(self.lines) if LINE.match(l)]


class PythonExamples(ClientTestCase):
    daemon_args = ("--unmatched-hint", "1s")  # test_4: the hint within its 3 s

    def rules(self):
        return self.d.ctlj("rule", "ls").get("rules", [])

    def inject(self, duration):
        d, lab = self.d, self.lab
        cmd = d.example_cmd("inject.py", "--iface", lab.IF_A, "--dir", "egress", "--addr", lab.V4_B,
                            "--port", PORT, "--rate", "2%", "--duration", duration)
        p = client_popen(lab, cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
        self.addCleanup(lambda: p.poll() is None and (p.kill(), p.wait()))
        return p, Lines(p)

    def check_rule_while_running(self, out, duration_s):
        # (labelled: lossd lists a rule before its labels are recorded, a race of its own
        # test: lossctl_rules_test.py test_3)
        rules = wait_until(lambda: [r for r in self.rules() if r["spec"].get("labels")], 10,
                           "inject.py's rule, with its labels, in lossctl rule ls")
        self.assertEqual(len(rules), 1, rules)
        r = rules[0]
        self.assertEqual(r["spec"]["labels"].get("client"), "inject.py", r)
        self.assertEqual(r["spec"]["direction"], "DIRECTION_EGRESS")
        self.assertIn(r["spec"]["match"]["dst"], (self.lab.V4_B, self.lab.V4_B + "/32"))
        self.assertEqual(r["spec"]["match"]["dport"], {"lo": PORT, "hi": PORT})
        self.assertEqual(r["spec"]["loss"]["bernoulli"]["rate"], 0.02)
        self.assertEqual(u64(r["spec"]["ttl_ns"]), (duration_s + 10) * 10**9)
        self.assertEqual(r["attachments"], ["clsact egress on %s" % self.lab.IF_A])
        return r

    def inject_under_flow(self, nbytes, duration_s):
        """A paced TCP flow B -> A, and inject.py for duration_s on it; its rule as listed."""
        lab = self.lab
        flow = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, PORT, nbytes, 100)
        self.addCleanup(flow.close)
        p, out = self.inject("%ds" % duration_s)
        return flow, p, out, self.check_rule_while_running(out, duration_s)

    # ------------------------------------------------------------------------------------
    def test_1_inject_runs_and_removes_its_rule(self):
        lab = self.lab
        flow, p, out, rule = self.inject_under_flow(100e6, 4)  # ~8 s of traffic
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            self.fail("inject.py did not end: %s" % "\n".join(out.lines))
        out.t.join(5)
        err = p.stderr.read()
        text = "\n".join(out.lines)
        left = self.rules()
        flow.wait()
        ticks = out.ticks()
        dropped = [int(m.group(2)) for m in ticks if m.group(2) != "?"]
        fin = re.search(r"dropped\s+\d+ of \d+ packets \((\d+) of (\d+) segments\)", text)
        measured("inject_py", exit=p.returncode, per_second=[(m.group(1), m.group(2), m.group(3)) for m in ticks],
                 final=fin.groups() if fin else None,
                 final_block=[l for l in out.lines if l.startswith("  ")])
        self.assertEqual(p.returncode, 0, text + err)
        self.assertRegex(out.lines[0], r"^rule %d: 2%% of %s egress \[.*\] \(packets to the service\) for 4s; "
                         r"attached: clsact egress on %s$" % (rule["id"], lab.IF_A, lab.IF_A), text)
        self.assertGreaterEqual(len(ticks), 3, text)
        self.assertTrue(any(x > 0 for x in dropped), text)
        self.assertIn("rule %d deleted" % rule["id"], text)
        self.assertIn("final effect of rule %d" % rule["id"], text)
        self.assertTrue(fin, text)
        self.assertGreaterEqual(int(fin.group(1)), sum(dropped), text)
        self.assertEqual(left, [], "inject.py left its rule behind: %s" % left)
        # The final rate and interval: over packets (skbs, the unit the decision is made on),
        # as the daemon's GetRuleEffect of the deleted rule gives them (lossctl, C++ maths).
        rate = re.search(r"measured rate +(\S+)  \(99\.9% CI (\S+) \.\. (\S+): configured (inside|OUTSIDE)\)", text)
        pk = re.search(r"dropped\s+(\d+) of (\d+) packets", text)
        self.assertTrue(rate and pk, text)
        eff = self.d.ctlj("rule", "effect", str(rule["id"]))
        k, n = int(pk.group(1)), int(pk.group(2))
        self.assertEqual((k, n), (u64(eff["counters"]["dropped_packets"]), u64(eff["counters"]["matched_packets"])), eff)
        self.assertEqual(rate.groups(), (format_rate(k / n), format_rate(eff["rate_ci_low"]),
                                         format_rate(eff["rate_ci_high"]),
                                         "inside" if eff.get("configured_within_ci") else "OUTSIDE"), (text, eff))

    def test_4_inject_names_the_fix_when_nothing_matched(self):
        # The most common mistake: the wrong direction (what A sends to B leaves by egress).
        d, lab = self.d, self.lab
        flow = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, PORT, 20e6, 100)
        self.addCleanup(flow.close)
        cmd = d.example_cmd("inject.py", "--iface", lab.IF_A, "--dir", "ingress", "--addr", lab.V4_B,
                            "--port", PORT, "--rate", "2%", "--duration", "3s")
        p = client_popen(lab, cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        self.addCleanup(lambda: p.poll() is None and (p.kill(), p.wait()))
        out, err = p.communicate(timeout=30)
        flow.wait()
        measured("inject_py_unmatched", final_block=[l for l in out.splitlines() if l.startswith("  ")])
        self.assertEqual(p.returncode, 0, out + err)
        self.assertRegex(out, r"dropped +0 of 0 packets", out)
        self.assertRegex(out, r"measured rate +- \(no packet matched: matched no packet in \d+s: it sees what "
                              r"arrives on %s; what this host sends leaves by egress \(--dir egress\)" % lab.IF_A, out)
        self.assertNotIn("CI", out)  # no interval without a trial

    def test_2_inject_sigterm_midrun(self):
        flow, p, out, rule = self.inject_under_flow(60e6, 60)  # ~5 s of traffic
        wait_until(lambda: len(out.ticks()) >= 2 or p.poll() is not None, 15, "two per-second lines")
        self.assertIsNone(p.poll(), "\n".join(out.lines))
        self.assertEqual(self.d.ctl("rule", "get", rule["id"]).rc, 0)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            self.fail("inject.py did not end on SIGTERM: %s" % "\n".join(out.lines))
        secs = time.monotonic() - t0
        out.t.join(5)
        text = "\n".join(out.lines)
        left = self.rules()
        flow.wait()
        measured("inject_py_sigterm", exit=p.returncode, secs_to_exit=round(secs, 3),
                 per_second_lines=len(out.ticks()))
        self.assertEqual(p.returncode, 128 + signal.SIGTERM, text)
        self.assertLess(secs, 10, text)
        self.assertIn("rule %d deleted" % rule["id"], text)
        self.assertEqual(left, [], "inject.py left its rule behind after SIGTERM: %s" % left)
        # Deleted: out of the kernel, kept readable (not listed) until forgotten.
        self.assertEqual(self.d.ctlj("rule", "get", rule["id"])["state"], "RULE_STATE_DELETED")

    # ------------------------------------------------------------------------------------
    def test_3_effect_table_matches_lossctl(self):
        d, lab = self.d, self.lab
        r1 = d.add_rule("--iface", lab.IF_A, "--dir", "egress", "--proto", "tcp", "--dport", PORT,
                        "--payload", "only", "--rate", "1%", "--label", "t=fx")["id"]
        r2 = d.add_rule("--iface", lab.IF_A, "--dir", "egress", "--proto", "tcp", "--dport", PORT + 7,
                        "--rate", "5%", "--label", "t=fx")["id"]
        c0 = lab.counters(lab.a)
        flow = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, PORT, 40e6, 300)
        self.addCleanup(flow.close)
        flow.wait()
        retrans = (lab.counters(lab.a) - c0)["Tcp.RetransSegs"]
        settled_effect(d, r1, want=retrans)
        # The effects, but the unmatched rule's hint (it names the rule's age, in seconds)
        effects = lambda: {r: {k: v for k, v in d.effect(r).items() if k != "hint"} for r in (r1, r2)}
        want = effects()

        rt = run_client(lab, d.example_cmd("effect_table.py"))
        rj = run_client(lab, d.example_cmd("effect_table.py", "--json"))
        # unchanged meanwhile
        self.assertEqual(effects(), want)
        measured("effect_table_py", lossctl={k: {"counters": counters(v), "retrans": retrans_by_type(v),
                                                 "flows": v.get("flows")} for k, v in want.items()},
                 table=rt.out)
        self.assertEqual(rt.rc, 0, rt)
        self.assertEqual(rj.rc, 0, rj)
        self.assertGreater(counters(want[r1])["dropped_segments"], 0)

        # --json: one object per rule, the same numbers
        js = {x["id"]: x for x in json.loads(rj.out)}
        self.assertEqual(sorted(js), sorted([r1, r2]), rj)
        for rid, e in want.items():
            j = js[rid]
            self.assertEqual(j["counters"], counters(e), rid)
            self.assertEqual({k: v for k, v in j["retransmitted_segments"].items() if v},
                             {k: v for k, v in retrans_by_type(e).items() if v}, rid)
            self.assertEqual(j["flows"], u64(e.get("flows")), rid)
            self.assertEqual(j["configured_rate"], e["configured_rate"], rid)
            self.assertEqual(j["measured_rate"], e["measured_rate"], rid)
            self.assertEqual(j["rate_ci"], [e["rate_ci_low"], e["rate_ci_high"]], rid)
            self.assertEqual(j["configured_within_ci"], e["configured_within_ci"], rid)
            self.assertEqual(j["labels"], {"t": "fx"})

        # table: one row per rule
        head, rows = table_rows(rt.out)
        self.assertEqual(head[:2], ["ID", "STATE"], rt)
        rows = {int(r["ID"]): r for r in rows}
        self.assertEqual(sorted(rows), sorted([r1, r2]), rt)
        for rid, e in want.items():
            row, c = rows[rid], counters(e)
            self.assertEqual(int(row["DROPPED SEGS"]), c["dropped_segments"], rt)
            self.assertEqual(int(row["MATCHED SEGS"]), c["matched_segments"], rt)
            self.assertEqual(int(row["FLOWS"]), u64(e.get("flows")), rt)
            self.assertEqual(int(row["RETRANS"]), sum(retrans_by_type(e).values()), rt)
            for t, n in retrans_by_type(e).items():
                if t.upper() in row:
                    self.assertEqual(int(row[t.upper()]), n, (t, rt))
                else:
                    self.assertEqual(n, 0, "no %s column in\n%s" % (t.upper(), rt.out))
            self.assertEqual(row["STATE"], "active")
        self.assertEqual(rows[r1]["CONFIGURED"], "1%")
        self.assertEqual(rows[r2]["CONFIGURED"], "5%")
        self.assertEqual(rows[r2]["MEASURED"], "-")  # nothing matched port 5208
        with self.subTest("daemon bug (intermittent): a retransmission with no event, missing from the "
                          "rule's effect"):
            self.assertEqual(int(rows[r1]["RETRANS"]), retrans,
                             "effect_table/lossctl: %s retransmitted segments; the namespace's "
                             "TcpRetransSegs delta: %d" % (rows[r1]["RETRANS"], retrans))
        d.ctl_ok("rule", "clear")


if __name__ == "__main__":
    main()
