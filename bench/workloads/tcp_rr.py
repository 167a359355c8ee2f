#!/usr/bin/python3
"""TCP request/response: the seed's first experiment (and a sweep workload). Stdlib only.

  tcp_rr.py server --bind ADDR --port P [--response BYTES]
      Prints READY once listening; serves connections until killed: for every request
      of the size the client announces it sends back BYTES (default: echo the request size).

  tcp_rr.py client --dst ADDR --port P [--request 1448] [--response 0] [--count 1000]
                   [--seconds S] [--conns 1] [--new-conn] [--nodelay]
      One connection (or one per request with --new-conn); each request is REQUEST bytes on
      the wire (header included: 1448 is one full segment), the reply RESPONSE bytes (0: the
      same as the request); the next request goes when the
      reply is complete. Stops after --count requests or --seconds. Prints one JSON line:
      requests, bytes (both directions), secs, throughput_bps (request+reply bytes), and
      latencies_ms (one per request) unless --no-latencies.

Wire format: an 8-byte header (body length, reply length; network order) then the body
(REQUEST - 8 bytes); the server replies with reply-length bytes.
"""
import argparse
import json
import socket
import struct
import sys
import threading
import time

HDR = struct.Struct("!II")


def family(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def recv_exact(s, n, buf):
    view = memoryview(buf)
    got = 0
    while got < n:
        k = s.recv_into(view[got:n])
        if k == 0:
            raise ConnectionError("peer closed after %d of %d bytes" % (got, n))
        got += k


def serve_conn(c, default_resp):
    buf = bytearray(1 << 20)
    try:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            hdr = bytearray(HDR.size)
            try:
                recv_exact(c, HDR.size, hdr)
            except ConnectionError:
                return
            req, resp = HDR.unpack(hdr)
            if req > len(buf):
                buf = bytearray(req)
            recv_exact(c, req, buf)
            n = resp or default_resp or (req + HDR.size)
            payload = bytes(n)
            c.sendall(payload)
    except OSError:
        pass
    finally:
        c.close()


def server(a):
    ls = socket.socket(family(a.bind), socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((a.bind, a.port))
    ls.listen(128)
    print("READY", flush=True)
    while True:
        c, _ = ls.accept()
        threading.Thread(target=serve_conn, args=(c, a.response), daemon=True).start()


def client(a):
    resp = a.response or a.request
    if a.request < HDR.size:
        raise SystemExit("--request: at least %d bytes (the header)" % HDR.size)
    body = a.request - HDR.size
    req = HDR.pack(body, resp) + bytes(body)
    buf = bytearray(max(resp, 1))
    lat = []
    s = None
    t0 = time.monotonic()
    end = t0 + a.seconds if a.seconds else None
    n = 0
    try:
        while (not a.count or n < a.count) and (end is None or time.monotonic() < end):
            if s is None:
                s = socket.socket(family(a.dst), socket.SOCK_STREAM)
                s.settimeout(a.timeout)
                if a.nodelay:
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.connect((a.dst, a.port))
            r0 = time.monotonic()
            s.sendall(req)
            recv_exact(s, resp, buf)
            lat.append((time.monotonic() - r0) * 1e3)
            n += 1
            if a.new_conn:
                s.close()
                s = None
    except OSError as e:
        print(json.dumps({"error": repr(e), "requests": n}), flush=True)
        return 1
    finally:
        if s is not None:
            s.close()
    secs = time.monotonic() - t0
    nbytes = n * (a.request + resp)
    out = {"requests": n, "bytes": nbytes, "secs": round(secs, 4),
           "throughput_bps": 8.0 * nbytes / secs if secs > 0 else 0.0}
    if not a.no_latencies:
        out["latencies_ms"] = [round(x, 4) for x in lat]
    print(json.dumps(out), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("server")
    s.add_argument("--bind", default="0.0.0.0")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--response", type=int, default=0)
    c = sub.add_parser("client")
    c.add_argument("--dst", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--request", type=int, default=1448)
    c.add_argument("--response", type=int, default=0)
    c.add_argument("--count", type=int, default=1000)
    c.add_argument("--seconds", type=float, default=0)
    c.add_argument("--timeout", type=float, default=30)
    c.add_argument("--new-conn", action="store_true")
    c.add_argument("--nodelay", action="store_true")
    c.add_argument("--no-latencies", action="store_true")
    a = ap.parse_args()
    return server(a) if a.cmd == "server" else client(a)


if __name__ == "__main__":
    sys.exit(main())
