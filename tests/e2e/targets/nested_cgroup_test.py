"""Nested cgroups: each cgroup rule is decided exactly once per packet (issue 10, item 4).

The kernel runs the cgroup_skb programs attached to a socket's cgroup and to every
ancestor (bpf_link attachments are BPF_F_ALLOW_MULTI). With a rule on T and a rule on
T/C, lossd has a program on both; a datagram sent from T/C runs both. Before the fix each
run evaluated every rule, so T's rule was decided twice per datagram: a 50 % rule on T
(udp/9999) beside a 0 % rule on T/C (udp/9) failed 75 % of a T/C sender's 10,000 datagrams
(measured: 7,486), T's rule counted 20,000 matched and GetRuleEffect said 0.500 "within CI".
Now each attachment decides only the rules whose target is the cgroup it is attached to.

Egress is decided at clsact egress on the sender's devices since issue 19 (a cgroup_skb
egress drop is a refusal the sender is told about): one program run per packet, matching
each rule's cgroup by the socket's ancestry, so a packet gets exactly one decision, by the
best rule among those that match (priority first), as on an interface. Drops are real
loss: the sender sees no error, the receiver misses exactly the dropped datagrams.

The daemon runs through `nsenter --net` (`ip netns exec` remounts /sys and hides the
cgroup v2 mount).
"""
from lab import traffic
from lab.config import main
from lab.daemon import DaemonTestCase
from lab.netns import measured
from lab.stats import binom_interval

N = 10_000
PPS = 10_000


class NestedCgroups(DaemonTestCase):
    daemon_nsenter = True

    def counters(self, rid):
        return self.d.get(rid).counters

    def send(self, cgroup, port, flow, count=N):
        ((s, r),) = traffic.udp_flows(self.lab, [dict(rx_ns=self.lab.b, tx_ns=self.lab.a, dst=self.lab.V4_B,
                                                      port=port, flow=flow, count=count, pps=PPS,
                                                      tx_cgroup=cgroup)])
        return s, r

    def parent_and_child(self, parent_port, parent_rate, child_port, child_priority=0):
        """T, T/C, and a UDP egress rule on each (T/C's at 0 %)."""
        t = self.lab.make_cgroup()
        c = self.lab.sub_cgroup(t, "c")
        parent = self.d.create(cgroup=t, hook="cgroup", direction="egress", protocol="udp",
                               dport=parent_port, rate=parent_rate)
        child = self.d.create(cgroup=c, hook="cgroup", direction="egress", protocol="udp",
                              dport=child_port, rate=0.0, priority=child_priority)
        return t, c, parent, child

    def test_parent_rule_decided_once_for_a_child_sender(self):
        t, c, parent, child = self.parent_and_child(9999, 0.5, 9)
        s, r = self.send(c, 9999, 41)
        lost = N - r["unique"]
        pc, cc = self.counters(parent.id), self.counters(child.id)
        eff = self.d.effect(parent.id)
        lo, hi = binom_interval(N, 0.5)
        measured("nested_cgroup_parent_50pct", lost=lost, interval=[lo, hi], parent_matched=pc.matched_packets,
                 parent_dropped=pc.dropped_packets, child_matched=cc.matched_packets,
                 measured_rate=eff.measured_rate)
        diag = "sender=%s receiver=%s parent=%s child=%s" % (s, r, pc, cc)
        self.assertEqual(s["errors"], {}, diag)
        self.assertEqual(pc.matched_packets, N, "each datagram decided once by T's rule: " + diag)
        self.assertEqual(pc.dropped_packets, lost, diag)
        self.assertEqual(cc.matched_packets, 0, diag)
        self.assertTrue(lo <= lost <= hi, "%d of %d lost, outside [%d, %d] for 50 %%: %s"
                        % (lost, N, lo, hi, diag))
        self.assertTrue(eff.configured_within_ci, str(eff))

    def test_overlapping_parent_and_child_rules_one_decision(self):
        # A sender in T/C to a port both rules match: one decision per datagram, by the
        # higher-priority rule (T/C's, 0 %); T's rule (20 %) sees none of them. A sender in
        # T itself meets only T's rule.
        t, c, parent, child = self.parent_and_child(9998, 0.2, 9998, child_priority=1)
        s, r = self.send(c, 9998, 42)
        pc, cc = self.counters(parent.id), self.counters(child.id)
        diag = "sender=%s receiver=%s parent=%s child=%s" % (s, r, pc, cc)
        self.assertEqual(s["errors"], {}, diag)
        self.assertEqual(cc.matched_packets, N, diag)
        self.assertEqual(cc.dropped_packets, 0, diag)
        self.assertEqual(pc.matched_packets, 0, "decided twice: " + diag)
        self.assertEqual(r["unique"], N, diag)
        s2, r2 = self.send(t, 9998, 43)
        lost = N - r2["unique"]
        pc2, cc2 = self.counters(parent.id), self.counters(child.id)
        lo, hi = binom_interval(N, 0.2)
        diag = "sender=%s receiver=%s parent=%s child=%s" % (s2, r2, pc2, cc2)
        self.assertEqual(pc2.matched_packets, N, diag)
        self.assertEqual(pc2.dropped_packets, lost, diag)
        self.assertEqual(cc2.matched_packets, cc.matched_packets, "T's sender is not in T/C: " + diag)
        self.assertTrue(lo <= lost <= hi, diag)
        measured("nested_cgroup_both", child_sender_lost=N - r["unique"], parent_sender_lost=lost,
                 interval=[lo, hi])


if __name__ == "__main__":
    main()
