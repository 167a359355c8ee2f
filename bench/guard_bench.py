#!/usr/bin/python3
"""Host protection's cost per CreateRule against the namespace's connection count
(issue 25 item 11; docs/benchmarks.md): a lossy TCP rule whose ports admit a
protected one (22) makes the guard read sockets. It read every TCP socket of the
namespace (/proc/net/tcp{,6}) on each create; now the kernel filters a sock_diag dump
by the protected ports (daemon/host/sockets.h), so the cost should not grow with
connections on other ports.

Same run, same daemon: CreateRule + DeleteRule round trips (one client, sequential)
with the namespace idle (the baseline), then with --conns established connections on
ports from 9000 (2 x conns sockets, both ends, in the daemon's namespace).

    PYTHONPATH=tests/e2e:client/python /usr/bin/python3 bench/guard_bench.py \\
        [--lossd build/daemon/lossd --stubs build/python] [--conns 20000] [--creates 300]

Prints one JSON document; target: with the connections, the median create within 20 %
of the idle one (before this change: it grew with the connections).
"""
import os
import statistics
import sys
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
import benchlib  # noqa: E402

log = benchlib.logger("guard_bench")

PER_PROCESS = 4000
CROWD = textwrap.dedent("""
    import resource, socket, sys, threading, time
    port, n = int(sys.argv[2]), int(sys.argv[3])
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], port))
    s.listen(4096)
    got = []
    t = threading.Thread(target=lambda: [got.append(s.accept()[0]) for _ in range(n)])
    t.start()
    out = [socket.create_connection((sys.argv[1], port)) for _ in range(n)]
    t.join()
    print("CONNECTED %d" % len(got), flush=True)
    time.sleep(3600)
""")


def creates(d, pb, n):
    """n CreateRule + DeleteRule round trips; the CreateRule latencies in ms."""
    from lab.daemon import rule_spec
    spec = rule_spec(interface=d.lab.IF_A, protocol="tcp", dport=(1, 1024), rate=0.01)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        rid = d.inj.CreateRule(pb.CreateRuleRequest(spec=spec), timeout=20).id
        out.append((time.perf_counter() - t0) * 1e3)
        d.delete(rid)
    return out


def main():
    ap = benchlib.argument_parser(__doc__)
    ap.add_argument("--conns", type=int, default=20000)
    ap.add_argument("--creates", type=int, default=300)
    args = benchlib.parse_args(ap, lambda a: "--conns must be 1..60000" if not 0 < a.conns <= 60000 else None)
    from lab import daemon
    daemon.load_stubs(args.stubs)
    from lab.config import PY
    from lab.netns import Lab
    pb = daemon.pb
    problems = []
    lab = Lab()
    try:
        d = daemon.Daemon(lab, lab.a, extra=["--protect-port", "22"], lossd=args.lossd)
        creates(d, pb, 20)  # warm: the program loaded, the first attachment made
        idle = creates(d, pb, args.creates)
        log("idle: median %.3f ms" % statistics.median(idle))
        # Both ends of each connection in one process: PER_PROCESS of them a process (the
        # fd limit), each process on its own port from 9000.
        left, crowds = args.conns, []
        while left > 0:
            n = min(left, PER_PROCESS)
            crowds.append((n, lab.popen(lab.a, [PY, "-c", CROWD, lab.V4_A, str(9000 + len(crowds)), str(n)],
                                        stdout=-1)))
            left -= n
        for n, p in crowds:
            line = p.stdout.readline().strip()
            if line != "CONNECTED %d" % n:
                raise RuntimeError("the connections did not open: %r" % line)
        busy = creates(d, pb, args.creates)
        log("with %d connections: median %.3f ms" % (args.conns, statistics.median(busy)))
        d.term()
    finally:
        lab.close()
    ratio = statistics.median(busy) / statistics.median(idle)
    out = {"benchmark": "guard_create_cost", "conns": args.conns, "sockets_in_namespace": 2 * args.conns + 1,
           "creates": args.creates,
           "idle_ms": benchlib.median_ci(idle), "with_conns_ms": benchlib.median_ci(busy),
           "p99_idle_ms": sorted(idle)[int(0.99 * (len(idle) - 1))],
           "p99_with_conns_ms": sorted(busy)[int(0.99 * (len(busy) - 1))],
           "median_ratio": ratio,
           "target": {"what": "median with the connections within 20 % of idle", "pass": ratio <= 1.2}}
    return benchlib.report(benchlib.rnd(out), problems)


if __name__ == "__main__":
    sys.exit(main())
