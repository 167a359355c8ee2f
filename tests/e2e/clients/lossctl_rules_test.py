"""Client e2e 1: lossctl's rule commands against the real daemon, checked against real traffic.

One daemon in namespace B (`lossd --socket ... --max-rules 2 --max-ttl 1h`): every rule carries
a TTL (a rule without one gets the default, 1 h; ttl 0, "until deleted", is refused), at most
2 rules at once.

  test_1_udp_port_rule_and_outputs
      `rule add` of a 100 % rule on UDP port 9000 (table form) and a 0 % rule on port 9001
      (-o json) at B's ingress; 1,000 sequence-numbered datagrams to each port at once: port
      9000 receives none, port 9001 all. `rule ls`, `rule ls --label`, `rule get`, `rule
      effect` (table and -o json) parse and agree with the traffic: matched == sent, dropped ==
      datagrams lost, bytes == 106 per datagram (64 payload + UDP/IP/Ethernet headers).
      `rule rm` prints the final counters; after it port 9000 passes again; `rule clear`.
  test_2_exit_codes
      0 ok; 2 bad flags (--rate 200%, XDP egress, bad CIDRs: lossctl checks them itself, with
      lossd's parsers, and sends nothing); 3 wrong socket; 4 unknown rule id / interface; 5 what
      only the daemon can refuse (TTL above --max-ttl, ttl 0 or none, --per-segment at a veth's
      ingress); 6 the third rule with --max-rules 2.
  test_3_list_never_shows_a_half_created_rule   (daemon bug)
      While `lossctl rule add --label k=v --ttl 10m` runs (12 times: tc egress, tcx, XDP), the
      Python client (lossd_client, the other real client) polls ListRules in a tight loop:
      every rule it sees must carry its labels, created_unix_ns and expires_unix_ns. lossd
      makes the rule visible (InjectorService::Create: inj_->Add(spec), which attaches) before
      it records its metadata (meta_[id] = m), so a listing in between shows the rule with no
      labels and created/expires 0 (and `rule ls --label k=v` misses a rule that is dropping).

UnmatchedHint (a daemon with --unmatched-hint 1s; issue 24):
  test_a_rule_that_matches_nothing_says_what_to_check
      Datagrams arrive on B's interface: an egress rule for them (the wrong direction) has
      matched nothing after 1 s and its listing says so, naming --dir ingress (rule ls below
      the table, rule get, rule effect's measured line instead of a 0..100 % interval, -o json
      Rule.hint and RuleEffect.hint, the Python client's Rule.hint); the ingress rule beside
      it matches them and carries no hint.
"""
import json
import os
import re
import subprocess
import threading
import time

from lab import config, traffic
from lab.config import main
from lab.netns import measured
from lab.clients import ClientTestCase, counters, retrans_by_type, table_rows, u64
from lab.lossd import COUNTERS


N = 1000
PORT_DROP, PORT_PASS = 9000, 9001
FRAME = 64 + 8 + 20 + 14  # udpflow payload + UDP + IPv4 + Ethernet: skb->len at tc ingress
TTL = ["--ttl", "10m"]


class LossctlRules(ClientTestCase):
    daemon_ns = "b"
    daemon_args = ["--max-rules", "2", "--max-ttl", "1h"]

    def rules(self, *args):
        return self.d.ctlj("rule", "ls", *args).get("rules", [])

    # ------------------------------------------------------------------------------------
    def test_1_udp_port_rule_and_outputs(self):
        d, lab, I = self.d, self.lab, self.lab.IF_B
        # Table form of `rule add`.
        r = d.ctl_ok("rule", "add", "--iface", I, "--proto", "udp", "--dport", PORT_DROP, "--rate", "100%",
                     "--label", "test=drop", *TTL)
        m = re.match(r"rule (\d+) added: (.*)", r.out)
        self.assertTrue(m, r)
        rid = int(m.group(1))
        self.assertIn("attached: tcx ingress to %s" % I, r.out, r)
        self.assertIn("udp dport %d" % PORT_DROP, r.out, r)
        # JSON form of `rule add`.
        pas = d.add_rule("--iface", I, "--proto", "udp", "--dport", PORT_PASS, "--rate", "0%",
                         "--label", "test=pass", *TTL)
        pid = pas["id"]
        self.assertNotEqual(pid, rid)
        self.assertEqual(pas["state"], "RULE_STATE_ACTIVE", pas)
        self.assertEqual(pas["spec"]["interface"], I)
        self.assertEqual(pas["spec"]["hook"], "HOOK_TC")
        self.assertEqual(pas["spec"]["direction"], "DIRECTION_INGRESS")
        self.assertEqual(pas["spec"]["match"]["dport"], {"lo": PORT_PASS, "hi": PORT_PASS})
        self.assertEqual(pas["spec"]["match"]["protocol"], "udp")
        self.assertEqual(pas["spec"]["labels"], {"test": "pass"})
        self.assertEqual(pas["spec"]["ttl_ns"], str(600 * 10**9))
        self.assertEqual(pas["attachments"], ["tcx ingress to %s" % I])
        self.assertTrue(all(v == 0 for v in counters(pas).values()), pas)

        (s_drop, g_drop), (s_pass, g_pass) = traffic.udp_flows(lab, [
            dict(rx_ns=lab.b, tx_ns=lab.a, dst=lab.V4_B, port=PORT_DROP, flow=1, count=N, pps=10_000),
            dict(rx_ns=lab.b, tx_ns=lab.a, dst=lab.V4_B, port=PORT_PASS, flow=2, count=N, pps=10_000)])
        lost_drop = s_drop["sent"] - g_drop["unique"]
        lost_pass = s_pass["sent"] - g_pass["unique"]

        # -o json rule ls: the counters are the traffic.
        by_id = {x["id"]: x for x in self.rules()}
        self.assertEqual(sorted(by_id), sorted([rid, pid]))
        cd, cp = counters(by_id[rid]), counters(by_id[pid])
        measured("lossctl_udp_rule", sent=[s_drop["sent"], s_pass["sent"]],
                 received=[g_drop["unique"], g_pass["unique"]], drop_rule=cd, pass_rule=cp)
        self.assertEqual((s_drop["sent"], s_pass["sent"]), (N, N))
        self.assertEqual(g_drop["unique"], 0, "the 100 % rule let datagrams through")
        self.assertEqual(g_pass["unique"], N, "the other port lost datagrams")
        self.assertEqual(g_pass["dups"] + g_drop["dups"], 0)
        # (a drop rule's action counters: all 0)
        acted = {k: 0 for k in COUNTERS if k.split("_")[0] in ("corrupted", "duplicated", "marked", "unacted")}
        self.assertEqual(cd, {"matched_packets": N, "matched_segments": N, "matched_bytes": N * FRAME,
                              "dropped_packets": lost_drop, "dropped_segments": lost_drop,
                              "dropped_bytes": lost_drop * FRAME, **acted})
        self.assertEqual(cp, {"matched_packets": N, "matched_segments": N, "matched_bytes": N * FRAME,
                              "dropped_packets": lost_pass, "dropped_segments": 0, "dropped_bytes": 0, **acted})
        # 64-bit integers as strings (README: -o json).
        self.assertIsInstance(by_id[rid]["counters"]["dropped_packets"], str)

        # Table form of `rule ls`.
        r = d.ctl_ok("rule", "ls")
        head, rows = table_rows(r.out)
        self.assertEqual(head[:3], ["ID", "STATE", "TARGET"], r)
        rows = {int(x["ID"]): x for x in rows}
        self.assertEqual(sorted(rows), sorted([rid, pid]), r)
        self.assertEqual((rows[rid]["MATCHED"], rows[rid]["DROPPED"], rows[rid]["DROP%"]),
                         (str(N), str(lost_drop), "100%"), r)
        self.assertEqual((rows[pid]["MATCHED"], rows[pid]["DROPPED"], rows[pid]["DROP%"]),
                         (str(N), "0", "0%"), r)
        self.assertEqual(rows[rid]["STATE"], "active")
        self.assertEqual(rows[rid]["MATCH"], "udp dport %d" % PORT_DROP)
        self.assertEqual(rows[rid]["LABELS"], "test=drop")
        # --label filters.
        self.assertEqual([x["id"] for x in self.rules("--label", "test=pass")], [pid])
        _, lrows = table_rows(d.ctl_ok("rule", "ls", "--label", "test=drop").out)
        self.assertEqual([int(x["ID"]) for x in lrows], [rid])

        # rule get: JSON equals the listing; the table shows the same numbers.
        g = d.ctlj("rule", "get", rid)
        self.assertEqual(counters(g), cd)
        self.assertEqual(g["spec"], by_id[rid]["spec"])
        r = d.ctl_ok("rule", "get", rid)
        self.assertRegex(r.out, r"(?m)^rule %d\s+active" % rid)
        self.assertRegex(r.out, r"(?m)^\s+matched\s+%d pkts, %d segs" % (N, N))
        self.assertRegex(r.out, r"(?m)^\s+dropped\s+%d pkts, %d segs" % (lost_drop, lost_drop))

        # rule effect: JSON and table.
        e = d.effect(rid)
        self.assertEqual(counters(e), cd)
        self.assertEqual(e["configured_rate"], 1)
        self.assertEqual(e["measured_rate"], 1)
        self.assertEqual(u64(e.get("flows")), 0)  # UDP: no TCP flow
        self.assertEqual(sum(retrans_by_type(e).values()), 0)
        r = d.ctl_ok("rule", "effect", rid)
        self.assertRegex(r.out, r"(?m)^\s+matched\s+%d segs, %d pkts" % (N, N))
        self.assertRegex(r.out, r"(?m)^\s+dropped\s+%d segs, %d pkts" % (lost_drop, lost_drop))
        ep = d.effect(pid)
        self.assertEqual(counters(ep), cp)
        self.assertEqual((ep["configured_rate"], ep["measured_rate"]), (0, 0))
        with self.subTest("daemon bug: configured rate inside its own CI when measured == configured"):
            # 1,000 of 1,000 dropped at a configured 100 %, and 0 of 1,000 at 0 %: the
            # configured rate is the measured one and must lie inside the 99.9 % interval.
            self.assertLessEqual(ep["rate_ci_low"], 0)
            self.assertTrue(ep["configured_within_ci"], ep)
            self.assertGreaterEqual(e["rate_ci_high"], 1, e)
            self.assertTrue(e["configured_within_ci"],
                            "100%% rule, %d of %d dropped: configured_within_ci false, rate_ci_high %r"
                            % (lost_drop, N, e["rate_ci_high"]))
            self.assertNotIn("OUTSIDE", r.out, r)

        # rule rm: final counters; the port passes again; the rule is kept, deleted, with its
        # counters (and its effect) until a second rm forgets it.
        r = d.ctl_ok("rule", "rm", rid)
        # The share is of packets, the rule's decisions (docs/architecture.md#measured-rate).
        self.assertRegex(r.out, r"rule %d removed: dropped %d of %d packets \(100%%\), %d segments, "
                         % (rid, lost_drop, N, lost_drop))
        kept = d.ctlj("rule", "get", rid)
        self.assertEqual((kept["state"], counters(kept)["dropped_packets"]), ("RULE_STATE_DELETED", lost_drop), kept)
        self.assertRegex(d.ctl_ok("rule", "get", rid).out, r"rule %d +deleted" % rid)
        self.assertNotIn(rid, [x["id"] for x in self.rules()])  # listed only when asked
        self.assertRegex(d.ctl_ok("rule", "ls", "--deleted").out, r"\n +%d +deleted " % rid)
        self.assertEqual(d.ctlj("rule", "effect", rid)["counters"]["dropped_packets"], str(lost_drop))
        d.ctl_ok("rule", "rm", rid)
        self.assertEqual(d.ctl("rule", "get", rid).rc, 4)
        ((s2, g2),) = traffic.udp_flows(lab, [dict(rx_ns=lab.b, tx_ns=lab.a, dst=lab.V4_B, port=PORT_DROP,
                                                   flow=3, count=500, pps=10_000)])
        self.assertEqual(g2["unique"], 500, "port %d still loses datagrams after rule rm" % PORT_DROP)
        # The 0 % rule saw none of that (other port), and rm -o json prints it with its counters.
        fin = d.ctlj("rule", "rm", pid)
        self.assertEqual(fin["rule"]["id"], pid)
        self.assertEqual(counters(fin["rule"]), cp)
        # rule clear: counts; then nothing is left.
        for port in (PORT_DROP, PORT_PASS):
            d.add_rule("--iface", I, "--proto", "udp", "--dport", port, "--rate", "1%", *TTL)
        self.assertEqual(d.ctlj("rule", "clear"), {"deleted": 2})
        self.assertEqual(self.rules(), [])
        self.assertEqual(d.ctl_ok("rule", "clear").out.strip(), "0 rules removed")
        self.assertEqual(d.health()["rules"], 0)

    # ------------------------------------------------------------------------------------
    def test_2_exit_codes(self):
        d, I = self.d, self.lab.IF_B
        seen = {}

        def expect(code, *args, stderr=None, **kw):
            r = d.ctl(*args, **kw)
            seen.setdefault(code, []).append(" ".join(str(a) for a in args))
            self.assertEqual(r.rc, code, r)
            if code:
                self.assertEqual(r.out, "", r)
                self.assertRegex(r.err, r"^lossctl: ", r)
                if stderr:
                    self.assertRegex(r.err, stderr, r)
            return r

        expect(0, "status")
        # 2: usage, refused by lossctl before anything is sent.
        expect(2, "rule", "add", "--iface", I, "--dport", PORT_DROP, "--rate", "200%", *TTL, stderr="--rate")
        expect(2, "rule", "add", "--iface", I, "--hook", "xdp", "--dir", "egress", "--rate", "1%", *TTL,
               stderr="(?i)xdp")
        expect(2, "rule", "add", "--iface", I, "--dst", "10.0.0.300/24", "--rate", "1%", *TTL, stderr="--dst")
        expect(2, "rule", "add", "--iface", I, "--dst", "192.0.2.1/24", "--rate", "1%", *TTL, stderr="--dst")
        expect(2, "rule", "add", "--file", "-", *TTL, stdin=json.dumps(
            {"iface": I, "hook": "xdp", "dir": "egress", "rate": "1%"}))
        expect(2, "rule", "get", "abc")
        expect(2, "watch", "--count", "0")
        self.assertEqual(self.rules(), [], "a refused command created a rule")
        # 3: lossd unreachable (a socket path where nothing listens), quickly.
        bad = "unix://" + os.path.join(d.sockdir, "nosuch.sock")
        r = expect(3, "--timeout", "2s", "status", addr=bad, stderr="unreachable")
        self.assertLess(r.secs, 5, r)
        expect(3, "rule", "ls", addr=bad)
        expect(3, "rule", "add", "--iface", I, "--rate", "1%", *TTL, addr=bad)
        # 4: NOT_FOUND.
        expect(4, "rule", "get", 4242, stderr="4242")
        expect(4, "rule", "rm", 4242)
        expect(4, "rule", "effect", 4242)
        expect(4, "rule", "add", "--iface", "nosuch0", "--rate", "1%", *TTL, stderr="nosuch0")
        # 5: only the daemon can refuse these (its limits, the interface's kind).
        expect(5, "rule", "add", "--iface", I, "--rate", "1%", "--ttl", "2h", stderr="ttl")
        expect(5, "rule", "add", "--iface", I, "--rate", "1%", "--ttl", "0", stderr="ttl")
        expect(5, "rule", "add", "--iface", I, "--rate", "1%", "--ttl", "none", stderr="ttl")
        expect(5, "rule", "add", "--iface", I, "--rate", "1%", "--per-segment", *TTL, stderr="per-segment")
        self.assertEqual(self.rules(), [])
        # No TTL given: the daemon's default (--max-ttl 1h, so 1 h), shown in the listing.
        r = d.add_rule("--iface", I, "--rate", "1%")
        self.assertEqual(int(r["spec"]["ttl_ns"]), 3600 * 10**9, r)
        self.assertEqual(int(r["expires_unix_ns"]) - int(r["created_unix_ns"]), 3600 * 10**9, r)
        self.assertRegex(d.ctl_ok("rule", "ls").out, r"\n +%d +active .* in (1h|59m\d*s) " % r["id"])
        d.ctl_ok("rule", "rm", r["id"])
        # 6: RESOURCE_EXHAUSTED at --max-rules 2.
        ids = [d.add_rule("--iface", I, "--proto", "udp", "--dport", p, "--rate", "1%", *TTL)["id"]
               for p in (9100, 9101)]
        expect(6, "rule", "add", "--iface", I, "--proto", "udp", "--dport", 9102, "--rate", "1%", *TTL,
               stderr="limit")
        self.assertEqual(sorted(x["id"] for x in self.rules()), sorted(ids))
        d.ctl_ok("rule", "rm", ids[0])
        expect(0, "rule", "add", "--iface", I, "--proto", "udp", "--dport", 9102, "--rate", "1%", *TTL)
        self.assertEqual(d.ctlj("rule", "clear"), {"deleted": 2})
        st = d.ctlj("status")
        self.assertTrue(st["health"]["serving"])
        self.assertEqual(st["capabilities"]["max_rules"], 2)
        measured("lossctl_exit_codes", **{str(k): v for k, v in sorted(seen.items())})

    # ------------------------------------------------------------------------------------
    def test_3_list_never_shows_a_half_created_rule(self):
        d, I = self.d, self.lab.IF_B
        from lossd_client import Client  # client/python: on PYTHONPATH (lossd_add_e2e)
        seen, polls, errors = [], [0], []
        stop = threading.Event()
        with Client(d.sock, stubs=config.STUBS) as c:
            def poll():
                try:
                    while not stop.is_set():
                        for r in c.list_rules():
                            polls[0] += 1
                            if not r.labels or not r.created_unix_ns or not r.expires_unix_ns:
                                seen.append(dict(id=r.id, labels=r.labels, created_unix_ns=r.created_unix_ns,
                                                 expires_unix_ns=r.expires_unix_ns, attachments=r.attachments))
                except Exception as e:  # noqa: BLE001
                    errors.append(repr(e))
            t = threading.Thread(target=poll, daemon=True)
            t.start()
            made = 0
            try:
                for i in range(12):
                    hook, direction = (("tc", "egress"), ("tc", "ingress"), ("xdp", "ingress"))[i % 3]
                    d.ctl_ok("rule", "add", "--iface", I, "--hook", hook, "--dir", direction, "--proto", "udp",
                             "--dport", 9200 + i, "--rate", "1%", "--label", "k=v", *TTL)
                    made += 1
                    time.sleep(0.05)
                    d.ctl_ok("rule", "clear")
            finally:
                stop.set()
                t.join(10)
        ids = sorted({x["id"] for x in seen})
        measured("half_created_rules", creates=made, polls=polls[0], observations=len(seen),
                 rules_seen_half_created=ids, first=seen[:1])
        self.assertEqual(errors, [])
        self.assertGreater(polls[0], 0)
        self.assertEqual(len(seen), 0, "ListRules showed %d of %d rules half-created (no labels, created 0), "
                         "%d times; first: %s" % (len(ids), made, len(seen), seen[:1]))



class UnmatchedHint(ClientTestCase):
    daemon_ns = "b"
    daemon_args = ["--unmatched-hint", "1s"]

    def test_a_rule_that_matches_nothing_says_what_to_check(self):
        d, lab, I = self.d, self.lab, self.lab.IF_B
        port = 9050
        wrong = d.add_rule("--iface", I, "--dir", "egress", "--proto", "udp", "--dport", port, "--rate", "50%", *TTL)
        right = d.add_rule("--iface", I, "--dir", "ingress", "--proto", "udp", "--dport", port, "--rate", "0%",
                           *TTL)
        self.assertEqual(wrong.get("hint", ""), "", wrong)  # as created: age 0
        traffic.udp_flows(lab, [dict(rx_ns=lab.b, tx_ns=lab.a, dst=lab.V4_B, port=port, flow=1, count=300,
                                     pps=1000)])
        time.sleep(1.2)
        w, r = d.ctlj("rule", "get", wrong["id"]), d.ctlj("rule", "get", right["id"])
        self.assertEqual(counters(r)["matched_packets"], 300, r)
        self.assertEqual(counters(w)["matched_packets"], 0, w)
        self.assertEqual(r.get("hint", ""), "", r)
        hint = w.get("hint", "")
        self.assertRegex(hint, r"^matched no packet in \ds: it sees what leaves by %s; .*--dir ingress" % I, w)
        self.assertIn("--sport", hint)  # the port's side on egress
        ls = d.ctl_ok("rule", "ls").out
        # (the age in the hint grows between the two calls: the text after it is the same)
        self.assertRegex(ls, r"rule %d matched no packet in \d+s: %s" % (wrong["id"], re.escape(hint.split(": ", 1)[1][:40])))
        self.assertNotIn("rule %d matched no packet" % right["id"], ls)
        self.assertRegex(d.ctl_ok("rule", "get", wrong["id"]).out, r"CHECK +matched no packet")
        eff = d.ctl_ok("rule", "effect", wrong["id"]).out
        self.assertRegex(eff, r"measured +- \(matched no packet in \ds: it sees what leaves by", eff)
        self.assertNotIn("CI 0", eff)
        self.assertRegex(d.ctlj("rule", "effect", wrong["id"])["hint"], r"^matched no packet in \ds: ")
        # The Python client, the other real client.
        code = ("import sys, lossd_client as L\n"
                "c = L.Client(sys.argv[1])\n"
                "print(c.get_rule(int(sys.argv[2])).hint)\n")
        out = subprocess.run([config.PY, "-c", code, d.addr, str(wrong["id"])], capture_output=True, text=True,
                             timeout=30, env=dict(os.environ, PYTHONPATH=config.PYCLIENT,
                                                  LOSSD_PYTHON_STUBS=config.STUBS))
        self.assertRegex(out.stdout, r"^matched no packet in \ds: it sees what leaves by", out)
        measured("unmatched_hint", hint=hint)


if __name__ == "__main__":
    main()
