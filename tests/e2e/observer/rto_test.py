"""Observer e2e: retransmission timeouts and tail-loss probes.

Blackout: during a paced bulk transfer A -> B a second lossd drops every data
segment at B's ingress for 1 s (--rate 100% --duration 1s). The sender's
probe and timeouts are lost until the link comes back: several RTO
retransmissions of the head (backoff growing), then the rest of the window
resent in Loss state (TCPSlowStartRetrans). The observer runs in A.

Tail drop: request/response over one connection, B answers each 64-byte
request with 100 bytes; a rule at A's ingress drops the first K response
segments (--payload only --first K). With K = 1 the lost response is the
tail and a tail-loss probe (TLP) resends it; with K = 2 the probe is lost
too and the retransmission timer resends it (RTO). The observer runs in B
(the responder).

Every run asserts the full reconciliation of lab.observer.reconcile; the types are
checked against the counters that define them (TCPLossProbes for TLP,
TCPTimeouts for RTO, TCPSlowStartRetrans for Loss).
"""
import time
import unittest

from lab import observer, traffic
from lab.lossd import type_name
from lab.config import main
from lab.netns import Lab, measured


P = 5302


class Blackout(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with Lab() as lab:
            def run_traffic():
                srv = traffic.server(lab, lab.b, "0.0.0.0", P)
                cli = traffic.sender(lab, lab.a, lab.V4_B, P, rate_mbit=300, until_stdin=True)
                bo = lab.lossd(lab.b, ["--iface", lab.IF_B, "--proto", "tcp", "--dport", str(P),
                                       "--payload", "only", "--rate", "100%", "--duration", "1s"])
                rc = bo.wait_exit(timeout=30)
                time.sleep(1.5)  # the link is back; let the sender recover before it ends
                s = traffic.finish(cli, stop=True)
                r = traffic.finish(srv)
                return s, r, rc, bo.output().final
            cls.run_ = observer.observe(lab, lab.a, run_traffic)
            s, r, rc, cls.blackout = cls.run_.traffic
            measured("rto_blackout", blackout_rc=rc, blackout_dropped_segs=(cls.blackout or {}).get(
                "dropped_segments"), **cls.run_.numbers())

    def test_blackout_rule_ran(self):
        s, r, rc, final = self.run_.traffic
        self.assertEqual(rc, 0)
        self.assertIsNotNone(final, "the 1 s rule printed no final event")
        self.assertGreater(final["dropped_segments"], 0, final)
        self.assertEqual(final["dropped_packets"], final["matched_packets"], "rate 100%%: %s" % (final,))
        self.assertEqual(r["bytes"], s["bytes"])

    def test_reconciles_with_kernel_counters(self):
        observer.reconcile(self, self.run_.out, self.run_.dk)

    def test_rto_and_loss_retransmissions(self):
        out, dk = self.run_.out, self.run_.dk
        n = self.run_.numbers()
        self.assertGreater(out.ev("rto"), 0, n)
        self.assertGreater(out.segs("loss"), 0, n)
        self.assertLessEqual(out.ev("rto"), dk["TcpExt.TCPTimeouts"], n)
        rtos = [e for e in out.retransmits if type_name(e) == "rto"]
        self.assertEqual(len(rtos), out.ev("rto"))
        for i, e in enumerate(rtos):
            # The timer's resend of the head: Loss state, cwnd 1, one segment, and the
            # i-th consecutive timeout has i earlier backoffs.
            self.assertEqual((e.state.ca_state, e.state.cwnd, e.segments), (4, 1, 1), e)
            self.assertEqual(e.state.retransmits, i + 1, e)
            self.assertEqual(e.state.backoff, i, e)
        fl = [c for c in out.closes if c.tuple.remote_port == P]
        self.assertEqual(len(fl), 1)
        # icsk_backoff as read at the tracepoint (the kernel increments it after the resend).
        self.assertEqual(fl[0].max_backoff, rtos[-1].state.backoff, fl[0])
        self.assertGreater(fl[0].ca_time_ns["loss"], 0, fl[0])
        self.assertEqual(fl[0].retransmitted_segments["rto"], out.segs("rto"), fl[0])
        self.assertEqual(fl[0].retransmitted_segments["loss"], out.segs("loss"), fl[0])


class TailDrop(unittest.TestCase):
    def tail(self, first):
        with Lab() as lab:
            rule = ["--iface", lab.IF_A, "--proto", "tcp", "--sport", str(P), "--payload", "only",
                    "--first", str(first)]
            run = observer.observe(lab, lab.b, lambda: traffic.rr(lab, lab.V4_B, port=P, count=3, resp=100),
                                   rules=[(lab.a, rule)])
        measured("tail_drop_first_%d" % first, **run.numbers())
        self.assertEqual(run.traffic["response_bytes"], 300)
        self.assertEqual(run.finals[0]["dropped_packets"], first, run.numbers())
        observer.reconcile(self, run.out, run.dk)
        return run

    def test_lost_tail_is_probed(self):
        run = self.tail(1)
        out, dk = run.out, run.dk
        self.assertEqual(out.ev("tlp"), 1, run.numbers())
        self.assertEqual(out.retrans_types(), {"tlp"}, run.numbers())
        # The memo's condition for equality holds here: nothing was left unsent when the
        # probe fired, so the probe resent the tail (no new-data probe).
        self.assertEqual(out.ev("tlp"), dk["TcpExt.TCPLossProbes"], run.numbers())
        e = out.retransmits[0]
        self.assertEqual((e.state.ca_state, e.segments, e.tuple.local_addr, e.tuple.local_port), (0, 1, Lab.V4_B, P), e)

    def test_lost_probe_ends_in_timeout(self):
        run = self.tail(2)
        out, dk = run.out, run.dk
        self.assertEqual((out.ev("tlp"), out.ev("rto")), (1, 1), run.numbers())
        self.assertEqual(out.retrans_types(), {"tlp", "rto"}, run.numbers())
        # Equality condition of the memo: no socket died of a timeout and no passive
        # handshake waited for a SYN-ACK timer.
        self.assertEqual(out.ev("rto"), dk["TcpExt.TCPTimeouts"], run.numbers())
        self.assertEqual([type_name(e) for e in out.retransmits], ["tlp", "rto"])


if __name__ == "__main__":
    main()
