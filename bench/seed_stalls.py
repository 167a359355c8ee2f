#!/usr/bin/python3
"""The seed's packet-analysis case (reference seed-experiments.md section 3; issue 13), reproduced
and diagnosed live by lossd: one command per case, each against a same-run baseline.

  nagle       requests in two writes (300 + 100 bytes; the second < MSS), answered only whole,
              without TCP_NODELAY (stalls of the peer's delayed ACK, 40 ms minimum on Linux)
              vs with TCP_NODELAY; request rate both ways
  tails       request/response (100-byte requests, 14,480-byte replies: 10 segments) with a
              rule dropping --tail-rate of the reply segments carrying PSH (the last of each
              write; per segment, on the server's egress) vs no rule: stalls named tlp / rto,
              linked to the rule's drops (StallEvent.caused_by)
  rwnd        bulk transfer through lab.DelayLab (+--rtt-ms) to a receiver with SO_RCVBUF
              28 KiB (the window ~32 KB) vs 1 MiB: throughput, the rwnd_limited share of busy
              time (Flow.limit_ns), the window (TraceFlow samples, and the kernel's ss)
  zerowindow  a receiver that stops reading for --pause seconds vs one that never pauses:
              zero_window stalls, probes (StallEvent.acks / backoff) against the kernel's
              TcpExt.TCPWinProbe (sender) and TCPToZeroWindowAdv / TCPFromZeroWindowAdv
              (receiver)

The workloads and what is read from lossd (WatchStalls, WatchFlows' closing summaries,
TraceFlow) are tests/e2e/lab/stalls.py's, the same the e2e suite tests/e2e/diagnosis/ asserts
on. lossd runs as the daemon in the namespace of the data's sender. Treatment and baseline
alternate, --rounds times. With --plots DIR, the first treatment run of each case is drawn
from its TraceFlow data as DIR/stall-<case>.png (sequence vs time with stalls shaded by
cause, retransmissions and the rule's drops marked; cwnd and the peer's window below).

Prints one JSON document; exit 1 when a sanity check failed (they are the issue's statements,
e.g. nagle_delayed_ack >= 90 % of the stall time, not speed targets).
Usage: bench/seed_stalls.py [--case nagle|tails|rwnd|zerowindow|all] [--rounds 3] [--plots DIR]
                            [--rtt-ms 20] [--tail-rate 0.1] [--pause 3]      (root)
"""
import argparse
import datetime
import os
import sys

from benchlib import binary_id, git_describe, logger, med, parse_args, report

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CASES = ("nagle", "tails", "rwnd", "zerowindow")
log = logger("seed_stalls")
COLORS = {"nagle_delayed_ack": "tab:orange", "tlp": "tab:purple", "rto": "tab:red", "zero_window": "tab:gray",
          "rwnd_limited": "tab:blue", "fast_recovery": "tab:green", "cwnd_limited": "tab:olive",
          "app_limited": "tab:cyan", "sndbuf_limited": "tab:brown", "unknown": "black"}


def plot(case, path, title, xlim_s=None):
    """The time-sequence picture of case's trace (TraceFlow): what an analyst draws from a
    packet capture, from lossd's own data."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from lab import stalls
    samples = case.samples()
    if not samples:
        return None
    t0 = samples[0].time_mono_ns
    base = samples[0].snd_una

    def rel(seq):  # bytes from the first sample's snd_una (32-bit wrap)
        d = (seq - base) & 0xFFFFFFFF
        return d - (1 << 32) if d >= 1 << 31 else d

    def ts(ns):
        return (ns - t0) / 1e9

    fig, (ax, bx) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]})
    t = [ts(s.time_mono_ns) for s in samples]
    ax.step(t, [rel(s.ack_seq) / 1e3 for s in samples], where="post", label="acknowledged (ACK)", lw=1)
    ax.plot(t, [rel(s.snd_nxt) / 1e3 for s in samples], ".", ms=2, label="snd_nxt (sent)", color="tab:green")
    ax.plot(t, [rel(s.write_seq) / 1e3 for s in samples], lw=0.6, ls="--", label="written", color="0.5")
    seen = set()
    for m in case.trace:
        if m.HasField("stall"):
            s = m.stall
            name = stalls.cause_name(s.cause)
            ax.axvspan(ts(s.start_mono_ns), ts(s.start_mono_ns + s.duration_ns), color=COLORS.get(name, "black"),
                       alpha=0.25, lw=0, label=None if name in seen else "stall: " + name)
            seen.add(name)
    rx = [(ts(m.retransmit.time_mono_ns), rel(m.retransmit.seq) / 1e3) for m in case.trace if m.HasField("retransmit")]
    if rx:
        ax.plot(*zip(*rx), "x", color="tab:red", ms=6, label="retransmission")
    dr = [(ts(m.drop.drop.time_mono_ns), rel(m.drop.drop.seq) / 1e3) for m in case.trace if m.HasField("drop")]
    if dr:
        ax.plot(*zip(*dr), "v", color="black", ms=5, label="dropped by the rule")
    ax.set_ylabel("sequence (KB from start)")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    bx.step(t, [s.cwnd for s in samples], where="post", label="cwnd (segments)", lw=1)
    bx.step(t, [s.in_flight for s in samples], where="post", label="in flight (segments)", lw=0.8)
    bx2 = bx.twinx()
    bx2.step(t, [s.snd_wnd / 1e3 for s in samples], where="post", color="tab:gray", lw=1, label="peer window (KB)")
    bx2.set_ylabel("window (KB)")
    bx.set_ylabel("segments")
    bx.set_xlabel("time (s)")
    bx.legend(loc="upper left", fontsize=8)
    bx2.legend(loc="upper right", fontsize=8)
    bx.grid(alpha=0.3)
    if xlim_s:
        ax.set_xlim(*xlim_s)
        lo, hi = xlim_s
        vis = [rel(s.ack_seq) / 1e3 for s, x in zip(samples, t) if lo <= x <= hi]
        vis += [rel(s.write_seq) / 1e3 for s, x in zip(samples, t) if lo <= x <= hi]
        if vis:
            ax.set_ylim(min(vis) - 1, max(vis) + 1)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def summary(runs, key):
    return med([key(r) for r in runs])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lossd", default=os.path.join(REPO, "build", "daemon", "lossd"))
    ap.add_argument("--stubs", default=os.path.join(REPO, "build", "python"))
    ap.add_argument("--case", default="all", choices=CASES + ("all",))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--plots", default=None, help="write the trace plots here (PNG)")
    ap.add_argument("--rtt-ms", type=float, default=20.0, help="rwnd: added round trip")
    ap.add_argument("--tail-rate", type=float, default=0.1, help="tails: fraction of PSH segments dropped")
    ap.add_argument("--pause", type=float, default=3.0, help="zerowindow: seconds the receiver stops reading")
    ap.add_argument("--seconds", type=float, default=3.0, help="nagle: seconds per run; rwnd: 5/3 of it")
    args = parse_args(ap, check=lambda a: "--rounds: at least 1" if a.rounds < 1 else None)
    from lab import config, stalls
    config.set_paths(stubs=args.stubs)
    from lab.daemon import Daemon
    from lab.netns import DelayLab, Lab
    cases = CASES if args.case == "all" else (args.case,)
    if args.plots:
        os.makedirs(args.plots, exist_ok=True)
    out = {"benchmark": "seed_stalls", "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "kernel": os.uname().release, "command": " ".join(sys.argv), "git_at_run": git_describe(),
           "lossd_binary": binary_id(args.lossd), "rounds": args.rounds, "cases": {}}
    problems = []

    def rounds(name, lab, d, treat, baseline, plot_args):
        runs = {"treatment": [], "baseline": []}
        for i in range(args.rounds):
            for kind, fn in (("treatment", treat), ("baseline", baseline)) if i % 2 == 0 else \
                    (("baseline", baseline), ("treatment", treat)):
                c = fn(i == 0 and kind == "treatment")
                log("%s %s round %d: %s" % (name, kind, i + 1, {k: v for k, v in c.numbers().items()
                                                                 if k in ("stalls", "stall_ms_by_cause", "dominant")}))
                runs[kind].append(c)
                if args.plots and i == 0 and kind == "treatment":
                    p = plot(c, os.path.join(args.plots, "stall-%s.png" % name), *plot_args)
                    out.setdefault("plots", {})[name] = p
        return runs

    def errors_of(runs):
        return sorted({"%s: %s" % kv for k in runs for c in runs[k] for kv in c.errors.items()})

    if set(cases) & {"nagle", "tails", "zerowindow"}:
        lab = Lab()
        try:
            d = Daemon(lab, lab.a)
            if "nagle" in cases:
                runs = rounds("nagle", lab, d,
                              lambda tr: stalls.nagle(lab, d, nodelay=False, seconds=args.seconds, trace=tr),
                              lambda tr: stalls.nagle(lab, d, nodelay=True, seconds=args.seconds, trace=False),
                              ("Nagle + delayed ACK: requests of 300 + 100 bytes, no TCP_NODELAY", (0, 0.5)))
                t, b = runs["treatment"], runs["baseline"]
                doc = {"treatment": "no TCP_NODELAY", "baseline": "TCP_NODELAY",
                       "requests_per_s": summary(t, lambda c: c.workload["requests_per_s"]),
                       "baseline_requests_per_s": summary(b, lambda c: c.workload["requests_per_s"]),
                       "nagle_share_of_stall_time": summary(t, lambda c: c.share("nagle_delayed_ack")),
                       "stalls_per_request": summary(t, lambda c: len(c.stalls) / max(1, c.workload["requests"])),
                       "stall_ms_median": summary(t, lambda c: c.numbers()["stall_ms_median"]),
                       "receiver_delayed_acks": [c.receiver["TcpExt.DelayedACKs"] for c in t],
                       "baseline_stall_ms": [sum(c.stall_ns_by_cause().values()) / 1e6 for c in b],
                       "runs": {k: [c.numbers() for c in v] for k, v in runs.items()},
                       "stream_errors": errors_of(runs)}
                doc["rate_ratio_baseline_to_treatment"] = (doc["baseline_requests_per_s"] / doc["requests_per_s"]
                                                           if doc["requests_per_s"] else None)
                out["cases"]["nagle"] = doc
                if (doc["nagle_share_of_stall_time"] or 0) < 0.9:
                    problems.append("nagle: nagle_delayed_ack share %s < 0.9" % doc["nagle_share_of_stall_time"])
            if "tails" in cases:
                runs = rounds("tails", lab, d,
                              lambda tr: stalls.tails(lab, d, rate=args.tail_rate, trace=tr),
                              lambda tr: stalls.tails(lab, d, rate=0, trace=False),
                              ("Lost block tails: %g %% of the replies' PSH segments dropped" % (100 * args.tail_rate),))
                t, b = runs["treatment"], runs["baseline"]

                def linked(c):
                    return sum(1 for s in c.stalls if s.caused_by.rule_id == c.extra["rule_id"])
                doc = {"treatment": "rule: %g of PSH reply segments" % args.tail_rate, "baseline": "no rule",
                       "requests_per_s": summary(t, lambda c: c.workload["requests_per_s"]),
                       "baseline_requests_per_s": summary(b, lambda c: c.workload["requests_per_s"]),
                       "tlp_rto_share_of_stall_time": summary(t, lambda c: c.share("tlp", "rto")),
                       "stalls": [len(c.stalls) for c in t],
                       "stalls_linked_to_rule": [linked(c) for c in t],
                       "rule_dropped_segments": [c.extra["rule_dropped_segments"] for c in t],
                       "effect_stalls_caused": [c.extra["effect_stalls_caused"] for c in t],
                       "stall_ms_by_cause": [c.numbers()["stall_ms_by_cause"] for c in t],
                       "flow_stall_ms": [c.numbers()["flow_stall_ms"] for c in t],
                       "sender_mib": [c.numbers()["sender_mib"] for c in t],
                       "baseline_stalls": [len(c.stalls) for c in b],
                       "runs": {k: [c.numbers() for c in v] for k, v in runs.items()},
                       "stream_errors": errors_of(runs)}
                out["cases"]["tails"] = doc
                if (doc["tlp_rto_share_of_stall_time"] or 0) < 0.9:
                    problems.append("tails: tlp+rto share %s < 0.9" % doc["tlp_rto_share_of_stall_time"])
            if "zerowindow" in cases:
                runs = rounds("zerowindow", lab, d,
                              lambda tr: stalls.zero_window(lab, d, pause_secs=args.pause, trace=tr),
                              lambda tr: stalls.zero_window(lab, d, pause_secs=0, trace=False),
                              ("A receiver that stops reading for %g s" % args.pause,))
                t, b = runs["treatment"], runs["baseline"]
                zw = [[s for s in c.stalls if stalls.cause_name(s.cause) == "zero_window"] for c in t]
                doc = {"treatment": "receiver pauses %g s" % args.pause, "baseline": "receiver reads on",
                       "secs": summary(t, lambda c: c.workload["secs"]),
                       "baseline_secs": summary(b, lambda c: c.workload["secs"]),
                       "zero_window_stalls": [[{"ms": s.duration_ns / 1e6, "acks": s.acks, "backoff": s.backoff,
                                                "min_window": s.min_window} for s in z] for z in zw],
                       "sender_TCPWinProbe": [c.sender["TcpExt.TCPWinProbe"] for c in t],
                       "receiver_TCPToZeroWindowAdv": [c.receiver["TcpExt.TCPToZeroWindowAdv"] for c in t],
                       "receiver_TCPFromZeroWindowAdv": [c.receiver["TcpExt.TCPFromZeroWindowAdv"] for c in t],
                       "baseline_zero_window_stalls": [sum(1 for s in c.stalls if stalls.cause_name(s.cause)
                                                           == "zero_window") for c in b],
                       "runs": {k: [c.numbers() for c in v] for k, v in runs.items()},
                       "stream_errors": errors_of(runs)}
                out["cases"]["zerowindow"] = doc
                if any(len(z) != 1 for z in zw):
                    problems.append("zerowindow: not one zero_window stall per pause: %s" % [len(z) for z in zw])
            d.term(60)
        finally:
            lab.close()
    if "rwnd" in cases:
        lab = DelayLab(args.rtt_ms)
        try:
            d = Daemon(lab, lab.c)
            secs = args.seconds * 5 / 3
            runs = rounds("rwnd", lab, d,
                          lambda tr: stalls.rwnd(lab, d, rcvbuf=28672, seconds=secs, trace=tr),
                          lambda tr: stalls.rwnd(lab, d, rcvbuf=1 << 20, seconds=secs, trace=False),
                          ("Receiver window: SO_RCVBUF 28 KiB, RTT +%g ms, CUBIC" % args.rtt_ms,))
            t, b = runs["treatment"], runs["baseline"]

            def share(c):
                lim = c.limits()
                return lim.get("rwnd_limited", 0) / lim["busy"] if lim.get("busy") else None

            def trace_wnd(c):
                w = sorted(s.snd_wnd for s in c.samples())
                return w[len(w) // 2] if w else None
            doc = {"treatment": "SO_RCVBUF 28 KiB", "baseline": "SO_RCVBUF 1 MiB", "rtt_added_ms": args.rtt_ms,
                   "mbit": summary(t, lambda c: c.workload["mbit"]),
                   "baseline_mbit": summary(b, lambda c: c.workload["mbit"]),
                   "rwnd_share": summary(t, share), "baseline_rwnd_share": summary(b, share),
                   "dominant": [c.numbers()["dominant"] for c in t],
                   "kernel_snd_wnd": [c.extra["snd_wnd"] for c in t], "trace_snd_wnd_median": [trace_wnd(c) for c in t],
                   "kernel_ss": [c.extra["ss"] for c in t] + [c.extra["ss"] for c in b],
                   "min_rtt_us": [[f.min_rtt_us for f in c.flows] for c in t],
                   "runs": {k: [c.numbers() for c in v] for k, v in runs.items()},
                   "stream_errors": errors_of(runs)}
            if doc["mbit"] and doc["baseline_mbit"]:
                doc["throughput_ratio_baseline_to_treatment"] = doc["baseline_mbit"] / doc["mbit"]
            out["cases"]["rwnd"] = doc
            if (doc["rwnd_share"] or 0) < 0.9:
                problems.append("rwnd: rwnd_limited share %s < 0.9" % doc["rwnd_share"])
            d.term(60)
            out["delay_line"] = lab.delay_report()
        finally:
            lab.close()
    for name, c in out["cases"].items():
        if c["stream_errors"]:
            problems.append("%s: lossd's streams failed: %s" % (name, c["stream_errors"]))
    return report(out, problems)


if __name__ == "__main__":
    sys.exit(main())
