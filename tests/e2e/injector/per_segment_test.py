"""e2e 6: --per-segment on the sender's egress (clsact STOLEN) under a paced
TCP flow.

While the rule lives, the interface has gso_max_segs 1 (TCP then builds
single-segment skbs; TSO/GSO settings alone do not change what TCP builds) and
GRO off, and that must make every skb the hook sees one wire segment: dropped_pkts == dropped_segs (and
matched_pkts == matched_segs), the segment loss rate inside the 99.9 %
binomial interval of n = matched_segs, p = 1 %. The retransmission accounting
of the egress test holds. After SIGTERM the interface's offload settings are
exactly what they were (a deliberately non-default mix); after SIGKILL, the
next lossd start with the same --state-dir restores them.
"""
import json
import os
import stat
import unittest

from lab import config, traffic
from lab.config import main
from lab.netns import Lab, measured
from lab.stats import binom_interval, retransmissions_explained


RULE = ["--dir", "egress", "--proto", "tcp", "--dport", "5201", "--payload", "only", "--rate", "1%",
        "--per-segment"]
OFF_WHILE_ACTIVE = ("generic-receive-offload",)


def gso_max_segs(lab, ns, ifname):
    return json.loads(lab.run(ns, "ip", "-d", "-j", "link", "show", "dev", ifname).stdout)[0].get("gso_max_segs")


class PerSegment(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lab = lab = Lab()
        try:
            # Non-default starting point (veth defaults to GRO off).
            lab.run(lab.a, "ethtool", "-K", lab.IF_A, "gro", "on")
            cls.before = lab.features(lab.a, lab.IF_A)
            cls.segs_before = gso_max_segs(lab, lab.a, lab.IF_A)
            d = lab.lossd(lab.a, ["--iface", lab.IF_A] + RULE)
            cls.state_dir = d.state_dir
            cls.during = lab.features(lab.a, lab.IF_A)
            cls.gso_max_segs = gso_max_segs(lab, lab.a, lab.IF_A)
            a0, b0, p0 = lab.counters(lab.a), lab.counters(lab.b), lab.path_drops()
            cls.sender, cls.receiver = traffic.tcp_flow(lab, lab.b, lab.a, lab.V4_B, mbytes=112.5, rate_mbit=300)
            cls.da, cls.db = lab.counters(lab.a) - a0, lab.counters(lab.b) - b0
            cls.path_drops = lab.path_drops() - p0
            cls.final = d.stop()
            cls.after = lab.features(lab.a, lab.IF_A)
            cls.segs_after = gso_max_segs(lab, lab.a, lab.IF_A)
            cls.summary = traffic.tcp_summary(dict(sender=cls.sender, receiver=cls.receiver, final=cls.final,
                                                   da=cls.da, db=cls.db, path_drops=cls.path_drops))
            f = cls.final
            measured("per_segment_egress", segs_per_skb=round(f["matched_segments"] / max(1, f["matched_packets"]), 2),
                     binom_interval=binom_interval(f["matched_segments"], 0.01),
                     features_during={k: cls.during.get(k) for k in OFF_WHILE_ACTIVE},
                     gso_max_segs=cls.gso_max_segs, **cls.summary)
        except BaseException:
            lab.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.lab.close()

    def test_offloads_off_while_rule_lives(self):
        for k in OFF_WHILE_ACTIVE:
            self.assertEqual(self.during.get(k), "off", "%s during the rule: %s" % (k, self.during))
        self.assertEqual(self.gso_max_segs, 1)
        self.assertGreater(self.segs_before, 1)

    def test_one_segment_per_skb(self):
        f = self.final
        self.assertEqual(f["dropped_packets"], f["dropped_segments"],
                         "per-segment rule dropped multi-segment skbs: %s" % self.summary)
        self.assertEqual(f["matched_packets"], f["matched_segments"],
                         "per-segment rule saw multi-segment skbs: %s" % self.summary)

    def test_segment_loss_rate_in_binomial_interval(self):
        f = self.final
        lo, hi = binom_interval(f["matched_segments"], 0.01)
        self.assertTrue(lo <= f["dropped_segments"] <= hi,
                        "dropped_segs %d outside [%d, %d]: %s" % (f["dropped_segments"], lo, hi, self.summary))

    def test_retransmissions_equal_dropped_segments(self):
        self.assertEqual(self.receiver["bytes"], int(112.5e6))
        self.assertGreater(self.final["dropped_segments"], 0)
        ok, _ = retransmissions_explained(self.da, self.db, self.final["dropped_segments"], self.path_drops)
        self.assertTrue(ok, self.summary)

    def test_offloads_restored_after_sigterm(self):
        diff = {k: (v, self.after.get(k)) for k, v in self.before.items() if self.after.get(k) != v}
        self.assertEqual(diff, {}, "features changed across the rule's life (before, after)")
        self.assertEqual(self.segs_after, self.segs_before)
        self.assertFalse(os.path.exists(os.path.join(self.state_dir, "offloads")),
                         "recovery state left behind after a clean exit")


class PerSegmentCrash(unittest.TestCase):
    def test_next_start_restores_offloads_after_sigkill(self):
        with Lab() as lab:
            lab.run(lab.a, "ethtool", "-K", lab.IF_A, "gro", "on", "tso", "off")
            before = lab.features(lab.a, lab.IF_A)
            segs_before = gso_max_segs(lab, lab.a, lab.IF_A)
            d = lab.lossd(lab.a, ["--iface", lab.IF_A] + RULE)
            during = lab.features(lab.a, lab.IF_A)
            d.kill9()
            left = lab.features(lab.a, lab.IF_A)
            self.assertEqual(gso_max_segs(lab, lab.a, lab.IF_A), 1, "SIGKILL cannot restore")
            # Same state dir: the next start finds the record and restores.
            d2 = lab.lossd(lab.a, [], state_dir=d.state_dir)
            d2.stop(expect_final=False)
            after = lab.features(lab.a, lab.IF_A)
            measured("per_segment_sigkill",
                     before={k: before.get(k) for k in OFF_WHILE_ACTIVE},
                     left_by_sigkill={k: left.get(k) for k in OFF_WHILE_ACTIVE},
                     after_restart={k: after.get(k) for k in OFF_WHILE_ACTIVE})
            self.assertEqual(during.get("generic-receive-offload"), "off")
            self.assertEqual(left.get("generic-receive-offload"), "off", "SIGKILL cannot restore")
            diff = {k: (v, after.get(k)) for k, v in before.items() if after.get(k) != v}
            self.assertEqual(diff, {}, "next start did not restore (before, after); stderr:\n" + d2.stderr())
            self.assertEqual(gso_max_segs(lab, lab.a, lab.IF_A), segs_before)


class PerSegmentNoStateDir(unittest.TestCase):
    def test_empty_state_dir_keeps_no_record_and_leaves_dev_null_alone(self):
        # --state-dir '' keeps no crash record (regression: the record went to /dev/null,
        # written through a temporary file renamed over it, then unlinked).
        with Lab() as lab:
            cmd = [config.LOSSD, "--json", "--state-dir", "", "--duration", "1s",
                   "--iface", lab.IF_A] + RULE
            r = lab.run(lab.a, *cmd, check=False, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(stat.S_ISCHR(os.stat("/dev/null").st_mode), "/dev/null is no device any more")
            self.assertFalse(os.path.exists("/dev/null.tmp"))


class PerSegmentBesideObserver(unittest.TestCase):
    def test_observe_alone_leaves_a_live_rules_offloads_alone(self):
        # Regression: `lossd --observe` with the same state dir as a running lossd holding a
        # per-segment rule restored that interface's offloads under the live rule and deleted
        # its record (it built an injector, whose start undoes "a dead owner's" changes).
        with Lab() as lab:
            d = lab.lossd(lab.a, ["--iface", lab.IF_A] + RULE)
            record = os.path.join(d.state_dir, "offloads")
            self.assertTrue(os.path.exists(record))
            obs = lab.lossd(lab.a, ["--observe", "--duration", "1s"], state_dir=d.state_dir)
            self.assertEqual(obs.wait_exit(60), 0, obs.stderr())
            self.assertEqual(gso_max_segs(lab, lab.a, lab.IF_A), 1, obs.stderr())
            self.assertEqual(lab.features(lab.a, lab.IF_A).get("generic-receive-offload"), "off")
            self.assertTrue(os.path.exists(record), "the live rule's record was deleted")
            d.stop()


class PerSegmentVethIngress(unittest.TestCase):
    def test_refused_with_a_clear_error(self):
        """At a veth's ingress the peer builds the packets: refused, nothing changed."""
        with Lab() as lab:
            before = lab.features(lab.b, lab.IF_B)
            p = lab.run(lab.b, config.LOSSD, "--iface", lab.IF_B, "--proto", "tcp", "--rate", "1%",
                        "--per-segment", "--state-dir", lab.tempdir(), check=False)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("FAILED_PRECONDITION", p.stderr)
            self.assertIn("sender's interface", p.stderr)
            self.assertEqual(lab.features(lab.b, lab.IF_B), before)


if __name__ == "__main__":
    main()
