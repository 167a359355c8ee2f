"""The control channel as another party sees it: one gRPC call made by a separate client
process (inside a namespace, as another user, over TLS), and the test's own certificates.

    Certs(lab)          a CA, a server certificate and a client certificate (openssl, in a
                        Lab temp dir)
    call(lab, target, rpc, ns=None, user=None, tls=None, **spec)
                        runs `python3 -m lab.channel` and returns its JSON answer:
                        {"pid", "uid", "ok", "code", "details", "id"}
    connect_errno(path, user)   connect(2) to a Unix socket as user: 0 or the errno

`python3 -m lab.channel --stubs DIR --target T [--ca F --cert F --key F --name N] RPC [SPEC]`
(RPC: health, create with a JSON RuleSpec of lab.daemon.rule_spec() keywords) prints one
JSON line; the process's own pid and uid are in it, so a test can find them in lossd's log.
"""

import json
import os
import subprocess
import sys

from lab import config


class Certs:
    """A throwaway CA; a server certificate for the DNS name NAME (and 127.0.0.1, ::1 and the
    lab's addresses); a client certificate with subject CLIENT_SUBJECT, and one from another
    CA (`stranger`). Files in a Lab temp dir, removed with it."""

    NAME = "lossd-e2e-server"

    def __init__(self, lab, client_cn="lossd-e2e-client"):
        self.dir = lab.tempdir()
        self.client_cn = client_cn
        j = lambda f: os.path.join(self.dir, f)
        self.ca, self.ca_key = j("ca.pem"), j("ca.key")
        self.server, self.server_key = j("server.pem"), j("server.key")
        self.client, self.client_key = j("client.pem"), j("client.key")
        self.stranger, self.stranger_key = j("stranger.pem"), j("stranger.key")
        self._self_signed(self.ca, self.ca_key, "/CN=lossd-e2e-ca")
        sans = "DNS:%s,IP:127.0.0.1,IP:::1,IP:%s,IP:%s" % (self.NAME, lab.V4_A, lab.V4_B)
        self._signed(self.server, self.server_key, "/CN=%s" % self.NAME, "subjectAltName=" + sans)
        self._signed(self.client, self.client_key, "/O=lossd-e2e/CN=%s" % client_cn, None)
        self._self_signed(self.stranger, self.stranger_key, "/CN=lossd-e2e-stranger")

    def _run(self, *cmd):
        subprocess.run(["openssl"] + list(cmd), check=True, capture_output=True, cwd=self.dir)

    def _key(self, key):
        self._run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key)

    def _self_signed(self, pem, key, subj):
        self._key(key)
        self._run("req", "-x509", "-new", "-key", key, "-out", pem, "-days", "2", "-subj", subj)

    def _signed(self, pem, key, subj, ext):
        self._key(key)
        csr = pem + ".csr"
        self._run("req", "-new", "-key", key, "-out", csr, "-subj", subj)
        cmd = ["x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key, "-CAcreateserial",
               "-out", pem, "-days", "2"]
        if ext:
            extfile = pem + ".ext"
            with open(extfile, "w") as f:
                f.write(ext + "\n")
            cmd += ["-extfile", extfile]
        self._run(*cmd)

    def client_tls(self, cert=True, stranger=False):
        """tls= argument of call(): trust the CA; present the client certificate (or the
        stranger's self-signed one, or none)."""
        t = {"ca": self.ca, "name": self.NAME}
        if stranger:
            t.update(cert=self.stranger, key=self.stranger_key)
        elif cert:
            t.update(cert=self.client, key=self.client_key)
        return t


def _user_prefix(user):
    """setpriv arguments that run a command as user (name, uid, gid) with its groups."""
    if user is None:
        return []
    name, uid, gid = user
    return ["setpriv", "--reuid=%d" % uid, "--regid=%d" % gid, "--init-groups", "--"]


def call(lab, target, rpc, ns=None, user=None, tls=None, timeout=30, **spec):
    """One RPC (health | create) to target by a new client process (in ns, as user, over
    tls from Certs.client_tls()); returns its JSON answer."""
    cmd = _user_prefix(user) + [config.PY, "-m", "lab.channel", "--stubs", config.STUBS,
                                "--target", target]
    for k, v in (tls or {}).items():
        cmd += ["--" + k, v]
    cmd += [rpc, json.dumps(spec)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(config.HERE)
    p = lab.popen(ns, cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, err = p.communicate(timeout=timeout)
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        raise AssertionError("lab.channel %s exited %d\nstdout:\n%s\nstderr:\n%s"
                             % (rpc, p.returncode, out, err))
    return json.loads(lines[-1])


def hold_streams(lab, target, user, n, queue):
    """A client process (as user) that opens up to n WatchRetransmits streams of `queue`
    events until lossd refuses one, and holds them: (its Popen, its JSON answer). Closing its
    stdin ends it."""
    cmd = _user_prefix(user) + [config.PY, "-m", "lab.channel", "--stubs", config.STUBS,
                                "--target", target, "streams",
                                json.dumps({"n": n, "queue": queue, "hold": True})]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(config.HERE)
    p = lab.popen(None, cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    line = p.stdout.readline()
    if not line.startswith("{"):
        p.kill()
        raise AssertionError("lab.channel streams: %r (exit %s)" % (line, p.wait()))
    return p, json.loads(line)


def connect_errno(lab, path, user):
    """connect(2) to the Unix socket path as user: 0, or the errno it failed with."""
    code = ("import socket,errno\ns=socket.socket(socket.AF_UNIX)\n"
            "try:\n s.connect(%r); print(0)\nexcept OSError as e:\n print(e.errno)\n" % path)
    p = lab.popen(None, _user_prefix(user) + [config.PY, "-c", code], stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=30)
    if p.returncode != 0:
        raise AssertionError("connect as %s: exit %d: %s" % (user, p.returncode, err))
    return int(out.strip())


def _main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--stubs", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--ca")
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--name", help="the server's name to verify (ssl_target_name_override)")
    ap.add_argument("rpc", choices=("health", "create", "streams"))
    ap.add_argument("spec", nargs="?", default="{}")
    a = ap.parse_args()
    from lab import daemon
    daemon.load_stubs(a.stubs)
    grpc, pb, pbg = daemon.grpc, daemon.pb, daemon.pbg
    read = lambda f: open(f, "rb").read() if f else None
    if a.ca:
        creds = grpc.ssl_channel_credentials(read(a.ca), read(a.key), read(a.cert))
        opts = [("grpc.ssl_target_name_override", a.name)] if a.name else []
        ch = grpc.secure_channel(a.target, creds, options=opts)
    else:
        ch = grpc.insecure_channel(a.target)
    out = {"pid": os.getpid(), "uid": os.getuid(), "ok": True, "code": "OK", "details": "", "id": 0}
    try:
        if a.rpc == "streams":
            # Up to n WatchRetransmits streams of `queue` events, one after another, until
            # lossd refuses one (its first answer); then, with hold, keeps them until stdin closes.
            import threading
            args = json.loads(a.spec)
            stub = pbg.ObserverStub(ch)
            calls, out["opened"] = [], 0
            for _ in range(args["n"]):
                call = stub.WatchRetransmits(pb.WatchRetransmitsRequest(queue=args["queue"]), timeout=600)
                err = []

                def drain(c=call, e=err):
                    try:
                        for _ in c:
                            pass
                    except grpc.RpcError as x:
                        e.append(x)
                t = threading.Thread(target=drain, daemon=True)
                t.start()
                t.join(0.5)
                if err and err[0].code() != grpc.StatusCode.CANCELLED:
                    out.update(ok=False, code=err[0].code().name, details=err[0].details() or "")
                    break
                calls.append(call)
                out["opened"] += 1
            if args.get("hold"):
                print(json.dumps(out), flush=True)
                sys.stdin.read()
                for c in calls:
                    c.cancel()
                return
        elif a.rpc == "health":
            out["serving"] = pbg.SystemStub(ch).GetHealth(pb.GetHealthRequest(), timeout=10).serving
        else:
            spec = daemon.rule_spec(**json.loads(a.spec))
            r = pbg.InjectorStub(ch).CreateRule(pb.CreateRuleRequest(spec=spec), timeout=20)
            out["id"] = r.id
    except grpc.RpcError as e:
        out.update(ok=False, code=e.code().name, details=e.details() or "")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    _main()
