"""Paced TCP flow whose end the test controls (stdlib only).

  dflow.py tcp-recv --bind ADDR --port P [--conns C]
      Prints READY once listening, accepts C connections, reads each until
      EOF, closes and prints {"bytes": total}.

  dflow.py tcp-send --dst ADDR --port P --bytes N --rate-mbit R [--conns C] [--hold]
      Opens C connections, paces each (SO_MAX_PACING_RATE, R Mbit/s), writes
      N bytes on each, waits until the peer acknowledged every byte (TIOCOUTQ
      0 and TCP_INFO unacked 0), prints SENT{json}; with --hold it then waits
      for a line on stdin. Then it shuts its write sides, waits for the
      receiver's EOFs and prints {"bytes", "total_retrans", "secs"}.
"""

import argparse
import fcntl
import json
import socket
import struct
import sys
import termios
import threading
import time

SO_MAX_PACING_RATE = 47
# struct tcp_info: u8 x8, then u32 fields: rto(8) ato(12) snd_mss(16) rcv_mss(20)
# unacked(24) ... total_retrans at 100.
OFF_UNACKED = 24
OFF_TOTAL_RETRANS = 100


def family(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def info(s):
    b = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    (unacked,) = struct.unpack_from("I", b, OFF_UNACKED)
    (retrans,) = struct.unpack_from("I", b, OFF_TOTAL_RETRANS)
    return unacked, retrans


def outq(s):
    """Bytes in the send queue: written but not yet acknowledged (sent or not)."""
    return struct.unpack("i", fcntl.ioctl(s.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]


def recv(a):
    ls = socket.socket(family(a.bind), socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((a.bind, a.port))
    ls.listen(a.conns)
    print("READY", flush=True)
    total = [0]
    lock = threading.Lock()

    def serve(c):
        buf = bytearray(1 << 18)
        n = 0
        while True:
            k = c.recv_into(buf)
            if k == 0:
                break
            n += k
        c.close()
        with lock:
            total[0] += n

    threads = []
    for _ in range(a.conns):
        c, _ = ls.accept()
        t = threading.Thread(target=serve, args=(c,))
        t.start()
        threads.append(t)
    ls.close()
    for t in threads:
        t.join()
    print(json.dumps({"bytes": total[0]}), flush=True)


def send(a):
    t0 = time.monotonic()
    socks = []
    for _ in range(a.conns):
        s = socket.socket(family(a.dst), socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, int(a.rate_mbit * 1e6 / 8))
        s.settimeout(a.timeout)
        s.connect((a.dst, a.port))
        socks.append(s)

    def write(s):
        chunk = memoryview(bytearray(1 << 16))
        left = a.bytes
        while left > 0:
            left -= s.send(chunk[:min(left, len(chunk))])

    threads = [threading.Thread(target=write, args=(s,)) for s in socks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in socks:
        while True:
            unacked, _ = info(s)
            if unacked == 0 and outq(s) == 0:
                break
            if time.monotonic() - t0 > a.timeout:
                raise SystemExit("data not acknowledged within %ss" % a.timeout)
            time.sleep(0.01)
    retrans = sum(info(s)[1] for s in socks)
    print("SENT" + json.dumps({"bytes": a.bytes * a.conns, "total_retrans": retrans,
                               "secs": round(time.monotonic() - t0, 3)}), flush=True)
    if a.hold:
        sys.stdin.readline()
    for s in socks:
        s.shutdown(socket.SHUT_WR)
    for s in socks:
        while s.recv(4096):
            pass
    retrans = sum(info(s)[1] for s in socks)
    for s in socks:
        s.close()
    print(json.dumps({"bytes": a.bytes * a.conns, "total_retrans": retrans,
                      "secs": round(time.monotonic() - t0, 3)}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("tcp-recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--conns", type=int, default=1)
    w = sub.add_parser("tcp-send")
    w.add_argument("--dst", required=True)
    w.add_argument("--port", type=int, required=True)
    w.add_argument("--bytes", type=int, required=True)
    w.add_argument("--rate-mbit", type=float, default=500)
    w.add_argument("--timeout", type=float, default=90)
    w.add_argument("--hold", action="store_true")
    w.add_argument("--conns", type=int, default=1, help="parallel connections, --bytes each")
    a = ap.parse_args()
    recv(a) if a.cmd == "tcp-recv" else send(a)


if __name__ == "__main__":
    main()
