"""e2e 4: 1 % loss on the sender's own egress (--dir egress: clsact filter
returning TC_ACT_STOLEN) under a paced TCP flow over IPv6: the local stack
must see network loss, i.e. retransmit every dropped segment (a local drop,
TC_ACT_SHOT, would instead be re-queued without retransmission: docs/architecture.md#egress-verdicts).

Exact relation asserted, as in the ingress test (see its docstring):

    TcpRetransSegs == dropped_segs + TCPDSACKRecvSegs
"""
import unittest

from lab import traffic
from lab.config import main
from lab.netns import Lab, measured
from lab.stats import binom_interval


RULE = ["--dir", "egress", "--proto", "tcp", "--dport", "5201", "--payload", "only", "--rate", "1%"]


class TcpEgressRetrans(unittest.TestCase):
    def test_egress_1pct_clsact_stolen_is_network_loss(self):
        with Lab() as lab:
            run = traffic.tcp_loss_run(lab, lab.a, ["--iface", lab.IF_A] + RULE, lab.V6_B)
            s = traffic.tcp_summary(run)
            measured("tcp_egress_1pct_clsact_v6", hook=run["ready"]["hooks"], **s)
            f, da = run["final"], run["da"]
            self.assertIn("clsact egress on " + lab.IF_A, run["ready"]["hooks"])
            self.assertEqual(run["receiver"]["bytes"], int(187.5e6), s)
            self.assertEqual(run["sender"]["errors"], {}, s)
            self.assertGreater(f["dropped_segs"], 0, s)
            self.assertEqual(f["hooks"]["tc_egress"]["dropped"], f["dropped_pkts"], s)
            # STOLEN is not a local drop: TCP retried nothing as a failed transmit.
            self.assertEqual(da["TcpExt.TCPRetransFail"], 0, s)
            self.assertEqual(da["Tcp.RetransSegs"],
                             f["dropped_segs"] + da["TcpExt.TCPDSACKRecvSegs"], s)
            self.assertEqual(run["sender"]["total_retrans"], da["Tcp.RetransSegs"], s)
            self.assertEqual(run["db"]["Tcp.OutRsts"] + da["Tcp.OutRsts"], 0, s)
            lo, hi = binom_interval(f["matched_pkts"], 0.01)
            self.assertTrue(lo <= f["dropped_pkts"] <= hi, "dropped skbs outside [%d, %d]: %s" % (lo, hi, s))


if __name__ == "__main__":
    main()
