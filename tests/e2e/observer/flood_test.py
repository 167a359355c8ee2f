"""Observer e2e: a flood of retransmissions, every event accounted for.

Four unpaced connections A -> B for 3 s with TSO/GSO off on A's interface (one
wire segment per skb) and 10 % of data segments dropped at B's ingress: thousands
of retransmit events in a few seconds. While the traffic runs the test stops
reading lossd's stdout, so its printer blocks on the full pipe and the
subscriber's queue fills; the ring reader and the hub must not block on it.

Produced = delivered + counted lost, at every stage:
  ring_consumed + ring_lost == wanted events (all events - filtered + flow closes)
  hub_published == ring_consumed
  subscriber delivered + lost == hub_published
  printed retransmit + flow_close lines == delivered, hub sequence numbers unique
  (and gap-free when nothing was lost)
The kernel reconciliation of the same run is a separate test.
"""
import time
import unittest

from lab import observer, traffic
from lab.config import main
from lab.netns import Lab, measured
from lab.stats import short


P = 5308
CONNS = 4


class Flood(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with Lab() as lab:
            lab.run(lab.a, "ethtool", "-K", lab.IF_A, "tso", "off", "gso", "off")
            obs, inj = lab.start(observer.spec(lab.a),
                                 (lab.b, ["--iface", lab.IF_B, "--proto", "tcp", "--dport", str(P),
                                          "--payload", "only", "--rate", "10%"]))
            obs.gate.clear()  # stop reading lossd's stdout
            k0 = lab.counters(lab.a)
            srv = traffic.server(lab, lab.b, "0.0.0.0", P, conns=CONNS)
            cli = traffic.sender(lab, lab.a, lab.V4_B, P, rate_mbit=0, conns=CONNS, until_stdin=True)
            time.sleep(3)
            cls.paused_lines = len(obs.lines)
            s = traffic.finish(cli, stop=True)
            r = traffic.finish(srv)
            lab.wait_idle(lab.a)
            cls.dk = lab.counters(lab.a) - k0
            cls.out = obs.stop_observer()  # reads again, then SIGTERM
            cls.final = inj.stop()
            cls.sent, cls.received = s, r
        measured("flood", lines_read_while_paused=cls.paused_lines, bytes=r["bytes"],
                 injector_dropped_segs=cls.final["dropped_segments"],
                 kernel=short(cls.dk), observer=cls.out.summary())

    def test_many_retransmissions(self):
        self.assertEqual(self.received["bytes"], self.sent["bytes"])
        self.assertGreater(len(self.out.retransmits), 1000, self.out.summary())

    def test_every_event_accounted(self):
        out = self.out
        t = out.totals
        ctx = str(out.summary())
        self.assertEqual(t["filtered"], 0, ctx)
        self.assertEqual(t["flows_closed"], CONNS, ctx)
        observer.check_event_stream(self, out, ctx)

    def test_reconciles_with_kernel_counters(self):
        observer.reconcile(self, self.out, self.dk)


if __name__ == "__main__":
    main()
