"""Diagnosis 1 (issue 13, the seed's case 3): Nagle meets the peer's delayed ACK.

The daemon runs in namespace A with the client (lab.stalls.nagle): each 400-byte request goes
out in two writes (300 + 100 bytes) and the server (TCP_NODELAY) answers only a whole request.
Without TCP_NODELAY, Nagle holds the second write while the first is unacknowledged, and the
server delays that ACK (40 ms minimum on Linux): one stall per request.

  test_nagle_named       stalls named nagle_delayed_ack for >= 90 % of the stall time, about
                         one per request, each at least the delayed-ACK minimum long; as many
                         as the server's delayed ACKs (TcpExt.DelayedACKs of B); the flow's
                         closing summary carries the same count and time as the events
  test_nodelay_no_stall  the same client with TCP_NODELAY: no nagle_delayed_ack stall, stall
                         time under 1 % of the run, and at least 10 times the requests
"""

from lab import stalls
from lab.config import main
from lab.daemon import DaemonTestCase
from lab.netns import measured

DELACK_MIN_NS = 40_000_000
SECONDS = 3.0


class Nagle(DaemonTestCase):
    def check_streams(self, c):
        self.assertEqual(c.errors, {}, "lossd's streams failed")
        self.assertEqual(c.gaps, [], "stall events lost")
        self.assertEqual(len(c.flows), 1, "one closing summary of the connection")

    def test_nagle_named(self):
        c = stalls.nagle(self.lab, self.d, nodelay=False, seconds=SECONDS)
        n = c.numbers()
        measured("nagle", **n)
        self.check_streams(c)
        reqs = c.workload["requests"]
        # Each request waited for the delayed ACK: at most one per 40 ms.
        self.assertGreaterEqual(reqs, 10, n)
        self.assertLessEqual(reqs, SECONDS / 0.040 + 1, n)
        self.assertGreaterEqual(c.share("nagle_delayed_ack"), 0.90, n)
        nagle = [s for s in c.stalls if stalls.cause_name(s.cause) == "nagle_delayed_ack"]
        # One per request (the last may close before its stall ended, or none at all).
        self.assertGreaterEqual(len(nagle), 0.9 * reqs, n)
        self.assertLessEqual(len(nagle), reqs + 1, n)
        durs = sorted(s.duration_ns for s in nagle)
        self.assertGreaterEqual(durs[len(durs) // 2], DELACK_MIN_NS, n)
        # a jiffy early at most (HZ >= 100)
        self.assertGreaterEqual(durs[0], DELACK_MIN_NS - 10_000_000, n)
        for s in nagle:
            self.assertTrue(s.nagle, s)
        # The kernel's own count: the server's delayed-ACK timer fired once per stall.
        dack = c.receiver["TcpExt.DelayedACKs"]
        self.assertLessEqual(abs(dack - len(nagle)), max(3, 0.1 * len(nagle)), n)
        # The flow's record says the same as the events.
        f = c.flows[0]
        self.assertEqual(f.stalls, len(c.stalls), n)
        self.assertEqual(sum(f.stall_ns.values()), sum(s.duration_ns for s in c.stalls), n)
        self.assertEqual(f.stall_ns.get("nagle_delayed_ack", 0), sum(durs), n)

    def test_nodelay_no_stall(self):
        base = stalls.nagle(self.lab, self.d, nodelay=False, seconds=1.0, trace=False)
        c = stalls.nagle(self.lab, self.d, nodelay=True, seconds=SECONDS, trace=False)
        n = c.numbers()
        measured("nagle_nodelay", nodelay=n, nagle_requests_per_s=base.workload["requests_per_s"])
        self.check_streams(c)
        self.assertEqual([s for s in c.stalls if stalls.cause_name(s.cause) == "nagle_delayed_ack"], [], n)
        self.assertLess(sum(s.duration_ns for s in c.stalls), 0.01 * SECONDS * 1e9, n)
        self.assertGreaterEqual(c.workload["requests_per_s"], 10 * base.workload["requests_per_s"], n)


if __name__ == "__main__":
    main()
