"""Configuration file, start-up rules and logs (issue 20, "Configuration and logs"): a real
lossd in a lab namespace, through gRPC on its Unix socket and its HTTP listener.

  test_config_file_and_command_line
      --config FILE sets http (a loopback port the kernel picks), lease 9s, max-ttl 2h and
      max-rules 7; --max-rules 5 on the command line wins: GetCapabilities says max_rules 5
      and max_ttl 2 h, GetHealth's lease_remaining is above the default 3 s lease, and the
      HTTP listener of the file answers /healthz. An unknown key, and a named file that does
      not exist, are exit 2 with a message naming the key / the file.
  test_startup_rules
      --rules FILE (a JSON array, the shape `lossctl rule add --file` takes): every rule is
      listed, with its labels, and each creation is logged
  test_bad_rules_file
      a file whose second rule has a rate of 200 %, and one whose rule names an interface
      that does not exist (checked when created): exit 2 before serving (no ready line),
      stderr naming the file, the rule's index and the reason
  test_refusal_logged_with_reason_and_caller
      a refused CreateRule: a warn line with the method, INVALID_ARGUMENT, the full reason
      and the caller's uid and pid (SO_PEERCRED: this process); 200 refusals in a burst
      write at most ~30 lines, and a later one says how many were suppressed
  test_json_log_format
      --log-format json: every stderr line is one JSON object with an RFC 3339 UTC time,
      level and msg; the refusal's line has its fields (method, code, reason, uid, pid)
"""
import json
import os
import re
import time
import unittest

from lab import daemon, web
from lab.config import main
from lab.daemon import Daemon, rule_spec, wait_until
from lab.lossd import Lossd
from lab.netns import Lab

RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")


class DaemonConfig(unittest.TestCase):
    def setUp(self):
        self.lab = Lab()
        self.daemons = []

    def tearDown(self):
        try:
            for d in self.daemons:
                if d.proc.poll() is None:
                    d.term()
        finally:
            self.lab.close()

    def write(self, name, text):
        path = os.path.join(self.lab.tempdir(), name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def start(self, args, **kw):
        kw.setdefault("http", None)
        d = Daemon(self.lab, self.lab.a, args, **kw)
        self.daemons.append(d)
        return d

    def run_to_exit(self, args, timeout=60):
        """lossd (daemon mode) that must exit: its code and stderr; it must print no ready line."""
        p = Lossd(self.lab, self.lab.a, ["--socket", os.path.join(self.lab.tempdir(), "s.sock"),
                                         "--http", ""] + list(args))
        rc = p.wait_exit(timeout)
        self.assertFalse(any(e.get("event") == "ready" for e in p.events),
                         "it served before exiting: %s" % p.events)
        return rc, p.stderr()

    def test_config_file_and_command_line(self):
        conf = self.write("lossd.conf", "\n".join([
            "# lossd, from a file",
            'http = "127.0.0.1:0"',
            'lease = "9s"',
            'max-ttl = "2h"',
            "max-rules = 7",
            ""]))
        d = self.start(["--config", conf, "--max-rules", "5"])
        caps = d.sys.GetCapabilities(daemon.pb.GetCapabilitiesRequest(), timeout=10)
        self.assertEqual(caps.max_rules, 5, "the command line wins over the file")
        self.assertEqual(caps.max_ttl_ns, 2 * 3600 * 10**9, "max-ttl from the file")
        lease = d.health().lease_remaining_ns
        self.assertGreater(lease, 3 * 10**9, "lease 9s from the file (renewed every 3 s)")
        self.assertLessEqual(lease, 9 * 10**9)
        self.assertTrue(d.http_port, "http from the file: %s" % d.ready)
        r = web.request(self.lab.a, "127.0.0.1", d.http_port, "/healthz")
        self.assertEqual(r.status, 200)
        print("MEASURED config_file %s" % json.dumps({"max_rules": caps.max_rules,
                                                     "lease_remaining_ns": lease,
                                                     "http_port": d.http_port}))
        self.assertEqual(d.term(), 0)

        bad = self.write("bad.conf", 'lease = "9s"\nhttp-port = 80\n')
        rc, err = self.run_to_exit(["--config", bad])
        self.assertEqual(rc, 2, err)
        self.assertIn("unknown key 'http-port'", err)
        self.assertIn(bad, err)
        missing = os.path.join(self.lab.tempdir(), "none.conf")
        rc, err = self.run_to_exit(["--config", missing])
        self.assertEqual(rc, 2, err)
        self.assertIn("--config %s: No such file or directory" % missing, err)

    def test_startup_rules(self):
        rules = self.write("rules.json", json.dumps([
            {"iface": self.lab.IF_A, "dport": 5201, "rate": "1%", "ttl": "1h",
             "labels": {"from": "rules-file"}},
            {"iface": self.lab.IF_A, "dir": "egress", "proto": "udp", "every": 10,
             "labels": {"from": "rules-file", "n": "2"}},
        ]))
        d = self.start(["--rules", rules])
        listed = d.inj.ListRules(daemon.pb.ListRulesRequest(), timeout=10).rules
        self.assertEqual(len(listed), 2, listed)
        self.assertEqual({r.spec.labels["from"] for r in listed}, {"rules-file"})
        self.assertEqual(sorted(r.spec.match.dport.lo for r in listed), [0, 5201])
        self.assertEqual([r.state for r in listed], [daemon.pb.RULE_STATE_ACTIVE] * 2)
        err = d.stderr()
        for i in (1, 2):
            self.assertRegex(err, r"--rules %s: rule %d created: rule \d+" % (re.escape(rules), i))
        self.assertEqual(d.term(), 0)

    def test_bad_rules_file(self):
        rules = self.write("bad.json", "\n".join([
            json.dumps({"iface": self.lab.IF_A, "rate": "1%"}),
            json.dumps({"iface": self.lab.IF_A, "rate": "200%"}),
            ""]))
        rc, err = self.run_to_exit(["--rules", rules])
        self.assertEqual(rc, 2, err)
        self.assertIn("--rules %s: rule 2" % rules, err)
        self.assertIn("rate", err)
        self.assertIn("200%", err)
        # Valid JSON and a valid rule, refused when created: no such interface.
        rules = self.write("nosuch.json", json.dumps([
            {"iface": self.lab.IF_A, "rate": "1%"},
            {"iface": "nosuch0", "rate": "1%"}]))
        rc, err = self.run_to_exit(["--rules", rules])
        self.assertEqual(rc, 2, err)
        self.assertRegex(err, r"--rules %s: rule 2 refused: NOT_FOUND.*nosuch0" % re.escape(rules))

    def refuse(self, d, n=1):
        for _ in range(n):
            with self.assertRaises(daemon.grpc.RpcError) as cm:
                d.inj.CreateRule(daemon.pb.CreateRuleRequest(
                    spec=rule_spec(interface=self.lab.IF_A, rate=2.0)), timeout=10)
            self.assertEqual(cm.exception.code(), daemon.grpc.StatusCode.INVALID_ARGUMENT)
        return cm.exception.details()

    def test_refusal_logged_with_reason_and_caller(self):
        d = self.start([])
        reason = self.refuse(d)
        me = "uid=%d gid=%d pid=%d (unix socket)" % (os.getuid(), os.getgid(), os.getpid())
        line = wait_until(lambda: next((l for l in d.stderr().splitlines() if "refused" in l
                                        and "CreateRule" in l), None), 10, "the refusal's line")
        self.assertIn(" warn ", line)
        self.assertIn("/lossd.v1.Injector/CreateRule by %s refused: INVALID_ARGUMENT: %s" % (me, reason),
                      line)
        time.sleep(2.5)  # the burst refilled
        before = len([l for l in d.stderr().splitlines() if "refused:" in l])
        self.refuse(d, 200)
        time.sleep(0.3)
        burst = len([l for l in d.stderr().splitlines() if "refused:" in l]) - before
        self.assertLessEqual(burst, 30, "200 refusals in a burst, lines written")
        self.assertGreaterEqual(burst, 10)
        time.sleep(1.0)
        self.refuse(d)
        # Every refusal from the burst on is either a line or counted in a later line's
        # "(N refusals suppressed before this one)". A burst that outlasts the refill also
        # writes lines carrying counts of their own (the last refusal's line then may carry
        # none: CI failure), so all of them are summed, until the last refusal's line is in.
        def suppressed(ls):
            return [int(m.group(1)) for l in ls
                    for m in [re.search(r"\((\d+) refusals suppressed before this one\)", l)] if m]

        def logged():
            ls = [l for l in d.stderr().splitlines() if "refused:" in l][before:]
            return ls if len(ls) > burst and len(ls) + sum(suppressed(ls)) >= 201 else None
        try:
            lines = wait_until(logged, 10, "every refusal logged or counted")
        except AssertionError:
            lines = [l for l in d.stderr().splitlines() if "refused:" in l][before:]
        counts = suppressed(lines)
        print("MEASURED refusal_log %s" % json.dumps({"refusals": 201, "lines": len(lines), "burst_lines": burst,
                                                     "suppressed": counts}))
        self.assertEqual(len(lines) + sum(counts), 201, lines[-3:])
        self.assertEqual(d.term(), 0)

    def test_json_log_format(self):
        d = self.start(["--log-format", "json"])
        self.refuse(d)
        wait_until(lambda: '"refused"' in d.stderr(), 10, "the refusal's line")
        self.assertEqual(d.term(), 0)
        lines = d.stderr().splitlines()
        self.assertGreater(len(lines), 3, lines)
        refusals = []
        for l in lines:
            obj = json.loads(l)  # every line
            self.assertIsInstance(obj, dict, l)
            self.assertRegex(obj["time"], RFC3339, l)
            self.assertIn(obj["level"], ("debug", "info", "warn", "error"), l)
            self.assertIsInstance(obj["msg"], str, l)
            if obj.get("event") == "refused":
                refusals.append(obj)
        self.assertEqual(len(refusals), 1, refusals)
        r = refusals[0]
        self.assertEqual(r["level"], "warn")
        self.assertEqual(r["method"], "/lossd.v1.Injector/CreateRule")
        self.assertEqual(r["code"], "INVALID_ARGUMENT")
        self.assertIn("rate", r["reason"])
        self.assertEqual((r["uid"], r["pid"]), (os.getuid(), os.getpid()))
        print("MEASURED json_log %s" % json.dumps({"lines": len(lines)}))


if __name__ == "__main__":
    main()
