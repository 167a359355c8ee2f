"""Client e2e 2 and 3: lossctl's observer commands and `rule effect` against the kernel.

One daemon in the sender's namespace A (it observes TCP only in its own namespace); the
receiver (tests/e2e/clients/cflow.py) runs in B. The rules sit on A's egress (clsact,
TC_ACT_STOLEN: network loss to the local TCP sender), data segments only (`--payload only`:
dropped pure ACKs or bare FINs would not be retransmitted segments).

  test_1_watch_stats_flows   (rule at 2 %, IPv4, one paced flow)
      `lossctl -o json watch --count 3` and `lossctl watch --count 3` exit 0 after 3 events
      with types and tuples (192.0.2.1:P > 192.0.2.2:5201, the rule's id); `lossctl -o json
      stats` / `lossctl stats` (stopped by SIGINT: exit 0) print per-second retransmitted
      segments by type whose sum over the flow is the namespace's TcpRetransSegs delta, in
      both forms (table: TOTAL == sum of the type columns); `lossctl flows` (-o json and
      table, --rule, --port) lists the flow while it runs.
  test_2_effect_reconciles_with_kernel   (rule at 1 %, IPv6, one paced flow)
      After the transfer, `lossctl -o json rule effect ID`:
          sum of retransmitted_segments (all types) == TcpRetransSegs delta (sender's ns)
          TcpRetransSegs delta == dropped_segments + TCPDSACKRecvSegs delta
      (every dropped data segment is retransmitted, a dropped retransmission counts on both
      sides, a retransmission of a segment that was not lost comes back as a D-SACK), flows
      == 1, the socket's own total_retrans agrees, and the table form shows the same numbers.
      (The first equality fails now and then: lossd misses a retransmission, a whole GSO skb
      of ~45 segments, with no Gap and events_lost_kernel 0; the message shows the effect
      3 s later too.)
      subTest (daemon bug): the 99.9 % interval is far narrower than the number of independent
      drop decisions (GSO skbs dropped whole) allows.
"""
import json
import re
import signal
import subprocess
import time

from lab import traffic
from lab.config import main
from lab.netns import measured
from lab.lossd import TYPES
from lab.daemon import wait_until
from lab.clients import ClientTestCase, counters, retrans_by_type, settled_effect, u64


PROTO_TYPES = {"RETRANSMIT_TYPE_" + t.upper() for t in TYPES}


def rule_flags(lab, port, rate):
    return ["--iface", lab.IF_A, "--dir", "egress", "--proto", "tcp", "--dport", str(port),
            "--payload", "only", "--rate", rate]


class LossctlObserve(ClientTestCase):
    pass

    # ------------------------------------------------------------------------------------
    def test_1_watch_stats_flows(self):
        d, lab = self.d, self.lab
        port = 5201
        rule = d.add_rule(*rule_flags(lab, port, "2%"))
        rid = rule["id"]
        self.assertEqual(rule["attachments"], ["clsact egress on %s" % lab.IF_A], rule)

        watch_j = d.ctl_popen("-o", "json", "watch", "--count", "3")
        watch_t = d.ctl_popen("watch", "--count", "3", "--port", port)
        stats_j = d.ctl_popen("-o", "json", "stats", "--interval", "1s")
        stats_t = d.ctl_popen("stats", "--interval", "1s")
        wait_until(lambda: d.health()["subscribers"] >= 2, 10, "2 watch subscribers")
        time.sleep(1.0)  # the stats streams' first window is open before the flow starts

        c0 = lab.counters(lab.a)
        flow = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, port, 60e6, 200)
        self.addCleanup(flow.close)
        # flows while it runs
        listed = None
        while flow.running() and listed is None:
            fl = d.ctlj("flows").get("flows", [])
            mine = [f for f in fl if f["tuple"]["remote_port"] == port]
            if mine and u64(mine[0].get("bytes_sent")) > 0:
                listed = mine[0]
                table = d.ctl_ok("flows").out
                by_rule = d.ctlj("flows", "--rule", rid).get("flows", [])
                other_port = d.ctlj("flows", "--port", port + 1).get("flows", [])
                by_port = d.ctlj("flows", "--port", port).get("flows", [])
                break
            time.sleep(0.2)
        sender, receiver = flow.wait()
        da = lab.counters(lab.a) - c0
        time.sleep(2.2)  # the windows holding the flow's end are printed
        outs = {}
        for name, p in (("stats_j", stats_j), ("stats_t", stats_t)):
            p.send_signal(signal.SIGINT)
        for name, p in (("watch_j", watch_j), ("watch_t", watch_t), ("stats_j", stats_j), ("stats_t", stats_t)):
            try:
                o, e = p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                o, e = p.communicate()
                self.fail("lossctl %s did not end: stdout %r stderr %r" % (name, o, e))
            outs[name] = (p.returncode, o, e)
        retrans = da["Tcp.RetransSegs"]

        # --- flows
        self.assertIsNotNone(listed, "lossctl flows never listed the running flow")
        self.assertEqual(listed["tuple"]["local_addr"], lab.V4_A)
        self.assertEqual(listed["tuple"]["remote_addr"], lab.V4_B)
        self.assertFalse(listed.get("closed", False))
        lport = listed["tuple"]["local_port"]
        self.assertIn("%s:%d" % (lab.V4_A, lport), table)
        self.assertIn("%s:%d" % (lab.V4_B, port), table)
        self.assertEqual([f["cookie"] for f in by_rule], [listed["cookie"]])
        self.assertEqual([f["cookie"] for f in by_port], [listed["cookie"]])
        self.assertEqual(other_port, [])

        # --- watch -o json --count 3
        rc, o, e = outs["watch_j"]
        self.assertEqual(rc, 0, e)
        lines = [json.loads(l) for l in o.splitlines() if l.strip()]
        events = [l["event"] for l in lines if "event" in l]
        self.assertEqual(len(events), 3, o)
        self.assertEqual([l for l in lines if "gap" in l], [])
        seqs = [int(l["seq"]) for l in lines]
        self.assertEqual(seqs, sorted(seqs))
        self.assertEqual(len(set(seqs)), len(seqs))
        for ev in events:
            self.assertIn(ev["type"], PROTO_TYPES, ev)
            self.assertEqual(ev["tuple"], {"local_addr": lab.V4_A, "local_port": lport,
                                           "remote_addr": lab.V4_B, "remote_port": port}, ev)
            self.assertGreaterEqual(ev["segments"], 1)
            self.assertEqual(ev["cookie"], listed["cookie"])
            self.assertIn(rid, ev.get("rule_ids", []))
            self.assertEqual(ev.get("outcome", "OUTCOME_SENT"), "OUTCOME_SENT")
            self.assertGreater(ev["state"]["mss"], 0)
        # --- watch (table) --count 3
        rc, o, e = outs["watch_t"]
        self.assertEqual(rc, 0, e)
        tl = o.splitlines()
        self.assertEqual(len(tl), 3, o)
        for l in tl:
            self.assertRegex(l, r"^\d\d:\d\d:\d\d\.\d{6} (fast|rto|loss|tlp)\s+%s:%d > %s:%d segs \d+ .* rules %d$"
                             % (re.escape(lab.V4_A), lport, re.escape(lab.V4_B), port, rid))

        # --- stats -o json: per-second windows by type; their sum is the kernel's
        rc, o, e = outs["stats_j"]
        self.assertEqual(rc, 0, "stats ended by SIGINT should exit 0: %s" % e)
        aggs = [json.loads(l) for l in o.splitlines() if l.strip()]
        self.assertGreaterEqual(len(aggs), 3, o)
        by_type = dict.fromkeys(TYPES, 0)
        by_rule = 0
        for a in aggs:
            self.assertEqual(a["window_ns"], "1000000000")
            self.assertEqual(a.get("gaps", []), [])
            for t, n in a["retransmits_by_type"].items():
                by_type[t] += u64(n)
            by_rule += u64(a.get("retransmits_by_rule", {}).get(str(rid)))
        starts = [u64(a["window_start_unix_ns"]) for a in aggs]
        self.assertEqual(starts, sorted(starts))
        # --- stats (table): TOTAL == sum of the type columns; the sum over rows likewise
        rc, o, e = outs["stats_t"]
        self.assertEqual(rc, 0, e)
        # (right-aligned 7-wide columns: "PROBE0 UNKNOWN" are one space apart; split on spaces)
        tl = [l.split() for l in o.splitlines() if l.strip() and not l.startswith("retransmitted")]
        head = tl[0]
        self.assertEqual(head, ["TIME", "TOTAL"] + [t.upper() for t in TYPES] + ["LOST", "BY-RULE"], o)
        rows = [dict(zip(head, l[:len(head) - 1] + [" ".join(l[len(head) - 1:])])) for l in tl[1:]]
        self.assertGreaterEqual(len(rows), 3, o)
        t_total = 0
        for r in rows:
            self.assertEqual(int(r["TOTAL"]), sum(int(r[t.upper()]) for t in TYPES), r)
            self.assertEqual(r["LOST"], "0", r)
            t_total += int(r["TOTAL"])
        nums = dict(retrans_segs=retrans, stats_json_by_type=by_type, stats_json_by_rule=by_rule,
                    stats_table_total=t_total, dsack=da["TcpExt.TCPDSACKRecvSegs"],
                    socket_total_retrans=sender["total_retrans"], secs=flow.secs,
                    events_seen=[e_["type"] for e_ in events])
        measured("lossctl_watch_stats", **nums)
        self.assertEqual(receiver["bytes"], 60_000_000)
        self.assertGreater(retrans, 0, nums)
        self.assertEqual(sum(by_type.values()), retrans, nums)
        self.assertEqual(by_rule, retrans, nums)
        self.assertEqual(t_total, retrans, nums)
        d.ctl_ok("rule", "rm", rid)

    # ------------------------------------------------------------------------------------
    def test_2_effect_reconciles_with_kernel(self):
        d, lab = self.d, self.lab
        port = 5202
        rid = d.add_rule(*rule_flags(lab, port, "1%"))["id"]
        c0 = lab.counters(lab.a)
        flow = traffic.TcpFlow(lab, lab.b, lab.a, lab.V6_B, port, 120e6, 400)
        self.addCleanup(flow.close)
        sender, receiver = flow.wait()
        da = lab.counters(lab.a) - c0
        retrans = da["Tcp.RetransSegs"]
        eff = settled_effect(d, rid, want=retrans)
        c = counters(eff)
        rt = retrans_by_type(eff)
        total = sum(rt.values())
        nums = dict(retrans_segs=retrans, dsack=da["TcpExt.TCPDSACKRecvSegs"],
                    effect_retrans_by_type={k: v for k, v in rt.items() if v}, effect_retrans_total=total,
                    dropped_segments=c["dropped_segments"], dropped_packets=c["dropped_packets"],
                    matched_segments=c["matched_segments"], flows=u64(eff.get("flows")),
                    socket_total_retrans=sender["total_retrans"],
                    retrans_fail=da["TcpExt.TCPRetransFail"], measured_rate=eff["measured_rate"],
                    ci=[eff["rate_ci_low"], eff["rate_ci_high"]], secs=flow.secs)
        if total != retrans:  # evidence: not a late event, not the kernel ring
            time.sleep(3)
            nums["effect_retrans_total_3s_later"] = sum(retrans_by_type(d.effect(rid)).values())
            nums["events_lost_kernel"] = d.health()["events_lost_kernel"]
        measured("lossctl_effect_vs_kernel", **nums)
        self.assertEqual(receiver["bytes"], 120_000_000)
        self.assertGreater(c["dropped_segments"], 0, nums)
        self.assertEqual(da["TcpExt.TCPRetransFail"], 0, nums)
        self.assertEqual(sender["total_retrans"], retrans, nums)
        self.assertEqual(retrans, c["dropped_segments"] + da["TcpExt.TCPDSACKRecvSegs"], nums)
        self.assertEqual(total, retrans, nums)
        self.assertEqual(u64(eff.get("flows")), 1, nums)
        self.assertEqual(set(rt), set(TYPES), "keys of retransmitted_segments: %s" % sorted(rt))
        self.assertEqual(eff["configured_rate"], 0.01)
        self.assertAlmostEqual(eff["measured_rate"], int(c["dropped_packets"]) / int(c["matched_packets"]), places=12)
        self.assertLessEqual(eff["rate_ci_low"], eff["measured_rate"])
        self.assertLessEqual(eff["measured_rate"], eff["rate_ci_high"])
        # ~120 MB of 1428-byte (IPv6) segments, at least
        self.assertGreaterEqual(c["matched_segments"], 120e6 / 1448)
        with self.subTest("daemon bug: the 99.9 % CI treats the segments of one dropped GSO skb as "
                          "independent draws"):
            # The random draw is per skb: a GSO skb (up to ~45 segments) is dropped whole
            # (README "Segments, not skbs"). With D independent drops the relative standard
            # error of the measured segment rate is at least ~1/sqrt(D), so no valid 99.9 %
            # interval can be narrower than about +-3.29/sqrt(D) of the rate; lossd's Wilson
            # interval over segments is +-3.29/sqrt(dropped_segments), i.e. sqrt(segments per
            # dropped skb) times too narrow, and calls a correctly working 1 % rule "outside".
            # Checked with a factor 2 of slack.
            D = c["dropped_packets"]
            half = (eff["rate_ci_high"] - eff["rate_ci_low"]) / 2 / eff["measured_rate"]
            need = 3.29 / D ** 0.5
            self.assertGreaterEqual(half, need / 2,
                                    "relative CI half-width %.3f with %d independent drops (%d segments); "
                                    "a valid 99.9%% interval needs about %.3f; configured_within_ci=%s"
                                    % (half, D, c["dropped_segments"], need, eff["configured_within_ci"]))
        # The table says the same.
        r = d.ctl_ok("rule", "effect", rid)
        self.assertRegex(r.out, r"(?m)^\s+dropped\s+%d segs, %d pkts" % (c["dropped_segments"], c["dropped_packets"]))
        self.assertRegex(r.out, r"(?m)^\s+matched\s+%d segs, %d pkts, .*, 1 flows?$" %
                         (c["matched_segments"], c["matched_packets"]))
        m = re.search(r"(?m)^\s+retransmits\s+(\d+) segs \(([^)]*)\)", r.out)
        self.assertTrue(m, r)
        self.assertEqual(int(m.group(1)), total, r)
        table_types = {k: int(v) for k, v in (x.split() for x in m.group(2).split(", "))}
        self.assertEqual(table_types, rt, r)
        d.ctl_ok("rule", "rm", rid)


if __name__ == "__main__":
    main()
