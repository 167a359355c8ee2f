#!/usr/bin/python3
"""HTTP GET workload (stdlib only): the seed's second experiment, and a sweep workload.

  http_get.py --url http://ADDR:PORT/PATH [--count N] [--seconds S] [--timeout T]

GETs the URL N times in a row (a new connection each time: the server is HTTP/1.0), reads
every body to the end and checks its length against Content-Length. Prints one JSON line:
requests, bytes (bodies), secs, throughput_bps (body bits per second over the whole run),
latencies_ms (one per request: request sent to last body byte, connection set-up included).
"""
import argparse
import http.client
import json
import sys
import time
import urllib.parse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (0: after --count)")
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()
    u = urllib.parse.urlsplit(a.url)
    lat, total = [], 0
    t0 = time.monotonic()
    try:
        while len(lat) < a.count and (not a.seconds or time.monotonic() - t0 < a.seconds):
            r0 = time.monotonic()
            c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=a.timeout)
            c.request("GET", u.path or "/")
            resp = c.getresponse()
            body = resp.read()
            c.close()
            if resp.status != 200 or len(body) != int(resp.getheader("Content-Length", len(body))):
                raise RuntimeError("bad response: status %d, %d bytes" % (resp.status, len(body)))
            lat.append((time.monotonic() - r0) * 1e3)
            total += len(body)
    except (OSError, RuntimeError, http.client.HTTPException) as e:
        print(json.dumps({"error": repr(e), "requests": len(lat)}), flush=True)
        return 1
    secs = time.monotonic() - t0
    print(json.dumps({"requests": len(lat), "bytes": total, "secs": round(secs, 4),
                      "throughput_bps": 8.0 * total / secs if secs > 0 else 0.0,
                      "latencies_ms": [round(x, 3) for x in lat]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
