"""Observer e2e: handshake retransmissions.

SYN: a rule at the server's ingress drops the first two SYNs of the flow
(--tcp-flags syn,!ack --first 2); the client's SYN timer resends twice and the
connection then succeeds. Observer in the client's namespace A:
syn events == dTCPSynRetrans == dTcpRetransSegs == 2 (all counted as timeouts).

SYN-ACK: a rule at the client's ingress drops the first SYN-ACK (--tcp-flags
syn,ack --first 1). The server resends it (its request timer, and/or the
client's resent SYN); observer in the server's namespace B:
synack events == dTCPSynRetrans and retrans_segs == dTcpRetransSegs there.
"""
import unittest

from lab import observer, traffic
from lab.config import main
from lab.lossd import tuple_of
from lab.netns import Lab, measured


P = 5303


class Handshake(unittest.TestCase):
    def handshake(self, name, observed, rule_side, rule, dropped, kind):
        """Two requests over one connection, observed in `observed`'s namespace,
        with a handshake rule on `rule_side` that drops `dropped` packets; the
        only retransmissions are of `kind`, each a TCPSynRetrans."""
        with Lab() as lab:
            ns, iface = (lab.a, lab.IF_A) if rule_side == "a" else (lab.b, lab.IF_B)
            run = observer.observe(lab, lab.b if observed == "b" else lab.a,
                                   lambda: traffic.rr(lab, lab.V4_B, port=P, count=2, resp=100),
                                   rules=[(ns, ["--iface", iface, "--proto", "tcp"] + rule)])
        measured(name, **run.numbers())
        self.assertEqual(run.traffic["response_bytes"], 200, "the connection did not succeed")
        self.assertEqual(run.finals[0]["dropped_packets"], dropped, run.numbers())
        observer.reconcile(self, run.out, run.dk)
        self.assertEqual(run.out.retrans_types(), {kind}, run.numbers())
        self.assertEqual(run.dk["TcpExt.TCPSynRetrans"], run.out.ev(kind), run.numbers())
        return run, run.out, run.dk

    def test_lost_syns_are_resent_and_counted(self):
        run, out, dk = self.handshake("syn_first_2", "a", "b",
                                      ["--dport", str(P), "--tcp-flags", "syn,!ack", "--first", "2"], 2, "syn")
        self.assertEqual(out.ev("syn"), 2, run.numbers())
        self.assertLessEqual(out.ev("syn"), dk["TcpExt.TCPTimeouts"], run.numbers())
        self.assertEqual(run.traffic["total_retrans"], 2)
        for i, e in enumerate(out.retransmits):
            self.assertEqual(tuple_of(e), (Lab.V4_A, run.traffic["sport"], Lab.V4_B, P), e)
            self.assertEqual((e.state.tcp_state, e.segments, e.state.retransmits), (2, 1, i + 1), e)  # SYN_SENT
        closes = [c for c in out.closes if c.tuple.local_port == run.traffic["sport"]]
        self.assertEqual(len(closes), 1, out.closes)
        self.assertEqual(closes[0].retransmitted_segments["syn"], 2, closes[0])

    def test_lost_synack_is_resent_and_counted_at_the_server(self):
        run, out, dk = self.handshake("synack_first_1", "b", "a",
                                      ["--sport", str(P), "--tcp-flags", "syn,ack", "--first", "1"], 1, "synack")
        self.assertGreaterEqual(out.ev("synack"), 1, run.numbers())
        self.assertEqual(dk["Tcp.RetransSegs"], out.ev("synack"), run.numbers())
        for e in out.retransmits:
            self.assertEqual(tuple_of(e) + (e.segments,), (Lab.V4_B, P, Lab.V4_A, run.traffic["sport"], 1), e)


if __name__ == "__main__":
    main()
