#!/usr/bin/python3
"""Soak: lossd under rule churn, subscribers coming and going, and traffic, for N minutes;
its RSS, fds and threads over time (issue 10, "Tests that keep it so").

    bench/soak_bench.py --lossd build/daemon/lossd --stubs build/python [--minutes 10]

One daemon (lossd --socket, namespace A of an e2e lab). For --minutes, at once:
  churn        CreateRule / UpdateRule / DeleteRule of UDP and TCP rules on A's veth (some with
               a 1 s ttl, so the expiry sweep works too), CreateRules batches, a ClearRules now
               and then; at most --max-live rules
  subscribers  streams of every kind (WatchRetransmits, WatchFlows, WatchAggregates,
               WatchRuleCounters), 1 to 4 at a time, each read for 1-8 s and cancelled
  traffic      rounds of paced TCP A -> B (4 connections) through a 5 % egress rule, so there
               are retransmissions for the streams to carry
Every --sample-secs: lossd's RSS (VmRSS), open fds, threads, rules and open streams
("samples"). The same-run baseline is the daemon quiesced (no rules, no streams) after a
--warmup-secs round of the same load (so every hook program is loaded and every stream kind
was opened once), against quiesced after the run; the series shows whether anything grows.

Prints one JSON document (benchlib.report): checks, not targets: after the load, with
no stream open, fds and threads are back to the baseline, and RSS is within 25 % (+8 MiB)
of the first quarter's median.
"""
import datetime
import os
import random
import sys
import threading
import time

from benchlib import argument_parser, binary_id, git_describe, logger, med, parse_args, report

log = logger("soak_bench")


def proc_stats(pid):
    st = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "Threads"):
                st[k] = int(v.split()[0])
    return {"rss_kb": st.get("VmRSS"), "threads": st.get("Threads"),
            "fds": len(os.listdir("/proc/%d/fd" % pid))}


def main():
    ap = argument_parser(__doc__)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--sample-secs", type=float, default=10)
    ap.add_argument("--warmup-secs", type=float, default=20,
                    help="load before the baseline (every program loaded, every stream kind opened)")
    ap.add_argument("--max-live", type=int, default=200)
    ap.add_argument("--seed", type=int, default=None)
    args = parse_args(ap, lambda a: "--minutes and --sample-secs must be > 0"
                      if a.minutes <= 0 or a.sample_secs <= 0 else None)
    from lab import daemon as labd, traffic
    from lab.daemon import Daemon, rule_spec, wait_until
    from lab.netns import Lab
    labd.load_stubs(os.path.abspath(args.stubs))
    grpc, pb = labd.grpc, labd.pb
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    out = {"benchmark": "soak",
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "kernel": os.uname().release, "cpus": os.cpu_count(), "lossd": args.lossd,
           "lossd_binary": binary_id(args.lossd), "command": " ".join([sys.executable] + sys.argv),
           "loadavg_1m_start": os.getloadavg()[0], "git_at_run": git_describe(), "seed": seed,
           "minutes": args.minutes}
    problems = []
    with Lab() as lab:
        d = Daemon(lab, lab.a, ready_timeout=180)
        pid = d.pid
        stop = threading.Event()
        counts = {"creates": 0, "updates": 0, "deletes": 0, "batches": 0, "clears": 0, "streams": 0,
                  "stream_msgs": 0, "traffic_rounds": 0, "errors": {}}
        lock = threading.Lock()

        def bump(k, n=1):
            with lock:
                counts[k] += n

        def err(e):
            with lock:
                counts["errors"][e.code().name] = counts["errors"].get(e.code().name, 0) + 1

        def churn():
            r = random.Random(seed)
            ids = []
            while not stop.is_set():
                k = r.random()
                try:
                    if k < 0.45 and len(ids) < args.max_live:
                        s = rule_spec(interface=lab.IF_A, direction=r.choice(["ingress", "egress"]),
                                      protocol=r.choice(["udp", "tcp"]), dport=r.randint(10000, 60000),
                                      rate=r.random() * 0.02, ttl_ns=r.choice([0, 0, 10**9]),
                                      labels={"soak": str(r.randint(0, 9))})
                        ids.append(d.inj.CreateRule(pb.CreateRuleRequest(spec=s), timeout=30).id)
                        bump("creates")
                    elif k < 0.65 and ids:
                        s = rule_spec(interface=lab.IF_A, protocol="udp", dport=r.randint(10000, 60000),
                                      rate=r.random() * 0.02)
                        d.inj.UpdateRule(pb.UpdateRuleRequest(id=r.choice(ids), spec=s), timeout=30)
                        bump("updates")
                    elif k < 0.9 and ids:
                        d.inj.DeleteRule(pb.DeleteRuleRequest(id=ids.pop(r.randrange(len(ids)))), timeout=30)
                        bump("deletes")
                    elif k < 0.98:
                        specs = [rule_spec(interface=lab.IF_A, protocol="udp", dport=r.randint(10000, 60000),
                                           rate=0.01, ttl_ns=10**9) for _ in range(r.randint(1, 20))]
                        d.inj.CreateRules(pb.CreateRulesRequest(specs=specs), timeout=30)
                        bump("batches")
                    else:
                        d.inj.ClearRules(pb.ClearRulesRequest(), timeout=30)
                        ids.clear()
                        bump("clears")
                except grpc.RpcError as e:
                    err(e)
                    if e.code() == grpc.StatusCode.NOT_FOUND and ids:
                        ids.pop(0)
                time.sleep(r.uniform(0, 0.02))

        def subscriber(k):
            r = random.Random(seed + 1 + k)
            while not stop.is_set():
                kind = r.choice(["rtx", "flows", "aggr", "counters"])
                if kind == "rtx":
                    call = d.obs.WatchRetransmits(pb.WatchRetransmitsRequest(queue=r.choice([0, 64, 4096])),
                                                  timeout=60)
                elif kind == "flows":
                    call = d.obs.WatchFlows(pb.WatchFlowsRequest(interval_ns=200 * 10**6), timeout=60)
                elif kind == "aggr":
                    call = d.obs.WatchAggregates(pb.WatchAggregatesRequest(window_ns=200 * 10**6), timeout=60)
                else:
                    call = d.inj.WatchRuleCounters(pb.WatchRuleCountersRequest(interval_ns=200 * 10**6),
                                                   timeout=60)
                bump("streams")
                end = time.monotonic() + r.uniform(1, 8)
                timer = threading.Timer(max(0.0, end - time.monotonic()), call.cancel)
                timer.start()
                try:
                    for _ in call:
                        bump("stream_msgs")
                        if stop.is_set():
                            break
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.CANCELLED:
                        err(e)
                finally:
                    timer.cancel()
                    call.cancel()
                time.sleep(r.uniform(0, 1))

        def traffic_loop():
            while not stop.is_set():
                try:  # (again after each ClearRules of the churn)
                    if not any(x.spec.match.dport.lo == 5201 for x in
                               d.inj.ListRules(pb.ListRulesRequest(labels={"soak": "traffic"}), timeout=30).rules):
                        d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=5201,
                                 payload="only", rate=0.05, labels={"soak": "traffic"})
                except grpc.RpcError as e:
                    err(e)
                f = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, 5201, 2e6, 20, conns=4)
                try:
                    f.wait()
                    bump("traffic_rounds")
                except Exception as e:  # noqa: BLE001 (a round that failed is counted, not fatal)
                    f.close()
                    log("traffic round failed: %s" % e)
                time.sleep(1)

        def run_load(seconds, samples):
            stop.clear()
            threads = [threading.Thread(target=churn, daemon=True),
                       threading.Thread(target=traffic_loop, daemon=True)]
            threads += [threading.Thread(target=subscriber, args=(k,), daemon=True) for k in range(4)]
            t0 = time.monotonic()
            for t in threads:
                t.start()
            end = t0 + seconds
            while time.monotonic() < end:
                time.sleep(min(args.sample_secs, max(0.0, end - time.monotonic())))
                h = d.health()
                smp = dict(t=round(time.monotonic() - t0, 1), rules=h.rules, streams=h.streams, **proc_stats(pid))
                if samples is not None:
                    samples.append(smp)
                log("t=%ss rss %s kB, fds %s, threads %s, rules %s, streams %s"
                    % (smp["t"], smp["rss_kb"], smp["fds"], smp["threads"], smp["rules"], smp["streams"]))
                if d.proc.poll() is not None:
                    problems.append("lossd exited (%s)" % d.proc.returncode)
                    break
            stop.set()
            for t in threads:
                t.join(120)
            d.clear()
            try:
                wait_until(lambda: d.health().streams == 0, 30, "streams to end")
            except AssertionError as e:
                problems.append(str(e))
            time.sleep(2)

        # Warm-up: every hook program loaded, every stream kind opened once; then the
        # quiesced baseline (no rules, no streams).
        log("warm-up %ss" % args.warmup_secs)
        run_load(args.warmup_secs, None)
        out["baseline_quiesced"] = proc_stats(pid)
        samples = []
        run_load(args.minutes * 60, samples)
        out["after_quiesced"] = proc_stats(pid)
        out["samples"] = samples
        out["counts"] = counts
        q = max(1, len(samples) // 4)
        first, last = samples[:q], samples[-q:]
        out["rss_kb_median_first_quarter"] = med([s["rss_kb"] for s in first])
        out["rss_kb_median_last_quarter"] = med([s["rss_kb"] for s in last])
        out["rss_growth_ratio"] = (round(out["rss_kb_median_last_quarter"] / out["rss_kb_median_first_quarter"], 3)
                                   if out["rss_kb_median_first_quarter"] else None)
        b, a = out["baseline_quiesced"], out["after_quiesced"]
        if a["fds"] != b["fds"]:
            problems.append("fds %d before the load, %d after it (quiesced)" % (b["fds"], a["fds"]))
        if a["threads"] != b["threads"]:
            problems.append("threads %d before the load, %d after it (quiesced)" % (b["threads"], a["threads"]))
        if out["rss_kb_median_last_quarter"] > 1.25 * out["rss_kb_median_first_quarter"] + 8192:
            problems.append("RSS grew: median %s kB in the first quarter, %s kB in the last"
                            % (out["rss_kb_median_first_quarter"], out["rss_kb_median_last_quarter"]))
        if counts["creates"] == 0 or counts["streams"] == 0 or counts["traffic_rounds"] == 0:
            problems.append("a load part did nothing: %s" % counts)
        rc = d.term()
        out["exit_code"] = rc
        if rc != 0:
            problems.append("lossd exited %d on SIGTERM" % rc)
    out["loadavg_1m_end"] = os.getloadavg()[0]
    return report(out, problems)


if __name__ == "__main__":
    sys.exit(main())
