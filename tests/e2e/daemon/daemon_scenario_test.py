"""Daemon e2e: scenarios, timelines of rules the daemon runs (issue 22). The daemon runs in
namespace A with its observer; traffic goes A -> B and the scenarios' rules act on A's egress.

  test_three_steps_and_a_guard_to_the_report
      `lossctl scenario run FILE --out DIR` (YAML): a pause, 10 % on a numbered UDP stream
      (started when that step has), then a TCP blackhole with guard stall>500ms. The guard stops the blackhole and with it
      the scenario (STOPPED, exit 3); the TCP flow recovers and delivers every byte. The
      report (scenario.json, .txt, .png) says per step what was configured and measured:
      the UDP step's drops are exactly the datagrams the receiver missed and its rate lies
      in its interval; the blackhole's rule is STOPPED by its stall with RTO resends and an
      RTO stall on its flow. The rules carried the scenario's labels.
  test_listed_while_running_then_aborted
      The Python client runs a two-step scenario (100 % UDP for 30 s, then 30 s more):
      listed while running (the API and `lossctl scenario ls`: step 1 of 2), its rule live
      with its labels and dropping every datagram; `lossctl scenario abort` ends it at once:
      ABORTED, step 1 "aborted", step 2 never started, the rule no longer active, and
      datagrams pass again.
  test_dry_run_checks_every_step
      A dry run answers the timeline (offsets, the rules as they would run: the step's TTL,
      the scenario's guard) and creates nothing; a bad step is refused naming it (a missing
      interface, SSH without force, a step longer than 7 d); a bad file is refused by the
      client before any call (exit 2, naming the file, the step and the field).
  KilledMidScenario.test_no_loss_after_the_lease
      lossd SIGKILLed during a 100 % step: its clsact filter drops until the lease runs
      out, then every datagram passes (a dead daemon's scenario stops with it).
"""
import json
import os
import subprocess
import sys
import time
import unittest

from lab import config, traffic
from lab.clients import Result, client_popen, run_client
from lab.config import artifact, main
from lab.daemon import Daemon, DaemonTestCase, wait_until
from lab.netns import Lab, measured

PORT = 9091


def write(lab, name, text):
    path = os.path.join(lab.tempdir(), name)
    with open(path, "w") as f:
        f.write(text)
    return path


class Scenarios(DaemonTestCase):
    daemon_args = ()

    def ctl(self, *args, timeout=60):
        return run_client(self.lab, [config.LOSSCTL, "--addr", self.d.addr] + [str(a) for a in args], timeout=timeout)

    def client(self):
        if config.PYCLIENT not in sys.path:
            sys.path.insert(0, config.PYCLIENT)
        from lossd_client import Client
        c = Client(self.d.sock, stubs=config.STUBS)
        self.addCleanup(c.close)
        return c

    def test_three_steps_and_a_guard_to_the_report(self):
        lab = self.lab
        yaml = """
name: brownout-then-blackhole
steps:
  - name: pause
    duration: 500ms
  - name: light
    duration: 5s
    rules:
      - {iface: %(if)s, direction: egress, protocol: udp, dport: %(udp)d, rate: 10%%}
  - name: blackhole
    duration: 6s
    rules:
      - iface: %(if)s
        direction: egress
        protocol: tcp
        dport: %(tcp)d
        payload: only
        rate: 100%%
        guard: stall>500ms
""" % {"if": lab.IF_A, "udp": PORT, "tcp": PORT + 1}
        path = write(lab, "scenario.yaml", yaml)
        out = os.path.join(lab.tempdir(), "report")
        cmd = [config.LOSSCTL, "--addr", self.d.addr, "scenario", "run", path, "--out", out]
        t0 = time.monotonic()
        p = client_popen(lab, cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # From step 2's start (however long lossctl took to start it): a numbered UDP stream
        # of 3 s, and a paced TCP transfer of ~10 s, across the blackhole's start (5 s later)
        # and past the guard's stop.
        c = self.client()
        wait_until(lambda: any(x["scenario"]["name"] == "brownout-then-blackhole" and x["current_step"] >= 2
                               for x in c.scenarios()), 30, "step 2 to start")
        rx = traffic.UdpReceiver(lab, lab.b, lab.V4_B, PORT, 11)
        tx = lab.popen(lab.a, traffic.udp_send_cmd(lab.V4_B, PORT, 11, 6000, 2000),
                       stdout=subprocess.PIPE)
        nbytes = 12_000_000
        flow = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, PORT + 1, nbytes, 10, hold=False, acked=False)
        self.addCleanup(flow.close)
        out_text, err_text = p.communicate(timeout=90)
        r = Result(cmd, p.returncode, out_text, err_text, time.monotonic() - t0)
        sent = traffic.finish_sender(tx, 6000, 2000)
        time.sleep(0.3)
        got = rx.finish()
        fsent, fgot = flow.wait()
        self.assertEqual(r.rc, 3, r)  # stopped by a guard
        with open(os.path.join(out, "scenario.json")) as f:
            run = json.load(f)
        for f in ("scenario.txt", "scenario.png", "scenario.svg"):
            self.assertGreater(os.path.getsize(os.path.join(out, f)), 1000 if f != "scenario.txt" else 100, f)
        shot = artifact("scenario_report.png")
        with open(os.path.join(out, "scenario.png"), "rb") as src, open(shot, "wb") as dst:
            dst.write(src.read())

        self.assertEqual(run["state"], "stopped", run)
        self.assertTrue(run["settled"], run)
        self.assertIn("step 3 (blackhole): rule", run["reason"])
        self.assertIn("stall", run["reason"])
        s1, s2, s3 = run["steps"]
        self.assertEqual((s1["outcome"], s2["outcome"]), ("done", "done"), run)
        self.assertNotIn("rules", s1)
        self.assertTrue(s3["outcome"].startswith("stopped: rule "), s3["outcome"])
        # Each step ran for its duration, one after the other.
        self.assertAlmostEqual((s2["started_unix_ns"] - s1["started_unix_ns"]) / 1e9, 0.5, delta=0.1)
        self.assertAlmostEqual((s2["ended_unix_ns"] - s2["started_unix_ns"]) / 1e9, 5.0, delta=0.1)

        # The UDP step: its drops are the datagrams B missed, at a rate inside its interval.
        (rule2,), (eff2,) = s2["rules"], s2["effects"]
        self.assertEqual(rule2["spec"]["labels"], {"scenario": "brownout-then-blackhole",
                                                   "scenario-run": str(run["id"]), "scenario-step": "2"})
        self.assertEqual(rule2["spec"]["ttl_ns"], 5 * 10**9)
        dropped = rule2["counters"].get("dropped_packets", 0)
        lost = sent["sent"] - got["unique"]
        self.assertEqual(sent["sent"], 6000, sent)
        self.assertEqual(lost, dropped, "B missed %d datagrams, the rule dropped %d" % (lost, dropped))
        self.assertGreater(rule2["counters"]["matched_packets"], 2000, rule2)
        self.assertTrue(eff2["configured_within_ci"], eff2)
        self.assertLessEqual(eff2["rate_ci_low"], 0.1)
        self.assertGreaterEqual(eff2["rate_ci_high"], 0.1)

        # The blackhole: stopped by its stall; the flow then delivered every byte.
        (rule3,), (eff3,) = s3["rules"], s3["effects"]
        self.assertEqual(rule3["state"], "RULE_STATE_STOPPED", rule3)
        self.assertEqual(rule3["guard_stop"]["condition"], "stall", rule3)
        self.assertLessEqual(rule3["guard_stop"]["last_drop_mono_ns"], rule3["guard_stop"]["stopped_mono_ns"])
        self.assertEqual((fsent["bytes"], fgot["bytes"]), (nbytes, nbytes))
        self.assertGreater(eff3["retransmitted_segments"].get("rto", 0), 0, eff3)
        self.assertGreater(eff3["stalls_on_flows"].get("rto", {}).get("count", 0), 0, eff3)
        self.assertGreater(eff3["stalls_caused"].get("rto", {}).get("count", 0), 0, eff3)

        # The table on stdout, one line per step.
        lines = r.out.splitlines()
        self.assertTrue(lines[0].startswith("scenario %d (brownout-then-blackhole): stopped" % run["id"]), r.out)
        self.assertRegex(r.out, r"\n1 +pause +- +\(pause\)")
        self.assertRegex(r.out, r"\n2 +light +%d +10%% %s egress udp dport %d +%d +%d +[0-9.]+%% \[" % (
            rule2["id"], lab.IF_A, PORT, rule2["counters"]["matched_packets"], dropped))
        self.assertRegex(r.out, r"\n3 +blackhole +%d .* stall +stopped: rule" % rule3["id"])
        self.assertIn("step 3 (blackhole) started", r.err)
        # Once ended, it is listed.
        listed = [x for x in c.scenarios() if x["id"] == run["id"]]
        self.assertEqual(listed[0]["state"], "stopped")
        measured("scenario_report", state=run["state"], udp_sent=sent["sent"], udp_lost=lost, udp_dropped=dropped,
                 udp_rate=eff2["measured_rate"], udp_ci=[eff2["rate_ci_low"], eff2["rate_ci_high"]],
                 guard=rule3["reason"], rto_resends=eff3["retransmitted_segments"].get("rto", 0),
                 table=r.out, plot=shot)

    def test_listed_while_running_then_aborted(self):
        lab = self.lab
        c = self.client()
        port = PORT + 2
        run = c.run_scenario({"name": "long", "steps": [
            {"name": "drop-all", "duration": "30s",
             "rules": [{"iface": lab.IF_A, "direction": "egress", "protocol": "udp", "dport": port,
                        "rate": "100%"}]},
            {"name": "later", "duration": "30s"}]})
        self.assertEqual((run["state"], run["current_step"]), ("running", 1), run)
        rid = run["steps"][0]["rules"][0]["id"]
        listed = [x for x in c.scenarios() if x["id"] == run["id"]]
        self.assertEqual(listed[0]["state"], "running")
        ls = self.ctl("scenario", "ls")
        self.assertEqual(ls.rc, 0, ls)
        self.assertRegex(ls.out, r"\n%d +long +running +step 1 of 2 \(drop-all: " % run["id"])
        rule = c.get_rule(rid)
        self.assertEqual(rule.state, "active")
        self.assertEqual(rule.labels["scenario-run"], str(run["id"]))
        self.assertEqual(traffic.udp_count(lab, lab.a, lab.b, lab.V4_B, port, 12, 300, 3000), (300, 0))

        ab = self.ctl("-o", "json", "scenario", "abort", run["id"])  # lossctl's -o, as for every command
        self.assertEqual(ab.rc, 0, ab)
        done = json.loads(ab.out)
        self.assertEqual(done["state"], "aborted", done)
        self.assertEqual(done["reason"], "aborted during step 1 (drop-all)")
        s1, s2 = done["steps"]
        self.assertEqual(s1["outcome"], "aborted")
        self.assertLess((s1["ended_unix_ns"] - s1["started_unix_ns"]) / 1e9, 30)
        self.assertNotIn("started_unix_ns", s2)
        self.assertEqual(s1["rules"][0]["state"], "RULE_STATE_DELETED")
        self.assertEqual(s1["rules"][0]["counters"]["dropped_packets"], 300)
        self.assertEqual(c.get_rule(rid).state, "deleted")
        self.assertEqual(traffic.udp_count(lab, lab.a, lab.b, lab.V4_B, port, 13, 300, 3000), (300, 300))
        self.assertEqual(c.get_scenario(run["id"])["state"], "aborted")
        # Aborting it again answers the same report.
        self.assertEqual(c.abort_scenario(run["id"])["state"], "aborted")

    def test_dry_run_checks_every_step(self):
        lab = self.lab
        c = self.client()
        doc = {"name": "plan", "guard": "stall>2s", "steps": [
            {"name": "a", "duration": "2s",
             "rules": [{"iface": lab.IF_A, "direction": "egress", "protocol": "udp", "dport": 8080, "rate": "1%"}]},
            {"name": "b", "duration": "5s",
             "rules": [{"iface": lab.IF_A, "direction": "egress", "protocol": "udp", "dport": 8080, "rate": "5%",
                        "ttl": "1s", "guard": "rtos>5/2s"}]}]}
        plan = c.run_scenario(doc, dry_run=True)
        self.assertEqual((plan["state"], plan["id"]), ("planned", 0), plan)
        a, b = plan["steps"]
        self.assertEqual((a["offset_ns"] if "offset_ns" in a else 0, b["offset_ns"]), (0, 2 * 10**9))
        ra, rb = a["rules"][0]["spec"], b["rules"][0]["spec"]
        self.assertEqual((ra["ttl_ns"], rb["ttl_ns"]), (2 * 10**9, 10**9))  # the step's, or its own if shorter
        self.assertEqual(ra["guard"], {"stall_ns": 2 * 10**9})  # the scenario's
        self.assertEqual(rb["guard"], {"rtos": 5, "rtos_window_ns": 2 * 10**9})  # its own
        self.assertEqual(c.list_rules(), [])
        path = write(lab, "plan.json", json.dumps(doc))
        r = self.ctl("scenario", "run", path, "--dry-run")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("scenario plan: planned, 2 steps, 7s in all (nothing changed)", r.out)
        self.assertRegex(r.out, r"\+2s +step 2 b +5s +5%% %s egress udp dport 8080 guard rtos>5/2s\n" % lab.IF_A)
        self.assertEqual(c.list_rules(), [])

        def refused(steps, code, *needles):
            bad = dict(doc, steps=steps)
            from lossd_client import LossdError
            with self.assertRaises(LossdError) as cm:
                c.run_scenario(bad, dry_run=True)
            self.assertEqual(cm.exception.code, code, cm.exception)
            for n in needles:
                self.assertIn(n, cm.exception.message)
            # And not run either.
            with self.assertRaises(LossdError):
                c.run_scenario(bad)
            self.assertEqual(c.list_rules(), [])
            return cm.exception.message
        good = doc["steps"][0]
        refused([good, {"name": "bad", "duration": "1s", "rules": [{"iface": "nosuch0", "rate": "1%"}]}],
                "NOT_FOUND", "step 2 (bad): rule 1: ", "nosuch0")
        # An SSH listener in A: a lossy rule on port 22 there needs force.
        ssh = lab.popen(lab.a, [sys.executable, "-c", "import socket, time; s = socket.socket(); "
                                "s.bind(('0.0.0.0', 22)); s.listen(); print('READY', flush=True); time.sleep(120)"],
                        stdout=subprocess.PIPE, text=True)
        self.addCleanup(ssh.kill)
        self.assertEqual(ssh.stdout.readline().strip(), "READY")
        refused([good, good, {"name": "ssh", "duration": "1s",
                              "rules": [{"iface": lab.IF_A, "protocol": "tcp", "dport": 22, "rate": "1%"}]}],
                "FAILED_PRECONDITION", "step 3 (ssh): rule 1: ", "force")
        refused([good, {"name": "long", "duration": "8d"}], "INVALID_ARGUMENT", "step 2 (long): duration")
        # The client refuses a bad file before any call: exit 2 naming the place.
        bad = write(lab, "bad.yaml", "name: x\nsteps:\n  - duration: 1s\n    rules:\n      - {iface: %s, rat: 1%%}\n"
                    % lab.IF_A)
        r = self.ctl("scenario", "run", bad, "--dry-run")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("bad.yaml: step 1: rule 1: ", r.err)
        self.assertIn("rat", r.err)


class KilledMidScenario(unittest.TestCase):
    """Its own lab and daemon, killed."""

    def setUp(self):
        self.lab = Lab()
        self.addCleanup(self.lab.close)

    def test_no_loss_after_the_lease(self):
        lab = self.lab
        d = Daemon(lab, lab.a, ["--lease", "2s"])
        if config.PYCLIENT not in sys.path:
            sys.path.insert(0, config.PYCLIENT)
        from lossd_client import Client
        port = PORT + 3
        with Client(d.sock, stubs=config.STUBS) as c:
            run = c.run_scenario({"name": "killed", "steps": [
                {"duration": "60s", "rules": [{"iface": lab.IF_A, "direction": "egress", "protocol": "udp",
                                                "dport": port, "rate": "100%"}]}]})
        self.assertEqual(run["state"], "running")
        self.assertEqual(traffic.udp_count(lab, lab.a, lab.b, lab.V4_B, port, 14, 200, 2000), (200, 0))
        d.kill9()
        killed = time.monotonic()
        time.sleep(max(0.0, 2.5 - (time.monotonic() - killed)))
        after = traffic.udp_count(lab, lab.a, lab.b, lab.V4_B, port, 15, 500, 2000)
        measured("scenario_killed", received_after_lease=after[1])
        self.assertEqual(after, (500, 500), "a dead daemon's scenario still drops after its lease")


if __name__ == "__main__":
    main()
