"""Paced TCP bulk connections with a clean end, for the client e2e tests (stdlib only).

  cflow.py recv --bind ADDR --port P [--conns C]
      Prints READY once listening, accepts C connections, reads each until EOF, closes them
      and prints {"bytes": total}.

  cflow.py send --dst ADDR --port P --bytes N --rate-mbit R [--conns C] [--timeout S]
      Opens C connections, paces each in the kernel (SO_MAX_PACING_RATE, R Mbit/s), writes N
      bytes on each, shuts the write sides and waits for the receiver's EOFs: the receiver
      closes only after it read every byte, so every lost data segment was retransmitted
      before this ends (as tests/e2e/tcpflow.py, with C connections). Prints {"bytes",
      "total_retrans" (TCP_INFO, all connections), "secs"}.
"""

import argparse
import json
import socket
import struct
import threading
import time

SO_MAX_PACING_RATE = 47
TCP_INFO_TOTAL_RETRANS = 100


def family(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def recv(a):
    ls = socket.socket(family(a.bind), socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((a.bind, a.port))
    ls.listen(max(8, a.conns))
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
    for t in threads:
        t.join()
    ls.close()
    print(json.dumps({"bytes": total[0]}), flush=True)


def send(a):
    socks = []
    t0 = time.monotonic()
    for _ in range(a.conns):
        s = socket.socket(family(a.dst), socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, int(a.rate_mbit * 1e6 / 8))
        s.settimeout(a.timeout)
        s.connect((a.dst, a.port))
        socks.append(s)
    sent = [0] * a.conns
    retrans = [0] * a.conns
    errors = []

    def run(i, s):
        try:
            chunk = memoryview(bytearray(1 << 17))
            left = a.bytes
            while left > 0:
                k = s.send(chunk[:min(left, len(chunk))])
                sent[i] += k
                left -= k
            s.shutdown(socket.SHUT_WR)
            while s.recv(4096):
                pass
            info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
            (retrans[i],) = struct.unpack_from("I", info, TCP_INFO_TOTAL_RETRANS)
            s.close()
        except OSError as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(i, s)) for i, s in enumerate(socks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"bytes": sum(sent), "total_retrans": sum(retrans), "errors": errors,
                      "secs": round(time.monotonic() - t0, 3)}), flush=True)
    if errors:
        raise SystemExit(1)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--conns", type=int, default=1)
    w = sub.add_parser("send")
    w.add_argument("--dst", required=True)
    w.add_argument("--port", type=int, required=True)
    w.add_argument("--bytes", type=int, required=True)
    w.add_argument("--rate-mbit", type=float, default=200)
    w.add_argument("--conns", type=int, default=1)
    w.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()
    recv(a) if a.cmd == "recv" else send(a)


if __name__ == "__main__":
    main()
