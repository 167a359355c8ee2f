"""Daemon e2e 3: rules made through gRPC drop real traffic, exactly as counted.

The daemon runs in namespace A.

  test_udp_port_isolation      100 % on one UDP port (tcx ingress of e2ea): every datagram of
                               that port dropped and counted, none of another port sent at the
                               same time
  test_udp_1_percent_and_effect   1 % of 100,000 datagrams: lost == dropped_packets, inside the
                               binomial interval (lab.stats.CONF); GetRuleEffect's measured rate is
                               dropped/matched and its interval is the 99.9 % Wilson interval
  test_deterministic_models_expected_drops   every 4th and first 5 of three UDP flows each:
                               GetRuleEffect states the expected drops from the data plane's
                               per-flow counts (sum of floor(n/4), of min(n, 5)), equal to what
                               was dropped and to what the receivers lost; lossctl rule effect
                               and the Python client say "as configured" (issue 24: before,
                               "configured -100%", "OUTSIDE")
  test_tcp_effect_equals_drops a paced TCP flow A -> B under 1 % on A's egress (clsact): the
                               effect's retransmitted segments (all types) == A's TcpRetransSegs
                               delta == dropped_segments + TCPDSACKRecvSegs delta
"""

import subprocess
import sys

from lab import config, daemon, traffic
from lab.config import main
from lab.netns import measured
from lab.stats import binom_interval
from lossd_client.units import wilson_interval as wilson  # client/python, stdlib only
from lab.daemon import DaemonTestCase, wait_until


N = 100_000
PPS = 50_000


class DaemonTraffic(DaemonTestCase):
    pass

    def counters_settled(self, rid, n):
        return wait_until(lambda: (lambda c: c if c.matched_packets >= n else None)(self.d.get(rid).counters),
                          5, "matched_packets >= %d" % n)

    def test_udp_port_isolation(self):
        lab, d = self.lab, self.d
        r = d.create(interface=lab.IF_A, protocol="udp", dport=9301, rate=1.0)
        self.assertEqual(list(r.attachments), ["tcx ingress to " + lab.IF_A])
        n = 5000
        res = traffic.udp_flows(lab, [
            dict(rx_ns=lab.a, tx_ns=lab.b, dst=lab.V4_A, port=9301, flow=1, count=n, pps=20000),
            dict(rx_ns=lab.a, tx_ns=lab.b, dst=lab.V4_A, port=9302, flow=2, count=n, pps=20000)])
        (s1, g1), (s2, g2) = res
        c = self.counters_settled(r.id, n)
        measured("udp_port_isolation", sent=[s1["sent"], s2["sent"]], received=[g1["unique"], g2["unique"]],
                 matched=c.matched_packets, dropped=c.dropped_packets)
        self.assertEqual((s1["sent"], s2["sent"]), (n, n))
        self.assertEqual(g1["unique"], 0, "the 100 % port got datagrams")
        self.assertEqual(g2["unique"], n, "the other port lost datagrams")
        self.assertEqual((c.matched_packets, c.dropped_packets, c.dropped_segments), (n, n, n))

    def test_deterministic_models_expected_drops(self):
        lab, d = self.lab, self.d
        counts = (1000, 1001, 1003)  # datagrams of each flow
        nth = d.create(interface=lab.IF_A, protocol="udp", dport=(9311, 9313), every_nth=4)
        first = d.create(interface=lab.IF_A, protocol="udp", dport=(9321, 9323), first_k=5)
        flows = [dict(rx_ns=lab.a, tx_ns=lab.b, dst=lab.V4_A, port=base + i, flow=10 + base % 100 + i,
                      count=n, pps=10000) for base in (9311, 9321) for i, n in enumerate(counts)]
        res = traffic.udp_flows(lab, flows)
        lost = [s["sent"] - g["unique"] for s, g in res]
        self.counters_settled(nth.id, sum(counts))
        self.counters_settled(first.id, sum(counts))
        want = {nth.id: sum(n // 4 for n in counts), first.id: sum(min(n, 5) for n in counts)}
        got = {}
        for rid, lost_here in ((nth.id, sum(lost[:3])), (first.id, sum(lost[3:]))):
            e = d.effect(rid)
            got[rid] = dict(deterministic=e.deterministic, has=e.HasField("expectation"),
                            expected=e.expectation.expected_dropped_packets, of=e.expectation.matched_packets,
                            dropped=e.expectation.dropped_packets, flows=e.expectation.flows,
                            within=e.configured_within_ci, configured=e.configured_rate,
                            counters_dropped=e.counters.dropped_packets, lost=lost_here)
        measured("deterministic_effect", want=want, got=got)
        for rid, g in got.items():
            self.assertTrue(g["deterministic"] and g["has"], got)
            self.assertEqual((g["expected"], g["dropped"], g["counters_dropped"], g["lost"]),
                             (want[rid],) * 4, got)
            self.assertEqual((g["of"], g["flows"]), (sum(counts), 3), got)
            self.assertTrue(g["within"], got)
        self.assertAlmostEqual(got[first.id]["configured"], 15 / sum(counts))
        self.assertAlmostEqual(got[nth.id]["configured"], 0.25)
        if config.LOSSCTL:
            out = subprocess.run([config.LOSSCTL, "--addr", d.addr, "rule", "effect", str(first.id)],
                                 capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 0, out)
            self.assertIn("expected     15 drops of the 3004 packets of 3 flows; 15 dropped  (as configured)",
                          out.stdout)
            self.assertNotIn("OUTSIDE", out.stdout)
            self.assertNotIn("-100", out.stdout)
        sys.path.insert(0, config.PYCLIENT)
        from lossd_client import Client
        with Client(d.sock, stubs=config.STUBS, timeout=30) as c:
            e = c.rule_effect(nth.id)
        self.assertEqual((e.deterministic, e.expected_dropped, e.expected_actual, e.configured_within_ci),
                         (True, want[nth.id], want[nth.id], True), str(e))
        self.assertIn("as configured", str(e))

    def test_udp_1_percent_and_effect(self):
        lab, d = self.lab, self.d
        port = 9303
        r = d.create(interface=lab.IF_A, protocol="udp", dport=port, rate=0.01)
        c0 = lab.counters(lab.a)
        ((sent, got),) = traffic.udp_flows(lab, [dict(rx_ns=lab.a, tx_ns=lab.b, dst=lab.V4_A, port=port,
                                                      flow=3, count=N, pps=PPS)])
        dc = lab.counters(lab.a) - c0
        c = self.counters_settled(r.id, N)
        lost = N - got["unique"]
        lo, hi = binom_interval(N, 0.01)
        e = d.effect(r.id)
        diag = "lost=%d interval=[%d,%d] counters=%s rcvbuf=%d" % (lost, lo, hi, c, dc["Udp.RcvbufErrors"])
        measured("udp_1pct_via_grpc", n=N, lost=lost, interval=[lo, hi], dropped=c.dropped_packets,
                 matched=c.matched_packets, measured_rate=e.measured_rate,
                 ci=[e.rate_ci_low, e.rate_ci_high], configured_within_ci=e.configured_within_ci,
                 rcvbuf_errors=dc["Udp.RcvbufErrors"])
        self.assertEqual(sent["sent"], N, diag)
        self.assertEqual(dc["Udp.RcvbufErrors"], 0, "receiver overflowed: " + diag)
        self.assertEqual(got["dups"], 0, diag)
        self.assertEqual(c.matched_packets, N, diag)
        self.assertEqual(lost, c.dropped_packets, diag)
        self.assertEqual(c.dropped_segments, c.dropped_packets, diag)
        self.assertTrue(lo <= lost <= hi, "loss outside the binomial interval: " + diag)
        # GetRuleEffect agrees with the counters.
        self.assertEqual(e.counters, d.get(r.id).counters)
        self.assertEqual(e.configured_rate, 0.01)
        self.assertEqual(e.measured_rate, c.dropped_packets / c.matched_packets)
        wlo, whi = wilson(c.dropped_packets, c.matched_packets)
        self.assertAlmostEqual(e.rate_ci_low, wlo, places=12)
        self.assertAlmostEqual(e.rate_ci_high, whi, places=12)
        self.assertTrue(e.rate_ci_low <= e.measured_rate <= e.rate_ci_high)
        self.assertEqual(e.configured_within_ci, e.rate_ci_low <= 0.01 <= e.rate_ci_high)
        self.assertTrue(e.configured_within_ci, diag)
        # The interval is the binomial one, in rates: the count interval sits inside it.
        self.assertTrue(e.rate_ci_low * N <= lost <= e.rate_ci_high * N)
        self.assertEqual(e.flows, 0)  # UDP: no TCP flow
        self.assertEqual(sum(e.retransmitted_segments.values()), 0)

    def test_tcp_effect_equals_drops(self):
        lab, d = self.lab, self.d
        r = d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=5201, payload="only",
                     rate=0.01)
        self.assertEqual(list(r.attachments), ["clsact egress on " + lab.IF_A])
        a0, b0 = lab.counters(lab.a), lab.counters(lab.b)
        sender, receiver = traffic.tcp_flow(lab, lab.b, lab.a, lab.V4_B, mbytes=150, rate_mbit=500)
        da, db = lab.counters(lab.a) - a0, lab.counters(lab.b) - b0
        retrans, dsack = da["Tcp.RetransSegs"], da["TcpExt.TCPDSACKRecvSegs"]

        e = daemon.effect_reaching(d, r.id, retrans, 5)
        c = e.counters
        rtx = {k: v for k, v in e.retransmitted_segments.items() if v}
        total = sum(rtx.values())
        numbers = dict(retrans_segs=retrans, dsack_recv_segs=dsack, effect_retransmitted=rtx,
                       effect_total=total, dropped_segs=c.dropped_segments, dropped_pkts=c.dropped_packets,
                       matched_segs=c.matched_segments, matched_pkts=c.matched_packets,
                       measured_rate=e.measured_rate, ci=[e.rate_ci_low, e.rate_ci_high],
                       flows=e.flows, sender_total_retrans=sender["total_retrans"],
                       fast=da["TcpExt.TCPFastRetrans"], slow_start=da["TcpExt.TCPSlowStartRetrans"],
                       probes=da["TcpExt.TCPLossProbes"], timeouts=da["TcpExt.TCPTimeouts"],
                       bytes=receiver["bytes"])
        measured("tcp_effect_vs_drops", **numbers)
        self.assertEqual(receiver["bytes"], 150_000_000, numbers)
        self.assertGreater(c.dropped_segments, 0, numbers)
        self.assertEqual(da["TcpExt.TCPRetransFail"], 0, numbers)
        self.assertEqual(db["Tcp.OutRsts"] + da["Tcp.OutRsts"], 0, numbers)
        # The kernel's own relation: every dropped segment retransmitted once, plus the
        # spurious retransmissions the receiver reported by D-SACK.
        self.assertEqual(retrans, c.dropped_segments + dsack, numbers)
        self.assertEqual(sender["total_retrans"], retrans, numbers)
        # The daemon's effect: the same count, over all retransmission types.
        self.assertEqual(total, retrans, numbers)
        self.assertEqual(total, c.dropped_segments + dsack, numbers)
        self.assertEqual(e.flows, 1, numbers)
        # The rate and its interval count skbs, the trial (a GSO skb is dropped whole),
        # so the rate lies inside its own interval; segments are only counted.
        self.assertEqual(e.measured_rate, c.dropped_packets / c.matched_packets)
        lo, hi = wilson(c.dropped_packets, c.matched_packets)
        self.assertAlmostEqual(e.rate_ci_low, lo, places=12)
        self.assertAlmostEqual(e.rate_ci_high, hi, places=12)
        self.assertTrue(e.rate_ci_low <= e.measured_rate <= e.rate_ci_high, numbers)
        # Per skb the loss is Bernoulli(1 %).
        plo, phi = binom_interval(c.matched_packets, 0.01)
        self.assertTrue(plo <= c.dropped_packets <= phi, numbers)



if __name__ == "__main__":
    main()
