"""Daemon e2e 2: bad input gets the right gRPC code and a message that names the field, and
the daemon stays alive (GetHealth after every case).

One daemon in namespace A started with --max-rules 5 --max-ttl 1h (so every valid rule
carries a ttl of at most 1 h).

  test_invalid_match           bad CIDRs, ports, protocol, family, TCP flags, enum values
  test_invalid_loss_model      rate > 100 %, negative, NaN, bad Gilbert-Elliott, no model at all
  test_unknown_rule_id         Get/Delete/Update/GetRuleEffect/WatchRuleCounters: NOT_FOUND
  test_control_characters_in_names_and_labels   a NUL in an interface name, an escape in a
                               label, either in ListRules' selector: INVALID_ARGUMENT
  test_unknown_interface       NOT_FOUND (also an interface of another namespace)
  test_no_target_and_xdp_egress   INVALID_ARGUMENT
  test_ttl_limits              ttl above --max-ttl and ttl 0 refused, ttl == max accepted
  test_max_rules               RESOURCE_EXHAUSTED past --max-rules (single rule, atomic batch)
  test_bad_stream_filters      WatchRetransmits/ListFlows/WatchFlows with a bad filter
  test_ssh_protection          a listener / live connection on port 22: FAILED_PRECONDITION
                               unless force
  test_plaintext_listen_refused   --listen on a non-loopback address without TLS or
                               --insecure-tcp: lossd exits non-zero with a clear message
"""
import os
import subprocess

from lab import config, daemon, traffic
from lab.config import main
from lab.netns import measured
from lab.daemon import DaemonTestCase, rule_spec


MAX_TTL = 3600 * 10**9
TTL = 60 * 10**9


class DaemonErrors(DaemonTestCase):
    daemon_args = ["--max-rules", "5", "--max-ttl", "1h"]

    # helpers
    def spec(self, **kw):
        kw.setdefault("interface", self.lab.IF_A)
        kw.setdefault("ttl_ns", TTL)
        if not any(k in kw for k in ("rate", "every_nth", "first_k", "ge", "no_loss")):
            kw["rate"] = 0.01
        kw.pop("no_loss", None)
        return rule_spec(**kw)

    def expect(self, code, fields, fn, *args, **kw):
        """fn(*args) fails with `code`; the message names every string in `fields`."""
        before = self.d.health().rules
        with self.assertRaises(daemon.grpc.RpcError) as cm:
            r = fn(*args, timeout=20, **kw)
            if hasattr(r, "__next__"):  # a stream: its first message or its status
                next(r)
        e = cm.exception
        self.assertEqual(e.code(), code, e.details())
        for f in ([fields] if isinstance(fields, str) else fields):
            self.assertIn(f, e.details())
        h = self.d.health()  # alive, and nothing was created
        self.assertTrue(h.serving)
        self.assertEqual(h.rules, before)
        return e.details()

    def create(self, **kw):
        return self.d.inj.CreateRule(self.pb.CreateRuleRequest(spec=self.spec(**kw)), timeout=20)

    def create_fails(self, code, fields, **kw):
        return self.expect(code, fields, self.d.inj.CreateRule, self.pb.CreateRuleRequest(spec=self.spec(**kw)))

    # ------------------------------------------------------------------ tests
    def test_invalid_match(self):
        INV = daemon.grpc.StatusCode.INVALID_ARGUMENT
        self.create_fails(INV, ["match.src", "10.0.0.300/24"], protocol="udp", src="10.0.0.300/24")
        self.create_fails(INV, "match.src", protocol="udp", src="not-an-address")
        self.create_fails(INV, "match.dst", protocol="udp", dst="2001:db8::/129")
        self.create_fails(INV, "match.dst", protocol="udp", dst="192.0.2.1/33")
        self.create_fails(INV, "match.dport", protocol="udp", dport=(70000, 70000))
        self.create_fails(INV, "match.sport", protocol="udp", sport=(2000, 1000))
        self.create_fails(INV, "match.protocol", protocol="tcpx")
        self.create_fails(INV, "match.family", protocol="udp", family=5)
        self.create_fails(INV, "match.tcp_flags", protocol="tcp", tcp_flags="syn,bogus")
        s = self.spec(protocol="udp")
        s.hook = 9
        self.expect(INV, "hook", self.d.inj.CreateRule, self.pb.CreateRuleRequest(spec=s))
        s = self.spec(protocol="udp")
        s.direction = 7
        self.expect(INV, "direction", self.d.inj.CreateRule, self.pb.CreateRuleRequest(spec=s))
        s = self.spec(protocol="udp")
        s.match.payload = 9
        self.expect(INV, "match.payload", self.d.inj.CreateRule, self.pb.CreateRuleRequest(spec=s))

    def test_invalid_loss_model(self):
        INV = daemon.grpc.StatusCode.INVALID_ARGUMENT
        self.create_fails(INV, "loss.bernoulli.rate", protocol="udp", rate=1.01)
        self.create_fails(INV, "loss.bernoulli.rate", protocol="udp", rate=-0.1)
        self.create_fails(INV, "loss.bernoulli.rate", protocol="udp", rate=float("nan"))
        self.create_fails(INV, "loss.gilbert_elliott", protocol="udp", ge=(0.01, 1.5, 1.0, 0.0))
        msg = self.create_fails(INV, "loss", protocol="udp", no_loss=True)
        self.assertIn("bernoulli", msg)  # says what to give
        # The same through UpdateRule and CreateRules.
        r = self.create(protocol="udp", dport=4000)
        self.expect(INV, "loss.bernoulli.rate", self.d.inj.UpdateRule,
                    self.pb.UpdateRuleRequest(id=r.id, spec=self.spec(protocol="udp", rate=2.0)))
        self.assertEqual(self.d.get(r.id).spec.loss.bernoulli.rate, 0.01)  # unchanged
        self.expect(INV, ["specs[1]", "loss.bernoulli.rate"], self.d.inj.CreateRules,
                    self.pb.CreateRulesRequest(atomic=True, specs=[self.spec(protocol="udp", dport=4001),
                                                                   self.spec(protocol="udp", rate=7.0)]))

    def test_unknown_rule_id(self):
        NF = daemon.grpc.StatusCode.NOT_FOUND
        pb, d = self.pb, self.d
        self.expect(NF, "999999", d.inj.GetRule, pb.GetRuleRequest(id=999999))
        self.expect(NF, "999999", d.inj.DeleteRule, pb.DeleteRuleRequest(id=999999))
        self.expect(NF, "999999", d.inj.UpdateRule,
                    pb.UpdateRuleRequest(id=999999, spec=self.spec(protocol="udp")))
        self.expect(NF, "999999", d.inj.GetRuleEffect, pb.GetRuleEffectRequest(id=999999))
        self.expect(NF, "999999", d.inj.WatchRuleCounters, pb.WatchRuleCountersRequest(ids=[999999]))

    def test_control_characters_in_names_and_labels(self):
        """Issue 25 item 9: a NUL or another control character in a name or a label, and in
        ListRules' label selector, is refused naming the field and the byte."""
        INV = daemon.grpc.StatusCode.INVALID_ARGUMENT
        pb, d = self.pb, self.d
        self.create_fails(INV, ["interface name", "control character", "v0\\x00 decoy"],
                          interface="v0\x00 decoy", protocol="udp")
        self.create_fails(INV, ["label", "control character"], interface=self.lab.IF_A, protocol="udp",
                          labels={"team": "a\x1b[2Jb"})
        self.expect(INV, ["labels key", "control character"], d.inj.ListRules,
                    pb.ListRulesRequest(labels={"a\x00b": "x"}))
        self.expect(INV, ["labels['team']", "control character", "\\x07"], d.inj.ListRules,
                    pb.ListRulesRequest(labels={"team": "a\x07"}))

    def test_unknown_interface(self):
        NF = daemon.grpc.StatusCode.NOT_FOUND
        self.create_fails(NF, ["interface", "nosuch0"], interface="nosuch0", protocol="udp")
        # B's end of the veth exists, but not in the daemon's namespace.
        self.create_fails(NF, ["interface", self.lab.IF_B], interface=self.lab.IF_B, protocol="udp")
        self.create_fails(NF, ["interface", "nosuch0"], interface="nosuch0", protocol="udp",
                          direction="egress")

    def test_no_target_and_xdp_egress(self):
        INV = daemon.grpc.StatusCode.INVALID_ARGUMENT
        self.create_fails(INV, "interface", interface="", protocol="udp")
        msg = self.create_fails(INV, ["XDP", "egress"], protocol="udp", hook="xdp", direction="egress")
        self.assertTrue("hook" in msg or "direction" in msg, msg)
        self.create_fails(INV, ["XDP", "egress"], protocol="udp", hook="xdp", direction="both")
        # XDP ingress itself is fine.
        r = self.create(protocol="udp", dport=4100, hook="xdp")
        self.assertEqual(r.spec.hook, self.pb.HOOK_XDP)

    def test_ttl_limits(self):
        INV = daemon.grpc.StatusCode.INVALID_ARGUMENT
        c = self.d.sys.GetCapabilities(self.pb.GetCapabilitiesRequest(), timeout=10)
        self.assertEqual((c.max_rules, c.max_ttl_ns), (5, MAX_TTL))
        self.create_fails(INV, ["ttl_ns", "--max-ttl"], protocol="udp", ttl_ns=MAX_TTL + 1)
        self.create_fails(INV, ["ttl_ns", "--max-ttl"], protocol="udp", ttl_ns=2 * MAX_TTL)
        self.create_fails(INV, "ttl_ns", protocol="udp", ttl_ns=0)  # "until deleted" exceeds the max
        r = self.create(protocol="udp", dport=4200, ttl_ns=MAX_TTL)
        self.assertEqual(r.expires_unix_ns, r.created_unix_ns + MAX_TTL)

    def test_max_rules(self):
        RE = daemon.grpc.StatusCode.RESOURCE_EXHAUSTED
        ids = [self.create(protocol="udp", dport=4300 + i).id for i in range(5)]
        self.create_fails(RE, ["rule limit", "--max-rules"], protocol="udp", dport=4310)
        self.expect(RE, ["specs[0]", "--max-rules"], self.d.inj.CreateRules, self.pb.CreateRulesRequest(
            atomic=True, specs=[self.spec(protocol="udp", dport=4311)]))
        self.d.delete(ids[0])
        self.expect(RE, ["specs[1]", "--max-rules"], self.d.inj.CreateRules, self.pb.CreateRulesRequest(
            atomic=True, specs=[self.spec(protocol="udp", dport=4312), self.spec(protocol="udp", dport=4313)]))
        self.assertEqual(self.d.health().rules, 4)  # the atomic batch left nothing behind
        self.create(protocol="udp", dport=4314)
        self.assertEqual(self.d.health().rules, 5)

    def test_bad_stream_filters(self):
        INV = daemon.grpc.StatusCode.INVALID_ARGUMENT
        pb, d = self.pb, self.d
        self.expect(INV, "allow[0].addr", d.obs.WatchRetransmits,
                    pb.WatchRetransmitsRequest(allow=[pb.EventFilter(addr="300.1.1.1/8")]))
        self.expect(INV, "deny[1].port", d.obs.WatchRetransmits,
                    pb.WatchRetransmitsRequest(deny=[pb.EventFilter(), pb.EventFilter(port=pb.PortRange(lo=9, hi=3))]))
        self.expect(INV, "allow[0].types", d.obs.WatchRetransmits,
                    pb.WatchRetransmitsRequest(allow=[pb.EventFilter(types=[42])]))
        self.expect(INV, "filter[0].addr", d.obs.ListFlows, pb.ListFlowsRequest(filter=[pb.EventFilter(addr="x")]))
        self.expect(INV, "filter[0].addr", d.obs.WatchFlows, pb.WatchFlowsRequest(filter=[pb.EventFilter(addr="x")]))
        self.assertEqual(d.health().subscribers, 0)

    def test_ssh_protection(self):
        FP = daemon.grpc.StatusCode.FAILED_PRECONDITION
        lab = self.lab
        # A "sshd" (a listener on port 22) in the daemon's namespace.
        srv = traffic.server(lab, lab.a, "0.0.0.0", 22)
        try:
            msg = self.create_fails(FP, ["22", "force"], protocol="tcp")
            self.create_fails(FP, ["22", "force"], protocol="tcp", dport=22)
            self.create_fails(FP, ["22", "force"], protocol="", direction="egress")
            # Narrowed away from port 22, or UDP, or forced: allowed.
            self.create(protocol="tcp", dport=5000)
            self.create(protocol="udp", dport=22)
            self.create(protocol="tcp", dport=22, force=True)
            self.d.inj.ClearRules(self.pb.ClearRulesRequest(), timeout=30)
            # A live connection B -> A:22: a rule narrowed by address still covers it.
            cli = traffic.sender(lab, lab.b, lab.V4_A, 22, nbytes=1000, rate_mbit=10, hold=True)
            self.assertTrue(cli.stdout.readline().startswith("SENT"))
            live = self.create_fails(FP, ["live connection", "22", "force"], protocol="tcp",
                                     src=lab.V4_B + "/32")
            self.create(protocol="tcp", src="192.0.2.99/32")  # another peer: fine
            cli.stdin.write("go\n")
            cli.stdin.flush()
            cli.communicate(timeout=20)
            measured("ssh_protection", listener_msg=msg, live_msg=live)
        finally:
            srv.kill()

    def test_plaintext_listen_refused(self):
        lab = self.lab
        for listen in ("192.0.2.2:7070", "0.0.0.0:7070", "[2001:db8:e2e::2]:7070"):
            d = lab.tempdir()
            sock = os.path.join(d, "lossd.sock")
            r = lab.run(lab.b, config.LOSSD, "--socket", sock, "--state-dir", lab.tempdir(),
                        "--listen", listen, check=False, timeout=60)
            measured("plaintext_listen_refused", listen=listen, rc=r.returncode, stderr=r.stderr.strip())
            self.assertNotEqual(r.returncode, 0, r.stderr)
            self.assertIn("refusing plaintext", r.stderr)
            self.assertIn(listen, r.stderr)
            self.assertIn("--insecure-tcp", r.stderr)
            self.assertIn("--tls-cert", r.stderr)
            self.assertFalse(os.path.exists(sock))

    def test_version_and_bad_flags(self):
        """--version answers (it was "not expected"); a bad flag is a usage error, exit 2 like
        lossctl's, naming the flag (every one exited 109, CLI11's code)."""
        r = subprocess.run([config.LOSSD, "--version"], capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout.strip(), r"^lossd \d+\.\d+\.\d+$")
        for args, word in ((["--bogus"], "--bogus"), (["--rate"], "--rate"), (["--interval", "1s", "x"], "x"),
                           # a default TTL beyond --max-ttl, or "until deleted" under one
                           (["--max-ttl", "10m", "--default-ttl", "1h"], "--default-ttl"),
                           (["--max-ttl", "10m", "--default-ttl", "none"], "--default-ttl"),
                           (["--default-ttl", "soon"], "--default-ttl")):
            r = subprocess.run([config.LOSSD] + args, capture_output=True, text=True, timeout=20)
            measured("bad_flag", args=args, rc=r.returncode, stderr=r.stderr.strip())
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn(word, r.stderr)
            if not word.startswith("--default-ttl"):
                self.assertIn("lossd --help", r.stderr)


if __name__ == "__main__":
    main()
