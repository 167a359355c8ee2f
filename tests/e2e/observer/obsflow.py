"""TCP traffic for the observer e2e tests (stdlib only).

  obsflow.py recv --bind ADDR --port P [--conns N] [--rr-resp BYTES]
      Listens, prints READY, accepts N connections and serves each on its own
      thread: bulk mode reads until EOF; request/response mode (--rr-resp)
      answers every 64-byte request with BYTES bytes. Each connection is
      closed only after the peer's EOF (so every byte sent was delivered).
      Prints {"bytes": received, "conns": N} at the end.

  obsflow.py send --dst ADDR --port P (--bytes N | --until-stdin)
                  [--conns C] [--rate-mbit R] [--cc NAME]
      C parallel connections, each paced in the kernel (SO_MAX_PACING_RATE,
      R/C Mbit/s each; R = 0: unpaced), writing N bytes each, or writing until
      a line arrives on stdin. Prints "STARTED <local port> ..." once every
      connection is up, then after the end (write side shut, peer's EOF seen)
      {"bytes": total, "conns": [{"sport", "bytes", "total_retrans"}]}.

  obsflow.py rr --dst ADDR --port P --count K [--resp BYTES] [--gap-ms G]
      One connection, K requests of 64 bytes, each waiting for its whole
      response. Prints {"requests": K, "bytes": received, "sport", "total_retrans"}.
"""

import argparse
import json
import socket
import struct
import sys
import threading
import time

SO_MAX_PACING_RATE = 47
TCPI_TOTAL_RETRANS = 100  # offset of tcpi_total_retrans in struct tcp_info
REQ = 64


def family(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def total_retrans(s):
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return struct.unpack_from("I", info, TCPI_TOTAL_RETRANS)[0]


def recv_exact(c, n):
    buf = bytearray()
    while len(buf) < n:
        k = c.recv(n - len(buf))
        if not k:
            return bytes(buf)
        buf += k
    return bytes(buf)


def serve(c, a, totals, lock):
    n = 0
    if a.rr_resp:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        resp = b"r" * a.rr_resp
        while True:
            req = recv_exact(c, REQ)
            n += len(req)
            if len(req) < REQ:
                break
            c.sendall(resp)
    else:
        buf = bytearray(1 << 18)
        while True:
            k = c.recv_into(buf)
            if k == 0:
                break
            n += k
    c.close()
    with lock:
        totals[0] += n


def recv(a):
    ls = socket.socket(family(a.bind), socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((a.bind, a.port))
    ls.listen(64)
    print("READY", flush=True)
    totals, lock, ts = [0], threading.Lock(), []
    for _ in range(a.conns):
        c, _ = ls.accept()
        t = threading.Thread(target=serve, args=(c, a, totals, lock))
        t.start()
        ts.append(t)
    ls.close()
    for t in ts:
        t.join()
    print(json.dumps({"bytes": totals[0], "conns": a.conns}), flush=True)


def connect(a):
    s = socket.socket(family(a.dst), socket.SOCK_STREAM)
    if getattr(a, "cc", None):
        s.setsockopt(socket.IPPROTO_TCP, 13, a.cc.encode())  # TCP_CONGESTION
    if getattr(a, "rate_mbit", 0):
        s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, int(a.rate_mbit * 1e6 / 8 / a.conns))
    s.settimeout(a.timeout)
    s.connect((a.dst, a.port))
    return s


def send(a):
    socks = [connect(a) for _ in range(a.conns)]
    print("STARTED " + " ".join(str(s.getsockname()[1]) for s in socks), flush=True)
    stop = threading.Event()
    res = [None] * len(socks)

    def run(i, s):
        chunk = memoryview(bytearray(1 << 17))
        left, sent = a.bytes, 0
        while (left > 0) if not a.until_stdin else not stop.is_set():
            k = s.send(chunk[:min(left, len(chunk))] if not a.until_stdin else chunk[:1 << 16])
            sent += k
            left -= k
        s.shutdown(socket.SHUT_WR)
        while s.recv(4096):
            pass
        res[i] = {"sport": s.getsockname()[1], "bytes": sent, "total_retrans": total_retrans(s)}
        s.close()

    ts = [threading.Thread(target=run, args=(i, s)) for i, s in enumerate(socks)]
    for t in ts:
        t.start()
    if a.until_stdin:
        sys.stdin.readline()
        stop.set()
    for t in ts:
        t.join()
    if any(r is None for r in res):
        sys.exit("a connection failed")
    print(json.dumps({"bytes": sum(r["bytes"] for r in res), "conns": res}), flush=True)


def rr(a):
    a.conns = 1
    s = connect(a)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    got = 0
    for _ in range(a.count):
        s.sendall(b"q" * REQ)
        r = recv_exact(s, a.resp)
        if len(r) < a.resp:
            sys.exit("short response")
        got += len(r)
        time.sleep(a.gap_ms / 1000.0)
    s.shutdown(socket.SHUT_WR)
    while s.recv(4096):
        pass
    out = {"requests": a.count, "bytes": got, "sport": s.getsockname()[1],
           "total_retrans": total_retrans(s)}
    s.close()
    print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--conns", type=int, default=1)
    r.add_argument("--rr-resp", type=int, default=0)
    w = sub.add_parser("send")
    w.add_argument("--dst", required=True)
    w.add_argument("--port", type=int, required=True)
    w.add_argument("--bytes", type=int, default=0)
    w.add_argument("--until-stdin", action="store_true")
    w.add_argument("--conns", type=int, default=1)
    w.add_argument("--rate-mbit", type=float, default=500)
    w.add_argument("--timeout", type=float, default=60)
    w.add_argument("--cc", help="congestion control of the connections (TCP_CONGESTION)")
    q = sub.add_parser("rr")
    q.add_argument("--dst", required=True)
    q.add_argument("--port", type=int, required=True)
    q.add_argument("--count", type=int, default=1)
    q.add_argument("--resp", type=int, default=100)
    q.add_argument("--gap-ms", type=float, default=0)
    q.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()
    {"recv": recv, "send": send, "rr": rr}[a.cmd](a)


if __name__ == "__main__":
    main()
