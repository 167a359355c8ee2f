"""A one-shot `lossd --observe --events` ends on SIGTERM in every phase, within 5 s.

Phases, each several times: right after start (while the observer's programs load: the
load is cancelled between programs), idle, under events (a lossy paced TCP flow), and with
a stdout reader that stopped reading (the pipe full: the printer gives up at its exit
deadline and says how many events it did not print). Regressions: the exit path waited for
the ring reader's lock for ever ("lossd did not exit on SIGTERM"), and a full stdout pipe
held the printer for ever.
"""
import fcntl
import signal
import struct
import termios
import time
import unittest

from lab import observer, traffic
from lab.config import main
from lab.lossd import Lossd
from lab.netns import Lab, measured

P = 5311
EXIT_S = 5.0
F_SETPIPE_SZ = 1031


def pipe_bytes(f):
    """Bytes waiting in the pipe behind file object f (FIONREAD)."""
    return struct.unpack("i", fcntl.ioctl(f.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]


class SigtermEndsObserver(unittest.TestCase):
    def term_within(self, d, ctx, killed_ok=False):
        """SIGTERM without resuming a paused reader; the seconds taken to exit (0, or with
        killed_ok also the signal's default action: it came before lossd took it)."""
        t0 = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        try:
            rc = d.proc.wait(timeout=EXIT_S)
        except Exception:
            d.proc.kill()
            d.proc.wait()
            d.gate.set()
            self.fail("%s: lossd did not exit within %.0f s of SIGTERM; stderr:\n%s"
                      % (ctx, EXIT_S, d.stderr()))
        took = time.monotonic() - t0
        d.gate.set()
        d._t.join(30)
        self.assertIn(rc, (0, -signal.SIGTERM) if killed_ok else (0,),
                      "%s: exit %d; stderr:\n%s" % (ctx, rc, d.stderr()))
        return took

    def test_right_after_start(self):
        with Lab() as lab:
            for delay in (0, 0.05, 0.2, 0.5, 1.0, 2.0, 3.5):
                d = Lossd(lab, lab.a, ["--observe", "--events"])
                time.sleep(delay)
                took = self.term_within(d, "SIGTERM %.2f s after start" % delay, killed_ok=True)
                measured("sigterm_after_start", delay_s=delay, exit_s=round(took, 3), rc=d.proc.returncode,
                         ready=any(e.get("event") == "ready" for e in d.events))

    def test_idle(self):
        with Lab() as lab:
            for i in range(3):
                d = lab.lossd(lab.a, ["--observe", "--events"])
                time.sleep(0.3 * i)
                took = self.term_within(d, "idle round %d" % i)
                out = d.output()
                self.assertIsNotNone(out.totals, "no totals; stderr:\n" + out.stderr)
                self.assertEqual(out.bad_lines, [])
                measured("sigterm_idle", round=i, exit_s=round(took, 3))

    def lossy_flow(self, lab, rate_mbit=100, nbytes=40e6):
        return traffic.TcpFlow(lab, lab.b, lab.a, Lab.V4_B, P, nbytes=int(nbytes), rate_mbit=rate_mbit)

    def test_under_events(self):
        with Lab() as lab:
            rule = lab.lossd(lab.b, ["--iface", Lab.IF_B, "--proto", "tcp", "--dport", str(P),
                                     "--rate", "3%"])
            for i in range(2):
                d = lab.lossd(lab.a, ["--observe", "--events", "--watch-port", str(P)])
                flow = self.lossy_flow(lab)
                try:
                    deadline = time.monotonic() + 20
                    while not any(e.get("event") == "retransmit" for e in d.events):
                        self.assertLess(time.monotonic(), deadline, "no retransmit event in 20 s")
                        time.sleep(0.05)
                    took = self.term_within(d, "under events, round %d" % i)
                finally:
                    flow.close()
                out = d.output()
                self.assertIsNotNone(out.totals, "no totals; stderr:\n" + out.stderr)
                self.assertEqual(out.subscriber["unprinted"], 0, out.subscriber)
                self.assertEqual(len(out.retransmits) + len(out.closes) + len(out.stalls),
                                 out.subscriber["delivered"], out.subscriber)
                measured("sigterm_under_events", round=i, exit_s=round(took, 3),
                         retransmits=len(out.retransmits))
                lab.wait_idle(lab.a, lab.b, check=False)
            rule.stop()

    def test_stdout_not_read(self):
        """The reader stops reading while events flow (the pipe fills, the printer blocks):
        SIGTERM still ends lossd within 5 s; whatever it wrote is whole JSON lines, and the
        events it did not print are counted (on stderr, and in the subscriber line if that
        was written)."""
        with Lab() as lab:
            rule = lab.lossd(lab.b, ["--iface", Lab.IF_B, "--proto", "tcp", "--dport", str(P),
                                     "--rate", "10%"])
            for i in range(2):
                d = lab.lossd(lab.a, ["--observe", "--events", "--watch-port", str(P)])
                # One page of pipe: a few events fill it.
                fcntl.fcntl(d.proc.stdout.fileno(), F_SETPIPE_SZ, 4096)
                flow = self.lossy_flow(lab, rate_mbit=200, nbytes=500e6)
                try:
                    d.gate.clear()  # stop reading stdout
                    # Until the pipe is full: lossd's first unread line is in it (with one
                    # page, poll no longer says it takes more), then ~50 more events come.
                    deadline = time.monotonic() + 30
                    while pipe_bytes(d.proc.stdout) == 0:
                        self.assertTrue(flow.running(), "the flow ended before the pipe filled")
                        self.assertLess(time.monotonic(), deadline, "nothing in the pipe in 30 s")
                        time.sleep(0.1)
                    time.sleep(2)
                    self.assertTrue(flow.running(), "the flow ended before SIGTERM")
                    took = self.term_within(d, "stdout not read, round %d" % i)
                finally:
                    flow.close()
                out = d.output()
                self.assertEqual(out.bad_lines, [], "torn lines on stdout")
                if out.subscriber is not None:
                    printed = len(out.retransmits) + len(out.closes) + len(out.stalls)
                    self.assertEqual(printed + out.subscriber["unprinted"], out.subscriber["delivered"],
                                     out.subscriber)
                    unprinted = out.subscriber["unprinted"]
                else:
                    unprinted = None
                if unprinted or out.totals is None:
                    self.assertIn("stdout was not read in time", out.stderr,
                                  "no word on stderr of what was not written")
                measured("sigterm_stdout_not_read", round=i, exit_s=round(took, 3),
                         printed=len(out.retransmits), unprinted=unprinted,
                         totals_written=out.totals is not None)
                lab.wait_idle(lab.a, lab.b, check=False)
            rule.stop()

    def test_rule_stdout_not_read(self):
        """A one-shot rule reporting every 50 ms to a stdout nobody reads (the main thread
        blocks in a report): SIGTERM still detaches and ends it within 5 s, and the rule
        is gone from the interface."""
        with Lab() as lab:
            for i in range(2):
                d = lab.lossd(lab.a, ["--iface", Lab.IF_A, "--proto", "udp", "--dport", "9", "--rate", "0",
                                      "--interval", "50ms"])
                fcntl.fcntl(d.proc.stdout.fileno(), F_SETPIPE_SZ, 4096)
                d.gate.clear()
                time.sleep(2)  # ~40 reports of ~600 bytes: the page is full, a report waits
                self.assertGreater(pipe_bytes(d.proc.stdout), 0)
                took = self.term_within(d, "rule, stdout not read, round %d" % i)
                left = lab.run(lab.a, "tc", "filter", "show", "dev", Lab.IF_A, "ingress").stdout.strip()
                measured("sigterm_rule_stdout_not_read", round=i, exit_s=round(took, 3), tc_left=left)
                self.assertIn("stdout was not read in time", d.stderr())


if __name__ == "__main__":
    main()
