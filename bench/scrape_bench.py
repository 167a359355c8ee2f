#!/usr/bin/python3
"""GET /metrics of a daemon holding 10,000 rules (docs/benchmarks.md#scrape), in the e2e lab.

One `lossd --socket` in namespace A with N rules (CreateRules: distinct UDP destination ports on
A's veth, tc ingress, rate 0 so every datagram is matched and none dropped), then:

  scrape   --scrapes GETs of /metrics from inside A (http.client, one connection each), at the
           default --metrics-max-rules (1000) and, in a second daemon, with every rule shown
           (--metrics-max-rules N): wall time per scrape (client side), the daemon's own
           lossd_metrics_last_scrape_duration_seconds, and the size in bytes.
           Targets: median < 100 ms and < 5 MB at the default cap.
  datapath the tc ingress program's cost per packet while scraping and while not, same run:
           --rounds interleaved pairs (the order alternates), each sending --packets UDP
           datagrams B -> A to a port a rule matches at --pps; kernel.bpf_stats_enabled on for the
           run (restored after) and run_time_ns / run_cnt of the daemon's lossd_tc_in (bpftool,
           by the daemon's pid) read before and after each round; while scraping, a thread
           scrapes back to back. Reports the medians and their ratio (sanity check: < 1.10).

    PYTHONPATH=tests/e2e:client/python /usr/bin/python3 bench/scrape_bench.py \\
        --lossd build/daemon/lossd --stubs build/python [--rules 10000] [--rounds 5]

Prints one JSON document (benchlib.report).
"""
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402

log = benchlib.logger("scrape_bench")
BASE_PORT = 20000
TARGET_MS = 100.0
TARGET_BYTES = 5 * 1024 * 1024


def create(d, lab, n):
    from lab.daemon import pb, rule_spec
    specs = [rule_spec(interface=lab.IF_A, protocol="udp", dport=BASE_PORT + i, rate=0.0) for i in range(n)]
    t0 = time.monotonic()
    resp = d.inj.CreateRules(pb.CreateRulesRequest(specs=specs, atomic=True), timeout=600)
    log("CreateRules(%d): %.0f ms" % (n, (time.monotonic() - t0) * 1e3))
    return len(resp.rules)


def scrape_once(d):
    from lab import web
    t0 = time.monotonic()
    r = web.request(d.ns, "127.0.0.1", d.http_port, "/metrics", timeout=60)
    ms = (time.monotonic() - t0) * 1e3
    if r.status != 200:
        raise RuntimeError("GET /metrics: %s" % r)
    own = None
    for line in r.text().splitlines():
        if line.startswith("lossd_metrics_last_scrape_duration_seconds "):
            own = float(line.split()[1]) * 1e3  # the previous scrape's, as lossd timed it
    return ms, len(r.body), own, r.text()


def scrapes(d, n):
    walls, sizes, owns = [], [], []
    text = ""
    for _ in range(n):
        ms, size, own, text = scrape_once(d)
        walls.append(ms)
        sizes.append(size)
        if own is not None:
            owns.append(own)
    omitted = [l for l in text.splitlines() if l.startswith("lossd_metrics_rules_omitted ")]
    series = sum(1 for l in text.splitlines() if l and not l.startswith("#"))
    return {"median_ms": round(statistics.median(walls), 2), "max_ms": round(max(walls), 2),
            "lossd_median_ms": round(statistics.median(owns[1:] or owns), 2) if owns else None,
            "bytes": statistics.median(sizes), "series": series,
            "rules_omitted": float(omitted[0].split()[1]) if omitted else None, "n": n}


def prog_ids(pid):
    """Ids of the BPF programs process pid holds fds of (/proc/PID/fdinfo: prog_id)."""
    ids = set()
    fds = "/proc/%d/fd" % pid
    for fd in os.listdir(fds):
        try:
            if os.readlink(os.path.join(fds, fd)) != "anon_inode:bpf-prog":
                continue
            with open("/proc/%d/fdinfo/%s" % (pid, fd)) as f:
                for line in f:
                    if line.startswith("prog_id:"):
                        ids.add(int(line.split()[1]))
        except OSError:
            continue
    return ids


def tc_in_stats(pid):
    """(run_cnt, run_time_ns) of the lossd_tc_in program held by process pid."""
    ids = prog_ids(pid)
    out = subprocess.run(["bpftool", "prog", "show", "--json"], capture_output=True, text=True, check=True).stdout
    for p in json.loads(out):
        if p.get("name") == "lossd_tc_in" and p.get("id") in ids:
            return p.get("run_cnt", 0), p.get("run_time_ns", 0)
    raise RuntimeError("no lossd_tc_in program of pid %d" % pid)


def datapath(lab, d, rounds, packets, pps):
    from lab import traffic
    stop = threading.Event()
    busy = {"scrapes": 0}

    def scraper():
        while not stop.is_set():
            scrape_once(d)
            busy["scrapes"] += 1

    res = {"idle": [], "scraping": []}
    for i in range(rounds):
        order = ("idle", "scraping") if i % 2 == 0 else ("scraping", "idle")
        for arm in order:
            t = None
            if arm == "scraping":
                stop.clear()
                t = threading.Thread(target=scraper, daemon=True)
                t.start()
            c0, ns0 = tc_in_stats(d.pid)
            sent, got = traffic.udp_count(lab, lab.b, lab.a, lab.V4_A, BASE_PORT + 7, flow=i, count=packets, pps=pps)
            c1, ns1 = tc_in_stats(d.pid)
            if t:
                stop.set()
                t.join()
            runs = c1 - c0
            res[arm].append({"ns_per_run": (ns1 - ns0) / runs if runs else None, "runs": runs, "sent": sent,
                             "received": got})
            log("round %d %s: %.1f ns/run over %d runs (%d/%d received)"
                % (i, arm, (ns1 - ns0) / max(runs, 1), runs, got, sent))
    out = {arm: {"median_ns_per_run": round(benchlib.med([x["ns_per_run"] for x in v]), 2), "rounds": v}
           for arm, v in res.items()}
    out["ratio_scraping_to_idle"] = round(out["scraping"]["median_ns_per_run"] / out["idle"]["median_ns_per_run"], 3)
    out["scrapes_during_rounds"] = busy["scrapes"]
    return out


def main():
    ap = benchlib.argument_parser(__doc__)
    ap.add_argument("--rules", type=int, default=10000)
    ap.add_argument("--scrapes", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--packets", type=int, default=100000)
    ap.add_argument("--pps", type=int, default=50000)
    args = benchlib.parse_args(ap, lambda a: "--rules must lie in 1..45000" if not 0 < a.rules <= 45000 else None)
    from lab import config
    config.set_paths(stubs=args.stubs)
    from lab.daemon import Daemon
    from lab.netns import Lab

    out = {"bench": "scrape", "git": benchlib.git_describe(), "lossd": benchlib.binary_id(args.lossd),
           "rules": args.rules, "host_load": os.getloadavg()}
    problems = []
    old = open("/proc/sys/kernel/bpf_stats_enabled").read().strip()
    with Lab() as lab:
        for cap, name in ((None, "default_cap"), (args.rules, "all_rules")):
            extra = ["--max-rules", str(max(args.rules, 10000))]
            if cap:
                extra += ["--metrics-max-rules", str(cap)]
            d = Daemon(lab, lab.a, extra)
            created = create(d, lab, args.rules)
            if created != args.rules:
                problems.append("%s: created %d of %d rules" % (name, created, args.rules))
            out[name] = scrapes(d, args.scrapes)
            log("%s: %s" % (name, out[name]))
            if name == "default_cap":
                try:
                    subprocess.run(["sysctl", "-q", "-w", "kernel.bpf_stats_enabled=1"], check=True)
                    out["datapath"] = datapath(lab, d, args.rounds, args.packets, args.pps)
                finally:
                    subprocess.run(["sysctl", "-q", "-w", "kernel.bpf_stats_enabled=" + old], check=True)
            d.term()
    dc = out["default_cap"]
    out["targets"] = {"scrape_under_100ms": dc["median_ms"] < TARGET_MS,
                      "size_under_5MB": dc["bytes"] < TARGET_BYTES}
    if out["datapath"]["ratio_scraping_to_idle"] >= 1.10:
        problems.append("the data path cost %.3fx while scraping" % out["datapath"]["ratio_scraping_to_idle"])
    for r in out["datapath"]["idle"]["rounds"] + out["datapath"]["scraping"]["rounds"]:
        if r["runs"] < r["sent"]:
            problems.append("a round's program ran %d times for %d datagrams" % (r["runs"], r["sent"]))
    return benchlib.report(out, problems)


if __name__ == "__main__":
    sys.exit(main())
