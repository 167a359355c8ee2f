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

TCP: request/response with 1,448-byte requests and replies (bench/workloads/tcp_rr.py, one
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
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
sys.dont_write_bytecode = True
import netlab  # noqa: E402  (binom_interval)
from benchlib import logger, sh  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "client", "python"))
from lossd_client.units import wilson_interval  # noqa: E402  (stdlib only; no stubs needed)

PY = "/usr/bin/python3"
RR = os.path.join(HERE, "workloads", "tcp_rr.py")
UDPFLOW = os.path.join(HERE, "..", "tests", "e2e", "udpflow.py")
RATES = (0.0, 0.00005, 0.0001, 0.0002, 0.0004, 0.0006, 0.0008)
TCP_PORT, UDP_PORT, BULK_PORT = 5401, 5402, 5403
log = logger("seed_router")
C_IP, R_IP0, R_IP1, S_IP = "192.0.2.1", "192.0.2.126", "198.51.100.126", "198.51.100.1"


class Topo:
    def __init__(self):
        tag = "%d-%s" % (os.getpid(), os.urandom(3).hex())
        self.c, self.r, self.s = ("lossd-seed-%s-%s" % (tag, x) for x in "crs")
        self.procs = []
        for ns in (self.c, self.r, self.s):
            sh("ip", "netns", "add", ns)
        sh("ip", "-n", self.c, "link", "add", "c0", "type", "veth", "peer", "name", "r0", "netns", self.r)
        sh("ip", "-n", self.r, "link", "add", "r1", "type", "veth", "peer", "name", "s0", "netns", self.s)
        for ns, ifn, addr in ((self.c, "c0", C_IP + "/25"), (self.r, "r0", R_IP0 + "/25"),
                              (self.r, "r1", R_IP1 + "/25"), (self.s, "s0", S_IP + "/25")):
            sh("ip", "-n", ns, "addr", "add", addr, "dev", ifn)
            sh("ip", "-n", ns, "link", "set", ifn, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", self.c, "route", "add", "198.51.100.0/25", "via", R_IP0)
        sh("ip", "-n", self.s, "route", "add", "192.0.2.0/25", "via", R_IP1)
        sh("ip", "netns", "exec", self.r, "sysctl", "-qw", "net.ipv4.ip_forward=1")

    def run(self, ns, *cmd, **kw):
        return sh("ip", "netns", "exec", ns, *cmd, **kw)

    def popen(self, ns, cmd, **kw):
        p = subprocess.Popen(["ip", "netns", "exec", ns] + list(cmd), text=True, **kw)
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for ns in (self.c, self.r, self.s):
            sh("ip", "netns", "del", ns, check=False)


class Dropper:
    """One tool at one rate in the router; counts() -> (matched, dropped) packets."""

    def __init__(self, topo, tool, rate, proto, port, lossd, tmp):
        self.t, self.tool, self.proto, self.port = topo, tool, proto, port
        self.p = None
        if tool == "lossd":
            self.p = topo.popen(topo.r, [lossd, "--iface", "r0", "--proto", proto, "--dport", str(port),
                                         "--rate", "%r%%" % (rate * 100), "--json", "--interval", "1h",
                                         "--state-dir", tmp], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            line = self.p.stdout.readline()
            if '"ready"' not in line:
                raise RuntimeError("lossd not ready: %r %s" % (line, self.p.stderr.read()))
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
            self.p.send_signal(signal.SIGTERM)
            out, err = self.p.communicate(timeout=60)
            final = [json.loads(l) for l in out.splitlines() if '"final"' in l]
            if not final:
                raise RuntimeError("lossd: no final line: %s" % err)
            f = final[-1]
            return f["matched_segs"], f["dropped_segs"]  # per wire segment (gso_segs)
        c = self.counts()
        if self.tool == "iptables":
            self.t.run(self.t.r, "iptables", "-w", "-F", "FORWARD")
        elif self.tool == "nft":
            self.t.run(self.t.r, "nft", "delete", "table", "inet", "lossd_peer")
        return c


def tcp_run(topo, n):
    r = topo.run(topo.c, PY, RR, "client", "--dst", S_IP, "--port", str(TCP_PORT), "--request", "1448",
                 "--response", "1448", "--count", str(n), "--no-latencies", "--nodelay", timeout=3600)
    return json.loads(r.stdout.strip().splitlines()[-1])


def bulk_run(topo, secs):
    r = topo.run(topo.c, "iperf3", "-c", S_IP, "-p", str(BULK_PORT), "-t", str(secs), "-J", timeout=secs + 60)
    return json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9


def udp_run(topo, count, pps):
    rx = topo.popen(topo.s, [PY, UDPFLOW, "recv", "--bind", S_IP, "--port", str(UDP_PORT), "--flow", "7"],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    if not rx.stdout.readline().startswith("READY"):
        raise RuntimeError("udp receiver did not start")
    tx = topo.run(topo.c, PY, UDPFLOW, "send", "--dst", S_IP, "--port", str(UDP_PORT), "--flow", "7",
                  "--count", str(count), "--pps", str(pps), timeout=600)
    sent = json.loads(tx.stdout.strip().splitlines()[-1])
    time.sleep(0.5)
    out, _ = rx.communicate("done\n", timeout=60)
    got = json.loads(out.strip().splitlines()[-1])
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
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("seed_router.py needs root", file=sys.stderr)
        return 77
    a.lossd = os.path.abspath(a.lossd)
    tools = a.tools.split(",")
    topo = Topo()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, f: (_ for _ in ()).throw(KeyboardInterrupt()))
    tcp = {}   # (tool, rate) -> list of runs
    udp = {}
    bulk = {}
    try:
        srv = topo.popen(topo.s, [PY, RR, "server", "--bind", S_IP, "--port", str(TCP_PORT)], stdout=subprocess.PIPE)
        if not srv.stdout.readline().startswith("READY"):
            raise RuntimeError("tcp_rr server did not start")
        configs = [("none", 0.0)] + [(t, r) for r in RATES for t in tools]
        tcp_run(topo, 2000)  # warm-up, not counted
        for i in range(a.rounds):
            k = (i * 7) % len(configs)
            for tool, rate in configs[k:] + configs[:k]:
                with tempfile.TemporaryDirectory(prefix="lossd-seed-") as tmp:
                    d = Dropper(topo, tool, rate, "tcp", TCP_PORT, a.lossd, tmp) if tool != "none" else None
                    try:
                        res = tcp_run(topo, a.requests)
                    finally:
                        mc = d.stop() if d else (None, None)
                res["matched"], res["dropped"] = mc
                res["round"] = i
                tcp.setdefault((tool, rate), []).append(res)
                log("round %d %-8s %-8s %7.0f req/s matched %s dropped %s"
                    % (i, tool, "%g%%" % (rate * 100), res["requests"] / res["secs"], mc[0], mc[1]))
        ip3 = topo.popen(topo.s, ["iperf3", "-s", "-B", S_IP, "-p", str(BULK_PORT)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        bulk_run(topo, 1)  # warm-up
        order = ["none"] + tools
        for i in range(a.bulk_rounds):
            k = i % len(order)
            for tool in order[k:] + order[:k]:
                with tempfile.TemporaryDirectory(prefix="lossd-seed-") as tmp:
                    d = Dropper(topo, tool, 0.0, "tcp", BULK_PORT, a.lossd, tmp) if tool != "none" else None
                    try:
                        g = bulk_run(topo, a.bulk_seconds)
                    finally:
                        if d:
                            d.stop()
                bulk.setdefault(tool, []).append(g)
                log("bulk round %d %-8s at 0%%: %.2f Gbit/s" % (i, tool, g))
        ip3.kill()
        for tool in ["none"] + tools:
            with tempfile.TemporaryDirectory(prefix="lossd-seed-") as tmp:
                d = Dropper(topo, tool, 0.0, "udp", UDP_PORT, a.lossd, tmp) if tool != "none" else None
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
            lo, hi = netlab.binom_interval(m, rate)
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
