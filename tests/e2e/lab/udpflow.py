"""Counted UDP flow for the lossd e2e tests (stdlib only).

  udpflow.py recv --bind ADDR --port P --flow F [--rcvbuf BYTES]
      Prints READY once bound, counts datagrams of flow F until a line (or
      EOF) arrives on stdin, drains the socket and prints one JSON line:
      {"received", "unique", "dups", "foreign", "max_seq", "seqs_missing"}
      (+ "missing": the sequence numbers never received, with --list-missing).

      Every datagram of the flow is checked whole: one whose header or body is not
      what the sender wrote (a bit flipped on the way, checksum valid) counts as
      "corrupt" (not received; its sequence number may be wrong).

  udpflow.py send --dst ADDR --port P --flow F --count N --pps R [--batch B] [--times FILE]
                  [--size BYTES] [--tos TOS] [--sport PORT]
      Sends N datagrams (magic, flow id, sequence number 0..N-1, then a body
      derived from the sequence number; SIZE bytes, default 64), paced to R
      per second (B at a time, default 32), and prints {"sent", "errors": {errno name: count}}. A send
      that fails is counted, not retried. --times: FILE gets, per datagram,
      CLOCK_MONOTONIC just before and just after its sendto (two native
      unsigned 64-bit integers, ns): a tc egress program decides the datagram
      between the two (it runs inside the sendto). --tos: the IPv4 TOS / IPv6
      traffic class byte (its low 2 bits are ECN: 1 ECT(1), 2 ECT(0)).
"""

import array
import argparse
import errno
import json
import select
import socket
import struct
import sys
import time

MAGIC = 0x4C4F5353  # "LOSS"
HDR = struct.Struct("!IIQ")
SIZE = 64


def family(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def body(seq, n):
    """The n bytes after the header of datagram seq: its number repeated, each
    byte xored with its offset (so no two bodies and no two bytes are alike)."""
    if n <= 0:
        return b""
    rep = int.from_bytes(seq.to_bytes(8, "little") * (n // 8 + 1), "little")
    return (rep ^ _ramp(n // 8 + 1)).to_bytes((n // 8 + 1) * 8, "little")[:n]


_ramps = {}


def _ramp(words):
    if words not in _ramps:
        _ramps[words] = int.from_bytes(bytes(i & 0xff for i in range(words * 8)), "little")
    return _ramps[words]


def recv(a):
    s = socket.socket(family(a.bind), socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, 33, a.rcvbuf)  # SO_RCVBUFFORCE (root)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, a.rcvbuf)
    s.bind((a.bind, a.port))
    print("READY", flush=True)
    seen = bytearray()
    received = dups = foreign = corrupt = 0
    max_seq = -1
    buf = bytearray(2048)
    stdin = sys.stdin.fileno()

    def take(n):
        nonlocal received, dups, foreign, corrupt, max_seq, seen
        if n < HDR.size:
            foreign += 1
            return
        magic, flow, seq = HDR.unpack_from(buf)
        if magic != MAGIC or flow != a.flow:
            # a flipped bit in the header of one of ours (the test's namespaces
            # carry no other traffic to this port), or someone else's
            if bin(magic ^ MAGIC).count("1") + bin(flow ^ a.flow).count("1") <= 1:
                corrupt += 1
            else:
                foreign += 1
            return
        if buf[HDR.size:n] != body(seq, n - HDR.size):
            corrupt += 1
            return
        received += 1
        if seq >= len(seen):
            seen.extend(b"\0" * (seq + 1 - len(seen) + 65536))
        if seen[seq]:
            dups += 1
        seen[seq] = 1
        if seq > max_seq:
            max_seq = seq

    s.settimeout(0.05)
    stop = False
    while not stop:
        try:
            for _ in range(4096):
                take(s.recv_into(buf))
        except socket.timeout:
            pass
        r, _, _ = select.select([stdin], [], [], 0)
        if r:
            stop = True
    s.setblocking(False)
    try:
        while True:
            take(s.recv_into(buf))
    except BlockingIOError:
        pass
    unique = received - dups
    out = {"received": received, "unique": unique, "dups": dups, "foreign": foreign, "corrupt": corrupt,
           "max_seq": max_seq, "seqs_missing": (max_seq + 1) - unique}
    if a.list_missing:
        out["missing"] = [i for i in range(max_seq + 1) if not seen[i]]
    print(json.dumps(out), flush=True)


def send(a):
    s = socket.socket(family(a.dst), socket.SOCK_DGRAM)
    if a.tos:
        if family(a.dst) == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, a.tos)
        else:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, a.tos)
    if a.sport:
        s.bind(("::" if family(a.dst) == socket.AF_INET6 else "0.0.0.0", a.sport))
    dst = (a.dst, a.port)
    payload = bytearray(max(a.size, HDR.size))
    errors = {}
    sent = 0
    batch = a.batch
    times = array.array("Q") if a.times else None
    clock = time.monotonic_ns
    t0 = time.monotonic()
    for seq in range(a.count):
        HDR.pack_into(payload, 0, MAGIC, a.flow, seq)
        payload[HDR.size:] = body(seq, len(payload) - HDR.size)
        before = clock()
        try:
            s.sendto(payload, dst)
            sent += 1
        except OSError as e:
            name = errno.errorcode.get(e.errno, str(e.errno))
            errors[name] = errors.get(name, 0) + 1
        if times is not None:
            times.append(before)
            times.append(clock())
        if (seq + 1) % batch == 0:
            due = t0 + (seq + 1) / a.pps
            d = due - time.monotonic()
            if d > 0:
                time.sleep(d)
    if times is not None:
        with open(a.times, "wb") as fh:
            times.tofile(fh)
    print(json.dumps({"sent": sent, "errors": errors, "secs": round(time.monotonic() - t0, 3)}),
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--flow", type=int, default=1)
    r.add_argument("--rcvbuf", type=int, default=32 << 20)
    r.add_argument("--list-missing", action="store_true")
    w = sub.add_parser("send")
    w.add_argument("--dst", required=True)
    w.add_argument("--port", type=int, required=True)
    w.add_argument("--flow", type=int, default=1)
    w.add_argument("--count", type=int, required=True)
    w.add_argument("--pps", type=float, default=20000)
    w.add_argument("--batch", type=int, default=32, help="datagrams sent between two pauses")
    w.add_argument("--times", help="write each datagram's send time (before, after) to this file")
    w.add_argument("--size", type=int, default=SIZE, help="datagram payload bytes (at least 16)")
    w.add_argument("--tos", type=int, default=0, help="IPv4 TOS / IPv6 traffic class (ECN bits)")
    w.add_argument("--sport", type=int, default=0, help="the source port (default: any)")
    a = ap.parse_args()
    recv(a) if a.cmd == "recv" else send(a)


if __name__ == "__main__":
    main()
