"""e2e 1: 100,000 counted UDP datagrams through a 0 % lossd rule: exactly 0 lost.

The seed experiment's kernel-module dropper lost 59,000 of 100,000 here at a
configured 0 % (docs/architecture.md#random-source). The flow is paced so the receiver's socket
never overflows (RcvbufErrors delta must be 0), and lossd's rule must have
matched every one of the datagrams.
"""
import unittest

from lab import traffic
from lab.config import main
from lab.netns import Lab, measured
from lab.stats import softnet_dropped


N, PPS, PORT = 100_000, 25_000, 9000  # datagrams, their rate, the port


class UdpZeroLoss(unittest.TestCase):
    def test_100k_datagrams_at_0_percent_lose_none(self):
        with Lab() as lab:
            d = lab.udp_rule_at_b(PORT, "0%")
            self.assertIn("tcx ingress to " + lab.IF_B, d.hooks)
            c0, sd0, l0 = lab.counters(lab.b), softnet_dropped(), lab.link_stats(lab.b, lab.IF_B)
            ((sent, got),) = traffic.udp_flows(lab, [dict(rx_ns=lab.b, tx_ns=lab.a, dst=lab.V4_B,
                                                          port=PORT, flow=1, count=N, pps=PPS)])
            dc, sd = lab.counters(lab.b) - c0, softnet_dropped() - sd0
            l1 = lab.link_stats(lab.b, lab.IF_B)
            veth_rx_dropped = l1["rx_dropped"] - l0["rx_dropped"]
            f = d.stop()
            lost = N - got["unique"]
            measured("udp_zero_loss", sent=sent["sent"], received=got["unique"], lost=lost,
                     matched_pkts=f["matched_packets"], dropped_pkts=f["dropped_packets"],
                     rcvbuf_errors=dc["Udp.RcvbufErrors"], udp_in_errors=dc["Udp.InErrors"],
                     softnet_dropped=sd, veth_rx_dropped=veth_rx_dropped, send_secs=sent["secs"])
            diag = ("sender %s receiver %s final %s udp deltas rcvbuf=%d inerr=%d; softnet drops=%d, "
                    "veth rx_dropped=%d" % (sent, got, f, dc["Udp.RcvbufErrors"], dc["Udp.InErrors"], sd,
                                            veth_rx_dropped))
            self.assertEqual(sent["sent"], N, diag)
            self.assertEqual(dc["Udp.RcvbufErrors"], 0, "receiver overflowed, pace lower: " + diag)
            self.assertEqual(dc["Udp.InErrors"], 0, diag)
            self.assertEqual(got["dups"], 0, diag)
            self.assertEqual(got["foreign"], 0, diag)
            self.assertEqual(lost, 0, diag)
            self.assertEqual(f["matched_packets"], N, diag)
            self.assertEqual(f["matched_segments"], N, diag)
            self.assertEqual(f["dropped_packets"], 0, diag)
            self.assertEqual(f["dropped_segments"], 0, diag)
            self.assertEqual(f["hooks"]["tc_ingress"]["dropped"], 0, diag)


if __name__ == "__main__":
    main()
