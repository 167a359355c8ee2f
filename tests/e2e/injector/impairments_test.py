"""e2e: the actions beside drop (lossd --action), each reconciled with the receiving kernel's
own counters in its namespace, and with what a numbered UDP receiver saw.

A one-shot lossd on A's interface, direction egress (clsact), unless a test says otherwise;
traffic A -> B over the lab's veth pair:

- ecn: ECT(0) datagrams: B's IpExt.InCEPkts rises by exactly the marked count, every datagram
  arrives; not-ECT ones: exactly the dropped ones are missing (ecn), or all pass (ecn-pass,
  counted unacted). IPv6 the same (Ip6InCEPkts). TCP with ECN negotiated: InCEPkts equals the
  marked segments, the sender answers with CWR (the observer's ca_time_ns["cwr"]).
- corrupt: with the veth's checksum offload on (a locally sent datagram is CHECKSUM_PARTIAL:
  the IPv4 header's identification flips) B's IpExt.InCsumErrors rises by exactly the corrupted
  count; with it off (CHECKSUM_NONE: a payload bit flips) Udp.InCsumErrors does; the numbered
  receiver misses exactly those. TCP: TcpRetransSegs resends exactly the corrupted segments.
- corrupt-payload: every corrupted datagram arrives with a wrong body (the receiver counts
  them), no checksum error anywhere.
- duplicate: the receiver sees exactly `duplicated` extra copies (egress and ingress); TCP's
  receiver answers each copy with a D-SACK.
- markov (netem's 4-state loss): the loss-run lengths of a 200,000-datagram stream fit the
  model's distribution (Pearson's chi-square, p > 0.001), the receiver misses exactly the
  dropped ones, and the same seed on the same flow drops exactly the same datagrams again.
- police: UDP offered at 100 Mbit/s through a 50mbit,64kib bucket passes 50 Mbit/s (within
  2 %, by the receiver's count), the rest counted dropped; a TCP flow under it (per segment:
  a policer on a wire sees wire packets) stays below the rate, every drop resent. Per flow
  (20mbit,32kib,flow): two flows at 40 Mbit/s get 20 Mbit/s each, each exactly what a GCRA
  over its own send times passes (within 1 %).

What TCP answered (class Answers: a daemon, GetRuleEffect, lossctl, the live page): see its
docstring.
"""
import array
import os
import unittest

from lab import config, traffic
from lab.browser import Browser
from lab.clients import run_client
from lab.config import artifact, main
from lab.daemon import DaemonTestCase, wait_until
from lab.netns import Lab, measured
from lab.stats import binom_interval, chi2_gof, retransmissions_explained

PORT = 9400
N = 20000
PPS = 20000
ECT0 = 2


def rule(*extra, port=PORT, proto="udp", rate="5%", direction="egress"):
    return ["--dir", direction, "--proto", proto, "--dport", str(port)] + \
        (["--rate", rate] if rate else []) + list(extra)


class Impairments(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lab = Lab()

    @classmethod
    def tearDownClass(cls):
        cls.lab.close()

    def udp(self, args, dst=None, count=N, tos=0, iface=None, ns=None, size=None, pps=PPS, sport=None,
            list_missing=False, times=None):
        """A one-shot lossd (args) on A's (or `iface` in `ns`) interface while `count` numbered
        datagrams go A -> B. Returns (final counters, sender, receiver, B's MIB delta)."""
        lab = self.lab
        dst = dst or lab.V4_B
        d = lab.lossd(ns or lab.a, ["--iface", iface or lab.IF_A] + args)
        b0 = lab.counters(lab.b)
        ((sent, got),) = traffic.udp_flows(lab, [dict(rx_ns=lab.b, tx_ns=lab.a, dst=dst, port=PORT, flow=1,
                                                     count=count, pps=pps, tos=tos, size=size, sport=sport,
                                                     list_missing=list_missing, times=times)])
        db = lab.counters(lab.b) - b0
        f = d.stop()
        self.assertEqual(sent["sent"], count, sent)
        self.assertEqual(got["foreign"], 0, got)
        # The receiver's socket lost nothing of its own (the counts below are exact).
        self.assertEqual(db["Udp.RcvbufErrors"] + db["Snmp6.Udp6RcvbufErrors"], 0, db)
        return f, sent, got, db

    def in_interval(self, k, n, p, what):
        lo, hi = binom_interval(n, p)
        self.assertTrue(lo <= k <= hi, "%s %d outside [%d, %d] of %d at %g" % (what, k, lo, hi, n, p))

    # ---- ECN ----------------------------------------------------------------------------

    def test_ecn_marks_ect_datagrams_ce(self):
        f, sent, got, db = self.udp(rule("--action", "ecn"), tos=ECT0)
        marked = f["marked_packets"]
        measured("ecn_udp_v4", marked=marked, in_ce=db["IpExt.InCEPkts"], received=got["unique"])
        self.assertEqual(f["matched_packets"], N)
        self.assertEqual(db["IpExt.InCEPkts"], marked)
        self.assertEqual(f["marked_segments"], marked)
        self.assertEqual(f["dropped_packets"] + f["unacted_packets"], 0, f)
        self.assertEqual(got["unique"], N, got)
        self.in_interval(marked, N, 0.05, "marked")

    def test_ecn_drops_or_passes_not_ect(self):
        f, sent, got, db = self.udp(rule("--action", "ecn"))
        self.assertEqual(f["marked_packets"], 0, f)
        self.assertEqual(db["IpExt.InCEPkts"], 0, db)
        self.assertEqual(got["unique"], N - f["dropped_packets"], (f, got))
        self.in_interval(f["dropped_packets"], N, 0.05, "dropped")
        f, sent, got, db = self.udp(rule("--action", "ecn-pass"))
        measured("ecn_pass_not_ect", unacted=f["unacted_packets"], received=got["unique"])
        self.assertEqual(f["dropped_packets"] + f["marked_packets"], 0, f)
        self.assertEqual(got["unique"], N, got)
        self.in_interval(f["unacted_packets"], N, 0.05, "passed unacted")

    def test_ecn_ipv6(self):
        f, sent, got, db = self.udp(rule("--action", "ecn"), dst=self.lab.V6_B, tos=ECT0)
        measured("ecn_udp_v6", marked=f["marked_packets"], in_ce=db["Snmp6.Ip6InCEPkts"])
        self.assertEqual(db["Snmp6.Ip6InCEPkts"], f["marked_packets"])
        self.assertEqual(got["unique"], N, got)
        self.in_interval(f["marked_packets"], N, 0.05, "marked")

    # ---- corrupt --------------------------------------------------------------------------

    def test_corrupt_with_checksum_offload(self):
        # veth's default: a local datagram's UDP checksum is left to the device (PARTIAL):
        # the IPv4 header's checksum is what the receiver finds wrong.
        f, sent, got, db = self.udp(rule("--action", "corrupt"))
        c = f["corrupted_packets"]
        measured("corrupt_udp_v4_partial", corrupted=c, ip_csum_errors=db["IpExt.InCsumErrors"],
                 udp_csum_errors=db["Udp.InCsumErrors"], received=got["unique"])
        self.assertEqual(db["IpExt.InCsumErrors"], c)
        self.assertEqual(db["Ip.InHdrErrors"], c)
        self.assertEqual(got["unique"], N - c, got)
        self.assertEqual(got["corrupt"], 0, got)
        self.assertEqual(f["unacted_packets"] + f["dropped_packets"], 0, f)
        self.in_interval(c, N, 0.05, "corrupted")

    def test_corrupt_without_checksum_offload(self):
        # Checksums computed by the stack (CHECKSUM_NONE): a bit of the datagram flips and
        # UDP's own check discards it.
        lab = self.lab
        lab.run(lab.a, "ethtool", "-K", lab.IF_A, "tx", "off")
        try:
            for dst, key in ((lab.V4_B, "Udp.InCsumErrors"), (lab.V6_B, "Snmp6.Udp6InCsumErrors")):
                f, sent, got, db = self.udp(rule("--action", "corrupt"), dst=dst)
                c = f["corrupted_packets"]
                measured("corrupt_udp_none", dst=dst, corrupted=c, csum_errors=db[key], received=got["unique"])
                self.assertEqual(db[key], c, db)
                self.assertEqual(got["unique"], N - c, got)
                self.assertEqual(f["unacted_packets"], 0, f)
                self.in_interval(c, N, 0.05, "corrupted")
        finally:
            lab.run(lab.a, "ethtool", "-K", lab.IF_A, "tx", "on")

    def test_corrupt_ipv6_offloaded_is_not_faked(self):
        # IPv6 has no header checksum, and the device finishes the UDP one over the flipped
        # bit: no receiver could tell. Nothing is corrupted; each pick is counted unacted.
        f, sent, got, db = self.udp(rule("--action", "corrupt"), dst=self.lab.V6_B)
        self.assertEqual(f["corrupted_packets"], 0, f)
        self.assertEqual(got["unique"], N, got)
        self.in_interval(f["unacted_packets"], N, 0.05, "unacted")

    def test_corrupt_tcp_is_resent(self):
        lab = self.lab
        run = traffic.tcp_loss_run(lab, lab.a, ["--iface", lab.IF_A] +
                                   rule("--action", "corrupt", "--per-segment", "--payload", "only",
                                        proto="tcp", port=5201, rate="1%"),
                                   lab.V4_B, mbytes=30, rate_mbit=200)
        f, da, db = run["final"], run["da"], run["db"]
        c = f["corrupted_segments"]
        ok, numbers = retransmissions_explained(da, db, c, run["path_drops"])
        measured("corrupt_tcp_v4", corrupted=c, ip_csum_errors=db["IpExt.InCsumErrors"], **numbers)
        self.assertGreater(c, 0, f)
        self.assertEqual(run["receiver"]["bytes"], run["sender"]["bytes"])
        self.assertEqual(db["IpExt.InCsumErrors"], c)
        self.assertTrue(ok, numbers)
        self.assertEqual(f["corrupted_packets"], c, "per-segment: one segment per skb")

    def test_corrupt_payload_delivers_wrong_bytes(self):
        lab = self.lab
        for dst in (lab.V4_B, lab.V6_B):
            for offload in ("on", "off"):
                lab.run(lab.a, "ethtool", "-K", lab.IF_A, "tx", offload)
                try:
                    f, sent, got, db = self.udp(rule("--action", "corrupt-payload"), dst=dst, size=256)
                finally:
                    lab.run(lab.a, "ethtool", "-K", lab.IF_A, "tx", "on")
                c = f["corrupted_packets"]
                errors = db["Udp.InCsumErrors"] + db["Snmp6.Udp6InCsumErrors"] + db["IpExt.InCsumErrors"]
                measured("corrupt_payload", dst=dst, tx_offload=offload, corrupted=c,
                         received_corrupt=got["corrupt"], csum_errors=errors)
                self.assertEqual(errors, 0, db)
                self.assertEqual(got["corrupt"], c, got)
                self.assertEqual(got["received"] + got["corrupt"], N, got)
                self.in_interval(c, N, 0.05, "corrupted")

    # ---- duplicate ------------------------------------------------------------------------

    def test_duplicate_udp_egress_and_ingress(self):
        lab = self.lab
        for where, iface, ns, direction in (("egress", lab.IF_A, lab.a, "egress"),
                                            ("ingress", lab.IF_B, lab.b, "ingress")):
            f, sent, got, db = self.udp(rule("--action", "duplicate", rate="10%", direction=direction),
                                        iface=iface, ns=ns)
            dup = f["duplicated_packets"]
            hook = "tc_" + direction
            measured("duplicate_udp", where=where, duplicated=dup, receiver_dups=got["dups"],
                     copies_passed=f["hooks"][hook]["copies"])
            self.assertEqual(got["dups"], dup, got)
            self.assertEqual(f["hooks"][hook]["copies"], dup, f["hooks"])
            self.assertEqual(got["unique"], N, got)
            self.assertEqual(db["Udp.InDatagrams"], N + dup, db)
            self.assertEqual(f["matched_packets"], N, "a copy is never decided again")
            self.in_interval(dup, N, 0.10, "duplicated")

    def test_duplicate_tcp_answered_with_dsacks(self):
        lab = self.lab
        run = traffic.tcp_loss_run(lab, lab.a, ["--iface", lab.IF_A] +
                                   rule("--action", "duplicate", "--payload", "only", "--per-segment",
                                        proto="tcp", port=5201, rate="2%"),
                                   lab.V4_B, mbytes=30, rate_mbit=200)
        f, da, db = run["final"], run["da"], run["db"]
        dup = f["duplicated_segments"]
        measured("duplicate_tcp", duplicated_pkts=f["duplicated_packets"], duplicated_segs=dup,
                 receiver_dsacks_sent=db["TcpExt.TCPDSACKOldSent"], sender_dsack_recv=da["TcpExt.TCPDSACKRecv"],
                 sender_dsack_recv_segs=da["TcpExt.TCPDSACKRecvSegs"], retrans=da["Tcp.RetransSegs"])
        self.assertGreater(dup, 0, f)
        self.assertEqual(run["receiver"]["bytes"], run["sender"]["bytes"])
        self.assertEqual(f["duplicated_packets"], dup, "per-segment: one segment per skb")
        # A duplicate is not a loss: nothing is recovered. A loaded host can still delay an ACK
        # past the probe timer: its resend (a TLP; 1 in one CI run) arrives as old data too.
        rtx = da["Tcp.RetransSegs"]
        self.assertEqual((da["TcpExt.TCPFastRetrans"], da["TcpExt.TCPSlowStartRetrans"]), (0, 0), da)
        self.assertLessEqual(rtx, 3, da)
        # Every copy is old data to the receiver: one D-SACK each (and one for each such resend),
        # and the sender hears them, all but those reaching it after its socket closed (the
        # copies of the last flight: 2 of 427 in one run, 11 of 269 on a loaded CI host).
        self.assertEqual(db["TcpExt.TCPDSACKOldSent"], f["duplicated_packets"] + rtx, db)
        self.assertLessEqual(da["TcpExt.TCPDSACKRecv"], f["duplicated_packets"] + rtx, da)
        self.assertGreaterEqual(da["TcpExt.TCPDSACKRecv"], 0.9 * f["duplicated_packets"], da)


    # ---- models: 4-state Markov, policer ---------------------------------------------------

    MARKOV = (0.01, 0.30, 0.10, 0.40, 0.001)  # p13, p31, p32, p23, p14

    @classmethod
    def run_length_pmf(cls, kmax):
        """P(a loss run has length k), k = 1 .. kmax-1, and P(>= kmax): a run that enters
        state 4 is one packet long (4 goes back to 1); one that enters 3 stays there with
        p33 = 1 - p31 - p32 per packet. The runs start in proportion to the stationary flux
        into each: pi1 p13 + pi2 p23 into 3, pi1 p14 into 4."""
        p13, p31, p32, p23, p14 = cls.MARKOV
        pi1 = 1.0
        pi3 = pi1 * p13 / p31
        pi2 = pi3 * p32 / p23
        into3, into4 = pi1 * p13 + pi2 * p23, pi1 * p14
        w3, w4 = into3 / (into3 + into4), into4 / (into3 + into4)
        q = 1 - p31 - p32
        pmf = [w4 + w3 * (1 - q)] + [w3 * q ** (k - 1) * (1 - q) for k in range(2, kmax)]
        return pmf + [1 - sum(pmf)]

    def test_markov_loss_runs_fit_the_model(self):
        count, kmax = 200000, 10
        args = rule("--markov", ",".join("%g" % p for p in self.MARKOV), "--seed", "4242", rate=None)
        runs = []
        for _ in range(2):
            f, sent, got, db = self.udp(args, count=count, pps=50000, sport=40404, list_missing=True)
            runs.append((f, got))
        (f, got), (f2, got2) = runs
        missing = got["missing"] + list(range(got["max_seq"] + 1, count))
        self.assertEqual(len(missing), f["dropped_packets"], "the receiver misses exactly the drops")
        self.assertEqual(f["matched_packets"], count)
        lengths, start = [], None
        for i, seq in enumerate(missing):
            if start is None or seq != missing[i - 1] + 1:
                if start is not None:
                    lengths.append(missing[i - 1] - start + 1)
                start = seq
        if start is not None:
            lengths.append(missing[-1] - start + 1)
        observed = [sum(1 for x in lengths if x == k) for k in range(1, kmax)] + \
            [sum(1 for x in lengths if x >= kmax)]
        stat, df, p = chi2_gof(observed, self.run_length_pmf(kmax))
        measured("markov_runs", drops=f["dropped_packets"], runs=len(lengths), observed=observed,
                 expected=[round(x * len(lengths), 1) for x in self.run_length_pmf(kmax)],
                 chi2=round(stat, 2), df=df, p_value=round(p, 4))
        self.assertGreater(p, 0.001, "the loss runs do not fit the model: chi2 %.1f, df %d" % (stat, df))
        # Same seed, same flow (same source port): the same datagrams, exactly.
        missing2 = got2["missing"] + list(range(got2["max_seq"] + 1, count))
        self.assertEqual(missing2, missing)

    def test_police_passes_its_rate(self):
        size = 1250  # UDP payload: 1292-byte frames as tc counts them (Ethernet + IPv4 + UDP)
        frame_bits = (size + 42) * 8
        pps = int(100e6 / frame_bits)  # offered: 100 Mbit/s
        count = pps * 3
        times_path = os.path.join(self.lab.tempdir(), "times")
        f, sent, got, db = self.udp(rule("--police", "50mbit,64kib", rate=None), count=count, pps=pps, size=size,
                                    times=times_path)
        passed = f["matched_packets"] - f["dropped_packets"]
        # The tc egress program decides each datagram inside its sendto: between the two times
        # the sender wrote. The same bucket run over those times passes what the policer had to
        # (a sender that stalled, as a loaded host makes it, leaves tokens unused past a full
        # bucket: the rate is then not reached, and the model says by how much).
        t = array.array("Q")
        with open(times_path, "rb") as fh:
            t.fromfile(fh, 2 * count)
        cap = 64 * 1024 * 8.0
        tokens, last, model = cap, t[0], 0
        for i in range(count):
            now = (t[2 * i] + t[2 * i + 1]) / 2
            tokens = min(cap, tokens + (now - last) * 50e6 / 1e9)
            last = now
            if tokens >= frame_bits:
                tokens -= frame_bits
                model += 1
        span = (t[-1] - t[0]) / 1e9
        delivered_bps = (got["unique"] * frame_bits - cap) / span  # less the first full bucket
        max_gap_ms = max(t[2 * i + 2] - t[2 * i] for i in range(count - 1)) / 1e6
        measured("police_udp", offered_mbit=round(count * frame_bits / span / 1e6, 1),
                 delivered_mbit=round(delivered_bps / 1e6, 2), passed=passed, model=model,
                 dropped=f["dropped_packets"], received=got["unique"], secs=span,
                 sender_max_gap_ms=round(max_gap_ms, 2))
        self.assertEqual(got["unique"], passed, "the receiver got exactly what the policer passed")
        self.assertEqual(f["matched_bytes"] - f["dropped_bytes"], passed * (size + 42))
        # What the bucket allows, never more: rate x time + the first full bucket (and a packet).
        self.assertLessEqual(passed * frame_bits, 50e6 * span + cap + frame_bits)
        # The same bucket over the datagrams' own times passes the same, within 1 %.
        self.assertLess(abs(passed - model) / model, 0.01, (passed, model))
        # A sender that kept its pace (no gap emptying a full bucket's worth: 10.5 ms) gets the
        # rate, within 2 % (the issue's).
        if max_gap_ms < cap / 50e6 * 1e3:
            self.assertLess(abs(delivered_bps - 50e6) / 50e6, 0.02, delivered_bps)

    def test_police_tcp_stays_below_the_rate(self):
        lab = self.lab
        # Per segment: a policer on a wire sees wire packets (a GSO skb of 45 segments is
        # one 65 kB packet to the hook, larger than the whole bucket).
        run = traffic.tcp_loss_run(lab, lab.a, ["--iface", lab.IF_A] +
                                   rule("--police", "50mbit,64kib", "--per-segment", proto="tcp", port=5201,
                                        rate=None),
                                   lab.V4_B, mbytes=5, rate_mbit=200)
        f, s = run["final"], run["sender"]
        goodput = s["bytes"] * 8 / s["secs"]
        ok, numbers = retransmissions_explained(run["da"], run["db"], f["dropped_segments"], run["path_drops"])
        measured("police_tcp", goodput_mbit=round(goodput / 1e6, 2), dropped=f["dropped_packets"],
                 timeouts=run["da"]["TcpExt.TCPTimeouts"], **numbers)
        self.assertTrue(ok, numbers)
        self.assertEqual(run["receiver"]["bytes"], s["bytes"])
        self.assertGreater(f["dropped_packets"], 0, f)
        # Below the rate; every byte arrived (the policer's hard edge costs TCP timeouts:
        # a burst of the pacing's rate empties 64 KiB within a few hundred microseconds).
        self.assertLess(goodput, 50e6 * 1.02)

    @staticmethod
    def gcra_passes(times, count, rate_bps, burst_bytes, frame):
        """What a per-flow policer passes of one flow's `count` frames sent at `times` (the
        sender's before/after pairs, ns): loss.bpf.c's GCRA, in its 1/16 ns and its rounding,
        each frame decided at the middle of its sendto."""
        cost = -(-frame * 8 * 10**9 * 16 // rate_bps)  # rounded up
        tau = burst_bytes * 8 * 10**9 * 16 // rate_bps  # rounded down
        tat, passed = 0, 0  # a new flow: a full bucket
        for i in range(count):
            now = (times[2 * i] + times[2 * i + 1]) // 2 * 16
            base = max(tat, now)
            if base + cost - now <= tau:
                tat = base + cost
                passed += 1
        return passed

    def test_police_per_flow(self):
        # Two UDP flows (their own source and destination ports) through one rule's
        # `20mbit,32kib,flow`, each offered 40 Mbit/s: a bucket per flow passes 20 Mbit/s of
        # each, 40 in all (one bucket for the rule would pass 20 in all).
        lab = self.lab
        size = 1250  # 1292-byte frames at tc, as in test_police_passes_its_rate
        frame = size + 42
        rate, burst = 20 * 10**6, 32 * 1024
        pps = int(40e6 / (frame * 8))
        count = pps * 3
        ports, sports = (PORT, PORT + 1), (40420, 40421)
        tmp = self.lab.tempdir()
        times_paths = [os.path.join(tmp, "times-%d" % i) for i in range(2)]
        d = lab.lossd(lab.a, ["--iface", lab.IF_A] + rule("--police", "20mbit,32kib,flow",
                                                          port="%d-%d" % ports, rate=None))
        b0 = lab.counters(lab.b)
        res = traffic.udp_flows(lab, [dict(rx_ns=lab.b, tx_ns=lab.a, dst=lab.V4_B, port=ports[i], flow=20 + i,
                                           count=count, pps=pps, size=size, sport=sports[i],
                                           times=times_paths[i]) for i in range(2)])
        db = lab.counters(lab.b) - b0
        f = d.stop()
        self.assertEqual([s["sent"] for s, _ in res], [count, count], res)
        self.assertEqual([g["foreign"] for _, g in res], [0, 0], res)
        self.assertEqual(db["Udp.RcvbufErrors"], 0, db)  # the receivers' counts are exact
        self.assertEqual(f["matched_packets"], 2 * count, f)
        passed = f["matched_packets"] - f["dropped_packets"]
        got = [g["unique"] for _, g in res]
        # The receivers got exactly what the policer passed (its counters are per rule: the sum).
        self.assertEqual(sum(got), passed, (got, f))
        self.assertEqual(f["matched_bytes"] - f["dropped_bytes"], passed * frame)
        flows, spans = [], []
        for i in range(2):
            t = array.array("Q")
            with open(times_paths[i], "rb") as fh:
                t.fromfile(fh, 2 * count)
            span = (t[-1] - t[0]) / 1e9
            spans.append(span)
            model = self.gcra_passes(t, count, rate, burst, frame)
            flows.append(dict(received=got[i], model=model, secs=round(span, 3),
                              offered_mbit=round(count * frame * 8 / span / 1e6, 1),
                              delivered_mbit=round((got[i] - burst / frame) * frame * 8 / span / 1e6, 2),
                              sender_max_gap_ms=round(max(t[2 * j + 2] - t[2 * j] for j in range(count - 1)) / 1e6,
                                                      2)))
        total_mbit = sum(fl["delivered_mbit"] for fl in flows)
        measured("police_per_flow", flows=flows, passed=passed, dropped=f["dropped_packets"],
                 delivered_mbit=round(total_mbit, 2))
        for i, fl in enumerate(flows):
            with self.subTest(flow=i):
                # Its own bucket, never more: the rate over its time and one full bucket (and a frame).
                self.assertLessEqual(fl["received"] * frame * 8, rate * spans[i] + burst * 8 + frame * 8, fl)
                # The GCRA over the flow's own send times passes the same, within 1 %.
                self.assertLess(abs(fl["received"] - fl["model"]) / fl["model"], 0.01, fl)
        # Two buckets: clearly more than one rule-wide bucket could pass (20 Mbit/s and 32 KiB)...
        self.assertGreater(total_mbit, 1.5 * rate / 1e6, flows)
        # ...and with senders that kept their pace (no gap refilling a bucket: 13.1 ms), twice
        # the rate within 2 %.
        if all(fl["sender_max_gap_ms"] < burst * 8 / rate * 1e3 for fl in flows):
            self.assertLess(abs(total_mbit - 2 * rate / 1e6) / (2 * rate / 1e6), 0.02, flows)


class Answers(DaemonTestCase):
    """What TCP answered to each action, as the daemon's observer saw it per flow and
    GetRuleEffect links it to the rule (RuleEffect ca_entries, ece_acks, dsacked_copies,
    resent_dropped_segments), reconciled with the sender's own counters:

    - ecn (net.ipv4.tcp_ecn=1 on both ends): B's IpExt.InCEPkts equals the marked segments;
      nothing is resent (a mark is not a loss); the sender heard the echoes (Flow.ece_acks)
      and answered (its flow entered CWR: ca_entries, ca_time_ns), which a flow on another
      port with ECN and no rule never did; the rule's effect has exactly its flow's entries
      and echoes. `lossctl rule get` / `rule effect` and the live page (headless Chromium,
      screenshot live_ecn.png) show them.
    - corrupt: every corrupted segment is resent, each resend linked to its corruption.
    - duplicate: the sender's D-SACKs of copies it never resent (the kernel ignores them as
      dubious: TcpExt.TCPDSACKIgnoredDubious) are the rule's dsacked_copies, exactly."""

    daemon_args = ("--http", "127.0.0.1:0")

    def test_marks_echoed_and_answered(self):
        lab, d, pb = self.lab, self.d, self.pb
        for ns in (lab.a, lab.b):
            lab.run(ns, "sysctl", "-qw", "net.ipv4.tcp_ecn=1")
        marked_port, control_port = 5491, 5492
        r = d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=marked_port,
                     payload="only", rate=0.01, action="ecn")
        a0, b0 = lab.counters(lab.a), lab.counters(lab.b)
        flows = [traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, port, 20e6, 100, hold=True, cc="cubic")
                 for port in (marked_port, control_port)]
        for fl in flows:
            self.addCleanup(fl.close)
        for fl in flows:
            fl.wait_sent()

        def listed():
            fl = d.obs.ListFlows(pb.ListFlowsRequest(filter=[pb.EventFilter(
                port=pb.PortRange(lo=marked_port, hi=control_port))]), timeout=10).flows
            by = {f.tuple.remote_port: f for f in fl if f.tuple.remote_port in (marked_port, control_port)}
            return by if len(by) == 2 else None

        def settled():
            # Both flows open and idle (every byte acknowledged): the rule's effect sums its
            # open flow as of now, between two equal reads of the flows.
            by = listed()
            e = d.effect(r.id)
            again = listed()
            if not by or not again:
                return None
            key = [(f.ece_acks, f.ca_entries["cwr"]) for f in by.values()]
            return (by, e) if key == [(f.ece_acks, f.ca_entries["cwr"]) for f in again.values()] else None
        by, e = wait_until(settled, 10, "both flows listed by the observer, idle")
        c = d.get(r.id).counters
        if config.LOSSCTL:
            effect_out = run_client(lab, [config.LOSSCTL, "--addr", d.addr, "rule", "effect", str(r.id)]).out
        for fl in flows:
            fl.release()
        lab.wait_idle()
        da, db = lab.counters(lab.a) - a0, lab.counters(lab.b) - b0
        m, ctl = by[marked_port], by[control_port]
        measured("ecn_tcp", marked_pkts=c.marked_packets, marked_segs=c.marked_segments,
                 in_ce=db["IpExt.InCEPkts"], retrans=da["Tcp.RetransSegs"],
                 cwr_entries=m.ca_entries["cwr"], cwr_ms=round(m.ca_time_ns["cwr"] / 1e6, 1),
                 ece_acks=m.ece_acks, effect_cwr_entries=e.ca_entries["cwr"], effect_ece_acks=e.ece_acks,
                 control_cwr_entries=ctl.ca_entries["cwr"], control_ece_acks=ctl.ece_acks,
                 cwnd_min=m.cwnd_min, cwnd_max=m.cwnd_max)
        self.assertGreater(c.marked_segments, 0, c)
        self.assertEqual(c.dropped_packets, 0, c)
        self.assertEqual(db["IpExt.InCEPkts"], c.marked_segments)
        self.assertEqual(da["Tcp.RetransSegs"], 0, "a mark is not a loss")
        # The echoes heard, the answers given; none on the control flow.
        self.assertGreater(m.ece_acks, 0, m)
        self.assertGreater(m.ca_entries["cwr"], 0, m)
        self.assertLessEqual(m.ca_entries["cwr"], m.ece_acks, "one CWR answers one or more echoes")
        self.assertGreater(m.ca_time_ns["cwr"], 0, m)
        self.assertEqual((ctl.ca_entries["cwr"], ctl.ece_acks), (0, 0), ctl)
        # The rule's effect: its one flow's answers, exactly.
        self.assertEqual(e.flows, 1, e)
        self.assertEqual(e.ca_entries["cwr"], m.ca_entries["cwr"], e)
        self.assertEqual(e.ece_acks, m.ece_acks, e)
        self.assertEqual(e.dsacked_copies, 0, e)

        if config.LOSSCTL:
            self.assertRegex(effect_out, r"entered\s+disorder \d+, cwr %d, recovery 0, loss 0" % e.ca_entries["cwr"],
                             effect_out)
            self.assertRegex(effect_out, r"ecn echoes\s+%d ACKs with ECE" % e.ece_acks, effect_out)
            out = run_client(lab, [config.LOSSCTL, "--addr", d.addr, "rule", "get", str(r.id)]).out
            self.assertRegex(out, r"loss\s+1% ecn\b", out)
            self.assertRegex(out, r"marked\s+%d pkts, %d segs" % (c.marked_packets, c.marked_segments), out)
        b = Browser(lab, lab.a, width=1400, height=900)
        b.open("http://127.0.0.1:%d/" % d.http_port)
        row = "#rules tbody tr[data-rule-id='%d']" % r.id
        want = "ECN mark: %s segs marked" % format(c.marked_segments, ",")
        text = b.wait(lambda: b.text(row) if want in b.text(row) else None, 20, "the rule's marks on the page")
        b.driver.execute_script("document.getElementById('rules').scrollIntoView()")
        shot = b.screenshot(artifact("live_ecn.png"))
        measured("ecn_live_row", row=text, screenshot=shot)
        # What the flow answered, as the rule's effect has it once the flow closed.
        self.assertRegex(text, want + r" → [\d,]+ echoes, [\d,]+ CWR", text)
        self.assertEqual(b.console_errors(), [])

    def transfer(self, port, ready, **rule):
        """A 20 MB TCP transfer A -> B under `rule` (A's egress, per segment); returns (the
        rule's counters, its effect once ready(effect, A's MIB delta) holds (the closed flow's
        resends and answers reach it through the observer's stream), or as it is after 15 s,
        A's and B's MIB deltas)."""
        lab, d = self.lab, self.d
        r = d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=port, payload="only",
                     per_segment=True, **rule)
        a0, b0 = lab.counters(lab.a), lab.counters(lab.b)
        s, got = traffic.tcp_flow(lab, lab.b, lab.a, lab.V4_B, port=port, mbytes=20, rate_mbit=200)
        da, db = lab.counters(lab.a) - a0, lab.counters(lab.b) - b0
        self.assertEqual(got["bytes"], s["bytes"])
        c = d.get(r.id).counters
        try:
            wait_until(lambda: ready(d.effect(r.id), da), 15, "the rule's effect to hold its closed flow")
        except AssertionError:
            pass  # the assertions below say what is missing
        return c, d.effect(r.id), da, db

    def test_corrupted_segments_resent_and_linked(self):
        c, e, da, db = self.transfer(
            5493, lambda e, da: sum(e.retransmitted_segments.values()) >= da["Tcp.RetransSegs"],
            rate=0.01, action="corrupt")
        resent = sum(e.resent_dropped_segments.values())
        linked = sum(h.count for h in e.recovery.values())
        measured("corrupt_effect", corrupted=c.corrupted_segments, csum_errors=db["IpExt.InCsumErrors"],
                 resent_corrupted=resent, linked_resends=linked, retrans=da["Tcp.RetransSegs"],
                 dsacked=sum(e.dsacked_segments.values()), drops_recorded=e.drops_recorded)
        self.assertGreater(c.corrupted_segments, 0, c)
        self.assertEqual(db["IpExt.InCsumErrors"], c.corrupted_segments)
        # Each corrupted segment is logged like a drop: its resend is linked to it.
        self.assertEqual(e.drops_recorded, c.corrupted_packets, e)
        self.assertGreaterEqual(resent, c.corrupted_segments, e)
        self.assertLessEqual(resent, da["Tcp.RetransSegs"], e)
        # More than one resend of a corrupted segment only where the receiver had it already.
        self.assertLessEqual(resent - c.corrupted_segments, sum(e.dsacked_segments.values()), e)

    def test_duplicates_dsacked_as_copies(self):
        def ready(e, da):
            return e.dsacked_copies >= da["TcpExt.TCPDSACKIgnoredDubious"]
        c, e, da, db = self.transfer(5494, ready, rate=0.02, action="duplicate")
        dsacks = da["TcpExt.TCPDSACKRecv"] + da["TcpExt.TCPDSACKOfoRecv"]
        measured("duplicate_effect", duplicated=c.duplicated_segments, dsacked_copies=e.dsacked_copies,
                 sender_dsacks=dsacks, ignored_dubious=da["TcpExt.TCPDSACKIgnoredDubious"],
                 receiver_dsacks_sent=db["TcpExt.TCPDSACKOldSent"], retrans=da["Tcp.RetransSegs"])
        self.assertGreater(c.duplicated_segments, 0, c)
        # A duplicate is not a loss: nothing is recovered (a loaded host's probe timer may
        # resend a segment or two that had arrived).
        rtx = da["Tcp.RetransSegs"]
        self.assertEqual((da["TcpExt.TCPFastRetrans"], da["TcpExt.TCPSlowStartRetrans"]), (0, 0), da)
        self.assertLessEqual(rtx, 3, da)
        # A D-SACK that names no resend is a copy, which the kernel ignores as dubious; the
        # observer counted each (one segment each, per segment) on the rule's flow, exactly; and
        # those of resends, which the kernel took, as needless resends.
        self.assertEqual(e.dsacked_copies, da["TcpExt.TCPDSACKIgnoredDubious"], (e, da))
        self.assertEqual(sum(e.dsacked_segments.values()), da["TcpExt.TCPDSACKRecvSegs"], (e, da))
        self.assertEqual(dsacks, da["TcpExt.TCPDSACKIgnoredDubious"] + da["TcpExt.TCPDSACKRecvSegs"], da)
        # All the copies, but those of the last flight D-SACKed after the socket closed (11 of
        # 269 on a loaded CI host).
        self.assertLessEqual(e.dsacked_copies, c.duplicated_segments)
        self.assertGreaterEqual(e.dsacked_copies, 0.9 * c.duplicated_segments)


if __name__ == "__main__":
    main()
