"""The example scripts, run as /usr/bin/python3 would run them, against FakeLossd."""

import json
import os
import signal
import subprocess
import tempfile
import time
import unittest

import support
from fake_lossd import FakeLossd

INJECT = os.path.join(support.EXAMPLES, "inject.py")
TABLE = os.path.join(support.EXAMPLES, "effect_table.py")


def run(script, *args, env, timeout=30):
    return subprocess.run([support.PYTHON, script, *args], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)


class ExamplesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stubs = support.stubs()
        cls.env = support.child_env(cls.stubs.root)

    def setUp(self):
        self.fake = FakeLossd(self.stubs, traffic=True).start()
        self.sock = self.fake.socket_path

    def tearDown(self):
        self.fake.stop()

    def test_inject_runs_prints_and_cleans_up(self):
        r = run(INJECT, "--socket", self.sock, "--iface", "veth0", "--port", "8080", "--rate", "5%",
                "--duration", "1.2s", "--interval", "500ms", env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        create = self.fake.calls("CreateRule")[0].spec
        self.assertEqual((create.match.dport.lo, create.match.protocol), (8080, "tcp"))
        self.assertEqual(create.loss.bernoulli.rate, 0.05)
        self.assertEqual(create.ttl_ns, (1200 + 10000) * 10**6)     # duration + grace
        self.assertEqual(create.labels["client"], "inject.py")
        self.assertEqual(self.fake.deleted, [1])
        self.assertEqual(self.fake.rules, {})
        watch = self.fake.calls("WatchRetransmits")[0]
        self.assertEqual(watch.allow[0].rule_id, 1)
        out = r.stdout
        self.assertIn("rule 1: 5% of veth0 ingress [tcp dport 8080]", out)
        self.assertIn("rule 1 deleted", out)
        self.assertIn("final effect of rule 1", out)
        self.assertIn("configured rate  5%", out)
        self.assertRegex(out, r"\n\s+0\.5s\s+\d+  (fast|-)")       # a line per interval
        self.assertRegex(out, r"dropped\s+\d+ of \d+ packets \(\d+ of \d+ segments\)")
        self.assertRegex(out, r"retransmitted\s+\d+ segments")
        self.assertIn("[lossd, just before deletion]", out)     # the fake forgets deleted rules

    def test_inject_uses_the_effect_of_a_deleted_rule_when_lossd_keeps_it(self):
        self.fake.keep_effects = True
        r = run(INJECT, "--socket", self.sock, "--iface", "veth0", "--port", "8080", "--rate", "5%",
                "--duration", "500ms", env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(self.fake.calls("GetRuleEffect")), 2)      # before and after deleting
        self.assertIn("final effect of rule 1", r.stdout)
        self.assertNotIn("just before deletion", r.stdout)

    def test_inject_from_service_and_aggregates(self):
        r = run(INJECT, "--socket", self.sock, "--iface", "veth0", "--addr", "192.0.2.1",
                "--port", "8000-8100", "--from-service", "--dir", "egress", "--proto", "any",
                "--source", "aggregates", "--interval", "300ms", "--duration", "700ms", env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        m = self.fake.calls("CreateRule")[0].spec
        self.assertEqual((m.match.src, m.match.sport.lo, m.match.sport.hi, m.match.protocol),
                         ("192.0.2.1", 8000, 8100, ""))
        self.assertEqual(m.direction, self.stubs.pb2.DIRECTION_EGRESS)
        self.assertEqual(self.fake.calls("WatchAggregates")[0].window_ns, 3 * 10**8)
        self.assertIn("all flows", r.stdout)
        self.assertEqual(self.fake.rules, {})

    def _interrupt(self, sig):
        p = subprocess.Popen([support.PYTHON, INJECT, "--socket", self.sock, "--iface", "veth0",
                              "--port", "8080", "--rate", "1%", "--duration", "60s"],
                             env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            end = time.monotonic() + 10
            while not self.fake.calls("WatchRetransmits") and time.monotonic() < end:
                time.sleep(0.05)
            self.assertTrue(self.fake.rules, "no rule created")
            time.sleep(0.3)
            p.send_signal(sig)
            out, err = p.communicate(timeout=15)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, 128 + sig, err)
        self.assertEqual(self.fake.rules, {}, "rule left behind")
        self.assertEqual(self.fake.deleted, [1])
        self.assertIn("final effect of rule 1", out)

    def test_inject_sigterm_cleans_up(self):
        self._interrupt(signal.SIGTERM)

    def test_inject_ctrl_c_cleans_up(self):
        self._interrupt(signal.SIGINT)

    def test_inject_refused_rule(self):
        r = run(INJECT, "--socket", self.sock, "--iface", "missing0", "--port", "1", env=self.env)
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot create the rule: NOT_FOUND: interface missing0", r.stderr)

    def test_inject_bad_arguments(self):
        for args, msg in ((["--iface", "e", "--port", "1", "--rate", "5"], "write '5%' for percent"),
                          (["--iface", "e"], "name the service"),
                          (["--port", "1"], "give --iface"),
                          (["--iface", "e", "--port", "1", "--duration", "soon"], "--duration")):
            with self.subTest(args=args):
                r = run(INJECT, "--socket", self.sock, *args, env=self.env)
                self.assertEqual(r.returncode, 2)
                self.assertIn(msg, r.stderr)
        self.assertEqual(self.fake.calls("CreateRule"), [])

    def test_effect_table(self):
        from lossd_client import Client
        self.fake.traffic = False
        with Client(self.fake.target) as c:
            a = c.add_rule(iface="veth0", dport=8080, protocol="tcp", rate="1%")
            b = c.add_rule(iface="veth1", sport=9090, rate="0.5%", labels="team=b")
        self.fake.set_counters(a.id, 100000, 1000, {"fast": 950, "rto": 50}, flows=2)
        self.fake.set_counters(b.id, 0, 0, flows=0)
        r = run(TABLE, "--socket", self.sock, env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertRegex(lines[0], r"^ID\s+STATE\s+TARGET.*CONFIGURED\s+MEASURED\s+99\.9% CI\s+IN CI\s+"
                                   r"DROPPED SEGS\s+MATCHED SEGS\s+FLOWS\s+FAST\s+RTO\s+RETRANS$")
        self.assertRegex(lines[1], r"^1\s+active\s+veth0 ingress\s+tcp dport 8080\s+1%\s+1%\s+1%\s+"
                                   r"\S+ \.\. \S+\s+yes\s+1000\s+100000\s+2\s+950\s+50\s+1000$")
        self.assertRegex(lines[2], r"^2\s+active\s+veth1 ingress\s+sport 9090\s+0\.5%\s+0\.5%\s+-\s+-\s+-\s+0\s+0\s+0\s+0\s+0\s+0$")
        r = run(TABLE, "--socket", self.sock, "--json", "--labels", "team=b", env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        d = json.loads(r.stdout)
        self.assertEqual([x["id"] for x in d], [2])
        self.assertEqual(d[0]["configured_rate"], 0.005)
        r = run(TABLE, "--socket", self.sock, "--rule", "7", env=self.env)
        self.assertEqual(r.returncode, 1)
        self.assertIn("rule 7: no such rule", r.stderr)

    def test_effect_table_no_rules(self):
        r = run(TABLE, "--socket", self.sock, env=self.env)
        self.assertEqual((r.returncode, r.stdout), (0, "no rules\n"))


class UnreachableExamplesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.env = support.child_env(support.stubs().root)

    def test_unreachable(self):
        with tempfile.TemporaryDirectory() as d:
            sock = os.path.join(d, "lossd.sock")
            for script, extra in ((INJECT, ["--iface", "e", "--port", "1"]), (TABLE, [])):
                with self.subTest(script=os.path.basename(script)):
                    r = run(script, "--socket", sock, *extra, env=self.env)
                    self.assertEqual(r.returncode, 1)
                    self.assertIn("lossd is not reachable at %s: no such socket" % sock, r.stderr)
                    self.assertNotIn("Traceback", r.stderr)

    def test_stubs_missing(self):
        env = dict(self.env)
        env["LOSSD_PYTHON_STUBS"] = "/nonexistent"
        r = run(TABLE, env=env)
        self.assertEqual(r.returncode, 1)
        self.assertIn("LOSSD_PYTHON_STUBS='/nonexistent' is not a directory", r.stderr)
        self.assertNotIn("Traceback", r.stderr)


if __name__ == "__main__":
    unittest.main()
