#!/usr/bin/python3
"""A user-space delay line: adds a fixed one-way delay to every packet routed through a tun.

This kernel has no qdisc that can delay a packet (netem, fq and etf are not built), so the
experiments get their RTT from this instead. Run it inside a forwarding namespace:

    delay_line.py --dev dl0 --delay-ms 5

It creates tun device DEV (IFF_TUN, no packet info), prints READY, and then forever: reads
every packet the kernel routes into DEV, and writes it back into DEV DELAY ms later, in
arrival order; the kernel then forwards it as if it had arrived on DEV. Route the traffic
of both directions into DEV (e.g. `ip rule add iif IN lookup 100; ip route add default dev
DEV table 100` for each input interface) and a packet crosses it once per direction: the
round trip grows by twice the delay. Stops on SIGTERM/SIGINT and prints one JSON line with
the packets carried and the largest lateness (how far after its due time a packet left).

Stdlib only; about 10 us of Python per packet, enough for ~100 Mbit/s of full-size
segments plus their ACKs.
"""
import argparse
import collections
import fcntl
import json
import os
import select
import signal
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dev", required=True)
    ap.add_argument("--delay-ms", type=float, required=True)
    a = ap.parse_args()
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", a.dev.encode(), IFF_TUN | IFF_NO_PI))
    delay = a.delay_ms / 1000.0
    q = collections.deque()  # (due, packet): constant delay keeps it sorted
    stop = []
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda n, f: stop.append(n))
    carried = 0
    late = 0.0
    print("READY", flush=True)
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    while not stop:
        now = time.monotonic()
        while q and q[0][0] <= now:
            due, pkt = q.popleft()
            late = max(late, now - due)
            try:
                os.write(fd, pkt)
                carried += 1
            except OSError:
                pass  # the kernel refused it (e.g. no route): a loss the experiment would see
        timeout = max(0.0, q[0][0] - time.monotonic()) * 1000 if q else 100
        try:
            ready = poll.poll(timeout)
        except InterruptedError:
            continue
        if ready:
            t = time.monotonic()
            while True:
                try:
                    pkt = os.read(fd, 65536)
                except BlockingIOError:
                    break
                q.append((t + delay, pkt))
    print(json.dumps({"carried": carried, "queued_at_exit": len(q), "max_late_ms": round(late * 1000, 3)}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
