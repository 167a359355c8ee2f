#!/usr/bin/python3
"""The live page's cost: the daemon's CPU with N pages (SSE clients of GET /api/v1/events) open
while a flood of retransmit events flows, against the same flood with no page, same run.

bench/ring_producer feeds lossd's own observer ring (as bench/transport_bench.py does: records
submitted exactly as the sockops program submits them, a failed reservation counted in lossd's
ring_lost) at --rate events/s for --seconds. Configurations, interleaved A/B/A/B with the order
rotating each round:

  none      the daemon (--http on its namespace's loopback), no page open
  pages_N   the same with N pages open: each an SSE reader (a plain HTTP client, reading as fast
            as the daemon writes, like a browser tab) of /api/v1/events with no flow or rule
            chosen: windowed aggregates, flow updates, rules, health, kernel counters

Measured: lossd's CPU (utime + stime from /proc/PID/stat) over the producer's run, as a
fraction of one core. Target: pages_N - none <= 0.20 of one core (median of the rounds'
paired differences).

Accounting, every page, every round: the aggregates' retransmitted segments (every window
received from the page's open to 2 windows after the producer ended) plus the events the
aggregates report lost (their gaps) equal what the producer offered (submitted + lost in the
ring): exact. SSE messages the page lost (gap messages) are counted too: a window lost
there would make the page's count short, and it is reported as such.

Usage: bench/live_bench.py [--rate 50000] [--seconds 5] [--rounds 3] [--pages 10]
Prints JSON on stdout.
"""
import argparse
import datetime
import json
import os
import sys
import threading
import time

from benchlib import binary_id, git_describe, logger, med, parse_args, report
from lab.browser import SseStream
from lab.daemon import Daemon, wait_until
from lab.netns import Lab
from lab.stats import cpu_secs

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(HERE, "..", "build")
log = logger("live_bench")


def produce(a, pid):
    import subprocess
    r = subprocess.run([a.producer, "--pid", str(pid), "--rate", str(a.rate), "--seconds", str(a.seconds)],
                       capture_output=True, text=True, timeout=a.seconds + 60)
    if r.returncode != 0:
        raise RuntimeError("ring_producer failed: " + r.stderr)
    return json.loads(r.stdout)


class Page:
    """One SSE reader on a thread: counts what a page would show."""

    def __init__(self, ns, port):
        self.s = SseStream(ns, port, "/api/v1/events")
        if self.s.status != 200:
            raise RuntimeError("GET /api/v1/events: %d %s" % (self.s.status, getattr(self.s, "error_body", "")))
        self.lock = threading.Lock()
        self.segments = 0
        self.agg_gaps = 0
        self.sse_gaps = {}
        self.windows = 0
        self.messages = 0
        self.bytes = 0
        self.ids_ok = True
        self.last_id = 0
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop:
            for m in self.s.read(0.2):
                with self.lock:
                    self.messages += 1
                    self.bytes += len(m.data)
                    if m.id != self.last_id + 1:
                        self.ids_ok = False
                    self.last_id = m.id
                    if m.event == "aggregate":
                        j = m.json()
                        self.windows += 1
                        self.segments += sum(int(v) for v in j["retransmits_by_type"].values())
                        self.agg_gaps += sum(int(g["count"]) for g in j.get("gaps", []))
                    elif m.event == "gap":
                        g = m.json()
                        self.sse_gaps[g["stream"]] = self.sse_gaps.get(g["stream"], 0) + int(g["count"])

    def snapshot(self):
        with self.lock:
            return dict(segments=self.segments, aggregate_gaps=self.agg_gaps, sse_gaps=dict(self.sse_gaps),
                        windows=self.windows, messages=self.messages, json_bytes=self.bytes,
                        ids_in_order=self.ids_ok)

    def close(self):
        self.stop = True
        self.t.join(5)
        self.s.close()


def run(a, lab, ns, npages):
    d = Daemon(lab, ns, ["--http", "127.0.0.1:0", "--http-max-streams", str(max(8, npages + 2)),
                         "--http-max-connections", str(max(32, npages + 8))])
    pages = []
    try:
        port = d.ready["http_port"]
        pages = [Page(ns, port) for _ in range(npages)]
        if pages:
            # every page had its first window: the shared aggregate stream is up
            wait_until(lambda: all(p.snapshot()["windows"] >= 1 for p in pages), 20, "first windows")
        time.sleep(1.5)
        cpu0 = cpu_secs(d.pid)
        t0 = time.monotonic()
        prod = produce(a, d.pid)
        secs = time.monotonic() - t0
        cpu1 = cpu_secs(d.pid)
        time.sleep(2.5)  # the windows holding the last events
        per = [p.snapshot() for p in pages]
    finally:
        for p in pages:
            p.close()
        d.term(60)
    wanted = prod["submitted"] + prod["lost"]
    for p in per:
        p["exact"] = p["segments"] + p["aggregate_gaps"] == wanted and p["ids_in_order"]
    return {"pages": npages, "producer": prod, "wall_secs": round(secs, 3),
            "lossd_cpu_core_fraction": round((cpu1 - cpu0) / secs, 4),
            "offered": wanted, "per_page": per,
            "accounted": all(p["exact"] for p in per),
            "sse_gaps_total": sum(sum(p["sse_gaps"].values()) for p in per)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lossd", default=os.path.join(BUILD, "daemon", "lossd"))
    ap.add_argument("--producer", default=os.path.join(BUILD, "bench", "ring_producer"))
    ap.add_argument("--rate", type=int, default=50000, help="events/s the producer offers")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pages", type=int, default=10)
    ap.add_argument("--stubs", default=os.path.join(BUILD, "python"),
                    help="<build>/python: the daemon is used once its parts are loaded (GetHealth)")
    a = parse_args(ap)
    from lab import config
    config.set_paths(stubs=a.stubs)
    a.producer = os.path.abspath(a.producer)
    configs = ["none", "pages_%d" % a.pages]
    runs = {c: [] for c in configs}
    lab = Lab(pair=False)
    ns = lab.netns("a")
    try:
        for i in range(a.rounds):
            order = configs if i % 2 == 0 else configs[::-1]
            for c in order:
                r = run(a, lab, ns, 0 if c == "none" else a.pages)
                r["round"] = i
                runs[c].append(r)
                log("round %d %s: lossd %.3f of a core, offered %d, accounted %s, sse gaps %d"
                    % (i, c, r["lossd_cpu_core_fraction"], r["offered"], r["accounted"], r["sse_gaps_total"]))
    finally:
        lab.close()
    diffs = [p["lossd_cpu_core_fraction"] - n["lossd_cpu_core_fraction"]
             for p, n in zip(runs[configs[1]], runs["none"])]
    added = med(diffs)
    problems = []
    for c in configs[1:]:
        for r in runs[c]:
            if not r["accounted"]:
                problems.append("round %d: a page's aggregates do not account for every event" % r["round"])
    out = {
        "benchmark": "live_page", "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "kernel": os.uname().release, "cpus": os.cpu_count(), "git_at_run": git_describe(),
        "lossd": binary_id(a.lossd), "command": " ".join(sys.argv), "rate_offered": a.rate,
        "seconds": a.seconds, "pages": a.pages,
        "summary": {
            "lossd_cpu_core_fraction_none_median": med(r["lossd_cpu_core_fraction"] for r in runs["none"]),
            "lossd_cpu_core_fraction_pages_median": med(r["lossd_cpu_core_fraction"] for r in runs[configs[1]]),
            "added_core_fraction_per_round": [round(x, 4) for x in diffs],
            "added_core_fraction_median": round(added, 4),
            "every_page_accounted_every_round": all(r["accounted"] for r in runs[configs[1]]),
            "sse_gaps_total": sum(r["sse_gaps_total"] for r in runs[configs[1]]),
        },
        "target": {"what": "%d pages open while %d retransmit events/s flow: lossd uses at most 0.20 of "
                           "one core more than with none (median of paired rounds), and every page's "
                           "aggregates account for every event" % (a.pages, a.rate),
                   "pass": added <= 0.20 and all(r["accounted"] for r in runs[configs[1]])},
        "runs": runs,
    }
    return report(out, problems)


if __name__ == "__main__":
    sys.exit(main())
