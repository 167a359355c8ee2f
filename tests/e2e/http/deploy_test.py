"""HTTP e2e 4: what dist/ ships for a fleet holds on this machine.

  test_daemonset_capabilities   dist/kubernetes/lossd-daemonset.yaml is not privileged, drops
                                ALL and adds a named list, carries the scrape annotations for
                                lossd's port; lossd run with exactly that list (setpriv
                                --bounding-set, nsenter into namespace A, the host's cgroup
                                mounts kept, as the manifest mounts them) has exactly those
                                capabilities, loads the injector and the observer, attaches a
                                tcx ingress and a clsact egress rule, a cgroup target's egress
                                inside another namespace (SYS_ADMIN: setns), and serves
                                /metrics; its probes are /readyz and /healthz
  test_prometheus_config        dist/prometheus/prometheus.yml passes `promtool check config`
                                (its files made here: a CA, the two target files)
  test_podmonitor               dist/kubernetes/podmonitor.yaml selects the DaemonSet's pods
                                and scrapes its named port over HTTPS
"""
import os
import shutil
import subprocess
import unittest

import yaml

from lab import daemon, config, web
from lab.config import main
from lab.daemon import Daemon
from lab.netns import Lab, measured

DIST = os.path.join(config.REPO, "dist")
CAP_BITS = {"BPF": 39, "PERFMON": 38, "NET_ADMIN": 12, "SYS_ADMIN": 21, "SYS_RESOURCE": 24,
            "SYS_PTRACE": 19}


def daemonset():
    with open(os.path.join(DIST, "kubernetes", "lossd-daemonset.yaml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    return [d for d in docs if d["kind"] == "DaemonSet"][0]


class Deploy(unittest.TestCase):
    def test_daemonset_capabilities(self):
        ds = daemonset()
        pod = ds["spec"]["template"]
        c = pod["spec"]["containers"][0]
        sc = c["securityContext"]
        self.assertIs(sc.get("privileged"), False)
        self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
        caps = sc["capabilities"]["add"]
        # SYS_ADMIN to enter pods' namespaces (setns), SYS_PTRACE to read which they are
        # (/proc/PID/ns/net of their processes), nothing broader (issue 19).
        self.assertEqual(sorted(caps), ["BPF", "NET_ADMIN", "PERFMON", "SYS_ADMIN", "SYS_PTRACE"])
        self.assertIs(pod["spec"].get("hostPID"), True)
        self.assertEqual(c["readinessProbe"]["httpGet"]["path"], "/readyz")
        self.assertEqual(c["livenessProbe"]["httpGet"]["path"], "/healthz")
        ann = pod["metadata"]["annotations"]
        self.assertEqual(ann["prometheus.io/scrape"], "true")
        self.assertEqual(int(ann["prometheus.io/port"]), 7071)
        self.assertIn("--http=0.0.0.0:7071", c["args"])
        self.assertEqual([p["containerPort"] for p in c["ports"]], [7071])

        with Lab() as lab:
            bounding = "-all," + ",".join("+" + x.lower() for x in caps)
            d = Daemon(lab, lab.a, nsenter=True, wrap=["setpriv", "--bounding-set=" + bounding])
            with open("/proc/%d/status" % d.pid) as f:
                eff = int([l.split()[1] for l in f if l.startswith("CapEff:")][0], 16)
            want = sum(1 << CAP_BITS[x] for x in caps)
            parts = d.parts
            r1 = d.create(interface=lab.IF_A, protocol="udp", dport=9500, rate=0.5)
            r2 = d.create(interface=lab.IF_A, direction="egress", protocol="udp", dport=9501, rate=0.5)
            # A "pod" in B's namespace: its egress is decided on its own device (setns).
            cg = lab.make_cgroup()
            lab.popen(lab.b, ["sleep", "600"], cgroup=cg)
            r3 = d.create(cgroup=cg, direction="egress", protocol="udp", dport=9502, rate=0.5)
            b_ino = os.stat("/run/netns/" + lab.b).st_ino
            m = web.request(lab.a, "127.0.0.1", d.http_port, "/metrics")
            measured("daemonset_capabilities", caps=caps, cap_eff=hex(eff), parts=parts,
                     attachments=[list(r1.attachments), list(r2.attachments), list(r3.attachments)],
                     metrics=m.status)
            self.assertEqual(eff, want, "lossd ran with other capabilities than the manifest's")
            self.assertEqual(parts["injector"][0], "COMPONENT_STATE_READY", parts)
            self.assertEqual(parts["observer"][0], "COMPONENT_STATE_READY", parts)
            self.assertEqual(list(r1.attachments), ["tcx ingress to " + lab.IF_A])
            self.assertEqual(list(r2.attachments), ["clsact egress on " + lab.IF_A])
            self.assertEqual(list(r3.attachments), ["clsact egress on %s in netns %d" % (lab.IF_B, b_ino)])
            self.assertEqual(m.status, 200)
            self.assertEqual(d.term(), 0, d.stderr())

            # Without SYS_PTRACE lossd cannot tell which namespace the "pod" is in: the rule
            # is refused, never attached to devices its packets do not leave by.
            fewer = "-all," + ",".join("+" + x.lower() for x in caps if x != "SYS_PTRACE")
            d2 = Daemon(lab, lab.a, nsenter=True, wrap=["setpriv", "--bounding-set=" + fewer])
            with self.assertRaises(daemon.grpc.RpcError) as cm:
                d2.create(cgroup=cg, direction="egress", protocol="udp", dport=9502, rate=0.5)
            measured("daemonset_without_sys_ptrace", code=cm.exception.code().name,
                     message=cm.exception.details())
            self.assertEqual(cm.exception.code(), daemon.grpc.StatusCode.PERMISSION_DENIED)
            self.assertIn("CAP_SYS_PTRACE", cm.exception.details())
            self.assertEqual(d2.term(), 0, d2.stderr())

    def test_prometheus_config(self):
        with Lab(pair=False) as lab:
            d = lab.tempdir()
            with open(os.path.join(DIST, "prometheus", "prometheus.yml")) as f:
                text = f.read().replace("/etc/prometheus/", d + "/")
            with open(os.path.join(d, "prometheus.yml"), "w") as f:
                f.write(text)
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                            "/CN=lossd-e2e", "-keyout", os.path.join(d, "ca.key"), "-out",
                            os.path.join(d, "lossd-ca.pem")], check=True, capture_output=True, timeout=60)
            for t in ("lossd-targets.yml", "node-targets.yml"):
                shutil.copy(os.path.join(DIST, "prometheus", "lossd-targets.example.yml"), os.path.join(d, t))
            r = subprocess.run(["promtool", "check", "config", os.path.join(d, "prometheus.yml")],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_podmonitor(self):
        with open(os.path.join(DIST, "kubernetes", "podmonitor.yaml")) as f:
            pm = yaml.safe_load(f)
        ds = daemonset()
        self.assertEqual(pm["spec"]["selector"]["matchLabels"], ds["spec"]["selector"]["matchLabels"])
        ep = pm["spec"]["podMetricsEndpoints"][0]
        names = [p["name"] for p in ds["spec"]["template"]["spec"]["containers"][0]["ports"]]
        self.assertIn(ep["port"], names)
        self.assertEqual((ep["path"], ep["scheme"]), ("/metrics", "https"))


if __name__ == "__main__":
    main()
