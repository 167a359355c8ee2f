"""e2e: host protection, in one-shot mode (regressions: each shape below was accepted).

A process named sshd listens dual-stack on port 2222 in namespace A (not 22: lossd must
find the port sshd really listens on), with one live IPv4 connection from B (shown as
::ffff:192.0.2.2 in /proc/net/tcp6). Every lossy TCP rule that could cut it is refused
with FAILED_PRECONDITION: the plain port, the port with an ephemeral source range, the
port with dst 0.0.0.0/0, the live peer's address, a cgroup sshd is in. --force lets a
rule through and the override is logged; a rule on another port is untouched unless
--protect-port names it (a listener there is then protected too).
"""
import os
import textwrap
import unittest

from lab.config import PY, main
from lab.netns import Lab

PORT = 2222

FAKE_SSHD = textwrap.dedent("""
    import ctypes, socket, sys, time
    ctypes.CDLL(None).prctl(15, b"sshd", 0, 0, 0)  # PR_SET_NAME: /proc/PID/comm is sshd
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", int(sys.argv[1])))
    s.listen(8)
    print("READY", flush=True)
    conns = []
    while True:
        c, _ = s.accept()
        conns.append(c)
""")

LISTENER = textwrap.dedent("""
    import socket, sys, time
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(sys.argv[1])))
    s.listen(8)
    print("READY", flush=True)
    time.sleep(120)
""")

CLIENT = textwrap.dedent("""
    import socket, sys, time
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
    print("CONNECTED", flush=True)
    time.sleep(120)
""")


class HostProtection(unittest.TestCase):
    def one_shot(self, lab, args, nsenter=False):
        """(exit code, stderr) of a one-shot lossd in A that stops right after it is ready."""
        d = lab.lossd(lab.a, args + ["--duration", "1s"], nsenter=nsenter, ready=False)
        rc = d.wait_exit(60)
        return rc, d.stderr()

    def test_rules_that_could_cut_sshd_are_refused(self):
        with Lab() as lab:
            cg = lab.make_cgroup()
            script = os.path.join(lab.tempdir(), "sshd.py")
            with open(script, "w") as f:
                f.write(FAKE_SSHD)
            sshd = lab.popen(lab.a, [PY, script, str(PORT)], cgroup=cg, stdout=-1)
            self.assertEqual(sshd.stdout.readline().strip(), "READY")
            client = os.path.join(lab.tempdir(), "client.py")
            with open(client, "w") as f:
                f.write(CLIENT)
            peer = lab.popen(lab.b, [PY, client, lab.V4_A, str(PORT)], stdout=-1)
            self.assertEqual(peer.stdout.readline().strip(), "CONNECTED")

            base = ["--iface", lab.IF_A, "--rate", "1%"]
            refused = {
                "port": (base + ["--proto", "tcp", "--dport", str(PORT)], False),
                "port, ephemeral sport": (base + ["--dport", str(PORT), "--sport", "1024-65535"], False),
                "port, dst 0.0.0.0/0": (base + ["--dst", "0.0.0.0/0", "--dport", str(PORT)], False),
                "egress from the port": (base + ["--dir", "egress", "--sport", str(PORT)], False),
                "the live peer (dual-stack)": (base + ["--src", lab.V4_B], False),
                "sshd's cgroup": (["--hook", "cgroup", "--cgroup", cg, "--dir", "egress", "--rate", "1%"], True),
            }
            for what, (args, nsenter) in refused.items():
                with self.subTest(rule=what):
                    rc, err = self.one_shot(lab, args, nsenter)
                    self.assertEqual(rc, 1, err)
                    self.assertIn("FAILED_PRECONDITION", err)
                    self.assertTrue("protected port %d" % PORT in err or "sshd's cgroup" in err, err)
            with self.subTest(rule="forced"):
                rc, err = self.one_shot(lab, refused["port"][0] + ["--force"])
                self.assertEqual(rc, 0, err)
                self.assertIn("host protection overridden (force)", err)
            with self.subTest(rule="another port"):
                rc, err = self.one_shot(lab, base + ["--proto", "tcp", "--dport", "5201"])
                self.assertEqual(rc, 0, err)
            with self.subTest(rule="--protect-port"):
                other = lab.popen(lab.a, [PY, "-c", LISTENER, "5201"], stdout=-1)  # not sshd
                self.assertEqual(other.stdout.readline().strip(), "READY")
                rule = base + ["--proto", "tcp", "--dport", "5201"]
                rc, err = self.one_shot(lab, rule + ["--protect-port", "5201"])
                self.assertEqual(rc, 1, err)
                self.assertIn("protected port 5201", err)
                rc, err = self.one_shot(lab, rule)
                self.assertEqual(rc, 0, err)  # 5201 is not protected unless asked
                rc, err = self.one_shot(lab, base + ["--protect-port", "nope"])
                self.assertEqual(rc, 2, err)
                self.assertIn("--protect-port", err)


if __name__ == "__main__":
    main()
