"""Observer e2e: the observer's totals reconcile exactly with the kernel's counters.

A paced TCP bulk transfer A -> B under injected loss, `lossd --observe --events`
in A (the sender), every TCP socket of A closed before the counters are read.
Asserted per run (lab.observer.reconcile, from the kernel research memo):

  exact   retrans_segs == dTcpRetransSegs           (and == sum of sent+failed segs)
          fast.sent.segs == dTCPFastRetrans
          loss.sent.segs == dTCPSlowStartRetrans
          syn+synack sent+failed events == dTCPSynRetrans
          failed segs == dTCPRetransFail
  bounds  tlp.sent events <= dTCPLossProbes          (a probe may send new data instead)
          rto+syn events <= dTCPTimeouts              (a timeout may kill, or be a SYN-ACK timer)
  health  unknown == ring_lost == arm_failed == 0
  stream  every wanted event was printed once (check_event_stream), and per socket the
          events add up to the kernel's own tcp total_retrans (lab.observer.unseen)

Rates: 1 % and 5 % of skbs at the receiver's ingress (tcx drop: real network loss;
veth carries GSO skbs of ~45 segments, so one drop loses a burst), 0.1 % per wire
segment (the sender's TSO/GSO off, so B's ingress sees single segments), and
1 % over IPv6. The 1 % run also shows cwnd falling after loss (flow record and
retransmit events). A separate test checks that starting the observer leaves a
running injector's egress rule alone.
"""
import ipaddress
import unittest

from lab import observer, traffic
from lab.config import main
from lab.lossd import outcome_name, type_name
from lab.netns import Lab, measured
from lab.stats import short


P = 5301
INGRESS = ["--proto", "tcp", "--dport", str(P)]


class _Scenario(unittest.TestCase):
    """Runs one scenario in setUpClass; the test methods check its result."""
    mbytes = 100
    rate_mbit = 500

    @classmethod
    def scenario(cls, lab):
        raise NotImplementedError

    @classmethod
    def setUpClass(cls):
        if cls is _Scenario:
            raise unittest.SkipTest("base class")
        cls.lab = Lab()
        try:
            cls.run_ = cls.scenario(cls.lab)
            measured(cls.__name__, **cls.run_.numbers())
        finally:
            cls.lab.close()


def bulk(lab, family, mbytes, rate_mbit, cc=None):
    dst = lab.V6_B if family == 6 else lab.V4_B
    return lambda: traffic.bulk(lab, dst, port=P, nbytes=mbytes * 1e6, rate_mbit=rate_mbit, cc=cc)


class _Reconciles:
    def test_reconciles_with_kernel_counters(self):
        r = self.run_
        s, rcv = r.traffic
        self.assertEqual(rcv["bytes"], s["bytes"], "receiver did not get every byte")
        observer.reconcile(self, r.out, r.dk)
        self.assertGreater(r.out.totals["retrans_segs"], 0, "no retransmission: the scenario tested nothing")

    def test_socket_total_retrans_matches_events(self):
        # The sender's own TCP_INFO count for its one socket, against the events of that socket.
        r = self.run_
        s, _ = r.traffic
        sport = s["conns"][0]["sport"]
        evs = [e for e in r.out.retransmits if e.tuple.local_port == sport]
        self.assertEqual(sum(e.segments for e in evs), s["conns"][0]["total_retrans"],
                         "socket %d: events vs tcpi_total_retrans; unseen: %s" % (sport, observer.unseen(r.out)))


class Ingress1Pct(_Scenario, _Reconciles):
    """Also the cwnd test; the sender's socket uses CUBIC here (the namespaces default to BBR,
    which keeps ssthresh infinite until it leaves STARTUP): entering Recovery sets a
    finite ssthresh below the window the flow had reached."""

    @classmethod
    def scenario(cls, lab):
        return observer.observe(lab, lab.a, bulk(lab, 4, cls.mbytes, cls.rate_mbit, cc="cubic"),
                              rules=[(lab.b, ["--iface", lab.IF_B] + INGRESS + ["--payload", "only", "--rate", "1%"])])

    def test_every_dropped_segment_was_retransmitted(self):
        # Paced traffic and only data segments A -> B dropped: the sender retransmitted
        # each dropped segment once, plus the spurious resends the receiver D-SACKed.
        r = self.run_
        f = r.finals[0]
        self.assertEqual(r.out.totals["retrans_segs"],
                         f["dropped_segments"] + r.dk["TcpExt.TCPDSACKRecvSegs"], r.numbers())

    def test_cwnd_falls_after_loss(self):
        out = self.run_.out
        closes = [c for c in out.closes if c.tuple.remote_port == P]
        self.assertEqual(len(closes), 1, "one closed flow for the bulk flow: %s" % closes)
        fl = closes[0]
        self.assertGreater(fl.retransmitted_segments["fast"], 0, fl)
        self.assertLess(fl.cwnd_min, fl.cwnd_max, "cwnd never changed: %s" % fl)
        self.assertGreater(fl.ca_time_ns["recovery"], 0, "no time in Recovery: %s" % fl)
        self.assertEqual(sum(fl.retransmitted_segments.values()),
                         sum(e.segments for e in out.retransmits
                             if e.cookie == fl.cookie and outcome_name(e) == "sent"),
                         "flow retransmitted_segments vs its sent retransmit events")
        fast = [e for e in out.retransmits if type_name(e) == "fast"]
        self.assertTrue(fast)
        for e in fast:
            self.assertNotEqual(e.state.ca_state, 4, "fast retransmit in Loss state: %s" % e)
            if e.state.ca_state == 3:
                # Entering Recovery set CUBIC's finite ssthresh before the retransmission.
                self.assertLess(e.state.ssthresh, 0x7fffffff, e)
        self.assertIn(3, [e.state.ca_state for e in fast])
        # The reduced window is below the largest window the flow had.
        self.assertLess(min(e.state.ssthresh for e in fast), fl.cwnd_max, fl)
        self.assertLess(min(e.state.cwnd for e in fast), fl.cwnd_max, fl)


class Ingress5Pct(_Scenario, _Reconciles):
    @classmethod
    def scenario(cls, lab):
        return observer.observe(lab, lab.a, bulk(lab, 4, cls.mbytes, cls.rate_mbit),
                                rules=[(lab.b, ["--iface", lab.IF_B] + INGRESS + ["--rate", "5%"])])


class Ingress01PctPerSegment(_Scenario, _Reconciles):
    """0.1 % per wire segment: TSO/GSO off on the sender's interface, so the stack
    segments before the wire and B's ingress sees (and drops) single segments.
    (lossd --per-segment cannot do this at the sender's egress hook on this kernel:
    TCP always builds GSO skbs and they are segmented after the egress hook.)"""

    @classmethod
    def scenario(cls, lab):
        lab.run(lab.a, "ethtool", "-K", lab.IF_A, "tso", "off", "gso", "off")
        return observer.observe(lab, lab.a, bulk(lab, 4, cls.mbytes, cls.rate_mbit),
                                rules=[(lab.b, ["--iface", lab.IF_B] + INGRESS + ["--payload", "only",
                                                                                  "--rate", "0.1%"])])

    def test_per_segment_drops(self):
        f = self.run_.finals[0]
        self.assertEqual(f["dropped_packets"], f["dropped_segments"], f)
        self.assertEqual(f["matched_packets"], f["matched_segments"], f)
        self.assertGreater(f["dropped_segments"], 0, f)


class Ipv6Ingress1Pct(_Scenario, _Reconciles):
    @classmethod
    def scenario(cls, lab):
        return observer.observe(lab, lab.a, bulk(lab, 6, cls.mbytes, cls.rate_mbit),
                                rules=[(lab.b, ["--iface", lab.IF_B] + INGRESS + ["--rate", "1%"])])

    def test_events_carry_ipv6_tuples(self):
        out = self.run_.out
        a, b = ipaddress.ip_address(Lab.V6_A), ipaddress.ip_address(Lab.V6_B)
        self.assertTrue(out.retransmits)
        for e in out.retransmits + out.closes:
            self.assertEqual((ipaddress.ip_address(e.tuple.local_addr), ipaddress.ip_address(e.tuple.remote_addr),
                              e.tuple.remote_port), (a, b, P), e)


class ObserverStartKeepsInjector(unittest.TestCase):
    def test_observer_start_keeps_live_egress_rule(self):
        """Starting `lossd --observe` in a namespace must not disarm a running lossd's
        egress (clsact) rule there: the observer is meant to watch that very loss."""
        with Lab() as lab:
            # 5 % of ~470 GSO skbs: P(no drop at all) = 0.95^470 ~ 4e-11 (at 1 % it was 0.9 %,
            # and a CI run hit it)
            inj = lab.lossd(lab.a, ["--iface", lab.IF_A, "--dir", "egress", "--payload", "only"] + INGRESS
                            + ["--rate", "5%"])
            before = lab.run(lab.a, "tc", "filter", "show", "dev", lab.IF_A, "egress").stdout
            obs = lab.lossd(lab.a, ["--observe"])
            after = lab.run(lab.a, "tc", "filter", "show", "dev", lab.IF_A, "egress").stdout
            k0 = lab.counters(lab.a)
            traffic.bulk(lab, lab.V4_B, port=P, nbytes=30e6, rate_mbit=500)
            lab.wait_idle(lab.a)
            dk = lab.counters(lab.a) - k0
            out = obs.stop_observer()
            f = inj.stop()
            measured("observer_start_vs_live_egress_rule", filter_before="lossd_tc_out" in before,
                     filter_after="lossd_tc_out" in after, injector_matched=f["matched_packets"],
                     injector_dropped_segs=f["dropped_segments"], kernel=short(dk),
                     observer_stderr=[l for l in out.stderr.splitlines() if "stale" in l])
            self.assertIn("lossd_tc_out", before)
            self.assertIn("lossd_tc_out", after,
                          "the observer's start removed the live injector's clsact filter; its log: %s"
                          % [l for l in out.stderr.splitlines() if "stale" in l])
            self.assertGreater(f["dropped_segments"], 0, "the running egress rule dropped nothing: %s" % f)


if __name__ == "__main__":
    main()
