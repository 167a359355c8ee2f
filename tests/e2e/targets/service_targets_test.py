"""Services named as users name them: --pid, --unit, --container, --pod (issue 14).

These machines run no systemd and no container runtime (PID 1 is not systemd, there is
no /run/systemd/system), so each test builds the layout the real thing makes in the
cgroup v2 tree, under a unique top cgroup of its own, and moves real processes in:

  unit        <top>/system.slice/<tag>-web.service                       (systemd)
  docker      <top>/system.slice/docker-ID.scope, <top>/docker/ID        (systemd, cgroupfs driver)
  containerd  <top>/kubepods.slice/kubepods-besteffort.slice/
                  kubepods-besteffort-podUID.slice/cri-containerd-ID.scope
  CRI-O       <top>/kubepods/burstable/podUID/crio-ID (beside crio-conmon-ID)
  podman      <top>/machine.slice/libpod-ID.scope (beside libpod-conmon-ID.scope)
  pod         kubepods-burstable-podUID.slice (systemd), kubepods/podUID (cgroupfs, guaranteed)

For each: a UDP receiver in the target and one on the same port in a sibling cgroup
(IPv4 and IPv6 addresses of B, so both can bind it); a rule by that name drops 10 % of the
target's datagrams (binomial interval, every drop counted by the rule) and none of the
sibling's; then a TCP server on that port in the sibling (nothing matched, nothing
retransmitted) and one in the target (segments matched and dropped, every byte delivered).
ListRules shows what was asked (the spec's pid/unit/container/pod) and what it resolved
to (Rule.cgroup, Rule.cgroup_id).

Bad input: an unknown pid, unit, container and pod are NOT_FOUND naming what was looked
for and where; an ambiguous container prefix or unit name is INVALID_ARGUMENT listing the
candidates; a pid in the root cgroup is INVALID_ARGUMENT; --pod NAMESPACE/NAME without
kubectl is FAILED_PRECONDITION saying so; a pid that exits while its rule is created gets
either a rule on its cgroup or NOT_FOUND, never another code.
"""
import binascii
import os
import shutil
import subprocess
import threading
import uuid

from lab import daemon, traffic
from lab.config import main
from lab.daemon import DaemonTestCase
from lab.netns import cgroup2_mount, measured
from lab.stats import binom_interval, retransmissions_explained

N = 10_000
PPS = 10_000
RATE = 0.1


def hexid():
    return binascii.hexlify(os.urandom(32)).decode()


class ServiceTargets(DaemonTestCase):
    daemon_ns = "b"
    daemon_nsenter = True  # sees the host's cgroup v2 mount
    port = 9400

    def rel(self, path):
        return path[len(cgroup2_mount()):] or "/"

    def next_port(self):
        ServiceTargets.port += 1
        return ServiceTargets.port

    def rule_counters(self, rid):
        return self.d.get(rid).counters

    def check_target(self, label, target, sibling, **asked):
        """A rule by `asked` (pid=, unit=, container=, pod=) resolves to `target` and drops
        only its traffic; `sibling` loses nothing."""
        lab = self.lab
        port = self.next_port()
        rule = self.d.create(direction="ingress", dport=port, rate=RATE, **asked)
        self.assertEqual(rule.cgroup, self.rel(target), rule)
        self.assertEqual(rule.cgroup_id, os.stat(target).st_ino, rule)
        self.assertEqual(rule.spec.hook, daemon.pb.HOOK_CGROUP)
        for k, v in asked.items():
            self.assertEqual(getattr(rule.spec, k), v, "the spec shows what was asked")
        listed = [r for r in self.d.inj.ListRules(daemon.pb.ListRulesRequest(), timeout=10).rules
                  if r.id == rule.id]
        self.assertEqual(listed[0].cgroup, self.rel(target))
        (s_t, r_t), (s_s, r_s) = traffic.udp_flows(lab, [
            dict(rx_ns=lab.b, tx_ns=lab.a, dst=lab.V4_B, port=port, flow=1, count=N, pps=PPS, rx_cgroup=target),
            dict(rx_ns=lab.b, tx_ns=lab.a, dst=lab.V6_B, port=port, flow=2, count=N, pps=PPS, rx_cgroup=sibling)])
        c = self.rule_counters(rule.id)
        lost_t, lost_s = N - r_t["unique"], N - r_s["unique"]
        lo, hi = binom_interval(N, RATE)
        diag = "%s: target=%s sibling=%s counters=%s" % (label, r_t, r_s, c)
        self.assertEqual(s_t["sent"] + s_s["sent"], 2 * N, diag)
        self.assertEqual(lost_s, 0, "the sibling cgroup lost datagrams: " + diag)
        self.assertEqual(c.matched_packets, N, diag)
        self.assertEqual(c.dropped_packets, lost_t, diag)
        self.assertTrue(lo <= lost_t <= hi, "%d of %d lost, outside [%d, %d]: %s" % (lost_t, N, lo, hi, diag))
        # TCP: a server on the same port in the sibling, then in the target.
        a0, b0, p0 = lab.counters(lab.a), lab.counters(lab.b), lab.path_drops()
        _, recv = traffic.tcp_flow(lab, lab.b, lab.a, lab.V4_B, port=port, mbytes=4, rate_mbit=200,
                                   server_cgroup=sibling)
        c1, da = self.rule_counters(rule.id), lab.counters(lab.a) - a0
        db, path_drops = lab.counters(lab.b) - b0, lab.path_drops() - p0
        self.assertEqual(recv["bytes"], 4_000_000)
        self.assertEqual(c1.matched_packets, c.matched_packets, "sibling's TCP matched: %s" % c1)
        # Nothing of the sibling's was lost to lossd: every resend it made (a tail loss probe
        # when a busy machine delays the last ACK) was of a segment the receiver already had,
        # which it reported with a D-SACK, or of one a kernel counted lost on the path (a
        # full veth ring on a loaded machine): stats.retransmissions_explained with no drops.
        ok, numbers = retransmissions_explained(da, db, 0, path_drops)
        self.assertTrue(ok, "sibling's TCP lost segments: %s %s" % (numbers, {k: v for k, v in da.items() if v}))
        a1 = lab.counters(lab.a)
        _, recv = traffic.tcp_flow(lab, lab.b, lab.a, lab.V4_B, port=port, mbytes=4, rate_mbit=200,
                                   server_cgroup=target)
        c2, da = self.rule_counters(rule.id), lab.counters(lab.a) - a1
        self.assertEqual(recv["bytes"], 4_000_000)
        self.assertGreater(c2.matched_segments, c1.matched_segments, str(c2))
        self.assertGreater(c2.dropped_segments, c1.dropped_segments, str(c2))
        self.assertGreater(da["Tcp.RetransSegs"], 0)
        measured("target_" + label, udp_lost=lost_t, interval=[lo, hi], sibling_lost=lost_s,
                 tcp_matched_segs=c2.matched_segments - c1.matched_segments,
                 tcp_dropped_segs=c2.dropped_segments - c1.dropped_segments,
                 tcp_retrans=da["Tcp.RetransSegs"], cgroup=rule.cgroup)
        self.d.delete(rule.id)
        return rule

    # -- each kind ---------------------------------------------------------------------
    def test_pid(self):
        top = self.lab.make_cgroup()
        target, sibling = self.lab.sub_cgroup(top, "app"), self.lab.sub_cgroup(top, "other")
        holder = self.lab.popen(None, ["sleep", "600"], cgroup=target)
        self.check_target("pid", target, sibling, pid=holder.pid)

    def test_unit_without_systemd(self):
        self.assertFalse(os.path.isdir("/run/systemd/system"), "systemd runs here: this test builds its layout")
        top = self.lab.make_cgroup()
        tag = os.path.basename(top)
        target = self.lab.sub_cgroup(top, "system.slice", tag + "-web.service")
        sibling = self.lab.sub_cgroup(top, "system.slice", tag + "-db.service")
        self.check_target("unit", target, sibling, unit=tag + "-web")  # ".service" implied
        self.check_target("unit_full_name", target, sibling, unit=tag + "-web.service")

    def test_docker_both_drivers(self):
        top = self.lab.make_cgroup()
        a, b = hexid(), hexid()
        target = self.lab.sub_cgroup(top, "system.slice", "docker-%s.scope" % a)
        sibling = self.lab.sub_cgroup(top, "system.slice", "docker-%s.scope" % b)
        self.check_target("docker_systemd", target, sibling, container=a[:12])
        c, d = hexid(), hexid()
        target = self.lab.sub_cgroup(top, "docker", c)
        sibling = self.lab.sub_cgroup(top, "docker", d)
        self.check_target("docker_cgroupfs", target, sibling, container=c)

    def test_containerd_in_a_pod(self):
        top = self.lab.make_cgroup()
        uid = str(uuid.uuid4())
        pod = self.lab.sub_cgroup(top, "kubepods.slice", "kubepods-besteffort.slice",
                                  "kubepods-besteffort-pod%s.slice" % uid.replace("-", "_"))
        a, b = hexid(), hexid()
        target = self.lab.sub_cgroup(pod, "cri-containerd-%s.scope" % a)
        sibling = self.lab.sub_cgroup(pod, "cri-containerd-%s.scope" % b)
        self.check_target("containerd", target, sibling, container=a[:16])
        self.check_target("containerd_in_pod", target, sibling, container=a[:8], pod=uid)

    def test_crio_cgroupfs(self):
        top = self.lab.make_cgroup()
        uid = str(uuid.uuid4())
        pod = self.lab.sub_cgroup(top, "kubepods", "burstable", "pod" + uid)
        a, b = hexid(), hexid()
        target = self.lab.sub_cgroup(pod, "crio-" + a)
        self.lab.sub_cgroup(pod, "crio-conmon-" + a)  # the monitor: not the container
        sibling = self.lab.sub_cgroup(pod, "crio-" + b)
        self.check_target("crio", target, sibling, container=a[:12])

    def test_podman(self):
        top = self.lab.make_cgroup()
        a, b = hexid(), hexid()
        target = self.lab.sub_cgroup(top, "machine.slice", "libpod-%s.scope" % a)
        self.lab.sub_cgroup(top, "machine.slice", "libpod-conmon-%s.scope" % a)
        sibling = self.lab.sub_cgroup(top, "machine.slice", "libpod-%s.scope" % b)
        self.check_target("podman", target, sibling, container=a[:12])

    def test_pod_both_drivers(self):
        top = self.lab.make_cgroup()
        u1, u2 = str(uuid.uuid4()), str(uuid.uuid4())
        qos = self.lab.sub_cgroup(top, "kubepods.slice", "kubepods-burstable.slice")
        target = self.lab.sub_cgroup(qos, "kubepods-burstable-pod%s.slice" % u1.replace("-", "_"))
        sibling = self.lab.sub_cgroup(qos, "kubepods-burstable-pod%s.slice" % u2.replace("-", "_"))
        self.check_target("pod_systemd_burstable", target, sibling, pod=u1)
        g1, g2 = str(uuid.uuid4()), str(uuid.uuid4())
        target = self.lab.sub_cgroup(top, "kubepods", "pod" + g1)
        sibling = self.lab.sub_cgroup(top, "kubepods", "pod" + g2)
        self.check_target("pod_cgroupfs_guaranteed", target, sibling, pod=g1)

    # -- bad input -----------------------------------------------------------------------
    def refused(self, code, *want, **asked):
        with self.assertRaises(daemon.grpc.RpcError) as cm:
            self.d.create(direction="ingress", dport=9, rate=0.5, **asked)
        e = cm.exception
        self.assertEqual(e.code(), code, e.details())
        for w in want:
            self.assertIn(w, e.details())
        self.assertLess(len(e.details()), 2000)
        return e.details()

    def test_bad_input(self):
        NF, IA, FP = (daemon.grpc.StatusCode.NOT_FOUND, daemon.grpc.StatusCode.INVALID_ARGUMENT,
                      daemon.grpc.StatusCode.FAILED_PRECONDITION)
        mount = cgroup2_mount()
        p = subprocess.Popen(["true"])
        p.wait()
        self.refused(NF, "pid %d" % p.pid, "no such process", pid=p.pid)
        self.refused(IA, "root cgroup", pid=os.getpid())
        top = self.lab.make_cgroup()
        tag = os.path.basename(top)
        self.refused(NF, "unit %s-nope.service" % tag, mount, "systemd is not running", unit=tag + "-nope")
        self.refused(IA, "only services, scopes and slices", unit="x.socket")
        self.refused(IA, "not a systemd unit name", unit="a/b")
        ghost = hexid()
        self.refused(NF, "container " + ghost[:12], mount, "docker-", container=ghost[:12])
        self.refused(IA, "not a container id", container="nginx")
        ghost_pod = str(uuid.uuid4())
        self.refused(NF, "pod " + ghost_pod, mount, "kubepods", pod=ghost_pod)
        if shutil.which("kubectl") is None:
            self.refused(FP, "kubectl", "not on lossd's PATH", "UID", pod="default/web")
        else:
            # kubectl is here (google-cloud-sdk's) but reaches no cluster: what it said (or
            # that it did not answer within its deadline), bounded.
            self.refused(FP, "pod default/web: kubectl", pod="default/web")
        self.refused(IA, "NAMESPACE/NAME must be Kubernetes names", pod="Default/web;rm")
        # Ambiguous: two containers sharing a prefix, one unit name in two places.
        prefix = "ab12" + hexid()[:8]
        one = self.lab.sub_cgroup(top, "system.slice", "docker-%s.scope" % (prefix + hexid()[:52]))
        two = self.lab.sub_cgroup(top, "docker", prefix + hexid()[:52])
        msg = self.refused(IA, "matches 2 cgroups", self.rel(one), self.rel(two), container=prefix)
        self.lab.sub_cgroup(top, "system.slice", tag + "-twice.service")
        self.lab.sub_cgroup(top, "user.slice", tag + "-twice.service")
        self.refused(IA, "matches 2 cgroups", unit=tag + "-twice")
        self.refused(IA, "one cgroup target", unit=tag + "-twice", pid=1)
        measured("targets_bad_input_example", ambiguous=msg)

    def test_pid_exiting_while_the_rule_is_created(self):
        top = self.lab.make_cgroup()
        cg = self.lab.sub_cgroup(top, "brief")
        outcomes = {"created": 0, "not_found": 0}
        for i in range(30):
            # Exits at once and is reaped concurrently (a thread waits for it): the daemon
            # sees it alive, a zombie, or gone, at any step of its lookup.
            p = self.lab.popen(None, ["true"] if i % 2 else ["sleep", "0.00%d" % (i % 10)], cgroup=cg)
            reaper = threading.Thread(target=p.wait)
            reaper.start()
            try:
                r = self.d.create(direction="ingress", dport=9, rate=0.5, pid=p.pid)
                self.assertEqual(r.cgroup, self.rel(cg), r)
                self.d.delete(r.id)
                outcomes["created"] += 1
            except daemon.grpc.RpcError as e:
                self.assertEqual(e.code(), daemon.grpc.StatusCode.NOT_FOUND, e.details())
                self.assertIn("pid %d" % p.pid, e.details())
                outcomes["not_found"] += 1
            reaper.join()
        measured("pid_exiting", **outcomes)
        self.assertEqual(sum(outcomes.values()), 30)


if __name__ == "__main__":
    main()
