"""Diagnosis 4 (issue 13): a receiver that stops reading.

The daemon runs in namespace A with the sender (lab.stalls.zero_window): 8 MiB at 100 Mbit/s
to a receiver in B (SO_RCVBUF 256 KiB) that stops reading after 2 MiB for 3 s. Its buffer
fills, it advertises a zero window (TcpExt.TCPToZeroWindowAdv of B), the sender probes it (TcpExt.TCPWinProbe of A,
not retransmissions: Tcp.RetransSegs counts none), and the window opens when it reads again
(TCPFromZeroWindowAdv).

  test_zero_window   one stall named zero_window, about the pause long, window 0, its probe
                     answers (acks) and backoff as the kernel's probes count; the flow's
                     summary carries it
  test_reading       the same transfer to a receiver that never pauses: no zero_window stall
                     unless the kernel says it advertised a zero window, none over 0.5 s
"""

from lab import stalls
from lab.config import main
from lab.daemon import DaemonTestCase
from lab.netns import measured

PAUSE = 3.0


class ZeroWindow(DaemonTestCase):
    def test_zero_window(self):
        c = stalls.zero_window(self.lab, self.d, pause_secs=PAUSE)
        n = c.numbers()
        n["stall_events"] = [{"cause": stalls.cause_name(s.cause), "ms": s.duration_ns / 1e6, "acks": s.acks,
                              "backoff": s.backoff, "min_window": s.min_window, "retransmits": s.retransmits}
                             for s in c.stalls]
        measured("zero_window", **n)
        self.assertEqual(c.errors, {}, "lossd's streams failed")
        self.assertEqual(c.gaps, [])
        self.assertEqual(len(c.flows), 1)
        probes = c.sender["TcpExt.TCPWinProbe"]
        self.assertGreaterEqual(probes, 1, n)
        # No probe counts as a retransmission (a spurious TLP of a busy machine may: D-SACKed).
        self.assertEqual(c.sender["Tcp.RetransSegs"], c.sender["TcpExt.TCPDSACKRecvSegs"], n)
        self.assertGreaterEqual(c.receiver["TcpExt.TCPToZeroWindowAdv"], 1, n)
        self.assertGreaterEqual(c.receiver["TcpExt.TCPFromZeroWindowAdv"], 1, n)
        zw = [s for s in c.stalls if stalls.cause_name(s.cause) == "zero_window"]
        self.assertEqual(len(zw), 1, n)
        s = zw[0]
        self.assertEqual(s.min_window, 0, n)
        # From the last delivery (the buffer full, a few ms after the pause began) to the
        # window update that ended the pause.
        self.assertGreaterEqual(s.duration_ns, (PAUSE - 0.5) * 1e9, n)
        self.assertLessEqual(s.duration_ns, (PAUSE + 0.3) * 1e9, n)
        # Each probe was answered by an ACK that delivered nothing; the window update that
        # ended the pause may be one more.
        self.assertGreaterEqual(s.acks, probes, n)
        self.assertLessEqual(s.acks, probes + 1, n)
        self.assertGreaterEqual(s.backoff, 1, n)
        self.assertEqual(c.flows[0].stall_ns.get("zero_window"), s.duration_ns, n)

    def test_reading(self):
        c = stalls.zero_window(self.lab, self.d, pause_secs=0, trace=False)
        n = c.numbers()
        measured("zero_window_none", **n)
        self.assertEqual(c.errors, {}, "lossd's streams failed")
        zw = [s for s in c.stalls if stalls.cause_name(s.cause) == "zero_window"]
        # A reading receiver can still fall behind on a busy machine for a moment (the kernel
        # says so: TCPToZeroWindowAdv); it never holds the window shut long.
        if c.receiver["TcpExt.TCPToZeroWindowAdv"] == 0:
            self.assertEqual(zw, [], n)
        self.assertEqual([s for s in zw if s.duration_ns > 500_000_000], [], n)


if __name__ == "__main__":
    main()
