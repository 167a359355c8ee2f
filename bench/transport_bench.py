#!/usr/bin/python3
"""Retransmit events per second from the kernel to consumers, with every event accounted.

TCP on this 2-core machine retransmits at most ~47,000 segments/s (bench/observer_bench.py,
16 iperf3 streams at 30 % loss), far below the 200,000 events/s the transport must carry.
So this benchmark feeds lossd's own observer ring with bench/ring_producer (a BPF program
run through BPF_PROG_TEST_RUN that reserves and submits records exactly as the sockops
program does, same wakeup rule, a failed reservation counted in lossd's ring_lost) at a
fixed rate, and measures what reaches the consumers:

  observer  `lossd --observe --events --json` writing every event as a JSON line to a file
            (the one-shot observer of the TCP-observer issue)
  daemon_1  the daemon (`lossd --socket`) with one `lossctl watch` subscriber
  daemon_10 the daemon with ten `lossctl watch` subscribers

Every run checks the accounting: observer: ring_consumed + ring_lost == submitted,
delivered + lost == hub_published, printed lines == delivered; daemon: per subscriber,
event lines + the counts of its Gap lines == submitted + ring_lost. A rate counts as
carried when nothing was lost anywhere (the counts are exact either way).

The same-run baseline of every figure is what the producer offered in that run
(producer.submitted + producer.lost over producer.seconds).

lossd runs in a fresh network namespace (nothing of the host's TCP is observed); the
producer and lossctl reach it by pid and Unix socket. Prints JSON on stdout.

Usage: bench/transport_bench.py [--rate 200000] [--seconds 5] [--rounds 3]
"""
import argparse
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import git_describe, logger
from lab import config
from lab.daemon import Daemon
from lab.lossd import Lossd
from lab.netns import Lab
from lab.stats import cpu_secs

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(HERE, "..", "build")
log = logger("transport_bench")


def produce(a, pid, rate, seconds):
    r = subprocess.run([a.producer, "--pid", str(pid), "--rate", str(rate), "--seconds", str(seconds)],
                       capture_output=True, text=True, timeout=seconds + 60)
    if r.returncode != 0:
        raise RuntimeError("ring_producer failed: " + r.stderr)
    return json.loads(r.stdout)


def wait_file(path, pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(path) as f:
                if pred(f.read()):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("%s: not within %ss" % (what, timeout))


def stable_size(paths, timeout=120):
    """Waits until none of the files grew for 2.5 s (Gap lines go out once a second)."""
    end = time.monotonic() + timeout
    prev, since = None, time.monotonic()
    while time.monotonic() < end:
        cur = [os.path.getsize(p) for p in paths]
        if cur != prev:
            prev, since = cur, time.monotonic()
        elif time.monotonic() - since >= 2.5:
            return True
        time.sleep(0.25)
    return False


def run_observer(a, lab, ns, tmp, rate, lossd=None):
    """One run of the one-shot observer (lossd: another binary than the lab's; a.producer,
    a.seconds: the producer and how long it offers rate events/s, 0: as fast as it can)."""
    out = os.path.join(tmp, "observer.jsonl")
    p = Lossd(lab, ns, ["--observe", "--events"], stdout_path=out, lossd=lossd)
    try:
        p.wait_ready(60)
        cpu0 = cpu_secs(p.pid)
        prod = produce(a, p.pid, rate, a.seconds)
        stable_size([out])
        cpu1 = cpu_secs(p.pid)
    finally:
        p.term(60)
    lines = retransmits = 0
    totals = sub = None
    with open(out) as f:
        for line in f:
            lines += 1
            if line.startswith('{"event":"retransmit"'):
                retransmits += 1
            elif line.startswith('{"event":"observer_totals"'):
                totals = json.loads(line)["observer"]  # the observer's own counters
            elif line.startswith('{"event":"subscriber"'):
                sub = json.loads(line)
    wanted = prod["submitted"] + prod["lost"]
    ident = {
        "ring_consumed+ring_lost==produced": totals["ring_consumed"] + totals["ring_lost"] == wanted,
        "hub_published==ring_consumed": totals["hub_published"] == totals["ring_consumed"],
        "delivered+lost==hub_published": sub["delivered"] + sub["lost"] == totals["hub_published"],
        "printed==delivered": retransmits == sub["delivered"],
    }
    return {"producer": prod, "ring_consumed": totals["ring_consumed"], "ring_lost": totals["ring_lost"],
            "delivered": sub["delivered"], "subscriber_lost": sub["lost"], "printed": retransmits,
            "identities": ident, "accounted": all(ident.values()),
            "carried": all(ident.values()) and sub["delivered"] == wanted,
            "delivered_per_s": round(sub["delivered"] / prod["seconds"]),
            "lossd_cpu_us_per_event": round((cpu1 - cpu0) / max(1, sub["delivered"]) * 1e6, 3)}


GAP = re.compile(r"^-- (\d+) events? lost \((.*)\)$")


def run_daemon(a, lab, ns, tmp, rate, nsubs):
    d = Daemon(lab, ns)
    sock = d.sock
    subs, outs = [], []
    try:
        def status():
            r = subprocess.run([a.lossctl, "--server", "unix:" + sock, "-o", "json", "status"],
                               capture_output=True, text=True, timeout=10)
            return json.loads(r.stdout) if r.returncode == 0 else None
        end = time.monotonic() + 60
        while status() is None:
            if time.monotonic() > end or d.proc.poll() is not None:
                raise RuntimeError("daemon not serving")
            time.sleep(0.1)
        for i in range(nsubs):
            path = os.path.join(tmp, "watch%d.txt" % i)
            outs.append(path)
            with open(path, "w") as f:
                subs.append(subprocess.Popen([a.lossctl, "--server", "unix:" + sock, "watch"],
                                             stdout=f, stderr=subprocess.STDOUT))
        end = time.monotonic() + 30
        while status()["health"].get("subscribers", 0) < nsubs:
            if time.monotonic() > end:
                raise RuntimeError("subscribers did not register")
            time.sleep(0.05)
        cpu0 = cpu_secs(d.pid)
        prod = produce(a, d.pid, rate, a.seconds)
        drained = stable_size(outs)
        cpu1 = cpu_secs(d.pid)
    finally:
        for p in subs:
            p.send_signal(signal.SIGINT)
        for p in subs:
            p.wait(timeout=30)
        d.term(60)
    wanted = prod["submitted"] + prod["lost"]
    per = []
    for path in outs:
        events, gaps, other = 0, {}, []
        with open(path) as f:
            for line in f:
                m = GAP.match(line.strip())
                if m:
                    gaps[m.group(2)] = gaps.get(m.group(2), 0) + int(m.group(1))
                elif " fast " in line:
                    events += 1
                elif line.strip():
                    other.append(line.strip())
        per.append({"events": events, "gaps": gaps, "other_lines": other[:3],
                    "accounted": events + sum(gaps.values()) == wanted and not other})
    total = sum(p["events"] for p in per)
    return {"producer": prod, "subscribers": nsubs, "drained": drained, "per_subscriber": per,
            "accounted": drained and all(p["accounted"] for p in per),
            "carried": drained and all(p["events"] == wanted for p in per),
            "events_per_s_per_subscriber_min": round(min(p["events"] for p in per) / prod["seconds"]),
            "events_per_s_total": round(total / prod["seconds"]),
            "daemon_cpu_us_per_event_written": round((cpu1 - cpu0) / max(1, total) * 1e6, 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lossd", default=os.path.join(BUILD, "daemon", "lossd"))
    ap.add_argument("--lossctl", default=os.path.join(BUILD, "client", "lossctl", "lossctl"))
    ap.add_argument("--producer", default=os.path.join(BUILD, "bench", "ring_producer"))
    ap.add_argument("--rate", type=int, default=200000, help="events/s the producer offers")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--subscribers", type=int, default=10)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("transport_bench needs root", file=sys.stderr)
        return 77
    for k in ("lossd", "lossctl", "producer"):
        setattr(a, k, os.path.abspath(getattr(a, k)))
    configs = ["observer", "daemon_1", "daemon_%d" % a.subscribers]
    runs = {c: [] for c in configs}
    config.set_paths(lossd=a.lossd)
    lab = Lab(pair=False)
    ns = lab.netns("a")
    try:
        for i in range(a.rounds):
            k = i % len(configs)
            for c in configs[k:] + configs[:k]:  # interleaved, order rotating
                with tempfile.TemporaryDirectory(prefix="lossd-tb-") as tmp:
                    if c == "observer":
                        r = run_observer(a, lab, ns, tmp, a.rate)
                        log("round %d %s: delivered %d/s of %d/s offered, accounted %s, carried %s"
                            % (i, c, r["delivered_per_s"], a.rate, r["accounted"], r["carried"]))
                    else:
                        n = 1 if c == "daemon_1" else a.subscribers
                        r = run_daemon(a, lab, ns, tmp, a.rate, n)
                        log("round %d %s: min per subscriber %d/s, total %d/s, accounted %s, carried %s"
                            % (i, c, r["events_per_s_per_subscriber_min"], r["events_per_s_total"],
                               r["accounted"], r["carried"]))
                r["round"] = i
                runs[c].append(r)
    finally:
        lab.close()

    def med(xs):
        return statistics.median(xs)
    summary = {
        "observer": {"delivered_per_s_median": med(r["delivered_per_s"] for r in runs["observer"]),
                     "carried_every_round": all(r["carried"] for r in runs["observer"]),
                     "accounted_every_round": all(r["accounted"] for r in runs["observer"]),
                     "lossd_cpu_us_per_event_median": med(r["lossd_cpu_us_per_event"] for r in runs["observer"])},
    }
    for c in configs[1:]:
        summary[c] = {
            "events_per_s_per_subscriber_min_median": med(r["events_per_s_per_subscriber_min"] for r in runs[c]),
            "events_per_s_total_median": med(r["events_per_s_total"] for r in runs[c]),
            "carried_every_round": all(r["carried"] for r in runs[c]),
            "accounted_every_round": all(r["accounted"] for r in runs[c]),
            "daemon_cpu_us_per_event_written_median": med(r["daemon_cpu_us_per_event_written"] for r in runs[c])}
    print(json.dumps({
        "benchmark": "transport", "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "kernel": os.uname().release, "cpus": os.cpu_count(), "git_at_run": git_describe(),
        "command": " ".join(sys.argv), "rate_offered": a.rate, "seconds": a.seconds,
        "target": {"events_per_s": 200000,
                   "what": "the offered rate carried with nothing lost, every round, to the one-shot "
                           "observer and to one lossctl subscriber; every run accounted",
                   "pass": a.rate >= 200000 and summary["observer"]["carried_every_round"]
                   and summary["daemon_1"]["carried_every_round"]
                   and all(summary[c]["accounted_every_round"] for c in configs)},
        "summary": summary, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
