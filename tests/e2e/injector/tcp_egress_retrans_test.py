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


RULE = ["--dir", "egress", "--proto", "tcp", "--dport", "5201", "--payload", "only", "--rate", "1%"]


class TcpEgressRetrans(unittest.TestCase):
    def test_egress_1pct_clsact_stolen_is_network_loss(self):
        with Lab() as lab:
            run = traffic.tcp_loss_run(lab, lab.a, ["--iface", lab.IF_A] + RULE, lab.V6_B)
            s = traffic.tcp_summary(run)
            measured("tcp_egress_1pct_clsact_v6", hook=run["hooks"], **s)
            f, da = traffic.assert_network_loss(self, run, "tc_egress", "clsact egress on " + lab.IF_A)
            self.assertEqual(run["receiver"]["bytes"], int(187.5e6), s)
            # STOLEN is not a local drop: TCP retried nothing as a failed transmit.
            self.assertEqual(da["TcpExt.TCPRetransFail"], 0, s)


if __name__ == "__main__":
    main()
