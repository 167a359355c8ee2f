"""Sweep one service across loss rates and record how it behaves.

    python3 -m lossd_client.sweep --iface veth0 --dport 8080 --rates 0,0.1%,1%,5% \\
        --workload './load-test --json' --repeat 3 --out results/
    lossctl sweep ...              (the same; lossctl runs this module)

For every rate (in the order given) and every repetition, the sweep creates one
rule through lossd's gRPC API, holds it for --duration or for one run of the
workload command (then up to 5 s more, until the rule's flows have closed: a workload that
closed with data unacknowledged has its last resends after it exits), reads what the
daemon measured, and deletes the rule. Per run
it records: configured and measured loss (segments the rule dropped / matched,
with the 99.9 % Wilson interval), throughput from the observer (bytes acked by
the rule's flows per second) and from the workload if it reports one, the
workload's request latency (mean, median, p99) if it reports latencies, retransmitted
segments by type and RTOs on the rule's flows, mean and minimum cwnd, mean srtt, and the
stalls the daemon reports for the run's rule (GetRuleEffect): stall time and count by cause on
the rule's flows (stalls_on_flows) and the part linked to the rule's own drops (stalls_caused).
Per rate it gives mean, std, min, quartiles and max over the repetitions, and the mean stall
time per run by cause.

Stalls are reported only as the daemon reports them: when GetRuleEffect's stall maps are empty in
every run (a daemon without stall detection, or no stall anywhere), the stall columns show "-"
(blank in the CSV, null in the JSON, whose "stalls" says the daemon reported none), never zeros.
Once any run has stalls, a run without any had none, and counts 0.

A step is a loss rate ('1%') or a Gilbert-Elliott model 'ge:P/R/1-H/1-K' (netem's gemodel:
P good->bad, R bad->good, 1-H loss in the bad state, 1-K in the good one), which is
reported and plotted at its mean loss rate P/(P+R)*(1-H) + R/(P+R)*(1-K); its losses come
in bursts, so the binomial interval does not apply to it. 'markov:P13/P31/P32/P23/P14'
(netem's 4-state loss state, omitted ones at netem's defaults) is likewise reported at its
chain's stationary loss rate.

--action makes every step's rule corrupt, duplicate or mark (ecn, ecn-pass) the packets its
model picks instead of dropping them (lossd runs it at tc): the measured rate is then the
picked packets' share (the daemon's), and a run records picked_packets beside the drops.

The workload is any shell command, run once per repetition with LOSSD_SWEEP_RATE
(a fraction), LOSSD_SWEEP_STEP and LOSSD_SWEEP_REP in its environment. If its
stdout has a JSON object line, these keys are read from the last one (all
optional): "latencies_ms" (a list), "p50_ms", "p99_ms", "throughput_bps",
"bytes" (with the run's wall time gives a throughput), "requests", "retransmits"
(segments the workload saw its own TCP retransmit), "loss_rate" (the fraction of
its packets it counted lost), "error" (text: the run failed). `iperf3 -J` is read
as is, with no wrapper: its one multi-line JSON document (the last, when the
output has several) gives throughput_bps (bits/s the receiving side got, both
directions with --bidir), TCP: retransmits (the sending side's, also with -R),
UDP: loss_rate (lost_packets / packets, the receiving side's) and jitter_ms;
its "error" (iperf3 3.12 -J exits 0 after e.g. a refused connection) fails the
run. A workload that exits non-zero, or reports an error, fails the sweep (its
run is recorded as failed, with the error).

Output (--out DIR): sweep.json (every run and the summary), sweep.csv (one row
per run), summary.csv, and sweep.png + sweep.svg (throughput and latency against
loss rate, retransmits by type), drawn with matplotlib (Debian python3-matplotlib).
A table goes to stdout.

Nothing is left behind: the current rule is deleted when the sweep ends, on
Ctrl-C or SIGTERM (after the running workload is stopped), and every rule has a
TTL (its hold time + --grace) so that it expires by itself if the sweep is killed.
"""

import argparse
import csv
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

from . import cli
from .errors import LossdError, LossdInputError
from .spec import RETRANSMIT_TYPES, action_name, gilbert_elliott, markov4, parse_action
from .types import LossModel
from .units import format_rate, parse_rate

METRICS = ("measured_rate", "throughput_obs_bps", "throughput_workload_bps", "latency_mean_ms",
           "latency_p50_ms", "latency_p99_ms", "retransmitted_segments", "rto", "cwnd_mean", "cwnd_min", "srtt_mean_us",
           "dropped_segments", "matched_segments", "wall_s", "stalls", "stall_ns", "stall_caused_ns",
           "retransmits_workload", "loss_rate_workload")
STALLS_NONE = ("the daemon reported no stalls: RuleEffect.stalls_on_flows and stalls_caused were empty in every "
               "run (a daemon that does not detect or link stalls, or no stall happened); the stall columns are "
               "'-', not zeros")


class Interrupted(Exception):
    pass


def parse_step(text):
    """'1%' -> Bernoulli; 'ge:P/R/1-H/1-K' -> Gilbert-Elliott; 'markov:P13/P31/P32/P23/P14' ->
    netem's 4-state chain. Returns a step dict: label, rate (the mean loss rate), ge (None or
    the model's p, r, bad_loss, good_loss), markov (None or its p13, p31, p32, p23, p14)."""
    text = text.strip()
    if text.lower().startswith("ge:"):
        ge = gilbert_elliott(text[3:].split("/"))
        rate = LossModel("gilbert_elliott", **ge).mean_rate
        return {"label": text, "rate": rate, "ge": ge, "markov": None}
    if text.lower().startswith("markov:"):
        mk = markov4(text[7:].split("/"))
        return {"label": text, "rate": LossModel("markov", **mk).mean_rate, "ge": None, "markov": mk}
    rate = parse_rate(text, "--rates")
    return {"label": format_rate(rate), "rate": rate, "ge": None, "markov": None}


def step_model(st):
    """The add_rule() model arguments of a step, and the model's name."""
    if st.get("ge"):
        return {"ge": [st["ge"][k] for k in ("p", "r", "bad_loss", "good_loss")]}, "ge"
    if st.get("markov"):
        return {"markov": dict(st["markov"])}, "markov"
    return {"rate": st["rate"]}, "bernoulli"


def quantile(xs, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(xs)
    if not xs:
        return None
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def describe(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"n": len(xs), "mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0,
            "min": min(xs), "q1": quantile(xs, 0.25), "median": quantile(xs, 0.5), "q3": quantile(xs, 0.75),
            "max": max(xs)}


def workload_report(stdout):
    """What a workload reported, in the contract's keys, or {}: the last JSON object of its
    stdout, either one line or a multi-line document from a line "{" at its start (iperf3 -J's,
    read by iperf3_report())."""
    lines = stdout.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i].strip()
        if not line.startswith("{"):
            continue
        try:
            if line.endswith("}"):
                v = json.loads(line)
            elif lines[i].startswith("{"):
                v = json.JSONDecoder().raw_decode("\n".join(lines[i:]))[0]
            else:
                continue
        except ValueError:
            continue
        if isinstance(v, dict):
            return iperf3_report(v) if {"start", "intervals", "end"} <= v.keys() else v
    return {}


# end's sums of an iperf3 -J document, per direction: (the sending side's, the receiving side's)
IPERF3_DIRECTIONS = (("sum_sent", "sum_received"), ("sum_sent_bidir_reverse", "sum_received_bidir_reverse"))


def iperf3_report(doc):
    """An iperf3 -J document (its client's) in the contract's keys. sum_sent is the sending
    side's view and sum_received the receiving side's, whichever end the client is (with -R the
    server sends and its counts come in iperf3's results exchange); --bidir adds the
    *_bidir_reverse pair; UDP before sum_received (iperf3 < 3.11?) has one "sum", whose loss is
    the receiver's. throughput_bps: what the receiving sides got; TCP "retransmits": the sending
    sides' (Linux TCP_INFO); UDP "loss_rate" (lost_packets / packets) and "jitter_ms": the
    receiving sides'. iperf3's "error" becomes the contract's."""
    if doc.get("error"):
        return {"error": "iperf3: %s" % doc["error"]}
    end = doc.get("end") or {}
    pairs = [(end.get(snd) or {}, end[rcv]) for snd, rcv in IPERF3_DIRECTIONS if rcv in end]
    if not pairs and "sum" in end:
        pairs = [({}, end["sum"])]
    if not pairs:
        return {}
    proto = (doc.get("start") or {}).get("test_start", {}).get("protocol")
    rep = {"workload": "iperf3 -J", "protocol": proto, "directions": len(pairs),
           "throughput_bps": sum(r.get("bits_per_second", 0.0) for _, r in pairs)}
    if proto == "UDP":
        lost, packets = (sum(r.get(k, 0) for _, r in pairs) for k in ("lost_packets", "packets"))
        rep.update(lost_packets=lost, packets=packets, loss_rate=lost / packets if packets else None,
                   jitter_ms=max(r.get("jitter_ms", 0.0) for _, r in pairs))
    elif all("retransmits" in s for s, _ in pairs):
        rep["retransmits"] = sum(s["retransmits"] for s, _ in pairs)
    return rep


def workload_fields(rep, wall):
    """A run's fields from its workload's report (workload_report()) and its wall time (s)."""
    f = {}
    lat = rep.get("latencies_ms")
    if isinstance(lat, list) and lat:
        f.update(latency_mean_ms=statistics.fmean(lat), latency_p50_ms=quantile(lat, 0.5),
                 latency_p99_ms=quantile(lat, 0.99), requests=len(lat))
    for k in ("p50_ms", "p99_ms"):
        if rep.get(k) is not None and "latency_" + k not in f:
            f["latency_" + k] = float(rep[k])
    if rep.get("throughput_bps") is not None:
        f["throughput_workload_bps"] = float(rep["throughput_bps"])
    elif rep.get("bytes") is not None and wall > 0:
        f["throughput_workload_bps"] = 8.0 * float(rep["bytes"]) / wall
    if rep.get("retransmits") is not None:
        f["retransmits_workload"] = int(rep["retransmits"])
    if rep.get("loss_rate") is not None:
        f["loss_rate_workload"] = float(rep["loss_rate"])
    return f


def stall_causes(pb2):
    """StallCause names as GetRuleEffect's maps key them ("rto", "tlp", ...), in the enum's order."""
    return [v.name[len("STALL_CAUSE_"):].lower() for v in pb2.StallCause.DESCRIPTOR.values if v.number]


def stall_fields(effect):
    """The stalls of one run from a RuleEffect message: by cause {"count", "time_ns"}, on the
    rule's flows and linked to its drops, with their totals; all None when the daemon reported
    none (both maps empty)."""
    on = {k: {"count": v.count, "time_ns": v.time_ns} for k, v in effect.stalls_on_flows.items()}
    caused = {k: {"count": v.count, "time_ns": v.time_ns} for k, v in effect.stalls_caused.items()}
    if not on and not caused:
        return {"stalls_reported": False, "stalls_on_flows": None, "stalls_caused": None, "stalls": None,
                "stall_ns": None, "stall_caused_ns": None}
    return {"stalls_reported": True, "stalls_on_flows": on, "stalls_caused": caused,
            "stalls": sum(v["count"] for v in on.values()), "stall_ns": sum(v["time_ns"] for v in on.values()),
            "stall_caused_ns": sum(v["time_ns"] for v in caused.values())}


def settle_stalls(runs):
    """True when the daemon reported stalls in some run: then it fills the fields, and a run it
    reported none for had none (its fields become 0). False: every run keeps None."""
    reported = any(r.get("stalls_reported") for r in runs)
    if reported:
        for r in runs:
            if r.get("stalls_reported") is False:
                r.update(stalls_on_flows={}, stalls_caused={}, stalls=0, stall_ns=0, stall_caused_ns=0)
    return reported


# How long a run waits, after its workload exited, for the rule's flows to close (their last
# resends counted) before it reads the rule's effect.
CLOSES_WITHIN_S = 5.0


class FlowTracker:
    """The rule's flows from WatchFlows: the last state of each, in a thread."""

    def __init__(self, client, rule_id, interval="200ms"):
        self.stream = client.watch_flows(rule=rule_id, interval=interval)
        self.lock = threading.Lock()
        self.flows = {}        # cookie -> last Flow
        self.baseline = {}     # cookie -> bytes_acked when the run began (flows open before it)
        self.cwnd_samples = []
        self.srtt_samples = []
        self.error = None
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        try:
            for u in self.stream:
                with self.lock:
                    for f in u.flows:
                        if u.snapshot:
                            self.baseline[f.cookie] = f.bytes_acked
                        self.flows[f.cookie] = f
                        if f.cwnd:
                            self.cwnd_samples.append(f.cwnd)
                        if f.srtt_us:
                            self.srtt_samples.append(f.srtt_us)
        except LossdError as e:
            self.error = e

    def stop(self, closes_within=0.0):
        """Ends the stream after the last flows' updates (interval 200 ms), and after every
        flow it saw closed, for up to closes_within seconds: a workload that exited may have
        closed with data unacknowledged, and the resends of its last drops come after."""
        time.sleep(0.5)
        deadline = time.monotonic() + closes_within
        while time.monotonic() < deadline:
            with self.lock:
                if all(f.closed for f in self.flows.values()):
                    break
            time.sleep(0.05)
        self.stream.close()
        self.t.join(timeout=5)
        with self.lock:
            acked = sum(f.bytes_acked - self.baseline.get(c, 0) for c, f in self.flows.items())
            mins = [f.cwnd_min for f in self.flows.values() if f.cwnd_min and f.cwnd_min < 2**31]
            return {"flows": len(self.flows), "bytes_acked": acked,
                    "cwnd_mean": statistics.fmean(self.cwnd_samples) if self.cwnd_samples else None,
                    "cwnd_min": min(mins) if mins else None,
                    "srtt_mean_us": statistics.fmean(self.srtt_samples) if self.srtt_samples else None}


def run_workload(cmd, env, stop):
    """Runs cmd (shell) in its own process group; stops it (SIGTERM, then SIGKILL) on stop."""
    p = subprocess.Popen(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env, start_new_session=True)
    out = {}
    t = threading.Thread(target=lambda: out.update(zip(("stdout", "stderr"), p.communicate())), daemon=True)
    t.start()
    while t.is_alive():
        if stop.wait(0.05):
            for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 3)):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    break
                t.join(wait)
                if not t.is_alive():
                    break
            t.join(5)
            raise Interrupted()
    return p.returncode, out.get("stdout", ""), out.get("stderr", "")


def one_run(client, a, target_kw, st, step, rep, stop):
    hold_ns = a.duration_ns if not a.workload else a.workload_timeout_ns
    model, model_name = step_model(st)
    rate = st["rate"]
    rule = client.add_rule(ttl="%dns" % (hold_ns + a.grace_ns), force=a.force,
                           labels={"client": "sweep", "pid": str(os.getpid()), "step": str(step),
                                   "rep": str(rep)}, **model, **target_kw)
    result = {"step": step, "rep": rep, "label": st["label"], "model": model_name,
              "configured_rate": rate, "rule": rule.id, "ok": True}
    tracker = None
    try:
        tracker = FlowTracker(client, rule.id)
        t0 = time.monotonic()
        if a.workload:
            env = dict(os.environ, LOSSD_SWEEP_RATE=repr(rate), LOSSD_SWEEP_STEP=str(step),
                       LOSSD_SWEEP_REP=str(rep))
            rc, out, err = run_workload(a.workload, env, stop)
            wall = time.monotonic() - t0
            result["workload_exit"] = rc
            rep_ = workload_report(out)
            why = rep_.get("error") or (err.strip() or out.strip())[-500:]
            if rc != 0 or rep_.get("error"):
                result["ok"] = False
                result["error"] = ("workload exited %d: %s" % (rc, why) if rc != 0 else
                                   "workload reported an error: %s" % why)
            result["workload_report"] = {k: v for k, v in rep_.items() if k != "latencies_ms"}
            result.update(workload_fields(rep_, wall))
        else:
            if stop.wait(a.duration_ns / 1e9):
                raise Interrupted()
            wall = time.monotonic() - t0
        result["wall_s"] = wall
        flows = tracker.stop(closes_within=CLOSES_WITHIN_S if a.workload else 0)
        tracker = None
        effect = client.rule_effect(rule)
        c = effect.counters
        # The daemon's rate and interval: over skbs, the unit the decision is made on
        # (docs/architecture.md#measured-rate), not over segments.
        result.update(
            matched_segments=c.matched_segments, dropped_segments=c.dropped_segments,
            matched_packets=c.matched_packets, dropped_packets=c.dropped_packets,
            picked_packets=c.picked_packets,
            measured_rate=effect.measured_rate if c.matched_packets else None,
            rate_ci_low=effect.rate_ci_low, rate_ci_high=effect.rate_ci_high,
            retransmitted_by_type=dict(effect.retransmitted_segments),
            retransmitted_segments=effect.retransmitted_total,
            rto=effect.retransmitted_segments.get("rto", 0),
            flows=flows["flows"], bytes_acked=flows["bytes_acked"],
            throughput_obs_bps=8.0 * flows["bytes_acked"] / wall if wall > 0 else None,
            cwnd_mean=flows["cwnd_mean"], cwnd_min=flows["cwnd_min"], srtt_mean_us=flows["srtt_mean_us"],
            **stall_fields(effect.raw))
    finally:
        if tracker:
            tracker.stream.close()
        try:
            client.delete_rule(rule)
        except LossdError as e:
            if e.code != "NOT_FOUND":
                print("sweep: deleting rule %d failed: %s (it expires by its TTL)" % (rule.id, e),
                      file=sys.stderr, flush=True)
    return result


def summarize(runs, steps):
    out = []
    for step, st in enumerate(steps):
        if not isinstance(st, dict):  # a bare rate
            st = {"label": format_rate(st), "rate": st, "ge": None}
        rs = [r for r in runs if r["step"] == step and r.get("ok")]
        s = {"step": step, "label": st["label"], "configured_rate": st["rate"], "ge": st["ge"],
             "markov": st.get("markov"), "runs": len(rs)}
        for m in METRICS:
            s[m] = describe([r.get(m) for r in rs])
        types = {}
        for r in rs:
            for k, v in r.get("retransmitted_by_type", {}).items():
                types.setdefault(k, []).append(v)
        s["retransmitted_by_type_mean"] = {k: statistics.fmean(v) for k, v in types.items()}
        # mean stall time per run by cause, over the runs with stall data (None: no such run)
        for key, out_key in (("stalls_on_flows", "stall_ns_by_cause_mean"),
                             ("stalls_caused", "stall_caused_ns_by_cause_mean")):
            have = [r[key] for r in rs if r.get(key) is not None]
            causes = sorted({c for d in have for c in d})
            s[out_key] = {c: statistics.fmean(d.get(c, {}).get("time_ns", 0) for d in have)
                          for c in causes} if have else None
        out.append(s)
    return out


def fmt(v, scale=1.0, digits=1):
    if v is None:
        return "-"
    return "%.*f" % (digits, v * scale)


def top_causes(by_cause, n=3):
    """'rto 412, tlp 35' (ms, the n largest that are not 0); '-' for None; '0' when all are 0."""
    if by_cause is None:
        return "-"
    top = sorted(((v, c) for c, v in by_cause.items() if v > 0), reverse=True)[:n]
    return ", ".join("%s %s" % (c, fmt(v, 1e-6, 0)) for v, c in top) or "0"


def table(summary):
    head = ("rate", "runs", "measured", "loss wl", "thr obs Mbit/s", "thr wl Mbit/s", "p50 ms", "p99 ms",
            "retrans segs", "rtx wl", "rto", "cwnd mean", "cwnd min", "srtt ms", "stall ms", "by drops ms",
            "stall ms by cause")
    rows = [head]
    for s in summary:
        def m(k, key="mean"):
            return s[k][key] if s[k] else None
        rows.append((s.get("label") or format_rate(s["configured_rate"]), str(s["runs"]),
                     format_rate(m("measured_rate")) if m("measured_rate") is not None else "-",
                     format_rate(m("loss_rate_workload")) if m("loss_rate_workload") is not None else "-",
                     "%s ±%s" % (fmt(m("throughput_obs_bps"), 1e-6), fmt(m("throughput_obs_bps", "std"), 1e-6)),
                     fmt(m("throughput_workload_bps"), 1e-6),
                     fmt(m("latency_p50_ms"), 1, 2), fmt(m("latency_p99_ms"), 1, 2),
                     fmt(m("retransmitted_segments"), 1, 0), fmt(m("retransmits_workload"), 1, 0),
                     fmt(m("rto"), 1, 1),
                     fmt(m("cwnd_mean")), fmt(m("cwnd_min"), 1, 0), fmt(m("srtt_mean_us"), 1e-3, 2),
                     fmt(m("stall_ns"), 1e-6, 1), fmt(m("stall_caused_ns"), 1e-6, 1),
                     top_causes(s.get("stall_ns_by_cause_mean"))))
    w = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w[i]) for i, c in enumerate(r)) for r in rows)


def write_outputs(outdir, doc, plot=True):
    os.makedirs(outdir, exist_ok=True)
    paths = {"json": os.path.join(outdir, "sweep.json"), "csv": os.path.join(outdir, "sweep.csv"),
             "summary_csv": os.path.join(outdir, "summary.csv")}
    with open(paths["json"], "w") as f:
        json.dump(doc, f, indent=1)
    causes = doc.get("stalls", {}).get("causes") or sorted(
        {c for r in doc["runs"] for k in ("stalls_on_flows", "stalls_caused") for c in (r.get(k) or {})})
    cols = ["step", "rep", "label", "configured_rate", "ok", "rule"] + list(METRICS) + \
        ["rate_ci_low", "rate_ci_high", "flows", "requests"] + ["rtx_" + t for t in RETRANSMIT_TYPES]
    with open(paths["csv"], "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(cols + ["stall_ns_" + c for c in causes] + ["stall_caused_ns_" + c for c in causes])
        for r in doc["runs"]:
            row = [r.get(c) for c in cols[:-len(RETRANSMIT_TYPES)]]
            row += [r.get("retransmitted_by_type", {}).get(t, 0) for t in RETRANSMIT_TYPES]
            for k in ("stalls_on_flows", "stalls_caused"):  # blank: the daemon reported none
                row += [None if r.get(k) is None else r[k].get(c, {}).get("time_ns", 0) for c in causes]
            wr.writerow(row)
    with open(paths["summary_csv"], "w", newline="") as f:
        wr = csv.writer(f)
        stats = ("mean", "std", "min", "q1", "median", "q3", "max")
        wr.writerow(["label", "configured_rate", "runs"] + ["%s_%s" % (m, s) for m in METRICS for s in stats] +
                    ["stall_ns_mean_" + c for c in causes] + ["stall_caused_ns_mean_" + c for c in causes])
        for s in doc["summary"]:
            by = [s.get(k) for k in ("stall_ns_by_cause_mean", "stall_caused_ns_by_cause_mean")]
            wr.writerow([s.get("label"), s["configured_rate"], s["runs"]] +
                        [(s[m] or {}).get(st) for m in METRICS for st in stats] +
                        [None if b is None else b.get(c, 0.0) for b in by for c in causes])
    if plot:
        paths.update(plot_summary(outdir, doc))
    return paths


def plot_summary(outdir, doc):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise LossdInputError("the plot needs matplotlib: apt-get install python3-matplotlib "
                              "(or --no-plot)")
    summ = doc["summary"]
    x = [100.0 * s["configured_rate"] for s in summ]

    def series(k, scale=1.0):
        mean = [s[k]["mean"] * scale if s[k] else float("nan") for s in summ]
        lo = [s[k]["min"] * scale if s[k] else float("nan") for s in summ]
        hi = [s[k]["max"] * scale if s[k] else float("nan") for s in summ]
        return mean, lo, hi

    fig, ax = plt.subplots(1, 4, figsize=(20, 4.2))
    for k, label in (("throughput_obs_bps", "observer (bytes acked)"),
                     ("throughput_workload_bps", "workload")):
        m, lo, hi = series(k, 1e-6)
        if any(v == v for v in m):
            ax[0].errorbar(x, m, yerr=[[a - b for a, b in zip(m, lo)], [c - a for a, c in zip(m, hi)]],
                           marker="o", capsize=3, label=label)
    ax[0].set_ylabel("throughput (Mbit/s)")
    ax[0].legend()
    for k, label in (("latency_p50_ms", "median"), ("latency_p99_ms", "p99")):
        m, lo, hi = series(k)
        if any(v == v for v in m):
            ax[1].plot(x, m, marker="o", label=label)
    ax[1].set_ylabel("request latency (ms)")
    if ax[1].lines:
        ax[1].legend()
    else:
        ax[1].text(0.5, 0.5, "the workload reported no latencies", ha="center", transform=ax[1].transAxes)
    bottom = [0.0] * len(summ)
    pos = list(range(len(summ)))
    for t in RETRANSMIT_TYPES:
        v = [s["retransmitted_by_type_mean"].get(t, 0.0) for s in summ]
        if any(v):
            ax[2].bar(pos, v, bottom=bottom, label=t)
            bottom = [b + c for b, c in zip(bottom, v)]
    labels = [s.get("label") or format_rate(s["configured_rate"]) for s in summ]
    rotation = 30 if any(s.get("ge") or s.get("markov") for s in summ) else 0
    ax[2].set_xticks(pos)
    ax[2].set_xticklabels(labels, rotation=rotation)
    wl = [s["retransmits_workload"]["mean"] if s.get("retransmits_workload") else float("nan") for s in summ]
    if any(v == v for v in wl):
        ax[2].plot(pos, wl, "k_", markersize=20, mew=2, linestyle="none", label="the workload's own count")
    ax[2].set_ylabel("retransmitted segments per run (mean)")
    if any(bottom) or ax[2].lines:
        ax[2].legend()
    for a_ in ax[:2]:
        a_.set_xscale("symlog", linthresh=0.01)
        a_.set_xlabel("configured (mean) loss (%)")
        a_.grid(True, alpha=0.3)
    ax[2].set_xlabel("configured loss")
    # stall time per run by cause (mean), stacked; the part linked to the rule's drops marked
    bottom = [0.0] * len(summ)
    causes = doc.get("stalls", {}).get("causes") or sorted(
        {c for s in summ for c in (s.get("stall_ns_by_cause_mean") or {})})
    for c in causes:
        v = [(s.get("stall_ns_by_cause_mean") or {}).get(c, 0.0) * 1e-6 for s in summ]
        if any(v):
            ax[3].bar(pos, v, bottom=bottom, label=c)
            bottom = [b + x for b, x in zip(bottom, v)]
    caused = [s["stall_caused_ns"]["mean"] * 1e-6 if s.get("stall_caused_ns") else float("nan") for s in summ]
    if any(v == v for v in caused):
        ax[3].plot(pos, caused, "k_", markersize=20, mew=2, linestyle="none", label="linked to the rule's drops")
    ax[3].set_xticks(pos)
    ax[3].set_xticklabels(labels, rotation=rotation)
    ax[3].set_xlabel("configured loss")
    ax[3].set_ylabel("stall time per run (ms, mean)")
    if not any(s.get("stall_ns_by_cause_mean") is not None for s in summ):
        ax[3].text(0.5, 0.5, "the daemon reported no stalls", ha="center", transform=ax[3].transAxes)
    elif ax[3].patches or ax[3].lines:
        ax[3].legend(fontsize="small")
    fig.suptitle(doc.get("title") or "lossd sweep")
    fig.tight_layout()
    out = {}
    for ext in ("png", "svg"):
        p = os.path.join(outdir, "sweep." + ext)
        fig.savefig(p)
        out[ext] = p
    plt.close(fig)
    return out


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="sweep", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    t = ap.add_argument_group("target (as for a rule)")
    t.add_argument("--iface")
    t.add_argument("--cgroup")
    t.add_argument("--dir", default="ingress", choices=("ingress", "egress", "both"))
    t.add_argument("--hook", default="auto", choices=("auto", "xdp", "tc", "cgroup"))
    t.add_argument("--proto", default="tcp")
    t.add_argument("--src")
    t.add_argument("--dst")
    t.add_argument("--sport")
    t.add_argument("--dport")
    t.add_argument("--payload", choices=("any", "only", "none"))
    t.add_argument("--per-segment", action="store_true")
    t.add_argument("--force", action="store_true")
    t.add_argument("--action", help="what each rule does to the packets it picks: drop (default) | "
                   "corrupt | corrupt-payload | duplicate | ecn | ecn-pass (all but drop at tc)")
    s = ap.add_argument_group("steps")
    s.add_argument("--rates", required=True,
                   help="steps, comma-separated, in order: 0,0.1%%,1%%,5%%, ge:P/R/1-H/1-K or "
                   "markov:P13/P31/P32/P23/P14")
    s.add_argument("--repeat", type=int, default=1, help="runs per rate (default 1)")
    s.add_argument("--duration", default="10s", help="hold per run without --workload (default 10s)")
    s.add_argument("--workload", help="shell command run once per run (instead of --duration)")
    s.add_argument("--workload-timeout", default="10m", help="the rule's TTL bound with --workload")
    s.add_argument("--settle", default="1s", help="pause between runs (default 1s)")
    s.add_argument("--grace", default="30s", help="TTL beyond the hold time (default 30s)")
    o = ap.add_argument_group("output")
    o.add_argument("--out", help="directory for sweep.json/.csv/.png/.svg")
    o.add_argument("--no-plot", action="store_true")
    o.add_argument("--title")
    cli.add_connection_args(ap)
    a = ap.parse_args(argv)
    if not (a.iface or a.cgroup):
        ap.error("give --iface and/or --cgroup")
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    try:
        a.steps = [parse_step(r) for r in a.rates.split(",") if r.strip()]
        a.action = action_name(parse_action(a.action))
    except LossdInputError as e:
        ap.error(e.message)
    cli.durations_ns(ap, a, "duration", "workload_timeout", "settle", "grace")
    if not a.steps:
        ap.error("--rates: at least one step")
    return a


def main(argv=None):
    a = parse_args(argv)
    stop = threading.Event()
    got = []

    def on_signal(signum, frame):
        got.append(signum)
        stop.set()
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    client = cli.connect(a)
    target_kw = {"iface": a.iface, "cgroup": a.cgroup, "direction": a.dir, "hook": a.hook,
                 "protocol": None if a.proto == "any" else a.proto, "src": a.src, "dst": a.dst,
                 "sport": a.sport, "dport": a.dport, "payload": a.payload, "per_segment": a.per_segment,
                 "action": None if a.action == "drop" else a.action}
    target_kw = {k: v for k, v in target_kw.items() if v not in (None, False)}
    runs = []
    status = 0
    started = time.time()
    stalls = {"causes": stall_causes(client.pb2), "threshold": None}
    try:
        caps = client.capabilities().raw
        if caps.HasField("stall_threshold"):
            stalls["threshold"] = {"min_ns": caps.stall_threshold.min_ns, "rtts": caps.stall_threshold.rtts}
    except LossdError:
        pass
    try:
        for step, st in enumerate(a.steps):
            for rep in range(a.repeat):
                if stop.is_set():
                    raise Interrupted()
                print("sweep: step %d %s run %d of %d" % (step, st["label"], rep + 1, a.repeat),
                      file=sys.stderr, flush=True)
                r = one_run(client, a, target_kw, st, step, rep, stop)
                runs.append(r)
                if not r["ok"]:
                    print("sweep: %s" % r["error"], file=sys.stderr, flush=True)
                    status = cli.EXIT_ERROR
                if stop.wait(a.settle_ns / 1e9):
                    raise Interrupted()
    except Interrupted:
        status = 128 + (got[0] if got else signal.SIGINT)
        print("sweep: interrupted; the current rule was deleted", file=sys.stderr, flush=True)
    except LossdError as e:
        status = cli.EXIT_USAGE if e.local else cli.EXIT_ERROR
        print("sweep: %s" % e, file=sys.stderr, flush=True)
    finally:
        client.close()
    stalls["reported"] = settle_stalls(runs)
    if not stalls["reported"]:
        stalls["note"] = STALLS_NONE
    doc = {"title": a.title, "started_unix": started, "command": sys.argv, "target": target_kw,
           "steps": a.steps, "rates": [st["rate"] for st in a.steps], "repeat": a.repeat,
           "hold": a.workload or ("%gs" % (a.duration_ns / 1e9)),
           "complete": status == 0 and len(runs) == len(a.steps) * a.repeat,
           "stalls": stalls, "runs": runs, "summary": summarize(runs, a.steps)}
    print(table(doc["summary"]), flush=True)
    if a.out and runs:
        try:
            paths = write_outputs(a.out, doc, plot=not a.no_plot)
            print("sweep: wrote " + ", ".join(sorted(paths.values())), file=sys.stderr, flush=True)
        except LossdInputError as e:
            print("sweep: " + e.message, file=sys.stderr, flush=True)
            status = status or cli.EXIT_ERROR
    return status


if __name__ == "__main__":
    sys.exit(main())
