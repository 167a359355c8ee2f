#!/usr/bin/python3
"""End-to-end cost of lossd on a TCP flow over veth (DESIGN.md fact 1).

Two network namespaces made for this run (sender, receiver), a veth pair
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
import atexit
import datetime
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time

PORT = 5201
SND_ADDR, RCV_ADDR = "10.201.0.1", "10.201.0.2"
TARGET_B_OVER_A = 0.97

TAG = f"lossdbench{os.getpid()}"
NS_SND, NS_RCV = f"{TAG}s", f"{TAG}r"
VETH_SND, VETH_RCV = "bsnd0", "brcv0"  # created inside the namespaces only

_procs = []        # processes we started (killed by pid on exit)
_namespaces = []   # namespaces we created
_tmpdirs = []


def log(msg):
    print(f"e2e_throughput: {msg}", file=sys.stderr, flush=True)


def run(*cmd, check=True, ns=None, capture=False, timeout=60):
    full = (["ip", "netns", "exec", ns] if ns else []) + list(cmd)
    r = subprocess.run(full, stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(full)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def cleanup():
    for p in _procs:
        if p.poll() is None:
            try:
                p.terminate()
                p.wait(timeout=5)
            except Exception:
                p.kill()
                p.wait()
    _procs.clear()
    for ns in _namespaces:
        subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    _namespaces.clear()
    for d in _tmpdirs:
        subprocess.run(["rm", "-rf", d])
    _tmpdirs.clear()


def on_signal(signum, frame):
    cleanup()
    sys.exit(128 + signum)


def setup():
    for ns in (NS_SND, NS_RCV):
        run("ip", "netns", "add", ns)
        _namespaces.append(ns)
        run("ip", "-n", ns, "link", "set", "lo", "up")
    # The pair is born inside the namespaces: nothing appears on the host.
    run("ip", "-n", NS_SND, "link", "add", VETH_SND, "type", "veth", "peer", "name", VETH_RCV,
        "netns", NS_RCV)
    run("ip", "-n", NS_SND, "addr", "add", f"{SND_ADDR}/24", "dev", VETH_SND)
    run("ip", "-n", NS_RCV, "addr", "add", f"{RCV_ADDR}/24", "dev", VETH_RCV)
    run("ip", "-n", NS_SND, "link", "set", VETH_SND, "up")
    run("ip", "-n", NS_RCV, "link", "set", VETH_RCV, "up")


NICE = []  # ["nice", "-n", N] with --nice


def start_server():
    p = subprocess.Popen(["ip", "netns", "exec", NS_RCV] + NICE + ["iperf3", "-s", "-p", str(PORT)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _procs.append(p)
    for _ in range(100):
        r = run("ss", "-Hltn", f"sport = :{PORT}", ns=NS_RCV, capture=True)
        if r.stdout.strip():
            return p
        time.sleep(0.05)
    raise RuntimeError("iperf3 server did not start listening")


def iperf(seconds):
    r = run(*NICE, "iperf3", "-c", RCV_ADDR, "-p", str(PORT), "-t", str(seconds), "-J", ns=NS_SND,
            capture=True, timeout=seconds + 30)
    j = json.loads(r.stdout)
    end = j["end"]
    return {
        "gbps": round(end["sum_received"]["bits_per_second"] / 1e9, 3),
        "retransmits": end["sum_sent"].get("retransmits"),
    }


class Lossd:
    """lossd in the receiver namespace with a 0 % rule on the flow."""

    def __init__(self, binary):
        self.state = tempfile.mkdtemp(prefix="lossd-bench-state.")
        _tmpdirs.append(self.state)
        cmd = ["ip", "netns", "exec", NS_RCV, binary, "--iface", VETH_RCV, "--proto", "tcp",
               "--dport", str(PORT), "--rate", "0%", "--state-dir", self.state, "--json",
               "--interval", "1h"]
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _procs.append(self.p)
        self.ready = None
        deadline = time.time() + 30
        while time.time() < deadline:
            rl, _, _ = select.select([self.p.stdout], [], [], 0.5)
            if rl:
                line = self.p.stdout.readline()
                if not line:
                    break
                ev = json.loads(line)
                if ev.get("event") == "ready":
                    self.ready = ev
                    return
            if self.p.poll() is not None:
                break
        err = self.p.stderr.read() if self.p.poll() is not None else ""
        raise RuntimeError(f"lossd did not become ready: {err.strip()}")

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        out, err = self.p.communicate(timeout=15)
        _procs.remove(self.p)
        final = None
        for line in out.splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("event") == "final":
                final = ev
        if self.p.returncode != 0:
            raise RuntimeError(f"lossd exited {self.p.returncode}: {err.strip()}")
        return final


IPT_RULE = ["INPUT", "-i", VETH_RCV, "-p", "tcp", "--dport", str(PORT), "-m", "statistic",
            "--mode", "random", "--probability", "0", "-j", "DROP"]


def measure(config, args):
    if config == "A":
        r = iperf(args.seconds)
        return r
    if config == "B":
        d = Lossd(args.lossd)
        try:
            r = iperf(args.seconds)
        finally:
            final = d.stop()
        r["hooks"] = d.ready.get("hooks")
        if final:
            r["matched_pkts"] = final.get("matched_pkts")  # skbs the hook saw match
            r["matched_segs"] = final.get("matched_segs")
            r["dropped_segs"] = final.get("dropped_segs")
            if r["matched_pkts"]:
                r["segs_per_skb"] = round(r["matched_segs"] / r["matched_pkts"], 1)
                r["skbs_per_s"] = round(r["matched_pkts"] / args.seconds)
        return r
    if config == "C":
        run("iptables", "-A", *IPT_RULE, ns=NS_RCV)
        try:
            r = iperf(args.seconds)
            out = run("iptables", "-L", "INPUT", "-v", "-n", "-x", ns=NS_RCV, capture=True).stdout
        finally:
            run("iptables", "-D", *IPT_RULE, ns=NS_RCV, check=False)
        for line in out.splitlines():
            if "statistic" in line:
                r["rule_pkts_dropped"] = int(line.split()[0])
        return r
    raise ValueError(config)


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
    args = ap.parse_args()
    if args.nice:
        NICE[:] = ["nice", "-n", str(args.nice)]
    if args.pairs < 3:
        ap.error("--pairs must be >= 3")
    args.lossd = os.path.abspath(args.lossd)
    if not os.access(args.lossd, os.X_OK):
        ap.error(f"no lossd binary at {args.lossd} (build first, or pass --lossd)")
    if os.geteuid() != 0:
        ap.error("needs root (network namespaces, BPF)")

    atexit.register(cleanup)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    configs = ["A", "B"] + ([] if args.no_iptables else ["C"])
    load_start = os.getloadavg()
    setup()
    start_server()
    log("warm-up run (not counted)")
    iperf(1)

    runs = {c: [] for c in configs}
    for i in range(args.pairs):
        order = configs[i % len(configs):] + configs[:i % len(configs)]
        for c in order:
            r = measure(c, args)
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
            "path": f"{NS_SND}/{VETH_SND} ({SND_ADDR}) -> {NS_RCV}/{VETH_RCV} ({RCV_ADDR}), veth",
            "traffic": f"iperf3 TCP, unpaced, 1 stream, {args.seconds} s, port {PORT}, "
                       f"nice {args.nice}",
            "rounds": args.pairs,
            "A": "no injector",
            "B": f"lossd --iface {VETH_RCV} --proto tcp --dport {PORT} --rate 0% (hook auto), "
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
        if not r.get("matched_segs"):
            problems.append(f"round {r['round']}: lossd's rule matched nothing")
        if r.get("dropped_segs"):
            problems.append(f"round {r['round']}: lossd dropped {r['dropped_segs']} segments at 0%")
    out["checks_ok"] = not problems
    out["problems"] = problems
    print(json.dumps(out, indent=2))
    return 0 if not problems else 1


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        cleanup()
    sys.exit(rc)
