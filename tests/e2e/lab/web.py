"""HTTP clients inside a lab namespace (stdlib only).

setns(CLONE_NEWNET) moves only the calling thread, and a socket stays in the namespace it was
created in: so a helper thread enters the namespace, opens the socket, and hands it back; the
test then uses it from any thread. Nothing here touches the host's namespace.

    in_netns(ns, fn, *args)        fn(*args) on a thread inside ns; its result (or exception)
    connect(ns, host, port, source=None)
                                   a connected TCP socket inside ns (from address `source`)
    request(ns, host, port, path, method="GET", headers=None, body=None, tls=None, source=None)
                                   -> Reply(status, headers {lower-case: value}, body bytes)
    raw(sock_or_ns, ..., data)     bytes sent as they are, the reply read until close/timeout
    get_json(ns, host, port, path) the body parsed as JSON (status must be 200)
"""

import ctypes
import http.client
import json
import os
import socket
import threading

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def in_netns(ns, fn, *args, **kw):
    """Runs fn(*args, **kw) on a new thread that entered network namespace ns
    (/run/netns/NS); returns what it returned, or raises what it raised."""
    out = {}

    def run():
        try:
            fd = os.open("/run/netns/" + ns, os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    e = ctypes.get_errno()
                    raise OSError(e, "setns %s: %s" % (ns, os.strerror(e)))
            finally:
                os.close(fd)
            out["value"] = fn(*args, **kw)
        except BaseException as e:  # handed to the caller
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out.get("value")


def connect(ns, host, port, timeout=10, source=None):
    """A TCP socket connected to host:port inside ns (usable from any thread), from the
    address `source` if given (e.g. 127.0.0.2: another client address on loopback)."""
    def make():
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            if source:
                s.bind((source, 0))
            s.connect((host, port))
        except BaseException:
            s.close()
            raise
        return s
    return in_netns(ns, make)


class Reply:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def text(self):
        return self.body.decode("utf-8", "replace")

    def __repr__(self):
        return "Reply(%d, %s, %r)" % (self.status, self.headers, self.body[:200])


def request(ns, host, port, path, method="GET", headers=None, body=None, tls=None, timeout=20,
            source=None):
    """One HTTP/1.1 request (http.client) inside ns. tls: an ssl.SSLContext for HTTPS;
    source: the client's address."""
    def do():
        src = (source, 0) if source else None
        if tls is not None:
            c = http.client.HTTPSConnection(host, port, timeout=timeout, context=tls, source_address=src)
        else:
            c = http.client.HTTPConnection(host, port, timeout=timeout, source_address=src)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            data = r.read()
            return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
        finally:
            c.close()
    return in_netns(ns, do)


def get_json(ns, host, port, path, timeout=20):
    r = request(ns, host, port, path, timeout=timeout)
    if r.status != 200:
        raise AssertionError("GET %s: %s" % (path, r))
    return json.loads(r.body)


def raw(sock, data, timeout=10, limit=1 << 20):
    """Sends data on a connected socket (connect()) and reads until the peer closes, the
    timeout passes with nothing more, or `limit` bytes came; returns the bytes read."""
    sock.settimeout(timeout)
    if data:
        sock.sendall(data)
    got = b""
    while len(got) < limit:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            break
        if not chunk:
            break
        got += chunk
    return got


def status_of(reply_bytes):
    """The status code of a raw HTTP/1.x reply (0 if none)."""
    line = reply_bytes.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) >= 2 and line[1].isdigit() else 0
