"""e2e 2: 100,000 counted UDP datagrams through a 1 % lossd rule (tcx ingress).

The number lost must lie in the 99.9 % binomial interval for n=100,000,
p=0.01, equal lossd's dropped_pkts exactly (no other loss: RcvbufErrors
delta 0), and the losses must not be periodic. A second, smaller run does the
same through the XDP hook (--hook xdp) at 5 %.
"""
import unittest

from lab import traffic
from lab.config import main
from lab.netns import Lab, measured
from lab.stats import binom_interval


N = 100_000
PPS = 25_000


class UdpRate(unittest.TestCase):
    def run_flow(self, lab, args, n, pps, p, port, hook_name, label):
        d = lab.lossd(lab.b, ["--iface", lab.IF_B, "--proto", "udp", "--dport", str(port)] + args)
        c0 = lab.counters(lab.b)
        ((sent, got),) = traffic.udp_flows(lab, [dict(rx_ns=lab.b, tx_ns=lab.a, dst=lab.V4_B, port=port,
                                                      flow=2, count=n, pps=pps, list_missing=True)])
        dc = lab.counters(lab.b) - c0
        f = d.stop()
        lost = n - got["unique"]
        missing = got["missing"] + list(range(got["max_seq"] + 1, n))
        gaps = {b - a for a, b in zip(missing, missing[1:])}
        lo, hi = binom_interval(n, p)
        measured(label, n=n, p=p, lost=lost, interval=[lo, hi], dropped_pkts=f["dropped_packets"],
                 dropped_segs=f["dropped_segments"], matched_pkts=f["matched_packets"],
                 rcvbuf_errors=dc["Udp.RcvbufErrors"], distinct_gaps=len(gaps),
                 hook=d.hooks)
        diag = "lost=%d interval=[%d,%d] final=%s rcvbuf=%d" % (lost, lo, hi, f, dc["Udp.RcvbufErrors"])
        self.assertEqual(sent["sent"], n, diag)
        self.assertEqual(dc["Udp.RcvbufErrors"], 0, "receiver overflowed: " + diag)
        self.assertEqual(dc["Udp.InErrors"], 0, diag)
        self.assertEqual(got["dups"], 0, diag)
        self.assertEqual(len(missing), lost, diag)
        self.assertEqual(f["matched_packets"], n, diag)
        self.assertEqual(lost, f["dropped_packets"], "every loss is lossd's and lossd counted every one: " + diag)
        self.assertEqual(f["dropped_segments"], f["dropped_packets"], diag)
        self.assertEqual(f["hooks"][hook_name]["dropped"], f["dropped_packets"], diag)
        self.assertTrue(lo <= lost <= hi, "loss outside the 99.9 %% binomial interval: " + diag)
        # Bernoulli losses are not periodic: the gaps between them take many values.
        self.assertGreater(len(gaps), 20, "periodic losses? gaps %s" % sorted(gaps)[:50])
        return d

    def test_1_percent_tcx_ingress(self):
        with Lab() as lab:
            d = self.run_flow(lab, ["--rate", "1%"], N, PPS, 0.01, 9010, "tc_ingress", "udp_rate_1pct_tcx")
            self.assertIn("tcx ingress to " + lab.IF_B, d.hooks)

    def test_5_percent_xdp(self):
        with Lab() as lab:
            d = self.run_flow(lab, ["--hook", "xdp", "--rate", "5%"], 20_000, PPS, 0.05, 9011, "xdp",
                              "udp_rate_5pct_xdp")
            self.assertIn("XDP", d.hooks)


if __name__ == "__main__":
    main()
