"""Paced TCP bulk flow with a clean end, for the lossd e2e tests (stdlib only).

  tcpflow.py recv --bind ADDR --port P
      Prints READY once listening, accepts one connection, reads until EOF,
      then closes and prints {"bytes": n}.

  tcpflow.py send --dst ADDR --port P --bytes N --rate-mbit R [--timeout S]
      Connects, paces the socket in the kernel (SO_MAX_PACING_RATE: TCP's
      internal pacing, no fq needed), writes N bytes, shuts down its write
      side and waits for the receiver's EOF. The receiver closes only after it
      has read every byte, so every byte the sender wrote was delivered: each
      lost data segment was retransmitted before the flow ends (unlike
      iperf3, whose server may close the data socket while lost data is still
      outstanding and reset it). Prints {"bytes", "errors": {errno: count},
      "secs", "total_retrans" (TCP_INFO of the socket)}.
"""

import argparse
import errno
import json
import socket
import struct
import sys
import time

SO_MAX_PACING_RATE = 47
TCP_INFO_TOTAL_RETRANS = 100  # offset of tcpi_total_retrans in struct tcp_info


def family(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def recv(a):
    ls = socket.socket(family(a.bind), socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((a.bind, a.port))
    ls.listen(1)
    print("READY", flush=True)
    c, _ = ls.accept()
    buf = bytearray(1 << 18)
    n = 0
    while True:
        k = c.recv_into(buf)
        if k == 0:
            break
        n += k
    c.close()
    ls.close()
    print(json.dumps({"bytes": n}), flush=True)


def send(a):
    s = socket.socket(family(a.dst), socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, int(a.rate_mbit * 1e6 / 8))
    s.settimeout(a.timeout)
    errors = {}
    t0 = time.monotonic()
    s.connect((a.dst, a.port))
    chunk = memoryview(bytearray(1 << 17))
    left = a.bytes
    sent = 0
    while left > 0:
        try:
            k = s.send(chunk[:min(left, len(chunk))])
        except OSError as e:
            if isinstance(e, socket.timeout):
                raise
            name = errno.errorcode.get(e.errno, str(e.errno))
            errors[name] = errors.get(name, 0) + 1
            if errors[name] > 1000:
                break
            time.sleep(0.001)
            continue
        sent += k
        left -= k
    s.shutdown(socket.SHUT_WR)
    while s.recv(4096):
        pass
    secs = time.monotonic() - t0
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    (total_retrans,) = struct.unpack_from("I", info, TCP_INFO_TOTAL_RETRANS)
    s.close()
    print(json.dumps({"bytes": sent, "errors": errors, "secs": round(secs, 3),
                      "total_retrans": total_retrans}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, required=True)
    w = sub.add_parser("send")
    w.add_argument("--dst", required=True)
    w.add_argument("--port", type=int, required=True)
    w.add_argument("--bytes", type=int, required=True)
    w.add_argument("--rate-mbit", type=float, default=500)
    w.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()
    recv(a) if a.cmd == "recv" else send(a)


if __name__ == "__main__":
    main()
