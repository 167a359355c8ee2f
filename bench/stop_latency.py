#!/usr/bin/python3
"""Guards' stop latency (issue 22; docs/guards.md): from the event that made a guard's
condition hold to the moment its rule stopped dropping, decided in the kernel, against the
same condition decided by a client in user space (the same run, the same lab and daemon).

Each trial is a paced TCP transfer A -> B under a rule on A's egress dropping its data:
  rto, kernel      30 % loss, --guard rtos>5/2s: the observer's sock_ops program stops the
                   rule at the 6th RTO (of its drops) within 2 s. Latency: GuardStop's
                   stopped - crossed (the crossing RTO's time, read in the same program).
  rto, user space  the same rule without a guard; a client reads WatchRetransmits, counts
                   the flow's RTOs and calls DeleteRule at the 6th within 2 s. Latency: the
                   moment DeleteRule returned (CLOCK_MONOTONIC, as the events' time_mono_ns)
                   - that RTO's time (an upper bound of the stop: the rule was out of the
                   kernel before the reply).
  stall, kernel    100 % loss, --guard stall>500ms: the program's timer at the stall's start
                   + 500 ms (past the first RTO, ~200 ms, which arms it: a limit shorter than
                   that is decided at the resend instead). Latency: stopped - crossed (the limit).
And for each kernel trial, the rule's last drop against the stop (GuardStop.last_drop_mono_ns):
nothing may be dropped after it.

    PYTHONPATH=tests/e2e:client/python /usr/bin/python3 bench/stop_latency.py \\
        [--lossd build/daemon/lossd --stubs build/python] [--trials 10]

Prints one JSON document; target: the kernel's median stop latency under 1 ms (and every
last drop before its stop).
"""
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
import benchlib  # noqa: E402

log = benchlib.logger("stop_latency")
PORT = 9091
MS = 1_000_000


def flow(lab):
    from lab import traffic
    return traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, PORT, 200_000_000, 100, hold=False, acked=False,
                           timeout=120)


def rule(d, rate, guard=None):
    return d.create(interface=d.lab.IF_A, direction="egress", protocol="tcp", dport=PORT, payload="only",
                    rate=rate, guard=guard)


def wait_stopped(d, pb, rid, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        g = d.get(rid)
        if pb.RuleState.Name(g.state) == "RULE_STATE_STOPPED":
            return g
        time.sleep(0.02)
    raise RuntimeError("rule %d not stopped within %ss" % (rid, timeout))


def kernel_trial(d, pb, rate, guard, timeout=60):
    f = flow(d.lab)
    try:
        time.sleep(0.3)
        r = rule(d, rate, guard)
        g = wait_stopped(d, pb, r.id, timeout).guard_stop
        return {"stop_us": (g.stopped_mono_ns - g.crossed_mono_ns) / 1e3,
                "last_drop_before_stop_us": (g.stopped_mono_ns - g.last_drop_mono_ns) / 1e3}
    finally:
        f.close()
        d.clear()
        d.lab.wait_idle(check=False)


def user_trial(d, pb, timeout=60):
    """A client's guard: WatchRetransmits, the 6th RTO within 2 s, DeleteRule."""
    f = flow(d.lab)
    stream = d.obs.WatchRetransmits(pb.WatchRetransmitsRequest(), timeout=timeout + 30)
    out = {}
    try:
        time.sleep(0.3)
        r = rule(d, 0.3)

        def watch():
            times = []
            for batch in stream:
                for m in batch.items:
                    if m.WhichOneof("msg") != "event":
                        continue
                    e = m.event
                    if pb.RetransmitType.Name(e.type) != "RETRANSMIT_TYPE_RTO" or e.tuple.remote_port != PORT:
                        continue
                    times.append(e.time_mono_ns)
                    if len(times) >= 6 and times[-1] - times[-6] <= 2000 * MS:
                        d.inj.DeleteRule(pb.DeleteRuleRequest(id=r.id), timeout=10)
                        out["stop_us"] = (time.monotonic_ns() - times[-1]) / 1e3
                        return
        t = threading.Thread(target=watch, daemon=True)
        t.start()
        t.join(timeout)
        if "stop_us" not in out:
            raise RuntimeError("the client's guard did not fire within %ss" % timeout)
        return out
    finally:
        stream.cancel()
        f.close()
        d.clear()
        d.lab.wait_idle(check=False)


def main():
    ap = benchlib.argument_parser(__doc__)
    ap.add_argument("--trials", type=int, default=10)
    args = benchlib.parse_args(ap, lambda a: "--trials must be 1..1000" if not 0 < a.trials <= 1000 else None)
    from lab import daemon
    daemon.load_stubs(args.stubs)
    from lab.netns import Lab
    pb = daemon.pb
    problems = []
    runs = {"rto_kernel": [], "rto_user_space": [], "stall_kernel": []}
    lab = Lab()
    try:
        d = daemon.Daemon(lab, lab.a, lossd=args.lossd)
        for i in range(args.trials):  # interleaved: the same conditions for each kind
            runs["rto_kernel"].append(kernel_trial(d, pb, 0.3, dict(rtos=5, rtos_window_ns=2000 * MS)))
            runs["rto_user_space"].append(user_trial(d, pb))
            runs["stall_kernel"].append(kernel_trial(d, pb, 1.0, dict(stall_ns=500 * MS)))
            log("trial %d: %s" % (i + 1, {k: round(v[-1]["stop_us"], 1) for k, v in runs.items()}))
        d.term()
    finally:
        lab.close()
    out = {"benchmark": "guard_stop_latency", "trials": args.trials}
    for k, v in runs.items():
        stops = [x["stop_us"] for x in v]
        out[k] = {"stop_us": benchlib.median_ci(stops), "max_stop_us": max(stops)}
        if "last_drop_before_stop_us" in v[0]:
            before = [x["last_drop_before_stop_us"] for x in v]
            out[k]["min_last_drop_before_stop_us"] = min(before)
            if min(before) < 0:
                problems.append("%s: a drop after the stop (%.1f us)" % (k, -min(before)))
    kernel = max(benchlib.med([x["stop_us"] for x in runs[k]]) for k in ("rto_kernel", "stall_kernel"))
    out["target"] = {"what": "the kernel guards' median stop latency under 1 ms, no drop after a stop",
                     "pass": kernel < 1000 and not problems}
    out["speedup_rto_median"] = (benchlib.med([x["stop_us"] for x in runs["rto_user_space"]])
                                 / max(benchlib.med([x["stop_us"] for x in runs["rto_kernel"]]), 1e-3))
    return benchlib.report(benchlib.rnd(out), problems)


if __name__ == "__main__":
    sys.exit(main())
