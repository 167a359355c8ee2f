#!/usr/bin/python3
"""End-to-end cost of lossd on a TCP flow over veth (docs/architecture.md#hook-choice).

Two network namespaces made for this run (tests/e2e/lab: A sends, B receives), a veth pair
between them, unpaced TCP iperf3 from sender to receiver. Configurations, run
in interleaved rounds (the order rotating from round to round):

  A  no injector
  B  lossd in the receiver namespace with a 0 % rule on the flow
     (--iface <receiver veth> --proto tcp --dport 5201 --rate 0%), default
     (auto) hook
  C  (reference, --no-iptables to skip) an iptables rule in the receiver
     namespace: -m statistic --mode random --probability 0 -j DROP on the flow

Prints JSON: each run's Gbit/s, medians, B/A (target >= 0.97) and C/A.
Traffic stays inside the two namespaces; they are removed on exit, also on
failure or SIGINT/SIGTERM. Needs root.

  bench/e2e_throughput.py --lossd build/daemon/lossd [--pairs 5] [--seconds 4]
"""
import argparse
import datetime
import os
import statistics
import sys

from benchlib import report, parse_args
from lab import traffic
from lab.netns import Lab

PORT = 5201
TARGET_B_OVER_A = 0.97
NICE = []  # ["nice", "-n", N] with --nice


def log(msg):
    print(f"e2e_throughput: {msg}", file=sys.stderr, flush=True)


IPT_RULE = ["INPUT", "-i", Lab.IF_B, "-p", "tcp", "--dport", str(PORT), "-m", "statistic",
            "--mode", "random", "--probability", "0", "-j", "DROP"]


def measure(lab, conf, args):
    if conf == "A":
        return iperf(lab, args.seconds)
    if conf == "B":
        d = lab.lossd(lab.b, ["--iface", lab.IF_B, "--proto", "tcp", "--dport", str(PORT), "--rate", "0%",
                              "--interval", "1h"])
        try:
            r = iperf(lab, args.seconds)
        finally:
            final = d.stop()
        r["hooks"] = d.hooks
        if final:
            r["matched_packets"] = final.get("matched_packets")  # skbs the hook saw match
            r["matched_segments"] = final.get("matched_segments")
            r["dropped_segments"] = final.get("dropped_segments")
            if r["matched_packets"]:
                r["segs_per_skb"] = round(r["matched_segments"] / r["matched_packets"], 1)
                r["skbs_per_s"] = round(r["matched_packets"] / args.seconds)
        return r
    if conf == "C":
        lab.run(lab.b, "iptables", "-A", *IPT_RULE)
        try:
            r = iperf(lab, args.seconds)
            out = lab.run(lab.b, "iptables", "-L", "INPUT", "-v", "-n", "-x").stdout
        finally:
            lab.run(lab.b, "iptables", "-D", *IPT_RULE, check=False)
        for line in out.splitlines():
            if "statistic" in line:
                r["rule_pkts_dropped"] = int(line.split()[0])
        return r
    raise ValueError(conf)


def iperf(lab, seconds):
    return traffic.iperf(lab, lab.a, lab.V4_B, PORT, seconds, prefix=NICE)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lossd", default=os.path.join(here, "..", "build", "daemon", "lossd"),
                    help="lossd binary")
    ap.add_argument("--pairs", type=int, default=5, help="interleaved rounds (>= 3)")
    ap.add_argument("--seconds", type=int, default=4, help="iperf3 run length")
    ap.add_argument("--no-iptables", action="store_true", help="skip the iptables reference C")
    ap.add_argument("--nice", type=int, default=0,
                    help="run iperf3 at this nice level (e.g. -10 on a busy shared machine)")
    args = parse_args(ap, lambda a: "--pairs must be >= 3" if a.pairs < 3 else None)
    if args.nice:
        NICE[:] = ["nice", "-n", str(args.nice)]
    configs = ["A", "B"] + ([] if args.no_iptables else ["C"])
    load_start = os.getloadavg()
    with Lab() as lab:
        traffic.iperf_server(lab, lab.b, PORT, prefix=NICE)
        log("warm-up run (not counted)")
        iperf(lab, 1)
        runs = {c: [] for c in configs}
        for i in range(args.pairs):
            order = configs[i % len(configs):] + configs[:i % len(configs)]
            for c in order:
                r = measure(lab, c, args)
                r["round"] = i
                runs[c].append(r)
                log(f"round {i} {c}: {r['gbps']} Gbit/s")

    med = {c: statistics.median(r["gbps"] for r in runs[c]) for c in configs}
    ratio_b = med["B"] / med["A"]
    # Ratio of each round's B to the same round's A, as a check on drift.
    per_round_b = [b["gbps"] / a["gbps"] for a, b in zip(runs["A"], runs["B"])]
    out = {
        "benchmark": "e2e_throughput",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "kernel": os.uname().release,
        "loadavg_1m_start_end": [load_start[0], os.getloadavg()[0]],
        "setup": {
            "path": f"A/{Lab.IF_A} ({Lab.V4_A}) -> B/{Lab.IF_B} ({Lab.V4_B}), veth (tests/e2e/lab)",
            "traffic": f"iperf3 TCP, unpaced, 1 stream, {args.seconds} s, port {PORT}, "
                       f"nice {args.nice}",
            "rounds": args.pairs,
            "A": "no injector",
            "B": f"lossd --iface {Lab.IF_B} --proto tcp --dport {PORT} --rate 0% (hook auto), "
                 "receiver namespace",
            "C": None if args.no_iptables else
                 "iptables -A " + " ".join(IPT_RULE) + " (receiver namespace)",
        },
        "runs": runs,
        "median_gbps": {c: round(v, 3) for c, v in med.items()},
        "ratio_B_over_A": round(ratio_b, 3),
        "per_round_B_over_A": [round(x, 3) for x in per_round_b],
        "median_per_round_B_over_A": round(statistics.median(per_round_b), 3),
        "target": {"B_over_A_min": TARGET_B_OVER_A, "pass": ratio_b >= TARGET_B_OVER_A},
    }
    if "C" in med:
        out["ratio_C_over_A"] = round(med["C"] / med["A"], 3)
    # A 0 % rule must have matched the flow and dropped nothing.
    problems = []
    for r in runs["B"]:
        if not r.get("matched_segments"):
            problems.append(f"round {r['round']}: lossd's rule matched nothing")
        if r.get("dropped_segments"):
            problems.append(f"round {r['round']}: lossd dropped {r['dropped_segs']} segments at 0%")
    return report(out, problems)


if __name__ == "__main__":
    sys.exit(main())
