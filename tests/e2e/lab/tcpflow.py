#!/usr/bin/python3
"""TCP traffic for the lossd e2e tests, benchmarks and sweeps (stdlib only). Run inside a
namespace by lab.traffic; also a `lossctl sweep --workload` (rr).

  tcpflow.py recv --bind ADDR --port P [--conns N] [--rcvbuf B]
                  [--pause-after B --pause-secs S] [--shut-first]
      Prints READY once listening, accepts N connections and reads each until EOF on its
      own thread, closing it only after the peer's EOF (so every byte sent was
      delivered). Prints {"bytes": received, "conns": N} at the end. --rcvbuf: SO_RCVBUF
      of the listener (inherited by the connections; the kernel doubles it and stops
      tuning it). --pause-after: a connection stops reading once it has read B bytes, for
      S seconds (its receive buffer fills: a zero window), then reads on. --shut-first: each
      connection's write side is shut on accept (the sender, in CLOSE_WAIT, sends on; its own
      close then takes it to LAST_ACK).

  tcpflow.py send --dst ADDR --port P (--bytes N | --until-stdin) [--conns C]
                  [--rate-mbit R] [--cc NAME] [--timeout S] [--acked | --hold] [--sndbuf B]
      C connections, each paced in the kernel (SO_MAX_PACING_RATE: TCP's internal pacing,
      no fq needed; R Mbit/s each, 0: unpaced), writing N bytes each, or until a line
      arrives on stdin. Prints "STARTED <local port> ..." once every connection is up. A
      send that fails (other than the timeout) is counted by errno and retried. --acked:
      once written, waits until the peer acknowledged every byte (TIOCOUTQ 0 and TCP_INFO
      unacked 0) and prints SENT{"bytes", "total_retrans", "secs"}; --hold: the same, then
      waits for a line on stdin. Then it shuts the write sides and waits for the receiver's
      EOFs: each lost data segment was retransmitted before this ends (unlike iperf3, whose
      server may close the data socket while lost data is still outstanding and reset it).
      Prints {"bytes", "errors": {errno: count}, "secs", "total_retrans" (TCP_INFO, all
      connections), "conns": [{"sport", "bytes", "total_retrans"}]}. --sndbuf: SO_SNDBUF
      (SO_SNDBUFFORCE as root: past net.core.wmem_max), so that a write of up to B bytes
      returns at once and the write side is shut with the data still unacknowledged.

  tcpflow.py rr-server --bind ADDR --port P [--response BYTES] [--conns N] [--cc NAME]
      Prints READY once listening; serves connections (N, then prints {"conns": N} and
      exits; default: until killed): for every request it sends back the reply length
      the request announces (or BYTES, or the request's own size).

  tcpflow.py rr --dst ADDR --port P [--request 1448] [--response 0] [--count 1000]
                [--seconds S] [--new-conn] [--nodelay] [--gap-ms G] [--no-latencies]
                [--split B]
      Request/response: one connection (or one per request with --new-conn); each request
      is REQUEST bytes on the wire (header included: 1448 is one full segment), the reply
      RESPONSE bytes (0: the same as the request); the next request goes G ms after the
      reply is complete. Stops after --count requests or --seconds; the last connection
      ends with a shut write side and the server's EOF. Prints one JSON line: requests,
      bytes (both directions), response_bytes, secs, throughput_bps (request+reply
      bytes), sport and total_retrans (of the last connection), and latencies_ms (one per
      request) unless --no-latencies. --split: each request in two writes, the last B
      bytes in the second (without --nodelay: Nagle may hold it).
      Wire format: an 8-byte header (body length, reply length; network order) then the
      body (REQUEST - 8 bytes); the server replies with reply-length bytes.
"""

import argparse
import errno
import fcntl
import json
import os
import socket
import struct
import sys
import termios
import threading
import time

SO_MAX_PACING_RATE = 47
SO_SNDBUFFORCE = 32
TCP_CONGESTION = 13
# struct tcp_info: u8 x8, then u32 fields: rto(8) ato(12) snd_mss(16) rcv_mss(20)
# unacked(24) ... total_retrans at 100.
OFF_UNACKED = 24
OFF_TOTAL_RETRANS = 100
HDR = struct.Struct("!II")


def family(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def tcp_info(s):
    """(unacked, total_retrans) of a connected socket."""
    b = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return struct.unpack_from("I", b, OFF_UNACKED)[0], struct.unpack_from("I", b, OFF_TOTAL_RETRANS)[0]


def outq(s):
    """Bytes in the send queue: written but not yet acknowledged (sent or not)."""
    return struct.unpack("i", fcntl.ioctl(s.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]


def listen(a):
    ls = socket.socket(family(a.bind), socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if getattr(a, "rcvbuf", 0):
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, a.rcvbuf)
    if getattr(a, "cc", None):  # inherited by the accepted connections
        ls.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, a.cc.encode())
    ls.bind((a.bind, a.port))
    ls.listen(128)
    print("READY", flush=True)
    return ls


def serve(ls, conns, handle):
    """Accepts conns connections (0: forever), each handled on its own thread."""
    threads = []
    while not conns or len(threads) < conns:
        c, _ = ls.accept()
        t = threading.Thread(target=handle, args=(c,), daemon=not conns)
        t.start()
        threads.append(t)
    ls.close()
    for t in threads:
        t.join()


def drain(s):
    """Shuts the write side and reads until the peer's EOF."""
    s.shutdown(socket.SHUT_WR)
    while s.recv(4096):
        pass


# ---- bulk --------------------------------------------------------------------------------

def recv(a):
    ls = listen(a)
    total = [0]
    lock = threading.Lock()

    def handle(c):
        if a.shut_first:
            c.shutdown(socket.SHUT_WR)
        buf = bytearray(1 << 18)
        n = 0
        pause = a.pause_after
        while True:
            k = c.recv_into(memoryview(buf)[:min(len(buf), pause - n)] if pause else buf)
            if k == 0:
                break
            n += k
            if pause and n >= pause:
                time.sleep(a.pause_secs)
                pause = 0
        c.close()
        with lock:
            total[0] += n

    serve(ls, a.conns, handle)
    print(json.dumps({"bytes": total[0], "conns": a.conns}), flush=True)


def connect(a):
    s = socket.socket(family(a.dst), socket.SOCK_STREAM)
    if getattr(a, "cc", None):
        s.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, a.cc.encode())
    if getattr(a, "rate_mbit", 0):
        s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, int(a.rate_mbit * 1e6 / 8))
    if getattr(a, "sndbuf", 0):
        s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE if os.geteuid() == 0 else socket.SO_SNDBUF, a.sndbuf)
    s.settimeout(a.timeout)
    if getattr(a, "sport", 0):  # a chosen local port (a rule can tell the flows apart by it)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("::" if family(a.dst) == socket.AF_INET6 else "0.0.0.0", a.sport))
    s.connect((a.dst, a.port))
    return s


def send(a):
    t0 = time.monotonic()
    socks = [connect(a) for _ in range(a.conns)]
    print("STARTED " + " ".join(str(s.getsockname()[1]) for s in socks), flush=True)
    stop = threading.Event()
    errors = {}
    sent = [0] * len(socks)

    def write(i, s):
        chunk = memoryview(bytearray(1 << 17))
        while (not stop.is_set()) if a.until_stdin else sent[i] < a.bytes:
            try:
                sent[i] += s.send(chunk if a.until_stdin else chunk[:min(a.bytes - sent[i], len(chunk))])
            except socket.timeout:
                raise
            except OSError as e:
                name = errno.errorcode.get(e.errno, str(e.errno))
                errors[name] = errors.get(name, 0) + 1
                if errors[name] > 1000:
                    break
                time.sleep(0.001)

    failed = []

    def each(fn):
        def run(i, s):
            try:
                fn(i, s)
            except Exception as e:  # noqa: BLE001  (reported below, exit 1)
                failed.append(repr(e))
        ts = [threading.Thread(target=run, args=(i, s)) for i, s in enumerate(socks)]
        for t in ts:
            t.start()
        if a.until_stdin and fn is write:
            sys.stdin.readline()
            stop.set()
        for t in ts:
            t.join()
        if failed:
            sys.exit("a connection failed: %s" % failed)

    each(write)
    if a.acked or a.hold:
        for s in socks:
            while tcp_info(s)[0] or outq(s):
                if time.monotonic() - t0 > a.timeout:
                    raise SystemExit("data not acknowledged within %ss" % a.timeout)
                time.sleep(0.01)
        print("SENT" + json.dumps({"bytes": sum(sent), "total_retrans": sum(tcp_info(s)[1] for s in socks),
                                   "secs": round(time.monotonic() - t0, 3)}), flush=True)
        if a.hold:
            sys.stdin.readline()
    res = [None] * len(socks)

    def end(i, s):
        drain(s)
        res[i] = {"sport": s.getsockname()[1], "bytes": sent[i], "total_retrans": tcp_info(s)[1]}
        s.close()

    each(end)
    print(json.dumps({"bytes": sum(sent), "errors": errors, "secs": round(time.monotonic() - t0, 3),
                      "total_retrans": sum(r["total_retrans"] for r in res), "conns": res}), flush=True)


# ---- request/response ------------------------------------------------------------------------

def recv_exact(s, n, buf):
    view = memoryview(buf)
    got = 0
    while got < n:
        k = s.recv_into(view[got:n])
        if k == 0:
            raise ConnectionError("peer closed after %d of %d bytes" % (got, n))
        got += k


def rr_server(a):
    ls = listen(a)

    def handle(c):
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
                c.sendall(bytes(resp or a.response or (req + HDR.size)))
        except OSError:
            pass
        finally:
            c.close()

    serve(ls, a.conns, handle)
    print(json.dumps({"conns": a.conns}), flush=True)


def rr(a):
    a.conns = 1
    resp = a.response or a.request
    if a.request < HDR.size:
        raise SystemExit("--request: at least %d bytes (the header)" % HDR.size)
    if a.split and not 0 < a.split < a.request:
        raise SystemExit("--split: between 1 and --request - 1 bytes")
    body = a.request - HDR.size
    req = HDR.pack(body, resp) + bytes(body)
    buf = bytearray(max(resp, 1))
    lat = []
    s = None
    t0 = time.monotonic()
    end = t0 + a.seconds if a.seconds else None
    n = 0
    out = {}
    try:
        while (not a.count or n < a.count) and (end is None or time.monotonic() < end):
            if s is None:
                s = connect(a)
                if a.nodelay:
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            r0 = time.monotonic()
            if a.split:
                s.sendall(req[:-a.split])
                s.sendall(req[-a.split:])
            else:
                s.sendall(req)
            recv_exact(s, resp, buf)
            lat.append((time.monotonic() - r0) * 1e3)
            n += 1
            if a.new_conn and (not a.count or n < a.count):
                s.close()
                s = None
            if a.gap_ms:
                time.sleep(a.gap_ms / 1000.0)
        if s is not None:
            drain(s)
            out = {"sport": s.getsockname()[1], "total_retrans": tcp_info(s)[1]}
    except OSError as e:
        print(json.dumps({"error": repr(e), "requests": n}), flush=True)
        return 1
    finally:
        if s is not None:
            s.close()
    secs = time.monotonic() - t0
    nbytes = n * (a.request + resp)
    out.update({"requests": n, "bytes": nbytes, "response_bytes": n * resp, "secs": round(secs, 4),
                "throughput_bps": 8.0 * nbytes / secs if secs > 0 else 0.0})
    if not a.no_latencies:
        out["latencies_ms"] = [round(x, 4) for x in lat]
    print(json.dumps(out), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--conns", type=int, default=1)
    r.add_argument("--rcvbuf", type=int, default=0, help="SO_RCVBUF of the listener (bytes)")
    r.add_argument("--pause-after", type=int, default=0, help="stop reading after this many bytes")
    r.add_argument("--pause-secs", type=float, default=0, help="for this long")
    r.add_argument("--shut-first", action="store_true",
                   help="shut each connection's write side at once (the sender gets our FIN first)")
    w = sub.add_parser("send")
    w.add_argument("--dst", required=True)
    w.add_argument("--port", type=int, required=True)
    w.add_argument("--bytes", type=int, default=0)
    w.add_argument("--until-stdin", action="store_true")
    w.add_argument("--conns", type=int, default=1)
    w.add_argument("--rate-mbit", type=float, default=500)
    w.add_argument("--timeout", type=float, default=60)
    w.add_argument("--cc", help="congestion control of the connections (TCP_CONGESTION)")
    w.add_argument("--acked", action="store_true")
    w.add_argument("--hold", action="store_true")
    w.add_argument("--sndbuf", type=int, default=0, help="SO_SNDBUF of the connections (bytes)")
    s = sub.add_parser("rr-server")
    s.add_argument("--bind", default="0.0.0.0")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--response", type=int, default=0)
    s.add_argument("--conns", type=int, default=0)
    s.add_argument("--cc", help="congestion control of the served connections (TCP_CONGESTION)")
    c = sub.add_parser("rr")
    c.add_argument("--dst", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--request", type=int, default=1448)
    c.add_argument("--response", type=int, default=0)
    c.add_argument("--count", type=int, default=1000)
    c.add_argument("--seconds", type=float, default=0)
    c.add_argument("--timeout", type=float, default=30)
    c.add_argument("--new-conn", action="store_true")
    c.add_argument("--nodelay", action="store_true")
    c.add_argument("--split", type=int, default=0, help="the last SPLIT bytes of a request in a second write")
    c.add_argument("--gap-ms", type=float, default=0)
    c.add_argument("--no-latencies", action="store_true")
    c.add_argument("--sport", type=int, default=0, help="local port of the connection")
    a = ap.parse_args()
    return {"recv": recv, "send": send, "rr-server": rr_server, "rr": rr}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
