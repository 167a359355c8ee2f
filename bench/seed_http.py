#!/usr/bin/python3
"""The seed's second experiment: HTTP response time and throughput under loss, through the sweep.

Three fresh namespaces: client 192.0.2.1/25 — delay (forwarding) — server 198.51.100.1/25,
the client's and the server's egress paced to --mbit (default 100) by tbf, and the round
trip lengthened by --rtt-ms (default 10, as the seed) in the middle namespace by
bench/delay_line.py (see RTT below; --rtt-ms 0: client and server on one veth pair).
The server is Python's http.server (HTTP/1.0: one connection per response;
bench/workloads/http_server.py) serving 996 B, 25.1 KB and 227.2 KB files and a bulk file.
lossd runs as the daemon in the server's namespace; the loss is the server's outgoing data
(rule: --iface s0 --dir egress --sport 8080 --payload only --per-segment: clsact, real
network loss for the server's TCP, one Bernoulli draw per wire segment: without
--per-segment the server's GSO skbs of many segments are dropped whole).

Everything is measured with the product's own sweep (python3 -m lossd_client.sweep), one
sweep per question, the workload bench/workloads/http_get.py run in the client namespace:

  response time per size   rates 0, 0.1, 1, 2 %; --requests GETs per run, --repeat runs
  throughput               rates 0 .. 8 % in 1 % steps; one GET of the bulk file per run

RTT: the seed had 10 ms. This kernel has no qdisc that can delay a packet:
CONFIG_NET_SCH_NETEM, _FQ and _ETF are not set (`tc qdisc add ... netem|fq|etf` fails with
"Specified qdisc kind is unknown"), so neither netem nor EDT (skb->tstamp + fq) can. The
delay comes from user space instead: the middle namespace routes both directions into a tun
device whose reader (bench/delay_line.py) writes every packet back --rtt-ms/2 later, so each
round trip gains --rtt-ms. Its lateness (how far after its due time a packet left) is in
the JSON.

TCP congestion control: --cc (default cubic) on the server's sockets (the sender of the
responses); setting a namespace's default to cubic is refused here (not in
net.ipv4.tcp_allowed_congestion_control). This machine's default is bbr, which hardly
slows down for random loss of a few percent; the seed's shape is CUBIC's.

Prints JSON on stdout (the tables, and the sweeps' output directories with their PNG/SVG).
Usage: bench/seed_http.py [--out DIR] [--requests 200] [--repeat 3] [--mbit 100]
                          [--rtt-ms 10] [--cc cubic] [--bulk-mb 16]   (root)
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from benchlib import logger, parse_args
from lab.daemon import Daemon
from lab.netns import DelayLab, sh

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PY = "/usr/bin/python3"
GET = os.path.join(HERE, "workloads", "http_get.py")
HTTP_SERVER = os.path.join(HERE, "workloads", "http_server.py")
C_IP, S_IP, PORT = DelayLab.C_IP, DelayLab.S_IP, 8080
SIZES = (("996B", 996), ("25.1KB", 25100), ("227.2KB", 227200))
SEED_MS = {"996B": {0.0: 1, 0.001: 1, 0.01: 31, 0.02: 42}, "25.1KB": {0.0: 3, 0.001: 3, 0.01: 41, 0.02: 60},
           "227.2KB": {0.0: 22, 0.001: 22, 0.01: 170, 0.02: 190}}
log = logger("seed_http")
SEED_MBIT = {0.0: 804.67, 0.01: 222.49, 0.02: 168.03, 0.03: 106.43, 0.04: 63.57, 0.05: 36.59,
             0.06: 24.99, 0.07: 15.52, 0.08: 10.82}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lossd", default=os.path.join(REPO, "build", "daemon", "lossd"))
    ap.add_argument("--stubs", default=os.path.join(REPO, "build", "python"))
    ap.add_argument("--out", default=None, help="keep the sweeps' outputs here (default: a temp dir)")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mbit", type=int, default=100)
    ap.add_argument("--bulk-mb", type=int, default=16)
    ap.add_argument("--rtt-ms", type=float, default=10.0, help="added round-trip time (0: none)")
    ap.add_argument("--cc", default="cubic",
                    help="the server's TCP congestion control, set on its listening socket (default "
                         "cubic, Linux's usual default; this machine's own default is bbr)")
    a = parse_args(ap)
    lab = DelayLab(a.rtt_ms)
    tmp = tempfile.mkdtemp(prefix="lossd-http-")  # kept: the sweeps' outputs without --out
    out = os.path.abspath(a.out) if a.out else os.path.join(tmp, "out")
    os.makedirs(out, exist_ok=True)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, f: (_ for _ in ()).throw(KeyboardInterrupt()))
    doc = {"benchmark": "seed_http", "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
           "kernel": os.uname().release, "command": " ".join(sys.argv), "mbit": a.mbit,
           "rtt_added_ms": a.rtt_ms, "congestion_control": a.cc, "requests_per_run": a.requests,
           "repeat": a.repeat, "out": out}
    d = None
    try:
        nsc, nss = lab.c, lab.s
        for ns, ifn in ((nsc, "c0"), (nss, "s0")):
            sh("tc", "-n", ns, "qdisc", "add", "dev", ifn, "root", "tbf", "rate", "%dmbit" % a.mbit,
               "burst", "64kb", "latency", "%dms" % (100 + 2 * a.rtt_ms))
        www = os.path.join(tmp, "www")
        os.makedirs(www)
        files = dict(SIZES, bulk=a.bulk_mb << 20)
        for name, size in files.items():
            with open(os.path.join(www, name + ".bin"), "wb") as f:
                f.write(os.urandom(size))
        srv = lab.popen(nss, [PY, HTTP_SERVER, "--port", str(PORT), "--bind", S_IP, "--directory", www,
                              "--cc", a.cc], stdout=subprocess.PIPE)
        if not srv.stdout.readline().startswith("READY"):
            raise RuntimeError("http server did not start")
        d = Daemon(lab, nss)
        sock = d.sock
        for _ in range(100):
            if sh("ip", "netns", "exec", nsc, PY, GET, "--url", "http://%s:%d/996B.bin" % (S_IP, PORT),
                  "--count", "1", check=False).returncode == 0:
                break
            time.sleep(0.1)
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "client", "python"), LOSSD_PYTHON_STUBS=a.stubs)

        def sweep(name, rates, count, path, repeat):
            wl = "ip netns exec %s %s %s --url http://%s:%d/%s --count %d" % (nsc, PY, GET, S_IP, PORT, path, count)
            d_out = os.path.join(out, name)
            cmd = [PY, "-m", "lossd_client.sweep", "--socket", sock, "--iface", "s0", "--dir", "egress",
                   "--sport", str(PORT), "--payload", "only", "--per-segment", "--rates", rates, "--repeat", str(repeat),
                   "--workload", wl, "--settle", "500ms", "--out", d_out, "--title",
                   "HTTP %s, %d Mbit/s, RTT +%g ms, %s" % (name, a.mbit, a.rtt_ms, a.cc)]
            log("sweep %s: %s" % (name, rates))
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
            if r.returncode != 0:
                raise RuntimeError("sweep %s failed: %s" % (name, r.stderr[-2000:]))
            log("sweep %s:\n%s" % (name, r.stdout))
            return json.load(open(os.path.join(d_out, "sweep.json")))

        latency = {}
        for name, size in SIZES:
            s = sweep("size-" + name, "0,0.1%,1%,2%", a.requests, name + ".bin", a.repeat)
            latency[name] = [{"rate": st["configured_rate"],
                              "mean_ms": st["latency_mean_ms"]["mean"] if st["latency_mean_ms"] else None,
                              "median_ms": st["latency_p50_ms"]["median"] if st["latency_p50_ms"] else None,
                              "p99_ms": st["latency_p99_ms"]["mean"] if st["latency_p99_ms"] else None,
                              "measured_rate": st["measured_rate"]["mean"] if st["measured_rate"] else None,
                              "retransmitted_segments": st["retransmitted_segments"]["mean"]
                              if st["retransmitted_segments"] else None,
                              "seed_ms": SEED_MS[name].get(st["configured_rate"])}
                             for st in s["summary"]]
        s = sweep("throughput", ",".join("%d%%" % i for i in range(9)), 1, "bulk.bin", a.repeat)
        thr = [{"rate": st["configured_rate"],
                "mbit_mean": st["throughput_workload_bps"]["mean"] / 1e6 if st["throughput_workload_bps"] else None,
                "mbit_std": st["throughput_workload_bps"]["std"] / 1e6 if st["throughput_workload_bps"] else None,
                "observer_mbit_mean": st["throughput_obs_bps"]["mean"] / 1e6 if st["throughput_obs_bps"] else None,
                "measured_rate": st["measured_rate"]["mean"] if st["measured_rate"] else None,
                "rto_mean": st["rto"]["mean"] if st["rto"] else None,
                "seed_mbit": SEED_MBIT.get(st["configured_rate"])} for st in s["summary"]]
        base = thr[0]["mbit_mean"]
        for row in thr:
            row["ratio_to_0"] = row["mbit_mean"] / base if base and row["mbit_mean"] is not None else None
            row["seed_ratio_to_0"] = row["seed_mbit"] / SEED_MBIT[0.0] if row["seed_mbit"] else None
        doc.update(latency=latency, throughput=thr)
        if a.rtt_ms > 0:
            doc["delay_line"] = lab.delay_report()
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        if d is not None:
            d.term(60)
        lab.close()
        shutil.rmtree(os.path.join(tmp, "www"), ignore_errors=True)
        if a.out:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
