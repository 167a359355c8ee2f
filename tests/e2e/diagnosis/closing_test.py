"""Diagnosis after the application's close (issue 24): write-then-close, the common way a
sender ends, leaves the flow in FIN_WAIT1 with data unacknowledged, and its last ACKs no
longer reach tcp_probe (it runs in ESTABLISHED). lossd sees them from tcp_rcv_state_process
(fentry, obs_ack_closing): the stall detector and TraceFlow go on until everything, FIN
included, is acknowledged. The daemon runs in namespace A with the sender, whose send buffer
(--sndbuf, SO_SNDBUFFORCE) takes the whole transfer: its write returns at once and it shuts
its write side with all of it still to deliver.

  test_zero_window_after_close
      2 MiB at 100 Mbit/s to a receiver in B (SO_RCVBUF 128 KiB) that stops reading after
      256 KiB for 2 s: its window goes to 0 while the sender is in FIN_WAIT1. One zero_window
      stall, marked closing, about the pause long, the flow's summary carries it; the trace
      goes on to the ACK of the FIN (a sample whose ack_seq is its write_seq) with samples
      through the pause (the probe answers) and after it. Before: no stall, and the trace's
      last sample was before the shutdown.
  test_zero_window_in_last_ack
      The same, but the receiver shuts its write side on accept: the sender is in CLOSE_WAIT
      as it writes, and its shutdown takes it to LAST_ACK (the passive closer) with the data
      outstanding. The same stall, marked closing, and the trace to the ACK of its FIN.
  test_zero_window_in_close_wait
      The receiver shuts first and the sender's send buffer is small (64 KiB): it still
      writes through the pause, in CLOSE_WAIT, where the ACKs no longer reach tcp_probe
      either (a server answering a client that shut its side after the request). The stall,
      not marked closing (the application had not closed), and samples through the pause.
      Before: no stall, and no sample after the peer's FIN.
  test_rto_after_close
      A 100 % rule (data only, TTL 1 s) on A's egress, then 1 MiB at 20 Mbit/s written at
      once and the write side shut: every data segment meets the blackhole while the flow is
      in FIN_WAIT1; the RTO stall that follows ends after the rule's TTL, marked closing,
      caused_by the rule's drop, and GetRuleEffect credits the rule with it. The kernel's
      TCPTimeouts of A count the timeouts. Before: no stall at all.
"""

import subprocess
import time

from lab import stalls, traffic
from lab.config import PY, main
from lab.daemon import DaemonTestCase, wait_until
from lab.netns import measured

PAUSE = 2.0


def _receiver(lab, port, rcvbuf=0, pause_after=0, pause_secs=0.0, shut_first=False):
    srv = lab.popen(lab.b, [PY, traffic.TCPFLOW, "recv", "--bind", "0.0.0.0", "--port", str(port),
                            "--rcvbuf", str(rcvbuf), "--pause-after", str(pause_after),
                            "--pause-secs", str(pause_secs)] + (["--shut-first"] if shut_first else []),
                    stdout=subprocess.PIPE)
    if not srv.stdout.readline().startswith("READY"):
        srv.kill()
        raise AssertionError("receiver did not start")
    return srv


class Closing(DaemonTestCase):
    def run_closing(self, port, nbytes, rate_mbit, sndbuf=None, **recv):
        """The receiver, the Watch (stalls, flows, trace), then the sender that writes nbytes
        (at once: its send buffer takes them all, unless sndbuf says otherwise) and shuts its
        write side; returns (Case, sender's json)."""
        lab, d = self.lab, self.d
        srv = _receiver(lab, port, **recv)
        w = stalls.Watch(d, port)

        def go():
            cli = traffic.sender(lab, lab.a, lab.V4_B, port, nbytes=nbytes, rate_mbit=rate_mbit,
                                 sndbuf=sndbuf or 4 * nbytes, timeout=60)
            s = traffic.finish(cli, timeout=90)
            traffic.finish(srv)
            return s

        res, ds, dr = stalls._run(lab, lab.a, lab.b, go)
        w.finish(1)
        return stalls.Case("closing", res, ds, dr, w), res

    def test_zero_window_after_close(self):
        self.zero_window_case("zero_window_after_close", 5331, closing=True)

    def test_zero_window_in_last_ack(self):
        # The receiver shuts its side first: the sender is in CLOSE_WAIT when it writes, and
        # its shutdown takes it to LAST_ACK with all of it outstanding.
        self.zero_window_case("zero_window_in_last_ack", 5333, closing=True, shut_first=True)

    def test_zero_window_in_close_wait(self):
        # The same, with a small send buffer: the sender still writes (CLOSE_WAIT, not closed
        # by its application) through the pause. Before: no stall, no sample in the pause.
        self.zero_window_case("zero_window_in_close_wait", 5334, closing=False, shut_first=True,
                              sndbuf=64 << 10)

    def zero_window_case(self, name, port, closing, sndbuf=None, shut_first=False):
        c, res = self.run_closing(port, 2 << 20, 100, sndbuf=sndbuf, rcvbuf=128 << 10,
                                  pause_after=256 << 10, pause_secs=PAUSE, shut_first=shut_first)
        samples = c.samples()
        n = c.numbers()
        n["stall_events"] = [{"cause": stalls.cause_name(s.cause), "ms": s.duration_ns / 1e6,
                              "closing": s.closing, "at_close": s.at_close, "acks": s.acks} for s in c.stalls]
        last = samples[-1] if samples else None
        n["last_sample"] = None if last is None else {"ack_seq": last.ack_seq, "snd_una": last.snd_una,
                                                      "write_seq": last.write_seq}
        zw = [s for s in c.stalls if stalls.cause_name(s.cause) == "zero_window"]
        n["samples_in_pause"] = len([x for x in samples if zw and zw[0].start_mono_ns < x.time_mono_ns
                                     < zw[0].start_mono_ns + zw[0].duration_ns])
        measured(name, **n)
        self.assertEqual(c.errors, {}, "lossd's streams failed")
        self.assertEqual(res["bytes"], 2 << 20, n)
        self.assertGreaterEqual(c.receiver["TcpExt.TCPToZeroWindowAdv"], 1, n)
        self.assertEqual(len(zw), 1, n)
        s = zw[0]
        self.assertEqual(s.closing, closing, n)
        self.assertFalse(s.at_close, n)
        self.assertGreaterEqual(s.duration_ns, (PAUSE - 0.5) * 1e9, n)
        self.assertLessEqual(s.duration_ns, (PAUSE + 0.3) * 1e9, n)
        self.assertEqual(len(c.flows), 1, n)
        self.assertEqual(c.flows[0].stall_ns.get("zero_window"), s.duration_ns, n)
        # The trace saw the last ACK: everything written, the FIN's own sequence number too.
        self.assertIsNotNone(last, n)
        self.assertEqual(last.ack_seq, last.write_seq, n)
        self.assertGreater(n["samples_in_pause"], 0, n)
        self.assertTrue(any(x.time_mono_ns > s.start_mono_ns + s.duration_ns for x in samples), n)

    def test_rto_after_close(self):
        lab, d, pb = self.lab, self.d, self.pb
        port = 5332
        r = d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=port, payload="only",
                     rate=1.0, ttl_ns=1_000_000_000)
        t0 = time.monotonic_ns()
        c, res = self.run_closing(port, 1 << 20, 20)
        n = c.numbers()
        rto = [s for s in c.stalls if stalls.cause_name(s.cause) == "rto"]
        # The kernel ends the rule at its TTL; the daemon's reaper marks it on its next tick.
        info = wait_until(lambda: (lambda i: i if pb.RuleState.Name(i.state) != "RULE_STATE_ACTIVE" else None)(
            d.get(r.id)), 10, "the rule to expire")
        n["stall_events"] = [{"cause": stalls.cause_name(s.cause), "ms": round(s.duration_ns / 1e6),
                              "closing": s.closing, "backoff": s.backoff, "caused_by": s.caused_by.rule_id,
                              "ended_after_rule_ms": round((s.start_mono_ns + s.duration_ns - t0) / 1e6 - 1000)}
                             for s in c.stalls if stalls.cause_name(s.cause) == "rto"]
        n["dropped"] = info.counters.dropped_packets

        def credited():
            e = d.effect(r.id)
            return e if e.stalls_caused["rto"].count else None
        try:
            eff = wait_until(credited, 10, "the rule's effect to count the RTO stall")
        except AssertionError:
            eff = d.effect(r.id)
        n["stalls_caused"] = {k: (v.count, v.time_ns) for k, v in eff.stalls_caused.items() if v.count}
        measured("rto_after_close", **n)
        self.assertEqual(c.errors, {}, "lossd's streams failed")
        self.assertEqual(res["bytes"], 1 << 20, n)
        self.assertEqual(pb.RuleState.Name(info.state), "RULE_STATE_EXPIRED", n)
        self.assertGreater(info.counters.dropped_packets, 0, n)
        self.assertGreaterEqual(c.sender["TcpExt.TCPTimeouts"], 1, n)
        self.assertGreaterEqual(len(rto), 1, n)
        self.assertTrue(all(s.closing for s in rto), n)
        linked = [s for s in rto if s.caused_by.rule_id == r.id]
        self.assertGreaterEqual(len(linked), 1, n)
        # At 100 % nothing was delivered while the rule lived: the stall ends after it.
        self.assertTrue(all(s.start_mono_ns + s.duration_ns > t0 + 1_000_000_000 for s in linked), n)
        self.assertGreaterEqual(max(s.backoff for s in linked), 1, n)
        self.assertGreaterEqual(n["stalls_caused"].get("rto", (0, 0))[0], 1, n)
        self.assertEqual(len(c.flows), 1, n)
        self.assertGreaterEqual(c.flows[0].stall_ns.get("rto", 0), linked[0].duration_ns, n)


if __name__ == "__main__":
    main()
