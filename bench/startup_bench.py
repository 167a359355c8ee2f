#!/usr/bin/python3
"""Start-up of `lossd --socket` (docs/benchmarks.md#start-up): how soon after its start
the daemon answers, can take a rule, and observes, against the old start-up measured in
the same run (`--sync-start`: every BPF program loaded before serving), over N interleaved
rounds (the order alternates), in a lab namespace (tests/e2e/lab).

Per start, from the process's spawn (time.monotonic() before Popen):
  first_rpc_s       the first GetHealth that answers (polled every 10 ms on a fresh channel)
  injector_ready_s  GetHealth says the injector READY (sync: = first_rpc_s)
  first_rule_s      a CreateRule (100 % UDP on tcx ingress: loads that hook's program) returned
  observer_ready_s  GetHealth says the observer READY
  *_daemon_s        the same readiness as the daemon reports it (Component.ready_after_ns)
Then bench/prog_load (--prog-load): per program verified_insns and load time, each object
whole vs. maps only vs. one program at a time.

    PYTHONPATH=tests/e2e:client/python /usr/bin/python3 bench/startup_bench.py \\
        --lossd build/daemon/lossd --stubs build/python --prog-load build/bench/prog_load [--rounds 7] \
        [--old-lossd OLD]   # a third arm: a lossd built from before the change (e.g. commit ec63570)

Prints one JSON document; target: the new start-up's median first_rpc_s below 1 s.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402

log = benchlib.logger("startup_bench")


def spread(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3),
            "n": len(xs)}


def one_start(lab, lossd, pb, pbg, grpc, mode, port):
    """mode: "async" (the new start-up), "sync" (--sync-start), "old" (a lossd from before
    the change: no --sync-start, no components in GetHealth: all ready at its first RPC)."""
    from lab.lossd import Lossd
    sockdir = lab.tempdir()
    sock = os.path.join(sockdir, "lossd.sock")
    args = ["--socket", sock] + (["--sync-start"] if mode == "sync" else [])
    t0 = time.monotonic()
    p = Lossd(lab, lab.a, args, lossd=lossd)
    out = {"mode": mode}
    ch = None
    health = None
    deadline = t0 + 120
    while time.monotonic() < deadline:
        if p.proc.poll() is not None:
            raise RuntimeError("lossd exited: " + p.stderr())
        if os.path.exists(sock):
            try:
                if ch is None:
                    ch = grpc.insecure_channel("unix:" + sock)
                health = pbg.SystemStub(ch).GetHealth(pb.GetHealthRequest(), timeout=0.5)
                break
            except grpc.RpcError:
                ch.close()
                ch = None
        time.sleep(0.01)
    out["first_rpc_s"] = time.monotonic() - t0
    sysstub, inj = pbg.SystemStub(ch), pbg.InjectorStub(ch)

    def states():
        h = sysstub.GetHealth(pb.GetHealthRequest(), timeout=5)
        return h, {c.name: c for c in h.components}

    def until(name):
        while time.monotonic() < deadline:
            h, c = states()
            if not c:  # an old lossd: everything loaded before it served
                return time.monotonic() - t0, None
            if c[name].state == pb.COMPONENT_STATE_READY:
                return time.monotonic() - t0, c[name].ready_after_ns / 1e9
            if c[name].state == pb.COMPONENT_STATE_FAILED:
                raise RuntimeError("%s failed: %s" % (name, c[name].message))
            time.sleep(0.01)
        raise RuntimeError("%s not ready in 120 s" % name)

    out["observer_loading_at_first_rpc"] = {c.name: c.state for c in health.components}.get(
        "observer") == pb.COMPONENT_STATE_LOADING
    out["injector_ready_s"], out["injector_ready_daemon_s"] = until("injector")
    spec = pb.RuleSpec(interface=lab.IF_A, direction=pb.DIRECTION_INGRESS,
                       match=pb.Match(protocol="udp", dport=pb.PortRange(lo=port, hi=port)),
                       loss=pb.LossModel(bernoulli=pb.Bernoulli(rate=1.0)))
    inj.CreateRule(pb.CreateRuleRequest(spec=spec), timeout=60)
    out["first_rule_s"] = time.monotonic() - t0
    out["observer_ready_s"], out["observer_ready_daemon_s"] = until("observer")
    ch.close()
    t1 = time.monotonic()
    rc = p.term(60)
    out["sigterm_exit"] = rc
    out["sigterm_s"] = time.monotonic() - t1
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lossd", required=True)
    ap.add_argument("--stubs", required=True)
    ap.add_argument("--prog-load", help="bench/prog_load binary (per-program verifier cost)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--old-lossd", help="also a lossd built from before the change (a third arm)")
    ap.add_argument("--prog-rounds", type=int, default=3)
    a = ap.parse_args()
    from lab import config
    config.set_paths(lossd=a.lossd, stubs=a.stubs)
    from lab import daemon
    from lab.netns import Lab
    pb, pbg, grpc = daemon.pb, daemon.pbg, daemon.grpc

    runs = []
    problems = []
    lab = Lab()
    try:
        arms = [("sync", a.lossd), ("async", a.lossd)] + ([("old", a.old_lossd)] if a.old_lossd else [])
        for r in range(a.rounds):
            order = arms if r % 2 == 0 else arms[::-1]
            for mode, binary in order:
                res = one_start(lab, os.path.abspath(binary), pb, pbg, grpc, mode, 9600 + r)
                res["round"] = r
                log("round %d %s: first rpc %.2fs, injector %.2fs, rule %.2fs, observer %.2fs" % (
                    r, res["mode"], res["first_rpc_s"], res["injector_ready_s"], res["first_rule_s"],
                    res["observer_ready_s"]))
                if res["sigterm_exit"] not in (0, None):
                    problems.append("round %d %s: exit %s on SIGTERM" % (r, res["mode"], res["sigterm_exit"]))
                runs.append(res)
    finally:
        lab.close()

    keys = ("first_rpc_s", "injector_ready_s", "first_rule_s", "observer_ready_s",
            "injector_ready_daemon_s", "observer_ready_daemon_s", "sigterm_s")
    summary = {}
    for mode in ("sync", "async") + (("old",) if a.old_lossd else ()):
        rs = [x for x in runs if x["mode"] == mode]
        summary[mode] = {k: spread([x[k] for x in rs]) for k in keys}
    ratios = {}
    for base in ("sync", "old"):
        for k in ("first_rpc_s", "first_rule_s", "observer_ready_s"):
            s, n = summary.get(base, {}).get(k), summary["async"][k]
            if s and n and n["median"]:
                ratios["%s_%s_over_async" % (k, base)] = round(s["median"] / n["median"], 2)
    async_first = summary["async"]["first_rpc_s"]
    out = {
        "bench": "startup",
        "source": benchlib.git_describe(),
        "lossd": benchlib.binary_id(a.lossd),
        "old_lossd": benchlib.binary_id(a.old_lossd) if a.old_lossd else None,
        "rounds": a.rounds,
        "baseline": "--sync-start (every BPF program loaded before serving, as before issue 11, "
                    "with the new loaders) and, with --old-lossd, a lossd built from before the change; "
                    "interleaved with the new start-up, order alternating per round",
        "summary": summary,
        "ratios": ratios,
        "observer_loading_at_first_rpc": [x["observer_loading_at_first_rpc"] for x in runs if x["mode"] == "async"],
        "target": {"what": "new start-up: median first_rpc_s < 1.0 s",
                   "pass": bool(async_first and async_first["median"] < 1.0)},
        "runs": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in x.items()} for x in runs],
    }
    if a.prog_load:
        log("prog_load --rounds %d" % a.prog_rounds)
        pl = subprocess.run([a.prog_load, "--rounds", str(a.prog_rounds)], capture_output=True, text=True)
        if pl.returncode != 0:
            problems.append("prog_load failed: " + pl.stderr.strip())
        else:
            out["programs"] = json.loads(pl.stdout)
    return benchlib.report(out, problems)


if __name__ == "__main__":
    sys.exit(main())
