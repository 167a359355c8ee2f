"""HTTP e2e 1: lossd's HTTP listener (--http) over real sockets in the lab's namespaces.

One daemon in namespace A, --http 127.0.0.1:0 (its own loopback), --http-max-connections 4
--http-max-streams 1; more daemons started by single tests.

  test_metrics_served_and_promtool   GET /metrics: 200, text format 0.0.4, `promtool check
                                      metrics` passes; HEAD: headers only
  test_serves_while_loading           a new daemon answers /metrics right after its ready line,
                                      while its parts load (lossd_component_state says which)
  test_bad_input                      unknown path 404; POST/PUT/DELETE/PATCH/OPTIONS 405 with
                                      Allow: GET, HEAD and no rule created; a body 413; headers
                                      over 8 KiB 431; a header line over 8 KiB 400, a URI 414;
                                      the daemon alive after each
  test_connection_cap                 4 idle connections hold the cap: the 5th is answered 503
                                      and closed, gRPC still serves, and HTTP serves again once
                                      they go; lossd_http_refused_total counts it
  test_slow_heads_and_the_cap_per_address
                                      6 connections dripping a head from 127.0.0.1: 4 admitted
                                      (per-address cap), 2 answered 503 at once; 127.0.0.2 is
                                      served meanwhile, 127.0.0.1 gets 503 at once; the 4 closed
                                      at the 5 s head deadline; refused{reason="slow"}
  test_read_policy_for_local_users    issue 25 item 5: any local user read every rule and flow
                                      over HTTP. Now (--http-readers group, the default) a local
                                      user outside --http-group gets 403 at once naming the way
                                      in; a member, root, and a client of another namespace
                                      (across the veth) get 200; refused{reason="forbidden"};
                                      --http-readers any lets everyone read; a bad value: exit 2
  test_default_port_and_off           no --http: 127.0.0.1:7071, and a second daemon there
                                      exits 1 (address in use); --http '': no listener
  test_plaintext_off_loopback_refused --http on the veth address without TLS: exit 2, the
                                      message names --http-tls-cert and --http-plaintext; with
                                      --http-plaintext it serves B across the veth
  test_tls_and_client_certificates    HTTPS with a certificate made here (openssl): B verifies
                                      it; with --http-tls-client-ca a client without a
                                      certificate is refused, one with a signed one served
"""
import http.client
import os
import re
import socket
import ssl
import subprocess
import threading
import time

from lab import config, prom, web
from lab.config import main
from lab.daemon import Daemon, DaemonTestCase, wait_until
from lab.netns import measured


def make_certs(d, host_ip):
    """A CA, a server certificate for host_ip signed by it, and a client certificate."""
    def run(*a):
        subprocess.run(a, check=True, capture_output=True, timeout=60, cwd=d)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=lossd-e2e-ca",
        "-keyout", "ca.key", "-out", "ca.pem")
    for name, ext in (("server", "subjectAltName=IP:%s" % host_ip), ("client", "extendedKeyUsage=clientAuth")):
        run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=lossd-e2e-" + name,
            "-keyout", name + ".key", "-out", name + ".csr")
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write(ext + "\n")
        run("openssl", "x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "1", "-extfile", name + ".ext", "-out", name + ".pem")
    return {k: os.path.join(d, k) for k in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")}


class HttpListener(DaemonTestCase):
    daemon_args = ["--http", "127.0.0.1:0", "--http-max-connections", "4", "--http-max-streams", "1"]

    def get(self, path, d=None, **kw):
        d = d or self.d
        return web.request(d.ns, "127.0.0.1", d.http_port, path, **kw)

    def rules(self):
        return len(self.d.inj.ListRules(self.pb.ListRulesRequest(), timeout=10).rules)

    def test_metrics_served_and_promtool(self):
        self.d.create(interface=self.lab.IF_A, protocol="udp", dport=9999, rate=0.01, ttl_ns=60 * 10**9)
        r = self.get("/metrics")
        self.assertEqual(r.status, 200, r)
        self.assertTrue(r.headers["content-type"].startswith("text/plain; version=0.0.4"), r.headers)
        text = r.text()
        rc, out = prom.promtool_check_metrics(text)
        measured("metrics_promtool", bytes=len(r.body), rc=rc, promtool=out)
        self.assertEqual(rc, 0, out)
        self.assertIn('lossd_component_state{component="injector",state="ready"} 1', text)
        self.assertRegex(text, r'lossd_rule_info\{rule="\d+",interface="%s",cgroup="",direction="ingress",'
                               r'hook="tc",model="bernoulli",labels=""\} 1' % self.lab.IF_A)
        self.assertIn("lossd_rule_configured_loss_ratio{", text)
        h = self.get("/metrics", method="HEAD")
        self.assertEqual(h.status, 200)
        self.assertEqual(h.body, b"")

    def test_serves_while_loading(self):
        t0 = time.monotonic()
        d = Daemon(self.lab, self.lab.b, wait_parts=False)
        try:
            r = self.get("/metrics", d=d)
            secs = time.monotonic() - t0
            text = r.text()
            loading = [l for l in text.splitlines() if l.startswith("lossd_component_state") and
                       'state="loading"} 1' in l]
            measured("http_while_loading", secs_from_start=round(secs, 3), loading=loading)
            self.assertEqual(r.status, 200, r)
            self.assertIn("lossd_component_state{", text)
            # The observer takes seconds to verify: it is still loading this early.
            self.assertIn('lossd_component_state{component="observer",state="loading"} 1', text)
            d.wait_parts()
            text = self.get("/metrics", d=d).text()
            self.assertIn('lossd_component_state{component="observer",state="ready"} 1', text)
        finally:
            self.assertEqual(d.term(), 0, d.stderr())

    def test_bad_input(self):
        before = self.rules()
        r = self.get("/nothing/here")
        self.assertEqual(r.status, 404, r)
        for m in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
            r = self.get("/metrics", method=m, body=b"x" if m != "OPTIONS" else None)
            self.assertEqual(r.status, 405, (m, r))
            self.assertEqual(r.headers.get("allow"), "GET, HEAD", (m, r))
        s = web.connect(self.d.ns, "127.0.0.1", self.d.http_port)
        got = web.raw(s, b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nabcde")
        s.close()
        self.assertEqual(web.status_of(got), 413, got[:200])
        # RFC 9112 framing (issue 25 item 13): a space before the colon, differing lengths.
        for head in (b"Transfer-Encoding : chunked\r\n", b"Content-Length: 0\r\nContent-Length: 5\r\n",
                     b"X Bad: 1\r\n"):
            s = web.connect(self.d.ns, "127.0.0.1", self.d.http_port)
            got = web.raw(s, b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n" + head + b"\r\n")
            s.close()
            self.assertEqual(web.status_of(got), 400, (head, got[:200]))
        # DNS rebinding (issue 25 item 5): a page of attacker.example whose name resolves here
        # names that host; the page and /metrics answer it 421, not 200.
        for path in (b"/", b"/metrics", b"/api/v1/events"):
            s = web.connect(self.d.ns, "127.0.0.1", self.d.http_port)
            got = web.raw(s, b"GET " + path + b" HTTP/1.1\r\nHost: attacker.example:%d\r\n\r\n"
                          % self.d.http_port)
            s.close()
            self.assertEqual(web.status_of(got), 421, (path, got[:300]))
            self.assertIn(b"--http-allowed-host", got)
        s = web.connect(self.d.ns, "127.0.0.1", self.d.http_port)  # the same length twice is one
        got = web.raw(s, b"GET /healthz-none HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n")
        s.close()
        self.assertEqual(web.status_of(got), 404, got[:200])
        many = {"X-F%d" % i: "a" * 100 for i in range(100)}
        self.assertEqual(self.get("/metrics", headers=many).status, 431)
        self.assertEqual(self.get("/metrics", headers={"X-Big": "a" * 9000}).status, 400)
        self.assertEqual(self.get("/" + "a" * 9000).status, 414)
        self.assertEqual(self.rules(), before, "a request over HTTP changed the rules")
        self.assertTrue(self.d.alive())
        text = self.get("/metrics").text()
        self.assertRegex(text, r'lossd_http_refused_total\{reason="bad"\} (\d+)')

    def test_connection_cap(self):
        d = self.d
        idle = [web.connect(d.ns, "127.0.0.1", d.http_port) for _ in range(4)]
        try:
            time.sleep(0.3)  # accepted and handed to the workers
            replies = []
            for _ in range(3):
                s = web.connect(d.ns, "127.0.0.1", d.http_port)
                got = web.raw(s, b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", timeout=5)
                s.close()
                replies.append(got)
            statuses = [web.status_of(g) for g in replies]
            measured("http_connection_cap", statuses=statuses, reply=replies[0][:120].decode(errors="replace"))
            self.assertEqual(statuses, [503, 503, 503], replies)
            for g in replies:
                self.assertIn(b"Connection: close", g)
            self.assertTrue(d.alive(), "gRPC stopped serving under an HTTP connection flood")
        finally:
            for s in idle:
                s.close()
        r = wait_until(lambda: (lambda r: r if r.status == 200 else None)(self.get("/metrics")), 10,
                       "HTTP to serve again once the idle connections closed", step=0.1)
        self.assertRegex(r.text(), r'lossd_http_refused_total\{reason="busy"\} [1-9]')

    def test_slow_heads_and_the_cap_per_address(self):
        """Slowloris (issue 25 item 4): 6 connections from 127.0.0.1 each send a request head a
        byte every 0.5 s. Over the per-address cap (4) the 5th and 6th are answered 503 at once;
        a client from 127.0.0.2 is served meanwhile and one more from 127.0.0.1 gets its 503 at
        once, not a hang; each slow one is closed at its head's deadline (5 s from its accept)
        although it never stopped sending (before: each byte restarted a 2 s read timeout, and
        40 such held every worker for a minute)."""
        d = Daemon(self.lab, self.lab.a, ["--http-max-connections", "12", "--http-max-streams", "1",
                                          "--http-max-connections-per-address", "4"], wait_parts=False)
        try:
            head = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200
            slow = [web.connect(d.ns, "127.0.0.1", d.http_port) for _ in range(6)]
            t0 = time.monotonic()
            ended = {}  # connection index -> (seconds from the start, what it got)

            def drip(i, s):
                got = b""
                for b in head:
                    try:
                        s.sendall(bytes([b]))
                    except OSError:
                        break
                    s.settimeout(0.5)
                    try:
                        chunk = s.recv(4096)
                        if not chunk:
                            break
                        got += chunk
                        if b"\r\n\r\n" in got:
                            break
                    except socket.timeout:
                        continue
                    except OSError:
                        break
                ended[i] = (time.monotonic() - t0, got)
            threads = [threading.Thread(target=drip, args=(i, s), daemon=True) for i, s in enumerate(slow)]
            for t in threads:
                t.start()
            time.sleep(0.5)
            t1 = time.monotonic()
            other = web.request(d.ns, "127.0.0.1", d.http_port, "/metrics", source="127.0.0.2", timeout=5)
            other_s = time.monotonic() - t1
            t1 = time.monotonic()
            s = web.connect(d.ns, "127.0.0.1", d.http_port)
            same = web.raw(s, b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", timeout=5)
            s.close()
            same_s = time.monotonic() - t1
            for t in threads:
                t.join(15)
            for c in slow:
                c.close()
            statuses = sorted(web.status_of(g) for _, g in ended.values())
            held = sorted(round(t, 2) for t, g in ended.values() if not g)
            measured("http_slowloris", other_status=other.status, other_s=round(other_s, 3),
                     same_status=web.status_of(same), same_s=round(same_s, 3), slow_statuses=statuses,
                     slow_closed_after_s=held)
            self.assertEqual(other.status, 200, other)
            self.assertLess(other_s, 2)
            self.assertEqual(web.status_of(same), 503, same[:200])
            self.assertIn(b"--http-max-connections-per-address", same)
            self.assertLess(same_s, 2)
            self.assertEqual(len(ended), 6, "a slow connection was still open after 15 s")
            self.assertEqual(statuses, [0, 0, 0, 0, 503, 503], ended)
            # The 4 admitted ones: closed by lossd at 5 s (head timeout) from their accept,
            # never answered; a byte every 0.5 s would have taken 110 s to send the head.
            self.assertEqual(len(held), 4, ended)
            for t in held:
                self.assertTrue(4.0 <= t <= 8.0, held)
            m = wait_until(lambda: (lambda r: r if r.status == 200 else None)(
                web.request(d.ns, "127.0.0.1", d.http_port, "/metrics")), 10, "/metrics again", step=0.2)
            self.assertRegex(m.text(), r'lossd_http_refused_total\{reason="slow"\} [4-9]')
            self.assertRegex(m.text(), r'lossd_http_refused_total\{reason="busy"\} [3-9]')
        finally:
            self.assertEqual(d.term(), 0, d.stderr())

    def test_read_policy_for_local_users(self):
        lab = self.lab
        group = lab.make_group()
        member = lab.make_user(groups=[group])
        outsider = lab.make_user()
        script = ("import http.client, sys\n"
                  "c = http.client.HTTPConnection(sys.argv[1], int(sys.argv[2]), timeout=10)\n"
                  "c.request('GET', '/metrics')\n"
                  "r = c.getresponse()\n"
                  "print(r.status, r.read().decode(errors='replace').splitlines()[0])\n")

        def get_as(user, ns, host, port):
            cmd = ["setpriv", "--reuid=%d" % user[1], "--regid=%d" % user[2], "--init-groups", "--",
                   config.PY, "-c", script, host, str(port)]
            p = lab.popen(ns, cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            out, err = p.communicate(timeout=30)
            self.assertEqual(p.returncode, 0, err)
            status, _, first = out.strip().partition(" ")
            return int(status), first

        # B's own address, plaintext: B's local users are checked, A's clients are the network's.
        d = Daemon(lab, lab.b, ["--http", "%s:0" % lab.V4_B, "--http-plaintext", "--http-group", group],
                   wait_parts=False)
        try:
            port = d.http_port
            got = dict(outsider=get_as(outsider, lab.b, lab.V4_B, port),
                       member=get_as(member, lab.b, lab.V4_B, port),
                       root=web.request(lab.b, lab.V4_B, port, "/metrics").status,
                       outsider_of_a=get_as(outsider, lab.a, lab.V4_B, port))
            m = web.request(lab.b, lab.V4_B, port, "/metrics").text()
            found = re.search(r'lossd_http_refused_total\{reason="forbidden"\} (\d+)', m)
            forbidden = int(found.group(1)) if found else None
        finally:
            self.assertEqual(d.term(), 0, d.stderr())
        measured("http_read_policy", forbidden=forbidden, **{k: str(v) for k, v in got.items()})
        self.assertEqual(got["outsider"][0], 403, got)
        self.assertIn("uid %d may not read lossd over HTTP" % outsider[1], got["outsider"][1])
        self.assertIn(group, got["outsider"][1])
        self.assertIn("--http-readers any", got["outsider"][1])
        self.assertEqual(got["member"][0], 200, got)
        self.assertEqual(got["root"], 200, got)
        self.assertEqual(got["outsider_of_a"][0], 200, got)
        self.assertEqual(forbidden, 1)

        d = Daemon(lab, lab.b, ["--http", "127.0.0.1:0", "--http-readers", "any"], wait_parts=False)
        try:
            self.assertEqual(get_as(outsider, lab.b, "127.0.0.1", d.http_port)[0], 200)
        finally:
            self.assertEqual(d.term(), 0, d.stderr())
        r = lab.run(lab.b, config.LOSSD, "--socket", os.path.join(lab.tempdir(), "l.sock"), "--state-dir",
                    lab.tempdir(), "--http", "127.0.0.1:0", "--http-readers", "everyone", check=False, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--http-readers", r.stderr)

    def test_default_port_and_off(self):
        d = Daemon(self.lab, self.lab.b, http=None, wait_parts=False)
        try:
            self.assertEqual(d.http_port, 7071)
            self.assertEqual(web.request(d.ns, "127.0.0.1", 7071, "/metrics").status, 200)
            # A second daemon in the namespace cannot take the port (no SO_REUSEPORT sharing).
            sock = os.path.join(self.lab.tempdir(), "lossd.sock")
            r = self.lab.run(self.lab.b, config.LOSSD, "--socket", sock, "--state-dir", self.lab.tempdir(),
                             "--no-observer", check=False, timeout=60)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("127.0.0.1:7071", r.stderr)
            self.assertIn("Address already in use", r.stderr)
        finally:
            self.assertEqual(d.term(), 0, d.stderr())
        d = Daemon(self.lab, self.lab.b, ["--http", ""], wait_parts=False)
        try:
            self.assertEqual(d.http_port, 0)
            with self.assertRaises(ConnectionRefusedError):
                web.connect(d.ns, "127.0.0.1", 7071)
        finally:
            self.assertEqual(d.term(), 0, d.stderr())

    def test_plaintext_off_loopback_refused(self):
        lab = self.lab
        for addr in ("%s:0" % lab.V4_B, "0.0.0.0:0", "[%s]:0" % lab.V6_B):
            sock = os.path.join(lab.tempdir(), "lossd.sock")
            r = lab.run(lab.b, config.LOSSD, "--socket", sock, "--state-dir", lab.tempdir(), "--http", addr,
                        check=False, timeout=60)
            measured("http_plaintext_refused", http=addr, rc=r.returncode, stderr=r.stderr.strip())
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("refusing plaintext HTTP", r.stderr)
            self.assertIn("--http-plaintext", r.stderr)
            self.assertIn("--http-tls-cert", r.stderr)
            self.assertFalse(os.path.exists(sock))
        d = Daemon(lab, lab.b, ["--http", "%s:0" % lab.V4_B, "--http-plaintext"], wait_parts=False)
        try:
            r = web.request(lab.a, lab.V4_B, d.http_port, "/metrics")  # from A, across the veth
            self.assertEqual(r.status, 200, r)
        finally:
            self.assertEqual(d.term(), 0, d.stderr())

    def test_tls_and_client_certificates(self):
        lab = self.lab
        c = make_certs(lab.tempdir(), lab.V4_B)
        d = Daemon(lab, lab.b, ["--http", "%s:0" % lab.V4_B, "--http-tls-cert", c["server.pem"],
                                "--http-tls-key", c["server.key"]], wait_parts=False)
        try:
            ctx = ssl.create_default_context(cafile=c["ca.pem"])
            r = web.request(lab.a, lab.V4_B, d.http_port, "/metrics", tls=ctx)
            self.assertEqual(r.status, 200, r)
            with self.assertRaises((ConnectionError, http.client.HTTPException, OSError)):
                web.request(lab.a, lab.V4_B, d.http_port, "/metrics", timeout=5)  # plaintext: no reply
        finally:
            self.assertEqual(d.term(), 0, d.stderr())
        d = Daemon(lab, lab.b, ["--http", "%s:0" % lab.V4_B, "--http-tls-cert", c["server.pem"],
                                "--http-tls-key", c["server.key"], "--http-tls-client-ca", c["ca.pem"]],
                   wait_parts=False)
        try:
            ctx = ssl.create_default_context(cafile=c["ca.pem"])
            with self.assertRaises((ssl.SSLError, ConnectionError, OSError)):
                web.request(lab.a, lab.V4_B, d.http_port, "/metrics", tls=ctx, timeout=5)
            ctx.load_cert_chain(c["client.pem"], c["client.key"])
            r = web.request(lab.a, lab.V4_B, d.http_port, "/metrics", tls=ctx)
            self.assertEqual(r.status, 200, r)
        finally:
            self.assertEqual(d.term(), 0, d.stderr())


if __name__ == "__main__":
    main()
