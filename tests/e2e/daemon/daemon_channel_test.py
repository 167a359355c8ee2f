"""Daemon e2e 7: the control channel (issue 10 item 8). Each test failed before its fix.

  test_tls_without_client_ca_refused
      --listen with --tls-cert/--tls-key and no --tls-client-ca was accepted on any address:
      anyone reaching the port could create forced rules. Now refused (on loopback too)
      unless --tls-no-client-auth, which then serves a client without a certificate.
  test_mutual_tls_and_the_subject_is_logged
      With --tls-client-ca a client without a certificate, or with one of another CA, is
      refused; the CA's client creates a rule, and lossd's log line of that CreateRule names
      the certificate's subject (no peer was logged before).
  test_plaintext_loopback_is_explicit
      Plaintext --listen on loopback was accepted silently (bypassing the Unix socket's
      0660 for every local user): now only with --plaintext-loopback; --insecure-tcp (plaintext
      off loopback) on a loopback address is refused naming the flag to use.
  test_socket_group
      --socket-group did not exist. With it, the socket is 0660 in that group (its directory
      too, created 0750 in that group); a real unprivileged user in the group connects and
      creates a rule, and the log names that user's uid and the client's pid; a user outside
      the group gets EACCES; an unknown group is refused at start.
  test_connection_caps (issue 25 item 1)
      an unprivileged member of the socket group opens 1,100 idle connections (under a soft
      open-file limit of 1,024, which lossd raises to its hard limit): lossd keeps 64 of
      them (its per-user cap) and closes the rest at once; root's GetHealth and CreateRule
      still answer, and once the user's connections close, the user connects again. Before:
      every connection was kept, lossd ran out of descriptors (GetHealth timed out,
      CreateRule failed INTERNAL or a false NOT_FOUND).
  test_stream_share (issue 25 item 3)
      an unprivileged user opens WatchRetransmits streams of 65,536 events (76 MiB of queues
      each) until lossd refuses one: it gets its share (half of --max-stream-memory), not the
      whole budget; a second user then still gets a stream, and root too. Before: the first
      user held 13 streams (975 of 1,024 MiB) and every other client got RESOURCE_EXHAUSTED.
      With 8 live pages open and unread first (the HTTP clients: each page's WatchFlows
      reserved ~75 MiB of the unprivileged clients' pool, 8 took 497 MiB, and the second user
      was refused; now ~10 MiB each), each page holds its stream and the second user still
      gets one.
  test_unix_peer_logged
      Every change to rules (create, update, delete, clear) is logged with the peer's
      SO_PEERCRED uid and pid (none was).
  test_runs_with_the_units_capabilities
      dist/lossd.service's CapabilityBoundingSet (with NoNewPrivileges), applied with
      setpriv (systemd does not run here): lossd still loads the injector and the observer,
      attaches tcx ingress and clsact egress rules, and after a SIGKILL the next start under
      the same set removes the clsact filter the dead one left (bpf_prog_get_fd_by_id needs
      CAP_SYS_ADMIN). The unit had no bounding set before.
"""

import errno
import json
import os
import re
import resource
import stat
import subprocess
import time

from lab import config, web
from lab import daemon as labd
from lab.channel import Certs, call, connect_errno, hold_streams
from lab.daemon import Daemon, wait_until
from lab.netns import Lab, measured

import unittest

NO_OBSERVER = ["--no-observer"]
# Opens N connections to a Unix socket, waits 1.5 s, prints how many lossd kept (no EOF yet)
# and closed, then holds them until stdin closes.
HOG = r"""
import json, socket, sys, time
path, n = sys.argv[1], int(sys.argv[2])
conns = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    conns.append(s)
time.sleep(1.5)
closed = 0
for s in conns:
    s.setblocking(False)
    try:
        closed += s.recv(1 << 16) == b""  # EOF: lossd closed it
    except BlockingIOError:
        pass
    except ConnectionResetError:
        closed += 1
print(json.dumps({"opened": len(conns), "kept": len(conns) - closed, "closed": closed}), flush=True)
sys.stdin.read()
"""
UNIT = os.path.join(config.REPO, "dist", "lossd.service.in")
CAP_BITS = {"CAP_NET_ADMIN": 12, "CAP_SYS_ADMIN": 21, "CAP_PERFMON": 38, "CAP_BPF": 39,
            "CAP_SYS_RESOURCE": 24, "CAP_NET_RAW": 13, "CAP_DAC_OVERRIDE": 1, "CAP_SYS_PTRACE": 19}


def unit_capabilities():
    """The capability names of the unit's CapabilityBoundingSet= line."""
    with open(UNIT) as f:
        for line in f:
            if line.startswith("CapabilityBoundingSet="):
                return line.split("=", 1)[1].split()
    raise AssertionError("%s has no CapabilityBoundingSet=" % UNIT)


def cap_eff(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    raise AssertionError("no CapEff in /proc/%d/status" % pid)


def udp_rule(lab, port):
    return dict(interface=lab.IF_A, protocol="udp", dport=port, rate=0.0)


class ChannelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lab = Lab()
        cls.certs = Certs(cls.lab)

    @classmethod
    def tearDownClass(cls):
        cls.lab.close()

    def refused(self, *args):
        """lossd with args exits 2 (before loading anything); returns its stderr."""
        lab = self.lab
        r = lab.run(lab.a, config.LOSSD, "--socket", os.path.join(lab.tempdir(), "s.sock"),
                    "--state-dir", lab.tempdir(), *args, check=False, timeout=60)
        self.assertEqual(r.returncode, 2, "lossd %s: exit %d\n%s" % (args, r.returncode, r.stderr))
        return r.stderr

    def daemon(self, *args):
        d = Daemon(self.lab, self.lab.a, list(args) + NO_OBSERVER)
        self.addCleanup(lambda: self.assertEqual(d.term(), 0, d.stderr()))
        return d

    def logged(self, d, pattern, timeout=10):
        return wait_until(lambda: re.search(pattern, d.stderr()), timeout,
                          "a log line /%s/ in lossd's stderr:\n%s" % (pattern, d.stderr()))

    def test_tls_without_client_ca_refused(self):
        lab, c = self.lab, self.certs
        tls = ["--tls-cert", c.server, "--tls-key", c.server_key]
        for listen in (lab.V4_A + ":7070", "0.0.0.0:7070", "127.0.0.1:7070", "[::1]:7070"):
            err = self.refused("--listen", listen, *tls)
            measured("tls_without_client_ca_refused", listen=listen, stderr=err.strip())
            self.assertIn("without client certificates", err)
            self.assertIn("--tls-client-ca", err)
            self.assertIn("--tls-no-client-auth", err)
        self.assertIn("contradicts", self.refused("--listen", lab.V4_A + ":7070", *tls,
                                                   "--tls-client-ca", c.ca, "--tls-no-client-auth"))
        # Said by name: served, to a client with no certificate.
        d = self.daemon("--listen", lab.V4_A + ":7071", "--tls-no-client-auth", *tls)
        r = call(lab, lab.V4_A + ":7071", "health", ns=lab.a, tls=c.client_tls(cert=False))
        self.assertTrue(r["ok"] and r["serving"], r)
        r = call(lab, lab.V4_A + ":7071", "create", ns=lab.a, tls=c.client_tls(cert=False),
                 **udp_rule(lab, 9001))
        self.assertTrue(r["ok"], r)
        self.logged(d, r"CreateRule by ipv4:%s:\d+ \(no client certificate\): rule %d"
                    % (re.escape(lab.V4_A), r["id"]))

    def test_mutual_tls_and_the_subject_is_logged(self):
        lab, c = self.lab, self.certs
        target = lab.V4_A + ":7072"
        d = self.daemon("--listen", target, "--tls-cert", c.server, "--tls-key", c.server_key,
                        "--tls-client-ca", c.ca)
        for what, tls in (("no certificate", c.client_tls(cert=False)),
                          ("another CA's certificate", c.client_tls(stranger=True))):
            r = call(lab, target, "create", ns=lab.a, tls=tls, **udp_rule(lab, 9002))
            measured("mtls_refused", client=what, code=r["code"], details=r["details"])
            self.assertFalse(r["ok"], "%s: %s" % (what, r))
            self.assertEqual(r["code"], "UNAVAILABLE", r)
        self.assertEqual(list(d.inj.ListRules(labd.pb.ListRulesRequest(), timeout=10).rules), [])
        r = call(lab, target, "create", ns=lab.a, tls=c.client_tls(), **udp_rule(lab, 9002))
        self.assertTrue(r["ok"], r)
        line = self.logged(d, r'CreateRule by x509 subject "[^"]*CN=%s[^"]*" \(ipv4:%s:\d+\): rule %d'
                           % (c.client_cn, re.escape(lab.V4_A), r["id"])).group(0)
        measured("mtls_logged", line=line)

    def test_plaintext_loopback_is_explicit(self):
        lab = self.lab
        for listen in ("127.0.0.1:7073", "[::1]:7073", "localhost:7073"):
            err = self.refused("--listen", listen)
            measured("plaintext_loopback_refused", listen=listen, stderr=err.strip())
            self.assertIn("refusing plaintext", err)
            self.assertIn("--plaintext-loopback", err)
            err = self.refused("--listen", listen, "--insecure-tcp")
            self.assertIn("--plaintext-loopback", err)
        err = self.refused("--listen", lab.V4_A + ":7073", "--plaintext-loopback")
        self.assertIn("--insecure-tcp", err)
        d = self.daemon("--listen", "127.0.0.1:7073", "--plaintext-loopback")
        r = call(lab, "127.0.0.1:7073", "create", ns=lab.a, **udp_rule(lab, 9003))
        self.assertTrue(r["ok"], r)
        self.logged(d, r"CreateRule by ipv4:127\.0\.0\.1:\d+ \(no client certificate\): rule %d" % r["id"])

    def test_connection_caps(self):
        lab = self.lab
        group = lab.make_group()
        user = lab.make_user(groups=[group])
        top = lab.tempdir()
        os.chmod(top, 0o755)
        sockdir = os.path.join(top, "run")
        d = Daemon(lab, lab.a, ["--socket-group", group] + NO_OBSERVER, sockdir=sockdir,
                   wrap=("prlimit", "--nofile=1024:%d" % resource.getrlimit(resource.RLIMIT_NOFILE)[1], "--"))
        self.addCleanup(lambda: self.assertEqual(d.term(), 0, d.stderr()))
        hog = lab.popen(None, ["prlimit", "--nofile=4096:4096", "--", "setpriv", "--reuid=%d" % user[1], "--regid=%d" % user[2], "--init-groups",
                               "--", config.PY, "-c", HOG, d.sock, "1100"],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        line = hog.stdout.readline()
        self.assertTrue(line, "the hog printed nothing")
        held = json.loads(line)
        fds = len(os.listdir("/proc/%d/fd" % d.pid))
        h = d.health()
        r = d.create(interface=lab.IF_A, protocol="udp", dport=9004, rate=0.5)
        measured("connection_caps", opened=held["opened"], kept=held["kept"], closed=held["closed"],
                 lossd_fds=fds)
        self.assertEqual(held["opened"], 1100, held)
        self.assertEqual(held["kept"], 64, held)
        self.assertTrue(h.serving)
        self.assertGreater(r.id, 0)
        self.assertLess(fds, 400, "lossd holds the refused connections' descriptors")
        self.logged(d, r"refused a connection of uid %d pid \d+: 64 connections of uid %d are open"
                    % (user[1], user[1]))
        hog.stdin.close()  # the hog closes its connections and exits
        hog.wait(30)
        again = lab.popen(None, ["prlimit", "--nofile=4096:4096", "--", "setpriv", "--reuid=%d" % user[1], "--regid=%d" % user[2], "--init-groups",
                                 "--", config.PY, "-c", HOG, d.sock, "10"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        held = json.loads(again.stdout.readline())
        again.stdin.close()
        again.wait(30)
        self.assertEqual(held["kept"], 10, "the user's closed connections still count: %s" % held)

    def test_stream_share(self):
        lab = self.lab
        group = lab.make_group()
        alice, bob = lab.make_user(groups=[group]), lab.make_user(groups=[group])
        top = lab.tempdir()
        os.chmod(top, 0o755)
        d = Daemon(lab, lab.a, ["--socket-group", group, "--http", "127.0.0.1:0"], sockdir=os.path.join(top, "run"))
        self.addCleanup(lambda: self.assertEqual(d.term(), 0, d.stderr()))
        pages = []
        for _ in range(8):  # live pages that read nothing (as root: HTTP reads need the group)
            c = web.connect(lab.a, "127.0.0.1", d.http_port)
            c.sendall(b"GET /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            self.addCleanup(c.close)
            pages.append(c)
        # Each page's WatchFlows, and the pages' one shared WatchAggregates.
        page_streams = wait_until(lambda: (lambda n: n if n >= 9 else None)(d.health().streams), 20,
                                  "the 8 pages' streams")
        hog, held = hold_streams(lab, "unix:" + d.sock, alice, 20, 65536)
        self.addCleanup(lambda: (hog.stdin.close(), hog.wait(30)))
        bobs = call(lab, "unix:" + d.sock, "streams", user=bob, n=1, queue=65536)
        roots = call(lab, "unix:" + d.sock, "streams", n=1, queue=65536)
        measured("stream_share", page_streams=page_streams, alice=held, bob=bobs, root=roots)
        self.assertEqual(page_streams, 9)
        self.assertEqual(held["code"], "RESOURCE_EXHAUSTED", held)
        self.assertIn("this client (uid %d)" % alice[1], held["details"])
        self.assertIn("half of lossd --max-stream-memory", held["details"])
        self.assertGreaterEqual(held["opened"], 5, held)  # 6 of 76 MiB fit in 512 MiB
        self.assertLessEqual(held["opened"], 7, held)
        self.assertEqual((bobs["ok"], bobs["opened"]), (True, 1), bobs)
        self.assertEqual((roots["ok"], roots["opened"]), (True, 1), roots)

    def test_socket_group(self):
        lab = self.lab
        group = lab.make_group()
        member = lab.make_user(groups=[group])
        outsider = lab.make_user()
        self.assertIn("no group named", self.refused("--socket-group", group + "-missing"))
        top = lab.tempdir()
        os.chmod(top, 0o755)  # the users may walk to the socket's directory
        sockdir = os.path.join(top, "run")  # lossd creates it
        d = Daemon(lab, lab.a, ["--socket-group", group] + NO_OBSERVER, sockdir=sockdir)
        self.addCleanup(lambda: self.assertEqual(d.term(), 0, d.stderr()))
        import grp
        gid = grp.getgrnam(group).gr_gid
        st, dst = os.stat(d.sock), os.stat(sockdir)
        measured("socket_group", socket_mode=oct(stat.S_IMODE(st.st_mode)), socket_gid=st.st_gid,
                 dir_mode=oct(stat.S_IMODE(dst.st_mode)), dir_gid=dst.st_gid, group_gid=gid)
        self.assertTrue(stat.S_ISSOCK(st.st_mode))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o660)
        self.assertEqual(st.st_gid, gid)
        self.assertEqual(stat.S_IMODE(dst.st_mode), 0o750)
        self.assertEqual(dst.st_gid, gid)

        self.assertEqual(connect_errno(lab, d.sock, member), 0)
        self.assertEqual(connect_errno(lab, d.sock, outsider), errno.EACCES)
        r = call(lab, "unix:" + d.sock, "create", user=member, **udp_rule(lab, 9004))
        self.assertTrue(r["ok"], r)
        self.assertEqual(r["uid"], member[1])
        line = self.logged(d, r"CreateRule by uid=%d gid=%d pid=%d \(unix socket\): rule %d"
                           % (member[1], member[2], r["pid"], r["id"])).group(0)
        measured("socket_group_logged", line=line)
        r = call(lab, "unix:" + d.sock, "health", user=outsider)
        self.assertFalse(r["ok"], r)
        self.assertEqual(r["code"], "UNAVAILABLE", r)

    def test_unix_peer_logged(self):
        lab = self.lab
        d = self.daemon()
        r = call(lab, "unix:" + d.sock, "create", **udp_rule(lab, 9005))
        self.assertTrue(r["ok"], r)
        self.logged(d, r"CreateRule by uid=0 gid=0 pid=%d \(unix socket\): rule %d" % (r["pid"], r["id"]))
        # This process's own channel: update, delete, clear are logged with its pid.
        me = os.getpid()
        rid = d.create(**udp_rule(lab, 9006)).id
        self.logged(d, r"CreateRule by uid=0 gid=0 pid=%d \(unix socket\): rule %d" % (me, rid))
        d.inj.UpdateRule(labd.pb.UpdateRuleRequest(id=rid, spec=labd.rule_spec(**udp_rule(lab, 9007))),
                         timeout=20)
        self.logged(d, r"UpdateRule by uid=0 gid=0 pid=%d \(unix socket\): rule %d" % (me, rid))
        d.delete(rid)
        self.logged(d, r"DeleteRule by uid=0 gid=0 pid=%d \(unix socket\): rule %d" % (me, rid))
        d.clear()
        self.logged(d, r"ClearRules by uid=0 gid=0 pid=%d \(unix socket\): deleted 1" % me)
        # A refused change is logged too, with its code and reason (service/refusals.h).
        with self.assertRaises(Exception):
            d.delete(rid)
        self.logged(d, r" warn  /lossd.v1.Injector/DeleteRule by uid=0 gid=0 pid=%d \(unix socket\) refused: "
                       r"NOT_FOUND: .*%d" % (me, rid))

    def test_runs_with_the_units_capabilities(self):
        from lab.daemon import tc_egress_filters
        lab = self.lab
        caps = unit_capabilities()
        self.assertTrue(caps and all(c in CAP_BITS for c in caps), caps)
        wrap = ["setpriv", "--bounding-set=-all," + ",".join("+" + c[4:].lower() for c in caps),
                "--inh-caps=-all", "--ambient-caps=-all", "--no-new-privs", "--"]
        state = lab.tempdir()
        d = Daemon(lab, lab.a, ["--lease", "1s"], state_dir=state, wrap=wrap)
        want = sum(1 << CAP_BITS[c] for c in caps)
        measured("unit_capabilities", caps=caps, cap_eff=hex(cap_eff(d.pid)), parts=d.parts)
        self.assertEqual(cap_eff(d.pid), want, "lossd runs with more or other capabilities")
        self.assertEqual(d.parts["observer"][0], "COMPONENT_STATE_READY", d.parts)
        tcx = d.create(**udp_rule(lab, 9010))
        clsact = d.create(interface=lab.IF_A, direction="egress", protocol="udp", dport=9011, rate=0.0)
        self.assertEqual(labd.pb.RuleState.Name(clsact.state), "RULE_STATE_ACTIVE", clsact)
        self.assertTrue(tcx.attachments and clsact.attachments, (tcx, clsact))
        self.assertTrue(tc_egress_filters(lab, lab.a, lab.IF_A)[1], "no clsact filter attached")
        d.kill9()
        time.sleep(1.5)  # the dead one's lease runs out
        d2 = Daemon(lab, lab.a, ["--lease", "1s"] + NO_OBSERVER, state_dir=state, wrap=wrap)
        try:
            d2.create(**udp_rule(lab, 9012))  # the injector has started (and cleaned up)
            out, ids = tc_egress_filters(lab, lab.a, lab.IF_A)
            self.assertEqual(ids, [], "the dead lossd's clsact filter was not removed:\n%s\n%s"
                             % (out, d2.stderr()))
        finally:
            self.assertEqual(d2.term(), 0, d2.stderr())


if __name__ == "__main__":
    config.main()
