"""e2e: host protection, in one-shot mode (regressions: each shape below was accepted).

A process named sshd listens dual-stack on port 2222 in namespace A (not 22: lossd must
find the port sshd really listens on), with one live IPv4 connection from B (shown as
::ffff:192.0.2.2 in /proc/net/tcp6). Every lossy TCP rule that could cut it is refused
with FAILED_PRECONDITION: the plain port, the port with an ephemeral source range, the
port with dst 0.0.0.0/0, the live peer's address, a cgroup sshd is in. --force lets a
rule through and the override is logged; a rule on another port is untouched unless
--protect-port names it (a listener there is then protected too). The guard reads only
the sockets on the protected ports a rule admits (the kernel filters the dump), not the
2,000 other connections of the namespace.
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

    def sshd_with_a_peer(self, lab, cgroup=None):
        """The fake sshd listening on PORT in A (in `cgroup`), with one live connection from B."""
        script = os.path.join(lab.tempdir(), "sshd.py")
        with open(script, "w") as f:
            f.write(FAKE_SSHD)
        sshd = lab.popen(lab.a, [PY, script, str(PORT)], cgroup=cgroup, stdout=-1)
        self.assertEqual(sshd.stdout.readline().strip(), "READY")
        client = os.path.join(lab.tempdir(), "client.py")
        with open(client, "w") as f:
            f.write(CLIENT)
        peer = lab.popen(lab.b, [PY, client, lab.V4_A, str(PORT)], stdout=-1)
        self.assertEqual(peer.stdout.readline().strip(), "CONNECTED")

    def test_rules_that_could_cut_sshd_are_refused(self):
        with Lab() as lab:
            cg = lab.make_cgroup()
            self.sshd_with_a_peer(lab, cg)

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

    def test_only_the_protected_ports_sockets_are_read(self):
        # Issue 25 item 11: the guard read all of /proc/net/tcp{,6} (every connection of
        # the host) for each lossy TCP rule. Now the kernel filters the dump by the
        # protected ports the rule admits: 2,000 connections on another port are not read.
        with Lab() as lab:
            self.sshd_with_a_peer(lab)
            crowd = lab.popen(lab.a, [PY, "-c", CROWD_SERVER, str(CROWD_PORT), str(CROWD)], stdout=-1)
            self.assertEqual(crowd.stdout.readline().strip(), "READY")
            crowd_peer = lab.popen(lab.b, [PY, "-c", CROWD_CLIENT, lab.V4_A, str(CROWD_PORT), str(CROWD)],
                                   stdout=-1)
            self.assertEqual(crowd_peer.stdout.readline().strip(), "CONNECTED")
            self.assertEqual(crowd.stdout.readline().strip(), "ACCEPTED %d" % CROWD)
            # Admits 2222 (sshd's) but names another peer: checked, and let through.
            rule = ["--iface", lab.IF_A, "--rate", "1%", "--proto", "tcp", "--dport", "2000-2300",
                    "--src", "198.51.100.7", "--log-level", "debug"]
            rc, err = self.one_shot(lab, rule)
            self.assertEqual(rc, 0, err)
            # sshd's listener and its one connection; not the crowd's 2,001 sockets.
            guard = [l for l in err.splitlines() if "host protection" in l]
            self.assertTrue(any(l.endswith("host protection: 2 sockets on the protected ports the rule admits")
                                for l in guard), guard)
            # The same filter still finds the live connection it must protect.
            rc, err = self.one_shot(lab, rule[:-4] + ["--src", lab.V4_B])
            self.assertEqual(rc, 1, err)
            self.assertIn("live connection on protected port %d" % PORT, err)


CROWD, CROWD_PORT = 2000, 9000
CROWD_SERVER = textwrap.dedent("""
    import resource, socket, sys, time
    resource.setrlimit(resource.RLIMIT_NOFILE, (8192, max(8192, resource.getrlimit(resource.RLIMIT_NOFILE)[1])))
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(sys.argv[1])))
    s.listen(4096)
    print("READY", flush=True)
    conns = [s.accept()[0] for _ in range(int(sys.argv[2]))]
    print("ACCEPTED %d" % len(conns), flush=True)
    time.sleep(120)
""")
CROWD_CLIENT = textwrap.dedent("""
    import resource, socket, sys, time
    resource.setrlimit(resource.RLIMIT_NOFILE, (8192, max(8192, resource.getrlimit(resource.RLIMIT_NOFILE)[1])))
    conns = [socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10) for _ in range(int(sys.argv[3]))]
    print("CONNECTED", flush=True)
    time.sleep(120)
""")


if __name__ == "__main__":
    main()
