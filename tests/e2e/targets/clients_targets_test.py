"""The service targets from the clients: lossctl, the one-shot lossd and the Python client.

`lossctl rule add --unit NAME` resolves (in the daemon) to the unit's cgroup, which
`rule ls`/`rule get` show beside what was asked; `lossctl rule add --pod NS/NAME` without
kubectl fails with the daemon's message and exit status; `lossctl watch --unit` prints the
owner of each retransmission; the one-shot `lossd --container ID` reports the cgroup it
resolved in its ready line and drops that container's datagrams; the Python client's
add_rule(pid=...) does the same through the API. Layouts are built in the cgroup v2 tree
(no systemd, no container runtime here).
"""
import binascii
import os
import subprocess
import sys

from lab import config, traffic
from lab.clients import ClientTestCase, table_rows
from lab.config import main
from lab.netns import cgroup2_mount


def hexid():
    return binascii.hexlify(os.urandom(32)).decode()


class ClientTargets(ClientTestCase):
    daemon_nsenter = True

    def rel(self, p):
        return p[len(cgroup2_mount()):]

    def watch_during_flow(self, cgroup, *watch_args):
        """`lossctl watch WATCH_ARGS` while a paced TCP flow A -> B:5401 runs from `cgroup`:
        (its lines about port 5401, all it printed)."""
        lab = self.lab
        w = self.d.ctl_popen("watch", *watch_args)
        try:
            traffic.tcp_flow(lab, lab.b, lab.a, lab.V4_B, port=5401, mbytes=8, rate_mbit=200, cgroup=cgroup)
            try:
                out, err = w.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                w.kill()
                out, err = w.communicate()
        finally:
            if w.poll() is None:
                w.kill()
        return [l for l in out.splitlines() if ":5401" in l], out + err

    def test_lossctl_unit_rule_and_watch(self):
        lab, d = self.lab, self.d
        top = lab.make_cgroup()
        tag = os.path.basename(top)
        unit = tag + "-api.service"
        ucg = lab.sub_cgroup(top, "system.slice", unit)
        r = d.add_rule("--unit", tag + "-api", "--dir", "ingress", "--proto", "udp", "--dport", "5400",
                       "--rate", "2%")
        self.assertEqual(r["spec"]["unit"], tag + "-api")
        self.assertEqual(r["cgroup"], self.rel(ucg))
        out = d.ctl_ok("rule", "ls").out
        self.assertIn("unit %s-api (cgroup %s)" % (tag, self.rel(ucg)), out)
        self.assertIn("cgroup       %s (id %d)" % (self.rel(ucg), os.stat(ucg).st_ino),
                      d.ctl_ok("rule", "get", r["id"]).out)
        # Retransmissions of a sender in the unit (a cgroup egress drop is a local drop TCP
        # does not retransmit: the loss is on A's interface).
        d.add_rule("--iface", lab.IF_A, "--dir", "egress", "--proto", "tcp", "--dport", "5401",
                   "--payload", "only", "--rate", "10%")  # of skbs of ~45 segments: ~15 events
        lines, shown = self.watch_during_flow(ucg, "--unit", unit, "--count", "3")
        self.assertEqual(len(lines), 3, shown)
        for l in lines:
            self.assertIn("owner " + unit, l)
        # --pid, as rule add takes it: a process of the unit names the unit's cgroup.
        sleeper = lab.popen(None, ["sleep", "60"], cgroup=ucg)
        self.addCleanup(lambda: (sleeper.kill(), sleeper.wait()))
        lines, shown = self.watch_during_flow(ucg, "--pid", sleeper.pid, "--count", "2")
        self.assertEqual(len(lines), 2, shown)
        # A service that is not there: watch, stalls, flows and top fail at once with the
        # NOT_FOUND rule add gives (before: watch waited silently for ever).
        ghost = tag + "-nope"
        added = d.ctl("rule", "add", "--unit", ghost, "--rate", "1%")
        self.assertEqual(added.rc, 4, added)
        for cmd in (["watch"], ["stalls"], ["flows"], ["top", "--count", "1"]):
            r = d.ctl(*(cmd + ["--unit", ghost]), timeout=20)
            self.assertEqual(r.rc, 4, (cmd, r))
            self.assertIn("unit %s.service" % ghost, r.err, (cmd, r))
            self.assertLess(r.secs, 10, (cmd, r))
        r = d.ctl("watch", "--pid", 4194000, timeout=20)
        self.assertEqual(r.rc, 4, r)
        bad = d.ctl("rule", "add", "--pod", "default/web", "--rate", "1%")
        self.assertNotEqual(bad.rc, 0)
        self.assertIn("kubectl", bad.err)
        # Without kubectl on its PATH (this machine has google-cloud-sdk's in /usr/bin: a
        # PATH without /usr/bin), a one-shot lossd says so.
        p = subprocess.run(["/usr/bin/nsenter", "--net=/run/netns/" + lab.b, "--", "/usr/bin/env",
                            "PATH=/usr/sbin:/sbin", config.LOSSD, "--json", "--state-dir", lab.tempdir(),
                            "--pod", "default/web", "--rate", "1%"],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertIn("FAILED_PRECONDITION", p.stderr)
        self.assertIn("not on lossd's PATH", p.stderr)

    def test_oneshot_container_and_python_pid(self):
        lab = self.lab
        top = lab.make_cgroup()
        cid = hexid()
        ccg = lab.sub_cgroup(top, "system.slice", "docker-%s.scope" % cid)
        one = lab.lossd(lab.b, ["--container", cid[:12], "--dir", "ingress", "--proto", "udp", "--dport",
                                "9601", "--rate", "100%"], nsenter=True)
        self.assertEqual(cgroup2_mount() + one.rule.cgroup, ccg)  # Rule.cgroup: relative to the mount
        self.assertIn("cgroup_skb ingress to " + ccg, one.hooks)
        ((s, r),) = traffic.udp_flows(lab, [dict(rx_ns=lab.b, tx_ns=lab.a, dst=lab.V4_B, port=9601, flow=1,
                                                 count=1000, pps=10000, rx_cgroup=ccg)])
        f = one.stop()
        self.assertEqual((s["sent"], r["unique"], f["dropped_packets"]), (1000, 0, 1000))
        # The Python client: a rule on a process's cgroup.
        holder = lab.popen(lab.a, ["sleep", "600"], cgroup=ccg)  # never the host's namespace: an egress rule decides on its devices
        code = ("import sys, lossd_client as lc\n"
                "c = lc.Client(%r, stubs=%r)\n"
                "r = c.add_rule(pid=%d, direction='egress', rate=0.01)\n"
                "print(r.resolved_cgroup)\n") % (self.d.sock, config.STUBS, holder.pid)
        p = subprocess.run([config.PY, "-c", code], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, PYTHONPATH=config.PYCLIENT))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), self.rel(ccg), p.stdout + p.stderr)


if __name__ == "__main__":
    main()
