#!/usr/bin/python3
"""The injector's cost at 0 % on a real path, measured so that noise cannot hide it.

Two paths, each in namespaces made for this run (tests/e2e/lab; addresses from the
documentation ranges, inside those namespaces only):

  router  client c0 192.0.2.1/25 -- r0 (router r) r1 -- s0 198.51.100.1/25 server;
          the injector acts on what r forwards from r0 (lossd: tcx ingress on r0)
  veth    sender e2ea 192.0.2.1 -- e2eb 192.0.2.2 receiver (the lab's pair); the injector
          acts on what the receiver gets on e2eb (lossd: tcx ingress on e2eb)

Four configurations, each at 0 % on the iperf3 flow (TCP dport 5201):

  none      nothing loaded
  lossd     one-shot `lossd --iface IF --proto tcp --dport 5201 --rate 0%` (default hook)
  iptables  -A FORWARD|INPUT -i IF -p tcp --dport 5201 -m statistic --mode random
            --probability 0 -j DROP
  nft       a forward|input chain: iifname IF tcp dport 5201 numgen random mod 1000000 < 0 drop

Per run: one unpaced iperf3 flow for --seconds. Measured:

  * lossd's own run time: kernel.bpf_stats_enabled=1 during lossd's runs only (set 0 then 1
    before each, so stats restart; the original setting restored after each run, on error and
    on SIGINT/SIGTERM too); run_time_ns / run_cnt of each lossd program that ran (fdinfo),
    i.e. ns per skb at the hook. The stats' own two clock reads per run are in the host CPU
    of lossd's runs, not in run_time_ns (this overstates lossd's host CPU a little).
  * the host's CPU per packet: system + softirq (+ irq) time of all CPUs from /proc/stat over
    the run, divided by the packets moved: skbs received on IF (link rx_packets, what a hook
    program runs on; GRO/GSO skbs of many segments) and wire segments (estimated: IF's rx
    bytes / 1514).
    The machine is shared, so /proc/stat also carries other work: that is the noise the
    interleaving and the intervals are for. iptables' and nft's per-rule cost is not in any
    BPF statistic: they are compared through this host CPU per packet only.
  * throughput (Gbit/s) and its ratio to 'none' in the same round.

Rounds are interleaved (every configuration of both paths once per round, the order rotating
round to round). Reported per (path, configuration): medians with a distribution-free
order-statistic confidence interval of the median (>= 95 % where the number of rounds allows,
the exact confidence given), for the per-round paired differences to 'none' as well.

Targets (issue 11): on both paths, lossd's added cost per packet at 0 % below both peers' (added
host CPU per skb, the same measure for all three; lossd's BPF run time beside it) and lossd's
BPF run time below 1 % of the host's CPU per packet.

  bench/path_cost.py --lossd build/daemon/lossd [--rounds 7] [--seconds 3] [--paths router,veth]
  (root; JSON on stdout; PYTHONPATH=tests/e2e:client/python, as bench/run_all.sh sets it)
"""
import argparse
import datetime
import json
import math
import os
import signal
import statistics
import sys

from benchlib import binary_id, git_describe, logger, report, parse_args
from lab import traffic
from lab.netns import Lab, RouterLab
from lab.stats import fdinfo

PORT = 5201
CONFIGS = ("none", "lossd", "iptables", "nft")
STATS_SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"
log = logger("path_cost")


# ---- kernel.bpf_stats_enabled: on for lossd's runs only, always restored -----------------

class BpfStatsSysctl:
    def __init__(self):
        with open(STATS_SYSCTL) as f:
            self.original = f.read().strip()

    def _write(self, v):
        with open(STATS_SYSCTL, "w") as f:
            f.write(v)

    def enable_fresh(self):
        self._write("0")
        self._write("1")

    def restore(self):
        self._write(self.original)


# ---- topologies ---------------------------------------------------------------------------

class Router(RouterLab):
    """client c -- r (router) -- server s; the injector on r, interface r0."""
    name, iface, chain, hook = "router", "r0", "FORWARD", "forward"

    def __init__(self):
        super().__init__()
        self.tx, self.rx, self.at, self.dst = self.c, self.s, self.r, self.S_IP


class Veth(Lab):
    """sender a -- receiver b; the injector on b, interface e2eb."""
    name, iface, chain, hook = "veth", Lab.IF_B, "INPUT", "input"

    def __init__(self):
        super().__init__(pair=True)
        self.tx, self.rx, self.at, self.dst = self.a, self.b, self.b, Lab.V4_B


class Injector:
    """One configuration loaded on a topology; stop() -> lossd's program stats, or None."""

    def __init__(self, topo, conf, stats):
        self.t, self.conf, self.stats, self.d = topo, conf, stats, None
        self.prog0 = {}
        if conf == "lossd":
            stats.enable_fresh()
            self.d = topo.lossd(topo.at, ["--iface", topo.iface, "--proto", "tcp", "--dport", str(PORT),
                                          "--rate", "0%", "--interval", "1h"])
            self.prog0 = self.progs()
        elif conf == "iptables":
            topo.run(topo.at, "iptables", "-w", "-A", topo.chain, "-i", topo.iface, "-p", "tcp", "--dport",
                     str(PORT), "-m", "statistic", "--mode", "random", "--probability", "0", "-j", "DROP")
        elif conf == "nft":
            script = ("table inet lossd_peer {\n chain c {\n  type filter hook %s priority 0;\n"
                      "  iifname \"%s\" tcp dport %d numgen random mod 1000000 < 0 drop\n }\n}\n"
                      % (topo.hook, topo.iface, PORT))
            topo.run(topo.at, "nft", "-f", "-", input=script)

    def progs(self):
        return {int(kv["prog_id"]): (int(kv.get("run_time_ns", 0)), int(kv.get("run_cnt", 0)))
                for kv in fdinfo(self.d.pid) if "prog_id" in kv and "run_cnt" in kv}

    def stop(self):
        out = None
        try:
            if self.conf == "lossd":
                p1 = self.progs()
                ran = {i: (v[0] - self.prog0.get(i, (0, 0))[0], v[1] - self.prog0.get(i, (0, 0))[1])
                       for i, v in p1.items()}
                ran = {i: v for i, v in ran.items() if v[1] > 0}
                final = self.d.stop()
                out = {"run_time_ns": sum(v[0] for v in ran.values()), "run_cnt": sum(v[1] for v in ran.values()),
                       "progs_ran": len(ran), "hooks": self.d.ready.get("hooks"),
                       "matched_pkts": final.get("matched_pkts"), "matched_segs": final.get("matched_segs"),
                       "dropped_segs": final.get("dropped_segs")}
            elif self.conf == "iptables":
                self.t.run(self.t.at, "iptables", "-w", "-F", self.t.chain)
            elif self.conf == "nft":
                self.t.run(self.t.at, "nft", "delete", "table", "inet", "lossd_peer")
        finally:
            if self.conf == "lossd":
                self.stats.restore()
        return out


# ---- measurement ----------------------------------------------------------------------------

def proc_stat():
    """Jiffies of all CPUs: user nice system idle iowait irq softirq steal."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return dict(zip(("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"), v))


WIRE_FRAME = 1514  # bytes of a full-sized TCP segment on the wire (MTU 1500 + Ethernet)


def link(topo):
    """rx packets (skbs: what a hook runs on) and bytes of the injector's interface."""
    j = json.loads(topo.run(topo.at, "ip", "-s", "-j", "link", "show", "dev", topo.iface).stdout)[0]
    rx = j["stats64"]["rx"]
    return {"packets": rx["packets"], "bytes": rx["bytes"]}


def one_run(topo, conf, secs, stats):
    hz = os.sysconf("SC_CLK_TCK")
    inj = Injector(topo, conf, stats)
    try:
        l0 = link(topo)
        c0 = proc_stat()
        r = traffic.iperf(topo, topo.tx, topo.dst, PORT, secs)
        c1 = proc_stat()
        l1 = link(topo)
    finally:
        bpf = inj.stop()
    cpu = {k: (c1[k] - c0[k]) * 1e9 / hz for k in c0}  # ns of CPU, all CPUs
    skbs = l1["packets"] - l0["packets"]
    segs = (l1["bytes"] - l0["bytes"]) / WIRE_FRAME  # estimate: full-sized segments
    kern = cpu["system"] + cpu["softirq"] + cpu["irq"]
    run = {"gbps": r["gbps"], "retransmits": r["retransmits"], "skbs": skbs, "segs": segs,
           "cpu_ns": {k: round(v) for k, v in cpu.items()},
           "host_ns_per_skb": kern / skbs if skbs else None,
           "host_ns_per_seg": kern / segs if segs else None,
           "host_all_busy_ns_per_skb": (kern + cpu["user"] + cpu["nice"]) / skbs if skbs else None}
    if bpf:
        run["bpf"] = bpf
        run["bpf_ns_per_run"] = bpf["run_time_ns"] / bpf["run_cnt"] if bpf["run_cnt"] else None
        # lossd's programs' share of the host's kernel CPU during the run
        run["bpf_share_of_host_cpu"] = bpf["run_time_ns"] / kern if kern else None
        run["bpf_runs_per_skb"] = bpf["run_cnt"] / skbs if skbs else None
    return run


# ---- statistics -------------------------------------------------------------------------------

def median_ci(xs, conf=0.95):
    """Median and a distribution-free interval [x_(k), x_(n+1-k)] for it, the widest k whose
    coverage 1 - 2 P(Bin(n, 1/2) < k) is still >= conf (k = 1 if none is: min..max)."""
    xs = sorted(x for x in xs if x is not None)
    n = len(xs)
    if not n:
        return {"median": None, "ci": None, "ci_conf": None, "n": 0}
    cdf = lambda k: sum(math.comb(n, i) for i in range(k)) / 2 ** n  # P(X < k)
    k = 1
    while k + 1 <= n // 2 and 1 - 2 * cdf(k + 1) >= conf:
        k += 1
    return {"median": statistics.median(xs), "ci": [xs[k - 1], xs[n - k]], "ci_conf": round(1 - 2 * cdf(k), 4),
            "n": n}


def rnd(d, nd=3):
    if isinstance(d, dict):
        return {k: rnd(v, nd) for k, v in d.items()}
    if isinstance(d, list):
        return [rnd(v, nd) for v in d]
    if isinstance(d, float):
        return round(d, nd)
    return d


def summarise(runs):
    """runs: {conf: [run per round]} of one path."""
    out = {}
    base = runs["none"]
    for conf, rs in runs.items():
        s = {"gbps": median_ci([r["gbps"] for r in rs]),
             "host_ns_per_skb": median_ci([r["host_ns_per_skb"] for r in rs]),
             "host_ns_per_seg": median_ci([r["host_ns_per_seg"] for r in rs]),
             "segs_per_skb": median_ci([r["segs"] / r["skbs"] if r["skbs"] else None for r in rs])}
        if conf != "none":
            s["gbps_ratio_to_none"] = median_ci([r["gbps"] / b["gbps"] for r, b in zip(rs, base)])
            s["added_host_ns_per_skb"] = median_ci(
                [r["host_ns_per_skb"] - b["host_ns_per_skb"] for r, b in zip(rs, base)])
            s["added_host_ns_per_seg"] = median_ci(
                [r["host_ns_per_seg"] - b["host_ns_per_seg"] for r, b in zip(rs, base)])
        if conf == "lossd":
            s["bpf_ns_per_run"] = median_ci([r.get("bpf_ns_per_run") for r in rs])
            s["bpf_ns_per_seg"] = median_ci([r["bpf"]["run_time_ns"] / r["segs"] if r.get("bpf") and r["segs"]
                                             else None for r in rs])
            s["bpf_share_of_host_cpu_pct"] = median_ci(
                [100 * r["bpf_share_of_host_cpu"] if r.get("bpf_share_of_host_cpu") is not None else None
                 for r in rs])
            s["bpf_runs_per_skb"] = median_ci([r.get("bpf_runs_per_skb") for r in rs])
        out[conf] = rnd(s)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lossd", default=os.path.join(os.path.dirname(__file__), "..", "build", "daemon", "lossd"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--paths", default="router,veth")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    a = parse_args(ap)
    confs = a.configs.split(",")
    if confs[0] != "none":
        confs = ["none"] + [c for c in confs if c != "none"]
    stats = BpfStatsSysctl()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, f: (_ for _ in ()).throw(KeyboardInterrupt()))
    topos, problems = {}, []
    runs = {}
    load0 = os.getloadavg()[0]
    try:
        for p in a.paths.split(","):
            topos[p] = Router() if p == "router" else Veth()
            t = topos[p]
            t.srv = traffic.iperf_server(t, t.rx, PORT, bind=t.dst)
            traffic.iperf(t, t.tx, t.dst, PORT, 1)  # warm-up
            runs[p] = {c: [] for c in confs}
        order = [(p, c) for p in topos for c in confs]
        for i in range(a.rounds):
            k = (i * 3) % len(order)
            for p, c in order[k:] + order[:k]:
                r = one_run(topos[p], c, a.seconds, stats)
                r["round"] = i
                runs[p][c].append(r)
                log("round %d %-6s %-8s %6.2f Gbit/s  %7.0f host ns/skb%s" % (
                    i, p, c, r["gbps"], r["host_ns_per_skb"] or 0,
                    "  lossd %.1f ns/run (%s runs)" % (r["bpf_ns_per_run"], r["bpf"]["run_cnt"])
                    if r.get("bpf_ns_per_run") else ""))
                if c == "lossd" and r.get("bpf", {}).get("dropped_segs"):
                    problems.append("%s round %d: lossd dropped %s at 0%%" % (p, i, r["bpf"]["dropped_segs"]))
                if c == "lossd" and not r.get("bpf", {}).get("matched_pkts"):
                    problems.append("%s round %d: lossd's rule matched nothing" % (p, i))
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        try:
            stats.restore()
        finally:
            for t in topos.values():
                t.close()

    summary = {p: summarise(r) for p, r in runs.items()}
    targets = {}
    for p, s in summary.items():
        if "lossd" not in s:
            continue
        lo = s["lossd"]
        peers = [c for c in ("iptables", "nft") if c in s]
        la = lo["added_host_ns_per_skb"]["median"]
        targets[p] = {
            "lossd_added_host_ns_per_skb_below_peers": all(la < s[c]["added_host_ns_per_skb"]["median"] for c in peers),
            "lossd_bpf_ns_per_skb_below_peers_added_host_ns": all(
                lo["bpf_ns_per_run"]["median"] < s[c]["added_host_ns_per_skb"]["median"] for c in peers),
            "lossd_bpf_share_below_1pct": lo["bpf_share_of_host_cpu_pct"]["median"] < 1.0,
            "lossd_bpf_share_ci_upper_below_1pct": lo["bpf_share_of_host_cpu_pct"]["ci"][1] < 1.0,
        }
    doc = {"benchmark": "path_cost", "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
           "command": " ".join(sys.argv), "commit": git_describe(), "lossd": binary_id(a.lossd),
           "kernel": os.uname().release, "cpus": os.cpu_count(), "loadavg_1m_start_end": [load0, os.getloadavg()[0]],
           "bpf_stats_enabled_original": stats.original, "rounds": a.rounds, "seconds": a.seconds,
           "port": PORT, "units": {
               "host_ns_per_skb": "(system + softirq + irq) ns of all CPUs from /proc/stat / skbs received on the "
                                  "injector's interface (link rx_packets)",
               "host_ns_per_seg": "the same / wire segments, estimated as rx bytes of the interface / 1514",
               "bpf_ns_per_run": "lossd's programs: run_time_ns / run_cnt (kernel.bpf_stats_enabled=1), per skb",
               "bpf_share_of_host_cpu_pct": "lossd's run_time_ns / the host's (system + softirq + irq) ns, %",
               "added_*": "per round: configuration minus 'none' of the same round; median over rounds",
               "ci": "order-statistic interval of the median, confidence ci_conf"},
           "summary": summary, "target": {"pass": bool(targets) and all(all(v.values()) for v in targets.values()),
                                          **targets},
           "runs": runs}
    return report(rnd(doc, 4), problems)


if __name__ == "__main__":
    sys.exit(main())
