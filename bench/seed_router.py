#!/usr/bin/python3
"""The seed's first experiment, side by side with the two peers: a dropper on a router.

Topology (three fresh namespaces, addresses from the documentation ranges only):

    client  c0 192.0.2.1/25 ----- r0 192.0.2.126/25  router  r1 198.51.100.126/25 ----- s0 198.51.100.1/25  server

The dropper acts on the router, on what it forwards from the client to the server port
(TCP dport 5401 for the request/response runs, UDP dport 5402 for the UDP run):

  none      nothing loaded
  lossd     one-shot `lossd --iface r0 --proto P --dport D --rate X` in the router (tcx ingress)
  iptables  iptables -A FORWARD -i r0 -p P --dport D -m statistic --mode random
            --probability X -j DROP  (a counting rule before it gives the matched packets)
  nft       nft ... iifname r0 P dport D numgen random mod 1000000 < X*1e6 counter drop
            (a counter rule before it gives the matched packets)

TCP: request/response with 1,448-byte requests and replies (tests/e2e/lab/tcpflow.py rr, one
connection), --requests per run (default 20,000; the seed used 100,000: give
--requests 100000 for the full length), at the seed's rates: 0, 0.005, 0.01, 0.02, 0.04,
0.06, 0.08 %. Every (tool, rate) runs once per round; --rounds rounds, the order
rotating each round; 'none' runs in every round as the same-run baseline. Reported per
(tool, rate): median requests/s, its ratio to the median of 'none', measured loss
(dropped / matched packets, summed over rounds) with its 99.9 % Wilson interval, and
whether the dropped count lies in the 99.9 % binomial interval of the configured rate.

Bulk TCP at 0 %: one unpaced iperf3 flow client -> server through the router (port 5403,
--bulk-seconds, --bulk-rounds interleaved rounds of none/lossd/iptables/nft at 0 %): the
dropper's own cost, which the request/response runs (paced by a Python client at ~14,000
requests/s) cannot show. Reported: median Gbit/s and its ratio to 'none'.

UDP: --udp-count datagrams (default 100,000) client -> server at --udp-pps, with each
tool at 0 %: datagrams lost (sent - received), which must be exactly 0.

Targets (issue: loss experiments): at 0 % lossd's bulk throughput ratio >= 0.98 and above
both peers';
UDP at 0 %: 0 lost; every lossd rate inside the 99.9 % binomial interval.

Usage: bench/seed_router.py [--requests N] [--rounds R] [--json-only]   (root; JSON on stdout)
"""
import argparse
import datetime
import json
import os
import signal
import statistics
import sys

from benchlib import logger, parse_args
from lab import traffic
from lab.netns import RouterLab
from lab.stats import binom_interval
from lossd_client.units import wilson_interval  # stdlib only; no stubs needed

HERE = os.path.dirname(os.path.abspath(__file__))
RATES = (0.0, 0.00005, 0.0001, 0.0002, 0.0004, 0.0006, 0.0008)
TCP_PORT, UDP_PORT, BULK_PORT = 5401, 5402, 5403
log = logger("seed_router")
S_IP = RouterLab.S_IP


class Dropper:
    """One tool at one rate in the router; counts() -> (matched, dropped) packets."""

    def __init__(self, topo, tool, rate, proto, port):
        self.t, self.tool, self.proto, self.port = topo, tool, proto, port
        self.p = None
        if tool == "lossd":
            self.p = topo.lossd(topo.r, ["--iface", "r0", "--proto", proto, "--dport", str(port),
                                         "--rate", "%r%%" % (rate * 100), "--interval", "1h"])
        elif tool == "iptables":
            m = ["-i", "r0", "-p", proto, "--dport", str(port)]
            topo.run(topo.r, "iptables", "-w", "-A", "FORWARD", *m)
            topo.run(topo.r, "iptables", "-w", "-A", "FORWARD", *m, "-m", "statistic", "--mode", "random",
                     "--probability", "%.10f" % rate, "-j", "DROP")
        elif tool == "nft":
            thr = int(round(rate * 1000000))
            script = ("table inet lossd_peer {\n chain forward_loss {\n  type filter hook forward priority 0;\n"
                      "  iifname \"r0\" %s dport %d counter\n"
                      "  iifname \"r0\" %s dport %d numgen random mod 1000000 < %d counter drop\n }\n}\n"
                      % (proto, port, proto, port, thr))
            topo.run(topo.r, "nft", "-f", "-", input=script)

    def counts(self):
        if self.tool == "iptables":
            out = self.t.run(self.t.r, "iptables", "-w", "-L", "FORWARD", "-v", "-x", "-n").stdout.splitlines()
            rows = [l.split() for l in out[2:] if l.strip()]
            return int(rows[0][0]), int(rows[1][0])
        if self.tool == "nft":
            j = json.loads(self.t.run(self.t.r, "nft", "-j", "list", "table", "inet", "lossd_peer").stdout)
            pk = [e["rule"]["expr"] for e in j["nftables"] if "rule" in e]
            c = [next(x["counter"]["packets"] for x in r if "counter" in x) for r in pk]
            return c[0], c[1]
        return None

    def stop(self):
        if self.tool == "lossd":
            f = self.p.stop()
            return f["matched_segments"], f["dropped_segments"]  # per wire segment (gso_segs)
        c = self.counts()
        if self.tool == "iptables":
            self.t.run(self.t.r, "iptables", "-w", "-F", "FORWARD")
        elif self.tool == "nft":
            self.t.run(self.t.r, "nft", "delete", "table", "inet", "lossd_peer")
        return c


def tcp_run(topo, n):
    r = topo.run(topo.c, *traffic.rr_cmd(S_IP, TCP_PORT, "--request", 1448, "--response", 1448, "--count", n,
                                         "--no-latencies", "--nodelay"), timeout=3600)
    return json.loads(r.stdout.strip().splitlines()[-1])


def bulk_run(topo, secs):
    return traffic.iperf(topo, topo.c, S_IP, BULK_PORT, secs)["gbps"]


def udp_run(topo, count, pps):
    ((sent, got),) = traffic.udp_flows(topo, [dict(rx_ns=topo.s, tx_ns=topo.c, dst=S_IP, port=UDP_PORT, flow=7,
                                                   count=count, pps=pps)], settle=0.5)
    return sent["sent"], got["unique"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lossd", default=os.path.join(HERE, "..", "build", "daemon", "lossd"))
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--udp-count", type=int, default=100000)
    ap.add_argument("--udp-pps", type=int, default=20000)
    ap.add_argument("--tools", default="lossd,iptables,nft")
    ap.add_argument("--bulk-seconds", type=int, default=3)
    ap.add_argument("--bulk-rounds", type=int, default=7)
    a = parse_args(ap)
    tools = a.tools.split(",")
    topo = RouterLab()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, f: (_ for _ in ()).throw(KeyboardInterrupt()))
    tcp = {}   # (tool, rate) -> list of runs
    udp = {}
    bulk = {}
    try:
        traffic.rr_server(topo, topo.s, S_IP, TCP_PORT)
        configs = [("none", 0.0)] + [(t, r) for r in RATES for t in tools]
        tcp_run(topo, 2000)  # warm-up, not counted
        for i in range(a.rounds):
            k = (i * 7) % len(configs)
            for tool, rate in configs[k:] + configs[:k]:
                d = Dropper(topo, tool, rate, "tcp", TCP_PORT) if tool != "none" else None
                try:
                    res = tcp_run(topo, a.requests)
                finally:
                    mc = d.stop() if d else (None, None)
                res["matched"], res["dropped"] = mc
                res["round"] = i
                tcp.setdefault((tool, rate), []).append(res)
                log("round %d %-8s %-8s %7.0f req/s matched %s dropped %s"
                    % (i, tool, "%g%%" % (rate * 100), res["requests"] / res["secs"], mc[0], mc[1]))
        ip3 = traffic.iperf_server(topo, topo.s, BULK_PORT, bind=S_IP)
        bulk_run(topo, 1)  # warm-up
        order = ["none"] + tools
        for i in range(a.bulk_rounds):
            k = i % len(order)
            for tool in order[k:] + order[:k]:
                d = Dropper(topo, tool, 0.0, "tcp", BULK_PORT) if tool != "none" else None
                try:
                    g = bulk_run(topo, a.bulk_seconds)
                finally:
                    if d:
                        d.stop()
                bulk.setdefault(tool, []).append(g)
                log("bulk round %d %-8s at 0%%: %.2f Gbit/s" % (i, tool, g))
        ip3.kill()
        for tool in ["none"] + tools:
            d = Dropper(topo, tool, 0.0, "udp", UDP_PORT) if tool != "none" else None
            try:
                sent, got = udp_run(topo, a.udp_count, a.udp_pps)
            finally:
                mc = d.stop() if d else (None, None)
            udp[tool] = {"sent": sent, "received": got, "lost": sent - got, "matched": mc[0], "dropped": mc[1]}
            log("udp %-8s at 0%%: sent %d received %d lost %d" % (tool, sent, got, sent - got))
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        topo.close()

    base = statistics.median(r["requests"] / r["secs"] for r in tcp[("none", 0.0)])
    table = []
    for (tool, rate), rs in sorted(tcp.items(), key=lambda kv: (kv[0][1], kv[0][0] != "none", kv[0][0])):
        rps = statistics.median(r["requests"] / r["secs"] for r in rs)
        row = {"tool": tool, "rate": rate, "runs": len(rs), "requests_per_s": round(rps, 1),
               "throughput_Bps": round(rps * 1448 * 2), "ratio_to_none": round(rps / base, 4),
               "secs_median": statistics.median(r["secs"] for r in rs)}
        if tool != "none":
            m = sum(r["matched"] for r in rs)
            dr = sum(r["dropped"] for r in rs)
            lo, hi = binom_interval(m, rate)
            row.update(matched=m, dropped=dr, measured_rate=dr / m if m else None,
                       wilson_999=wilson_interval(dr, m), binom_999_of_configured=[lo, hi],
                       in_interval=lo <= dr <= hi)
        table.append(row)
    bulk_base = statistics.median(bulk["none"])
    bulk_ratio = {t: round(statistics.median(bulk[t]) / bulk_base, 4) for t in tools}
    zero = bulk_ratio
    lossd_rows = [r for r in table if r["tool"] == "lossd"]
    targets = {
        "lossd_ratio_at_0_ge_0.98": zero.get("lossd", 0) >= 0.98,
        "lossd_ratio_at_0_above_peers": all(zero.get("lossd", 0) > zero[t] for t in tools if t != "lossd"),
        "udp_lossd_0_lost": udp.get("lossd", {}).get("lost") == 0,
        "lossd_every_rate_in_interval": all(r["in_interval"] for r in lossd_rows),
    }
    doc = {"benchmark": "seed_router", "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
           "kernel": os.uname().release, "cpus": os.cpu_count(), "command": " ".join(sys.argv),
           "requests_per_run": a.requests, "rounds": a.rounds, "request_bytes": 1448, "reply_bytes": 1448,
           "baseline_requests_per_s": round(base, 1), "tcp": table, "udp_at_0": udp,
           "bulk_at_0": {"gbit_median": {t: round(statistics.median(v), 3) for t, v in bulk.items()},
                         "ratio_to_none": bulk_ratio, "runs_gbit": bulk,
                         "traffic": "iperf3 -c server -t %d (unpaced, one flow) through the router" % a.bulk_seconds},
           "peers_in_interval": {t: all(r["in_interval"] for r in table if r["tool"] == t) for t in tools},
           "target": {"pass": all(targets.values()), **targets},
           "runs": {"%s@%g" % k: v for k, v in tcp.items()}}
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
