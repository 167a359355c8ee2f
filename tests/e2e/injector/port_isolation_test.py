"""e2e 7: a rule on one port drops that port's traffic and no other's.

Four UDP flows at once, IPv4 and IPv6, two to the rule's port (100 %) and two
to the next port: the first two lose everything, the others nothing.
"""
import unittest

from lab import traffic
from lab.config import main
from lab.netns import Lab, measured


DROP, KEEP = 9201, 9202
N = 10_000
PPS = 6_000


class PortIsolation(unittest.TestCase):
    def test_100pct_on_one_port_0_lost_on_another(self):
        with Lab() as lab:
            d = lab.udp_rule_at_b(DROP, "100%")
            c0 = lab.counters(lab.b)
            flows = [dict(rx_ns=lab.b, tx_ns=lab.a, dst=dst, port=port, flow=i, count=N, pps=PPS)
                     for i, (dst, port) in enumerate([(lab.V4_B, DROP), (lab.V4_B, KEEP),
                                                      (lab.V6_B, DROP), (lab.V6_B, KEEP)])]
            res = traffic.udp_flows(lab, flows)
            dc = lab.counters(lab.b) - c0
            f = d.stop()
            got = {(fl["dst"], fl["port"]): r["unique"] for fl, (s, r) in zip(flows, res)}
            measured("port_isolation", received={"%s:%d" % k: v for k, v in got.items()},
                     matched_pkts=f["matched_packets"], dropped_pkts=f["dropped_packets"],
                     rcvbuf_errors=dc["Udp.RcvbufErrors"] + dc["Snmp6.Udp6RcvbufErrors"])
            for s, _ in res:
                self.assertEqual(s["sent"], N)
            self.assertEqual(dc["Udp.RcvbufErrors"] + dc["Snmp6.Udp6RcvbufErrors"], 0)
            self.assertEqual(got[(lab.V4_B, DROP)], 0, got)
            self.assertEqual(got[(lab.V6_B, DROP)], 0, got)
            self.assertEqual(got[(lab.V4_B, KEEP)], N, got)
            self.assertEqual(got[(lab.V6_B, KEEP)], N, got)
            self.assertEqual(f["matched_packets"], 2 * N, f)
            self.assertEqual(f["dropped_packets"], 2 * N, f)


if __name__ == "__main__":
    main()
