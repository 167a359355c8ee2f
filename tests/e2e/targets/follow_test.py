"""A rule follows its service when the service's cgroup is deleted and recreated (issue 14).

A unit or container that restarts gets a new cgroup at the same path (a new cgroup id).
The rule (on a unit here: <top>/system.slice/<tag>-web.service, built as systemd lays it
out) is FAILED while the cgroup is gone, with the reason; once the cgroup is back, lossd
notices at its next periodic check (lease / 3: 1 s at the default 3 s lease), attaches
its programs to the new cgroup and the rule is ACTIVE again (the reason says it was
re-attached, with both ids) and drops the new process's traffic at its rate. Meanwhile a
receiver in a sibling cgroup, on the same port, runs through the whole restart and loses
nothing.
"""
import os
import time

from lab import daemon, traffic
from lab.config import main
from lab.daemon import DaemonTestCase, wait_until
from lab.netns import cgroup2_mount, measured, _remove_cgroup
from lab.stats import binom_interval

N = 10_000
PPS = 10_000
RATE = 0.1


class FollowsTheService(DaemonTestCase):
    daemon_ns = "b"
    daemon_nsenter = True

    def state(self, rid):
        r = self.d.get(rid)
        return daemon.pb.RuleState.Name(r.state), r.reason, r

    def phase(self, target, sibling, port, flow):
        lab = self.lab
        return traffic.udp_flows(lab, [
            dict(rx_ns=lab.b, tx_ns=lab.a, dst=lab.V4_B, port=port, flow=flow, count=N, pps=PPS, rx_cgroup=target),
            dict(rx_ns=lab.b, tx_ns=lab.a, dst=lab.V6_B, port=port, flow=flow + 1, count=N, pps=PPS,
                 rx_cgroup=sibling)])

    def test_unit_restart(self):
        lab = self.lab
        top = lab.make_cgroup()
        tag = os.path.basename(top)
        unit = tag + "-web.service"
        target = lab.sub_cgroup(top, "system.slice", unit)
        sibling = lab.sub_cgroup(top, "system.slice", tag + "-db.service")
        port = 9501
        rule = self.d.create(unit=unit, direction="ingress", protocol="udp", dport=port, rate=RATE)
        old_id = os.stat(target).st_ino
        self.assertEqual(rule.cgroup_id, old_id)
        self.assertEqual(self.state(rule.id)[0], "RULE_STATE_ACTIVE")
        lo, hi = binom_interval(N, RATE)
        (_, r1), (_, s1) = self.phase(target, sibling, port, 10)
        self.assertTrue(lo <= N - r1["unique"] <= hi, r1)
        self.assertEqual(s1["unique"], N, s1)

        # The service stops: its cgroup goes. A sibling receiver keeps running throughout.
        keeper = traffic.UdpReceiver(lab, lab.b, lab.V6_B, port + 1, 20, cgroup=sibling)
        keeper_tx = lab.popen(lab.a, traffic.udp_send_cmd(lab.V6_B, port + 1, 20, 12_500, 2_500),
                              stdout=traffic.subprocess.PIPE)
        _remove_cgroup(target)
        self.assertFalse(os.path.exists(target))
        st, reason, _ = self.state(rule.id)
        self.assertEqual(st, "RULE_STATE_FAILED", reason)
        self.assertIn(self.d.get(rule.id).cgroup, reason)
        # Still FAILED after the periodic check, with the reason it recorded.
        time.sleep(1.5)
        st, reason, _ = self.state(rule.id)
        self.assertEqual(st, "RULE_STATE_FAILED", reason)
        self.assertIn("deleted", reason)

        # It restarts: same path, a new cgroup id.
        os.mkdir(target)
        new_id = os.stat(target).st_ino
        self.assertNotEqual(new_id, old_id)
        t0 = time.monotonic()
        got = wait_until(lambda: (lambda s: s if s[0] == "RULE_STATE_ACTIVE" else None)(self.state(rule.id)),
                         5, "the rule to be ACTIVE again after its cgroup came back")
        secs = time.monotonic() - t0
        _, reason, r = got
        self.assertIn("recreated", reason)
        self.assertIn("%d -> %d" % (old_id, new_id), reason)
        self.assertEqual(r.cgroup_id, new_id)
        c0 = r.counters
        (_, r2), (_, s2) = self.phase(target, sibling, port, 30)
        c1 = self.d.get(rule.id).counters
        kept_sent = traffic.finish_sender(keeper_tx, 12_500, 2_500)
        kept = keeper.finish()
        lost = N - r2["unique"]
        diag = "after=%s sibling=%s counters=%s" % (r2, s2, c1)
        self.assertEqual(c1.matched_packets - c0.matched_packets, N, diag)
        self.assertEqual(c1.dropped_packets - c0.dropped_packets, lost, diag)
        self.assertTrue(lo <= lost <= hi, diag)
        self.assertEqual(s2["unique"], N, "the sibling lost datagrams: " + diag)
        self.assertEqual(kept["unique"], kept_sent["sent"], "a receiver outside lost datagrams during "
                         "the restart: %s %s" % (kept, kept_sent))
        measured("follow_unit_restart", reattach_secs=round(secs, 3), old_id=old_id, new_id=new_id,
                 lost_before=N - r1["unique"], lost_after=lost, interval=[lo, hi], reason=reason)


if __name__ == "__main__":
    main()
