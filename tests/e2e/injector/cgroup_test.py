"""e2e 8: cgroup_skb rules (--hook cgroup --cgroup PATH) on a cgroup v2 we create.

Ingress: two UDP receivers in namespace B, one inside the cgroup and one
outside it; a rule with no other condition than the cgroup drops only the
first one's datagrams (100 %, then 5 % within the binomial interval, every
loss counted by lossd and by the kernel as a UDP InError: the cgroup program
runs in the socket filter path, after the packet reached the socket).

Egress is network loss (issue 19): a cgroup_skb egress drop is a refusal the sending
socket is told about (DESIGN 14: UDP sendto() got EPERM for every drop, TCP retransmitted
nothing), so a cgroup target's egress is decided at clsact egress (STOLEN) on the devices
of its processes' namespace, matched by the socket's cgroup ancestry:
  - UDP sender in the cgroup: no send error at all; the receiver misses exactly the
    datagrams the rule dropped, within the binomial interval;
  - TCP sender in the cgroup, per segment: TcpRetransSegs is at least the dropped
    segments (equal, plus D-SACKed spurious ones, when no RTO resent more), the dropped
    segments inside the 99.9 % interval.

Paths (regressions, each failed before its fix): "CG/../CG" names CG itself (it
was attached to CG but matched at the depth the text suggested, so it never
dropped anything); a path that resolves outside the cgroup v2 mount is an
INVALID_ARGUMENT naming the mount, and the message does not echo a huge input.

lossd runs through `nsenter --net` here: `ip netns exec` remounts /sys, which
hides the cgroup v2 mount from lossd ("no cgroup v2 hierarchy is mounted").
"""
import os
import unittest

from lab import traffic
from lab.config import main
from lab.netns import Lab, measured
from lab.stats import binom_interval


N = 10_000
PPS = 10_000


class CgroupSkb(unittest.TestCase):
    def cg_lossd(self, lab, ns, cg, direction, rate, extra=()):
        d = lab.lossd(ns, ["--hook", "cgroup", "--cgroup", cg, "--dir", direction, "--rate", rate]
                      + list(extra), nsenter=True)
        self.assertIn("cgroup_skb %s to %s" % (direction, cg), d.hooks)
        return d

    def ingress_phase(self, lab, cg, rate, p, label):
        d = self.cg_lossd(lab, lab.b, cg, "ingress", rate)
        c0 = lab.counters(lab.b)
        (s_in, r_in), (s_out, r_out) = traffic.udp_flows(lab, [
            dict(rx_ns=lab.b, tx_ns=lab.a, dst=lab.V4_B, port=9301, flow=1, count=N, pps=PPS, rx_cgroup=cg),
            dict(rx_ns=lab.b, tx_ns=lab.a, dst=lab.V4_B, port=9302, flow=2, count=N, pps=PPS)])
        dc = lab.counters(lab.b) - c0
        f = d.stop()
        lost_in, lost_out = N - r_in["unique"], N - r_out["unique"]
        lo, hi = binom_interval(N, p)
        measured(label, lost_in_cgroup=lost_in, lost_outside=lost_out, interval=[lo, hi],
                 dropped_pkts=f["dropped_packets"], matched_pkts=f["matched_packets"],
                 udp_in_errors=dc["Udp.InErrors"], rcvbuf_errors=dc["Udp.RcvbufErrors"])
        diag = "in=%s out=%s final=%s udp inerr=%d rcvbuf=%d" % (r_in, r_out, f, dc["Udp.InErrors"],
                                                                 dc["Udp.RcvbufErrors"])
        self.assertEqual(s_in["sent"] + s_out["sent"], 2 * N, diag)
        self.assertEqual(dc["Udp.RcvbufErrors"], 0, diag)
        self.assertEqual(lost_out, 0, "the rule dropped traffic of a process outside its cgroup: " + diag)
        self.assertEqual(f["matched_packets"], N, "only the cgroup's datagrams match: " + diag)
        self.assertEqual(lost_in, f["dropped_packets"], diag)
        self.assertEqual(dc["Udp.InErrors"], f["dropped_packets"], diag)
        self.assertEqual(f["hooks"]["cgroup_ingress"]["dropped"], f["dropped_packets"], diag)
        self.assertTrue(lo <= lost_in <= hi, diag)

    def test_ingress_drops_only_that_cgroups_traffic(self):
        with Lab() as lab:
            cg = lab.make_cgroup()
            cgs = [cg]
            self.ingress_phase(lab, cg, "100%", 1.0, "cgroup_ingress_100pct")
            self.ingress_phase(lab, cg, "5%", 0.05, "cgroup_ingress_5pct")
        self.assertFalse(any(os.path.exists(c) for c in cgs), "cgroup not removed: %s" % cgs)

    def test_egress_udp_sender_sees_loss_not_errors(self):
        with Lab() as lab:
            cg = lab.make_cgroup()
            d = lab.lossd(lab.a, ["--hook", "cgroup", "--cgroup", cg, "--dir", "egress", "--rate", "10%"],
                          nsenter=True)
            self.assertIn("clsact egress on %s" % lab.IF_A, d.hooks)
            self.assertNotIn("cgroup_skb egress", d.hooks)
            a0 = lab.counters(lab.a)
            ((s, r),) = traffic.udp_flows(lab, [dict(rx_ns=lab.b, tx_ns=lab.a, dst=lab.V4_B, port=9303,
                                                     flow=3, count=N, pps=PPS, tx_cgroup=cg)])
            da = lab.counters(lab.a) - a0
            f = d.stop()
            lost = N - r["unique"]
            lo, hi = binom_interval(N, 0.10)
            measured("cgroup_egress_udp_10pct", send_ok=s["sent"], send_errors=s["errors"],
                     received=r["unique"], lost=lost, dropped_pkts=f["dropped_packets"], interval=[lo, hi],
                     ip_out_discards=da["Ip.OutDiscards"], udp_out=da["Udp.OutDatagrams"])
            diag = "sender=%s receiver=%s final=%s" % (s, r, f)
            self.assertEqual(s["errors"], {}, "the sender was told: " + diag)
            self.assertEqual(s["sent"], N, diag)
            self.assertEqual(da["Udp.OutDatagrams"], N, diag)
            self.assertEqual(da["Ip.OutDiscards"], 0, diag)
            self.assertEqual(f["matched_packets"], N, diag)
            self.assertEqual(lost, f["dropped_packets"], "lost on the way == dropped: " + diag)
            self.assertEqual(f["hooks"]["tc_egress"]["dropped"], f["dropped_packets"], diag)
            self.assertTrue(lo <= lost <= hi, diag)

    def test_egress_tcp_sender_retransmits_what_was_dropped(self):
        with Lab() as lab:
            cg = lab.make_cgroup()
            args = ["--hook", "cgroup", "--cgroup", cg, "--dir", "egress", "--rate", "1%",
                    "--proto", "tcp", "--payload", "only", "--per-segment"]
            run = traffic.tcp_loss_run(lab, lab.a, args, lab.V4_B, mbytes=62.5, rate_mbit=500, cgroup=cg,
                                       nsenter=True)
            s = traffic.tcp_summary(run)
            measured("cgroup_egress_tcp_1pct_per_segment", **s)
            f, da = run["final"], run["da"]
            self.assertIn("clsact egress on %s" % lab.IF_A, run["hooks"])
            self.assertNotIn("cgroup_skb egress", run["hooks"])
            self.assertEqual(run["receiver"]["bytes"], run["sender"]["bytes"], s)
            self.assertEqual(run["sender"]["errors"], {}, s)
            self.assertEqual(f["dropped_packets"], f["dropped_segments"], "per segment: " + str(s))
            self.assertEqual(f["hooks"]["tc_egress"]["dropped"], f["dropped_packets"], s)
            # Network loss: every dropped segment is retransmitted; an RTO resends more
            # (DESIGN 9), and the receiver D-SACKs spurious ones.
            self.assertGreaterEqual(da["Tcp.RetransSegs"], f["dropped_segments"], s)
            if da["TcpExt.TCPTimeouts"] == 0:
                self.assertEqual(da["Tcp.RetransSegs"], f["dropped_segments"] + da["TcpExt.TCPDSACKRecvSegs"], s)
            lo, hi = binom_interval(f["matched_segments"], 0.01)
            self.assertTrue(lo <= f["dropped_segments"] <= hi, "outside [%d, %d]: %s" % (lo, hi, s))

    def test_path_with_dotdot_is_the_cgroup_itself(self):
        with Lab() as lab:
            cg = lab.make_cgroup()
            spelled = os.path.join(cg, "..", os.path.basename(cg)) + "//"
            d = lab.lossd(lab.a, ["--hook", "cgroup", "--cgroup", spelled, "--dir", "both",
                                  "--rate", "100%"], nsenter=True)
            self.assertIn("cgroup_skb ingress to %s" % cg, d.hooks)  # the canonical path
            ((s, r),) = traffic.udp_flows(lab, [dict(rx_ns=lab.b, tx_ns=lab.a, dst=lab.V4_B, port=9304,
                                                     flow=4, count=1000, pps=PPS, tx_cgroup=cg)])
            f = d.stop()
            diag = "sender=%s receiver=%s final=%s" % (s, r, f)
            self.assertEqual(f["matched_packets"], 1000, diag)
            self.assertEqual(s["errors"], {}, diag)  # egress: lost, not refused
            self.assertEqual(r["unique"], 0, diag)

    def test_paths_outside_the_mount_are_invalid(self):
        with Lab() as lab:
            cg = lab.make_cgroup()
            outside = cg + "/../.."  # the directory the cgroup v2 mount sits in
            huge = "x" * 100_000  # below the kernel's 128 KiB per argument
            for path, want in ((outside, "outside the cgroup v2 mount"), (huge, "longer than")):
                d = lab.lossd(lab.a, ["--hook", "cgroup", "--cgroup", path, "--dir", "egress",
                                      "--rate", "1%"], nsenter=True, ready=False)
                rc = d.wait_exit(30)
                err = d.stderr()
                self.assertNotEqual(rc, 0, err)
                self.assertIn("INVALID_ARGUMENT", err)
                self.assertIn(want, err)
                self.assertLess(len(err), 4000, "the message echoes the whole input")


if __name__ == "__main__":
    main()
