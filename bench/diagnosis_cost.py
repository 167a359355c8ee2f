#!/usr/bin/python3
"""What issue 13's diagnosis costs: the observer with everything on (limit accounting and stall
detection at every ACK in BPF, the injector's drop log on drops) against the observer of
before (an older build of lossd, e.g. main at fcfc9bf), in interleaved A/B pairs of one run.

  bench/diagnosis_cost.py --lossd build/daemon/lossd --old-lossd /tmp/cost-old/build/daemon/lossd
      [--old-label fcfc9bf] [--pairs 9] [--seconds 3] [--rounds 4] [--streams 16] [--loss 30%]
      [--path-timer build/bench/path_timer] [--skip-path] [--skip-events]
  (root; JSON on stdout; PYTHONPATH=tests/e2e:client/python, as bench/run_all.sh sets it)

Build the old one from its own tree, never a worktree:
  git archive fcfc9bf | tar -x -C /tmp/cost-old && cmake -S /tmp/cost-old -B /tmp/cost-old/build
  ... && cmake --build /tmp/cost-old/build --target lossd

Part 1, the path (a, b, d). Two namespaces made for this run (tests/e2e/lab Lab: A -- veth --
B, documentation addresses, removed on exit, failure and signals). `lossd --observe` of one
configuration (old / new) in A, the sender's namespace, where the per-ACK work is: tcp_probe
runs once per skb A receives (the ACKs of the bulk flow), where the new observer accounts the
limits and watches for stalls. One unpaced iperf3 flow A -> B (port 5201) per phase:

  phase 1 (kernel.bpf_stats_enabled=0, both configurations alike): throughput; bench/path_timer
      from A's e2ea netif_receive_skb to tcp_probe in A (started after the observer, so its
      tcp_probe program runs after the observer's: the observer's per-ACK program is inside
      the timed path), the kernel's own ns per ACK skb; the host's CPU per ACK from /proc/stat
      (noisy: the machine is shared; shown, not a target).
  phase 2 (kernel.bpf_stats_enabled 0 then 1, restored after, on error and signals too): the
      same flow again; run_time_ns / run_cnt of each observer program lossd holds (fdinfo),
      their sum per ACK (A's Tcp.InSegs) and per data segment sent (A's Tcp.OutSegs), as
      bench/path_cost.py measures the injector.

  (d) ring records per ACK with no stall: the observer's counters at its exit
      (observer_totals; --events, its printer thread the consumer, in both configurations):
      ring records = ring_consumed + ring_lost, of which retransmit events (every type and
      outcome, not filtered) and flow closes are what the old observer sends; the new one adds
      one record per stall (stalls) and per ACK of a traced flow (samples: none traced here);
      the rest, per ACK of both phases. Expected 0.

Pairs are interleaved, the order alternating pair to pair (old new, new old, ...). Reported:
per configuration medians with distribution-free intervals of the median (benchlib.median_ci),
and per pair the paired new/old ratio or difference, its median and interval.

  (a) throughput ratio new/old, target >= 0.97. Throughput ratios are noisy here (DESIGN
      "facts" 8: +-10 % between runs of one configuration): the verdict is 'pass' when the
      interval's low end is >= 0.97, 'fail' when its high end is < 0.97, else 'inconclusive';
      only 'pass' meets the target.
  (b) observer BPF ns per ACK and per segment, old vs new, and the path timer's ns per ACK skb.

Part 2, retransmit events/s (c), the generator of bench/observer_bench.py (TSO/GSO off on A,
a lossd rule dropping --loss at B's ingress, --streams unpaced streams) and its two consumer
runs, reused: 'observed' (lossd --observe --events in A, sustained: delivered events/s, every
accounting identity checked) and 'burst' (the observer stopped 0.5 s in, the full ring's
drain timed: the pipeline's rate with work queued). Per round both configurations, the order
alternating; each run starts the injector and the observer of its own build (the new
injector keeps the drop log on each drop). Capacity unchanged: the new observer keeps every
identity and loses nothing where the old one did not, and its delivered and drain rates'
paired ratio to the old one's intervals are shown (verdict as for throughput, at 0.97, on the
burst's drain rate: the sustained rate is the generator's).

Part 3, the transport's capacity (c): bench/transport_bench.py's one-shot observer run, each
build's own bench/ring_producer (beside its lossd) offering --producer-rate events/s (0: as
fast as it can) into that build's observer ring; delivered events/s, every count accounted;
the paired new/old ratio (verdict at 0.97).
"""
import argparse
import datetime
import os
import signal
import sys
import tempfile
import types

import observer_bench as ob
import transport_bench as tb
from benchlib import (BpfStatsSysctl, PathTimer, binary_id, git_describe, logger, median_ci, parse_args,
                      proc_stat, report, rnd)
from lab import traffic
from lab.lossd import Lossd, all_events
from lab.netns import Lab

PORT = 5201
TARGET_RATIO = 0.97
CONFIGS = ("old", "new")
log = logger("diagnosis_cost")


def verdict(ci, target=TARGET_RATIO):
    """pass / fail / inconclusive of a ratio's interval against its target."""
    if not ci:
        return "no data"
    return "pass" if ci[0] >= target else "fail" if ci[1] < target else "inconclusive"


def obs_progs(pid):
    """{name: (run_time_ns, run_cnt)} of the observer programs (obs_*) lossd pid holds."""
    st = ob.prog_stats(pid)
    names = ob.prog_names(list(st))
    return {names[i]: (s["run_time_ns"], s["run_cnt"]) for i, s in st.items() if names[i].startswith("obs_")}


def ring_records(res):
    """What the observer's ring carried, from its counters at exit (observer_totals): records =
    ring_consumed + ring_lost; of them retransmit events (not filtered) and flow closes, what
    the old observer sends; stall records and ACK samples (stalls, samples: the new observer's;
    an old one has neither); and the rest."""
    t = res["totals"]
    records = t["ring_consumed"] + t["ring_lost"]
    old_kinds = all_events(t) - t["filtered"] + t["flows_closed"]
    stalls, samples = t.get("stalls", 0), t.get("samples", 0)
    return {"records": records, "retransmit_and_close": old_kinds, "stall_events": stalls,
            "sample_events": samples, "stall_lines": res["stall_lines"],
            "lost": t["ring_lost"] + res["subscriber"]["lost"], "other": records - old_kinds - stalls - samples}


# ---- part 1 ----------------------------------------------------------------------------------

def path_run(lab, conf, binary, secs, stats, timer_bin):
    hz = os.sysconf("SC_CLK_TCK")
    obs = ob.observer(lab, lab.a, ["--events"], lossd=binary)
    timer = None
    run = {"observer_ready_secs": round(obs.ready_secs, 2)}
    try:
        # Phase 1, statistics off: throughput, the path timer, the host's CPU.
        if timer_bin:
            timer = PathTimer(timer_bin, lab, lab.a, lab.IF_A)
        k0, c0 = lab.counters(lab.a), proc_stat()
        r = traffic.iperf(lab, lab.a, lab.V4_B, PORT, secs)
        c1, k1 = proc_stat(), lab.counters(lab.a)
        if timer:
            path = timer.stop()
            timer = None
            run["path"] = path
            run["path_ns_per_ack_skb"] = path["mean_in_range_ns"] if path["timed"] else None
            run["path_p50_ns_per_ack_skb"] = path["p50_ns"] if path["timed"] else None
        d1 = k1 - k0
        kern = sum((c1[k] - c0[k]) * 1e9 / hz for k in ("system", "softirq", "irq"))
        run.update(gbps=r["gbps"], iperf_retransmits=r["retransmits"], acks=d1["Tcp.InSegs"],
                   segs_out=d1["Tcp.OutSegs"], retrans_segs=d1["Tcp.RetransSegs"],
                   host_kernel_ns_per_ack=kern / d1["Tcp.InSegs"] if d1["Tcp.InSegs"] else None)
        # Phase 2: the same flow with the observer's programs' run time counted.
        stats.enable_fresh()
        p0 = obs_progs(obs.pid)
        k2 = lab.counters(lab.a)
        r2 = traffic.iperf(lab, lab.a, lab.V4_B, PORT, secs)
        d2 = lab.counters(lab.a) - k2
        p1 = obs_progs(obs.pid)
    finally:
        if timer:
            timer.p.kill()
        try:
            stats.restore()
        finally:
            out = ob.stop_observer(obs)
    progs = {}
    for name, (ns1, n1) in p1.items():
        ns0, n0 = p0.get(name, (0, 0))
        progs[name] = {"runs": n1 - n0, "run_time_ns": ns1 - ns0,
                       "ns_per_run": (ns1 - ns0) / (n1 - n0) if n1 > n0 else None,
                       "runs_per_ack": (n1 - n0) / d2["Tcp.InSegs"] if d2["Tcp.InSegs"] else None,
                       "runs_per_seg": (n1 - n0) / d2["Tcp.OutSegs"] if d2["Tcp.OutSegs"] else None,
                       "ns_per_seg": (ns1 - ns0) / d2["Tcp.OutSegs"] if d2["Tcp.OutSegs"] else None}
    bpf_ns = sum(p["run_time_ns"] for p in progs.values())
    acks2, segs2 = d2["Tcp.InSegs"], d2["Tcp.OutSegs"]
    t = out["totals"]
    rr = ring_records(out)
    run.update(
        phase2={"gbps": r2["gbps"], "acks": acks2, "segs_out": segs2, "retrans_segs": d2["Tcp.RetransSegs"]},
        bpf_programs=progs, bpf_ns=bpf_ns,
        bpf_ns_per_ack=bpf_ns / acks2 if acks2 else None,
        bpf_ns_per_seg=bpf_ns / segs2 if segs2 else None,
        ring=rr, identities=ob.identities(out)[0], identities_hold=ob.identities(out)[1],
        ring_other_per_ack=rr["other"] / (run["acks"] + acks2) if run["acks"] + acks2 else None,
        observer={k: t.get(k) for k in ("retrans_segs", "flows_opened", "flows_closed", "ring_lost", "filtered",
                                        "recursion_misses")},
        hooks_attached=sorted(h["name"] for h in t["hooks"] if h["available"]),
        hooks_not_attached={h["name"]: h["reason"] for h in t["hooks"] if not h["available"]})
    return run


def path_part(a, stats, problems):
    runs = {c: [] for c in CONFIGS}
    with Lab() as lab:
        traffic.iperf_server(lab, lab.b, PORT)
        traffic.iperf(lab, lab.a, lab.V4_B, PORT, 1)  # warm-up
        for i in range(a.pairs):
            order = CONFIGS if i % 2 == 0 else CONFIGS[::-1]
            for c in order:
                r = path_run(lab, c, a.bins[c], a.seconds, stats, None if a.skip_path_timer else a.timer_bin)
                r["pair"] = i
                runs[c].append(r)
                log("pair %d %s: %.2f Gbit/s, observer %.1f ns/ack (%.1f ns/seg), path %.0f ns/ack skb, "
                    "ring other %d" % (i, c, r["gbps"], r["bpf_ns_per_ack"] or 0, r["bpf_ns_per_seg"] or 0,
                                       r.get("path_ns_per_ack_skb") or 0, r["ring"]["other"]))
                if r["hooks_not_attached"]:
                    problems.append("pair %d %s: hooks not attached %s" % (i, c, r["hooks_not_attached"]))
                if not r["observer"]["flows_opened"]:
                    problems.append("pair %d %s: the observer saw no flow" % (i, c))
                if not r["identities_hold"]:
                    problems.append("pair %d %s: ring accounting does not hold: %s" % (i, c, r["identities"]))

    old, new = runs["old"], runs["new"]

    def per(conf, f):
        return median_ci([f(r) for r in runs[conf]])

    def paired(f, ratio=True):
        xs = []
        for o, n in zip(old, new):
            fo, fn = f(o), f(n)
            xs.append(None if fo is None or fn is None or (ratio and not fo) else fn / fo if ratio else fn - fo)
        return median_ci(xs)

    keys = {"gbps": lambda r: r["gbps"],
            "bpf_ns_per_ack": lambda r: r["bpf_ns_per_ack"],
            "bpf_ns_per_seg": lambda r: r["bpf_ns_per_seg"],
            "path_ns_per_ack_skb": lambda r: r.get("path_ns_per_ack_skb"),
            "path_p50_ns_per_ack_skb": lambda r: r.get("path_p50_ns_per_ack_skb"),
            "host_kernel_ns_per_ack": lambda r: r["host_kernel_ns_per_ack"],
            "ring_other_per_ack": lambda r: r["ring_other_per_ack"],
            "ring_other": lambda r: r["ring"]["other"],
            "stall_events": lambda r: r["ring"]["stall_events"]}
    summary = {c: {k: per(c, f) for k, f in keys.items()} for c in CONFIGS}
    for c in CONFIGS:
        names = sorted({n for r in runs[c] for n in r["bpf_programs"]})
        summary[c]["programs"] = {n: {k: per(c, lambda r: r["bpf_programs"].get(n, {}).get(k))
                                      for k in ("ns_per_run", "runs_per_ack", "runs_per_seg", "ns_per_seg")}
                                  for n in names}
    ratio = paired(keys["gbps"])
    res = {
        "runs": runs, "summary": summary,
        "pairs": [{"pair": o["pair"], "old_gbps": o["gbps"], "new_gbps": n["gbps"],
                   "ratio": n["gbps"] / o["gbps"] if o["gbps"] else None} for o, n in zip(old, new)],
        "throughput_ratio_new_over_old": dict(ratio, target_min=TARGET_RATIO, verdict=verdict(ratio["ci"])),
        "added_bpf_ns_per_ack": paired(keys["bpf_ns_per_ack"], ratio=False),
        "added_bpf_ns_per_seg": paired(keys["bpf_ns_per_seg"], ratio=False),
        "added_path_ns_per_ack_skb": paired(keys["path_ns_per_ack_skb"], ratio=False),
        "added_path_p50_ns_per_ack_skb": paired(keys["path_p50_ns_per_ack_skb"], ratio=False),
        "added_host_kernel_ns_per_ack": paired(keys["host_kernel_ns_per_ack"], ratio=False),
        "ring_records_per_ack_beside_retransmits_closes_stalls": {
            c: {"max": max(r["ring_other_per_ack"] or 0 for r in runs[c]),
                "other_records_total": sum(r["ring"]["other"] for r in runs[c]),
                "acks_total": sum(r["acks"] + r["phase2"]["acks"] for r in runs[c]),
                "stall_events_total": sum(r["ring"]["stall_events"] for r in runs[c])} for c in CONFIGS},
    }
    return res


# ---- part 3: the transport's capacity (bench/ring_producer) ------------------------------------

def transport_part(a, problems):
    """transport_bench's one-shot observer run, old and new interleaved: each build's own
    ring_producer offering --producer-rate events/s (0: as fast as it can) for --producer-seconds
    into that build's observer ring; delivered/s is the pipeline's capacity when it is below
    what was offered."""
    runs = {c: [] for c in CONFIGS}
    with Lab(pair=False) as lab:
        ns = lab.netns("a")
        for i in range(a.rounds):
            for c in (CONFIGS if i % 2 == 0 else CONFIGS[::-1]):
                args = types.SimpleNamespace(producer=a.producers[c], seconds=a.producer_seconds)
                with tempfile.TemporaryDirectory(prefix="lossd-dc-") as tmp:
                    r = tb.run_observer(args, lab, ns, tmp, a.producer_rate, lossd=a.bins[c])
                r["round"] = i
                r["offered_per_s"] = round((r["producer"]["submitted"] + r["producer"]["lost"])
                                           / r["producer"]["seconds"])
                runs[c].append(r)
                log("transport round %d %s: delivered %d/s of %d/s offered, accounted %s" % (
                    i, c, r["delivered_per_s"], r["offered_per_s"], r["accounted"]))
                if not r["accounted"]:
                    problems.append("transport %s round %d: accounting does not hold: %s" % (c, i, r["identities"]))
    ratio = median_ci([n["delivered_per_s"] / o["delivered_per_s"] if o["delivered_per_s"] else None
                       for o, n in zip(runs["old"], runs["new"])])
    ratio["verdict"] = verdict(ratio["ci"])
    return {"producer_rate": a.producer_rate, "seconds": a.producer_seconds, "runs": runs,
            "summary": {c: {"delivered_per_s": median_ci([r["delivered_per_s"] for r in runs[c]]),
                            "offered_per_s": median_ci([r["offered_per_s"] for r in runs[c]]),
                            "lossd_cpu_us_per_event": median_ci([r["lossd_cpu_us_per_event"] for r in runs[c]])}
                        for c in CONFIGS},
            "delivered_ratio_new_over_old": ratio}


# ---- part 2 ----------------------------------------------------------------------------------

def events_part(a, problems):
    args = types.SimpleNamespace(seconds=a.event_seconds, streams=a.streams)
    kinds = ("observed", "burst")
    runs = {c: {k: [] for k in kinds} for c in CONFIGS}
    bstats = ob.BpfStats()
    try:
        with Lab() as lab:
            lab.run(lab.a, "ethtool", "-K", lab.IF_A, "tso", "off", "gso", "off")
            traffic.iperf_server(lab, lab.b, ob.PORT_FLOOD)
            for i in range(a.rounds):
                order = CONFIGS if i % 2 == 0 else CONFIGS[::-1]
                for c in order:
                    inj = Lossd(lab, lab.b, ["--iface", lab.IF_B, "--proto", "tcp", "--dport", str(ob.PORT_FLOOD),
                                             "--payload", "only", "--rate", a.loss, "--interval", "1h"],
                                lossd=a.bins[c])
                    try:
                        inj.wait_ready(120)
                        if i == 0 and c == order[0]:
                            traffic.iperf(lab, lab.a, lab.V4_B, ob.PORT_FLOOD, 1, a.streams)  # warm-up
                            lab.wait_idle(lab.a, port=ob.PORT_FLOOD, timeout=60, check=False)
                        for k in kinds:
                            r = ob.observed(lab, args, burst=(k == "burst"), lossd=a.bins[c])
                            r["round"] = i
                            runs[c][k].append(r)
                            if not r["identities_hold"]:
                                problems.append("events %s %s round %d: identities do not hold: %s"
                                                % (c, k, i, r["identities"]))
                            log("events round %d %s %s: %s" % (
                                i, c, k, "%d events/s delivered (generated %d/s), lost %d" % (
                                    r["delivered_events_per_s"], r["generated_events_per_s"],
                                    r["subscriber_lost"] + r["observer"]["ring_lost"]) if k == "observed"
                                else "drained %d events at %s/s" % (r["burst"]["drained_events"],
                                                                    r["burst"]["drain_events_per_s"])))
                    finally:
                        f = inj.stop()
                    runs[c]["observed"][-1]["injector_dropped_segs"] = f.get("dropped_segments")
    finally:
        bstats.close()

    def per(c, k, f):
        return median_ci([f(r) for r in runs[c][k]])

    def paired(k, f):
        return median_ci([f(n) / f(o) if f(o) else None for o, n in zip(runs["old"][k], runs["new"][k])])

    fs = {"delivered_events_per_s": ("observed", lambda r: r["delivered_events_per_s"]),
          "generated_events_per_s": ("observed", lambda r: r["generated_events_per_s"]),
          "kernel_retrans_segs_per_s": ("observed", lambda r: r["kernel"]["RetransSegs"] / r["secs"]),
          "obs_sockops_ns_per_run": ("observed",
                                        lambda r: r["bpf_programs"].get("obs_sockops", {}).get("ns_per_run")),
          "observer_cpu_us_per_event": ("observed", lambda r: r["observer_cpu_us_per_delivered_event"]),
          "burst_drain_events_per_s": ("burst", lambda r: r["burst"]["drain_events_per_s"])}
    summary = {c: {m: per(c, k, f) for m, (k, f) in fs.items()} for c in CONFIGS}
    ratios = {m: paired(k, f) for m, (k, f) in fs.items() if m in ("delivered_events_per_s", "burst_drain_events_per_s",
                                                                     "generated_events_per_s")}
    for m in ratios:
        ratios[m]["verdict"] = verdict(ratios[m]["ci"])
    lossless = {c: all(r["subscriber_lost"] == 0 and r["observer"]["ring_lost"] == 0 for r in runs[c]["observed"])
                for c in CONFIGS}
    ids = {c: all(r["identities_hold"] for k in kinds for r in runs[c][k]) for c in CONFIGS}
    return {"generator": "observer_bench.py part 2: TSO/GSO off on A, lossd --rate %s at B's ingress (each "
                         "configuration its own build), iperf3 -P %d for %d s" % (a.loss, a.streams, a.event_seconds),
            "bpf_stats": "enabled (BPF_ENABLE_STATS)" if bstats.error is None else "unavailable: %s" % bstats.error,
            "runs": runs, "summary": summary, "ratio_new_over_old": ratios,
            "observed_lossless": lossless, "identities_hold": ids,
            # the sustained rate is the generator's (delivered == generated when nothing is lost):
            # capacity shows in the burst's drain
            "unchanged": bool(ids["new"] and (lossless["new"] or not lossless["old"])
                              and ratios["burst_drain_events_per_s"]["verdict"] == "pass")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--lossd", default=os.path.join(here, "..", "build", "daemon", "lossd"), help="the new build")
    ap.add_argument("--old-lossd", default="/tmp/cost-old/build/daemon/lossd", help="the old build")
    ap.add_argument("--old-label", default="fcfc9bf", help="what the old build is (recorded)")
    ap.add_argument("--path-timer", default=None, help="bench/path_timer (default: beside --lossd's build tree)")
    ap.add_argument("--pairs", type=int, default=9)
    ap.add_argument("--seconds", type=int, default=3, help="iperf3 length of each phase of part 1")
    ap.add_argument("--rounds", type=int, default=4, help="rounds of part 2")
    ap.add_argument("--event-seconds", type=int, default=4)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--loss", default="30%")
    ap.add_argument("--skip-path", action="store_true", help="skip part 1")
    ap.add_argument("--skip-path-timer", action="store_true")
    ap.add_argument("--skip-events", action="store_true", help="skip part 2")
    ap.add_argument("--producer-rate", type=int, default=0, help="part 3: events/s offered (0: as fast as it can)")
    ap.add_argument("--producer-seconds", type=float, default=3)
    ap.add_argument("--skip-transport", action="store_true", help="skip part 3")
    a = parse_args(ap, lambda a: "--pairs must be >= 3" if a.pairs < 3 else
                   "--rounds must be >= 2" if a.rounds < 2 else
                   None if os.access(a.old_lossd, os.X_OK) else "no old lossd at %s" % a.old_lossd)
    a.old_lossd = os.path.abspath(a.old_lossd)
    a.bins = {"old": a.old_lossd, "new": a.lossd}
    a.producers = {c: os.path.join(os.path.dirname(os.path.dirname(a.bins[c])), "bench", "ring_producer")
                   for c in CONFIGS}
    a.timer_bin = a.path_timer or os.path.join(os.path.dirname(os.path.dirname(a.lossd)), "bench", "path_timer")
    stats = BpfStatsSysctl()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, f: (_ for _ in ()).throw(KeyboardInterrupt()))
    problems = []
    doc = {"benchmark": "diagnosis_cost",
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "command": " ".join([sys.executable] + sys.argv), "commit": git_describe(),
           "new": {"lossd": a.lossd, "binary": binary_id(a.lossd)},
           "old": {"lossd": a.old_lossd, "binary": binary_id(a.old_lossd), "label": a.old_label},
           "kernel": os.uname().release, "cpus": os.cpu_count(), "loadavg_1m_start": os.getloadavg()[0],
           "bpf_stats_enabled_original": stats.original, "pairs": a.pairs, "seconds": a.seconds,
           "units": {
               "bpf_ns_per_ack": "sum of run_time_ns of the observer's programs (obs_*, "
                                 "kernel.bpf_stats_enabled=1) / the sender's Tcp.InSegs (ACKs) in phase 2",
               "bpf_ns_per_seg": "the same / the sender's Tcp.OutSegs (data segments sent)",
               "path_ns_per_ack_skb": "bench/path_timer, A's e2ea netif_receive_skb -> tcp_probe in A: mean over "
                                      "the run's skbs shorter than 16.4 us; p50: their median",
               "host_kernel_ns_per_ack": "(system + softirq + irq) ns of all CPUs (/proc/stat) / ACKs, phase 1",
               "ring_other_per_ack": "ring records (ring_consumed + ring_lost) that are not retransmit events, "
                                     "flow closes or stall events, / ACKs of both phases",
               "added_*": "per pair new minus old; median over pairs",
               "ci": "order-statistic interval of the median (benchlib.median_ci), confidence ci_conf"}}
    try:
        if not a.skip_path:
            doc["path"] = path_part(a, stats, problems)
        if not a.skip_events:
            doc["events"] = events_part(a, problems)
        if not a.skip_transport:
            doc["transport"] = transport_part(a, problems)
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        stats.restore()
    doc["loadavg_1m_end"] = os.getloadavg()[0]
    target = {}
    if "path" in doc:
        p = doc["path"]
        target["throughput_ratio_verdict"] = p["throughput_ratio_new_over_old"]["verdict"]
        target["throughput_pass"] = target["throughput_ratio_verdict"] == "pass"
        rec = p["ring_records_per_ack_beside_retransmits_closes_stalls"]["new"]
        target["no_ring_records_per_ack_pass"] = rec["other_records_total"] == 0
    if "events" in doc:
        target["events_tcp_unchanged_pass"] = doc["events"]["unchanged"]
    if "transport" in doc:
        target["transport_capacity_verdict"] = doc["transport"]["delivered_ratio_new_over_old"]["verdict"]
        target["transport_capacity_pass"] = target["transport_capacity_verdict"] == "pass"
    target["pass"] = bool(target) and all(v for k, v in target.items() if k.endswith("_pass"))
    doc["target"] = target
    return report(rnd(doc, 4), problems)


if __name__ == "__main__":
    sys.exit(main())
