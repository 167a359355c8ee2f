"""--pod NAMESPACE/NAME goes through kubectl (issue 25 item 12). No cluster runs here, so
the daemon's PATH starts with a stand-in `kubectl` script that records its arguments and
answers as kubectl does when a pod is missing, closing its stdout before it exits.

  test_waits_for_the_exit
      kubectl says "NotFound" on stdout, closes it, exits 1 a moment later: NOT_FOUND
      quoting what it said and its exit status. Before: "did not answer within 10000 ms"
      (FAILED_PRECONDITION) as soon as stdout ended.
  test_names_never_become_flags
      --kubeconfig/x, -n/x, a/-x, upper case, a trailing dash, a 64-character namespace:
      INVALID_ARGUMENT, and kubectl never runs. A good name reaches kubectl as
      --namespace=NS and, after `--`, NAME. Before: "--kubeconfig/x" passed the name check
      and reached kubectl as a flag.
"""
import os
import unittest

from lab import daemon
from lab.config import main
from lab.daemon import Daemon
from lab.netns import Lab, measured

FAKE = """#!/bin/sh
printf '%%s\\n' "$*" >> %(log)s
echo 'Error from server (NotFound): pods "web" not found'
exec 1>&-
sleep 0.4
exit 1
"""


class Kubectl(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lab = Lab()
        bindir = cls.lab.tempdir()
        cls.log = os.path.join(cls.lab.tempdir(), "kubectl-args")
        with open(os.path.join(bindir, "kubectl"), "w") as f:
            f.write(FAKE % {"log": cls.log})
        os.chmod(os.path.join(bindir, "kubectl"), 0o755)
        path = bindir + ":" + os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        cls.d = Daemon(cls.lab, cls.lab.a, ["--no-observer"], nsenter=True, wrap=("env", "PATH=" + path))

    @classmethod
    def tearDownClass(cls):
        cls.d.term()
        cls.lab.close()

    def calls(self):
        try:
            with open(self.log) as f:
                return [l.rstrip("\n") for l in f]
        except FileNotFoundError:
            return []

    def create(self, pod):
        with self.assertRaises(daemon.grpc.RpcError) as cm:
            self.d.create(direction="ingress", dport=9, rate=0.5, pod=pod)
        return cm.exception

    def test_waits_for_the_exit(self):
        e = self.create("default/web")
        measured("kubectl_closes_stdout_first", code=e.code().name, details=e.details())
        self.assertEqual(e.code(), daemon.grpc.StatusCode.NOT_FOUND, e.details())
        self.assertIn("exit status 1", e.details())
        self.assertIn('pods "web" not found', e.details())
        self.assertNotIn("did not answer", e.details())

    def test_names_never_become_flags(self):
        before = len(self.calls())
        for pod in ("--kubeconfig/x", "-n/x", "a/-x", "Default/web", "a-/web", "a/web-",
                    "a/web..x", "x" * 64 + "/web", "a/" + "b" * 254):
            e = self.create(pod)
            self.assertEqual(e.code(), daemon.grpc.StatusCode.INVALID_ARGUMENT, (pod, e.details()))
            self.assertIn("must be Kubernetes names", e.details())
        self.assertEqual(len(self.calls()), before, "kubectl ran for a refused name: %s" % self.calls())
        self.create("kube-system/web-0.a")
        last = self.calls()[-1].split(" ")
        measured("kubectl_args", args=last)
        self.assertIn("--namespace=kube-system", last)
        self.assertEqual(last[-2:], ["--", "web-0.a"], last)


if __name__ == "__main__":
    main()
