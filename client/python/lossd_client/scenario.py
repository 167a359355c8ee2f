"""Scenarios: a timeline of rules the daemon runs (docs/guards.md#scenarios).

    lossctl scenario run FILE [--dry-run] [--detach] [--out DIR]
    lossctl scenario ls | get ID [--out DIR] | abort ID
    python3 -m lossd_client.scenario [--socket PATH ...] run FILE ...   (the same)

A scenario file (YAML or JSON):

    name: checkout-brownout
    guard: stall>2s            # every rule without a guard of its own
    continue_on_guard: false   # default: a guard's stop ends the scenario
    steps:
      - name: baseline
        duration: 5s           # no rules: a pause
      - name: light
        duration: 20s
        rules:
          - {iface: eth0, direction: egress, dport: 8080, rate: 1%}
      - name: blackhole
        duration: 10s
        rules:
          - {iface: eth0, direction: egress, dport: 8080, rate: 100%, guard: stall>500ms}

A rule's fields are Client.add_rule's arguments (a dash may stand for an
underscore: start-after). The daemon runs it: it survives the client's exit,
`ls`/`get` show its progress, `abort` ends it. Its report (JSON, a table and
plots drawn by matplotlib) says per step what was configured, what was
measured (with its 99.9 % interval), what TCP did (retransmits by type,
stalls by cause, where the flows' time went) and which guards fired.

Exit status of `run` (followed to its end) and `get`: 0 done, 3 stopped by a
guard, 1 failed or aborted (or any error), 2 bad input.
"""

import argparse
import json
import os
import signal
import sys
import time

from . import spec as _spec
from .errors import LossdError, LossdInputError
from .units import format_duration, format_police, format_rate, parse_duration

MAX_FILE_BYTES = 1 << 20
EXIT_ERROR, EXIT_USAGE, EXIT_STOPPED = 1, 2, 3  # as cli's, and a guard's stop
RETRANSMIT_TYPES = ("fast", "rto", "loss", "tlp", "syn", "synack", "probe0", "unknown")
_TOP = {"name", "guard", "continue_on_guard", "steps"}
_STEP = {"name", "duration", "rules"}


# ------------------------------------------------------------------ input --

def load(path):
    """A scenario file (YAML or JSON) as a dict; errors name the file."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise LossdInputError("%s: %s" % (path, e.strerror or e))
    if len(data) > MAX_FILE_BYTES:
        raise LossdInputError("%s: larger than %d bytes" % (path, MAX_FILE_BYTES))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LossdInputError("%s: not UTF-8 (%s)" % (path, e))
    return parse(text, path)


def parse(text, source="scenario"):
    """A scenario's text (JSON, or YAML: Debian's python3-yaml) as a dict."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise LossdInputError("%s: %s" % (source, e))
    else:
        try:
            import yaml
        except ImportError:
            raise LossdInputError("%s: YAML needs python3-yaml (apt-get install python3-yaml), "
                                  "or write the scenario as JSON" % source)
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise LossdInputError("%s: %s" % (source, str(e).replace("\n", " ")))
    if not isinstance(doc, dict):
        raise LossdInputError("%s: expected a mapping with name and steps, got %s"
                              % (source, type(doc).__name__))
    return doc


def _keys(d, allowed, where):
    if not isinstance(d, dict):
        raise LossdInputError("%s: expected a mapping, got %r" % (where, d))
    norm = {}
    for k, v in d.items():
        key = str(k).replace("-", "_")
        if key not in allowed:
            raise LossdInputError("%s: unknown field %r (expected %s)"
                                  % (where, k, ", ".join(sorted(allowed))))
        norm[key] = v
    return norm


def _rule(d, where):
    if not isinstance(d, dict):
        raise LossdInputError("%s: expected a mapping of add_rule() arguments, got %r" % (where, d))
    kw = {str(k).replace("-", "_"): v for k, v in d.items()}
    try:
        return _spec.rule_spec(**kw)
    except TypeError as e:  # an argument rule_spec does not take
        raise LossdInputError("%s: %s" % (where, str(e).replace("rule_spec() ", "")))
    except LossdInputError as e:
        raise LossdInputError("%s: %s" % (where, e.message))


def scenario_id(value):
    """A scenario's id: an int, or a run (run_scenario's dict)."""
    sid = value.get("id") if isinstance(value, dict) else value
    if isinstance(sid, bool) or not isinstance(sid, int) or not 0 < sid < 1 << 64:
        raise LossdInputError("id: expected a scenario id (a positive number) or a run, got %r" % (value,))
    return sid


def to_proto(scenario, pb2, source="scenario"):
    """A lossd.v1.Scenario from a file's path, its dict, or a Scenario itself."""
    if hasattr(scenario, "DESCRIPTOR") and scenario.DESCRIPTOR.name == "Scenario":
        return scenario
    if isinstance(scenario, (str, os.PathLike)):
        source = str(scenario)
        scenario = load(scenario)
    doc = _keys(scenario, _TOP, source)
    out = pb2.Scenario()
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise LossdInputError("%s: name: give the scenario a name (letters, digits, . _ -)" % source)
    out.name = name
    if doc.get("guard"):
        try:
            g = _spec._guard(doc["guard"])
        except LossdInputError as e:
            raise LossdInputError("%s: %s" % (source, e.message))
        _spec.to_proto(g, out.guard)
    cont = doc.get("continue_on_guard", False)
    if not isinstance(cont, bool):
        raise LossdInputError("%s: continue_on_guard: true or false, got %r" % (source, cont))
    out.continue_on_guard = cont
    steps = doc.get("steps")
    if not isinstance(steps, list) or not steps:
        raise LossdInputError("%s: steps: a list of steps (name, duration, rules)" % source)
    for i, st in enumerate(steps):
        where = "%s: step %d" % (source, i + 1)
        s = _keys(st, _STEP, where)
        if s.get("name") is not None:
            if not isinstance(s["name"], str):
                raise LossdInputError("%s: name: expected text, got %r" % (where, s["name"]))
            where += " (%s)" % s["name"]
        if "duration" not in s:
            raise LossdInputError("%s: duration: how long the step lasts, e.g. 10s" % where)
        try:
            dur = parse_duration(s["duration"], "duration")
        except LossdInputError as e:
            raise LossdInputError("%s: %s" % (where, e.message))
        ps = out.steps.add(name=s.get("name") or "", duration_ns=dur)
        rules = s.get("rules") or []
        if not isinstance(rules, list):
            rules = [rules]
        for k, r in enumerate(rules):
            _spec.to_proto(_rule(r, "%s: rule %d" % (where, k + 1)), ps.rules.add())
    return out


# ------------------------------------------------------------ the answers --

def plain(m):
    """A message as plain Python (ints stay ints; enums by name; set fields only)."""
    out = {}
    for fd, v in m.ListFields():
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            vf = fd.message_type.fields_by_name["value"]
            out[fd.name] = {k: plain(x) if vf.message_type else x for k, x in v.items()}
        elif fd.label == fd.LABEL_REPEATED:
            out[fd.name] = [_value(fd, x) for x in v]
        else:
            out[fd.name] = _value(fd, v)
    return out


def _value(fd, v):
    if fd.message_type is not None:
        return plain(v)
    if fd.enum_type is not None:
        return fd.enum_type.values_by_number[v].name if v in fd.enum_type.values_by_number else v
    return v


def run_dict(m):
    """A ScenarioRun as a dict, its state in short ('running', 'done', ...)."""
    d = plain(m)
    d["state"] = d.get("state", "SCENARIO_STATE_UNSPECIFIED").replace("SCENARIO_STATE_", "").lower()
    d.setdefault("id", 0)
    d.setdefault("current_step", 0)  # proto3 leaves a zero out of plain()
    return d


# ----------------------------------------------------------------- report --

def _rule_text(spec):
    """One line of what a rule was configured to do (a RuleSpec as plain())."""
    loss = spec.get("loss", {})
    if "ramp" in loss:
        model = "ramp " + ",".join("%s/%s" % (format_rate(s.get("rate", 0)), format_duration(s.get("duration_ns", 0)))
                                   for s in loss["ramp"].get("steps", []))
    elif "gilbert_elliott" in loss:
        model = "gilbert-elliott"
    elif "every_nth" in loss:
        model = "every %d" % loss["every_nth"]
    elif "first_k" in loss:
        model = "first %d" % loss["first_k"]
    elif "markov" in loss:
        model = "markov " + ",".join(format_rate(loss["markov"].get(k, 0)) for k in _spec.MARKOV_KEYS)
    elif "police" in loss:
        p = loss["police"]
        model = "police " + format_police(int(p.get("rate_bps", 0)), int(p.get("burst_bytes", 0)),
                                          bool(p.get("per_flow", False)))
    else:
        model = format_rate(loss.get("bernoulli", {}).get("rate", 0))
    action = spec.get("action", "ACTION_DROP")
    if action != "ACTION_DROP":
        model += " " + _spec.action_name(action)
    where = spec.get("interface") or spec.get("cgroup") or spec.get("unit") or \
        spec.get("container") or spec.get("pod") or ("pid %s" % spec["pid"] if spec.get("pid") else "?")
    d = spec.get("direction", "DIRECTION_INGRESS").replace("DIRECTION_", "").lower()
    m = spec.get("match", {})
    parts = []
    if m.get("protocol"):
        parts.append(m["protocol"])
    for key in ("src", "dst"):
        if m.get(key):
            parts.append("%s %s" % (key, m[key]))
    for key in ("sport", "dport"):
        if m.get(key):
            lo, hi = m[key].get("lo", 0), m[key].get("hi", 0)
            parts.append("%s %s" % (key, lo if not hi or hi == lo else "%s-%s" % (lo, hi)))
    if m.get("payload"):
        parts.append("payload " + m["payload"].replace("PAYLOAD_", "").lower())
    if spec.get("guard"):
        g = spec["guard"]
        conds = []
        if g.get("stall_ns"):
            cause = g.get("stall_cause", "")[12:].lower()  # "STALL_CAUSE_RTO" -> "rto"
            conds.append("stall%s>%s" % ("(%s)" % cause if cause else "", format_duration(g["stall_ns"])))
        for kind in ("rtos", "resends", "resets"):
            if g.get(kind + "_window_ns"):
                conds.append("%s>%d/%s" % (kind, g.get(kind, 0), format_duration(g[kind + "_window_ns"])))
        if g.get("retrans_window_ns"):
            conds.append("retrans>%s/%s" % (format_rate(g.get("retrans", 0)),
                                            format_duration(g["retrans_window_ns"])))
        if g.get("misbehaves"):
            conds.append("misbehaves")
        if g.get("watch_port"):
            conds.append("watch=%d" % g["watch_port"])
        parts.append("guard " + ",".join(conds))
    return "%s %s %s%s" % (model, where, d, (" " + " ".join(parts)) if parts else "")


def step_rows(run):
    """Per rule of every step, what the table and the plots show."""
    rows = []
    for st in run.get("steps", []):
        rules = st.get("rules", [])
        effects = st.get("effects", [])
        if not rules:
            rows.append({"step": st.get("index", 0), "name": st.get("name", ""), "rule": None,
                         "outcome": st.get("outcome", ""), "started": bool(st.get("started_unix_ns"))})
            continue
        for k, r in enumerate(rules):
            e = effects[k] if k < len(effects) else {}
            c = e.get("counters", r.get("counters", {}))
            stalls = e.get("stalls_on_flows", {})
            stalls_caused = e.get("stalls_caused", {})
            rows.append({
                "step": st.get("index", 0), "name": st.get("name", ""), "rule": r.get("id", 0),
                "configured": _rule_text(r.get("spec", {})),
                "configured_rate": e.get("configured_rate"),
                "state": r.get("state", "").replace("RULE_STATE_", "").lower(),
                "matched": c.get("matched_packets", 0), "dropped": c.get("dropped_packets", 0),
                "measured_rate": e.get("measured_rate"), "ci": (e.get("rate_ci_low"), e.get("rate_ci_high")),
                "within_ci": e.get("configured_within_ci"),
                "retransmits": {t: e.get("retransmitted_segments", {}).get(t, 0) for t in RETRANSMIT_TYPES},
                "resent_dropped": sum(e.get("resent_dropped_segments", {}).values()),
                "stalls": {c2: v.get("count", 0) for c2, v in stalls.items()},
                "stalls_caused": {c2: v.get("count", 0) for c2, v in stalls_caused.items()},
                "stall_ns": sum(v.get("time_ns", 0) for v in stalls.values()),
                "limit_ns": e.get("limit_ns", {}),
                "guard": (r.get("guard_stop") or {}).get("condition", ""),
                "reason": r.get("reason", "") if r.get("guard_stop") else "",
                "outcome": st.get("outcome", ""), "started": bool(st.get("started_unix_ns")),
            })
    return rows


def _pct(x):
    return "-" if x is None else format_rate(x)


def table(run):
    """The report as text: one line per rule of each step."""
    head = ["step", "name", "rule", "configured", "matched", "dropped", "measured [99.9% CI]",
            "retransmits", "stalls", "limited by", "guard", "outcome"]
    rows = [head]
    for r in step_rows(run):
        if r["rule"] is None:
            rows.append([str(r["step"]), r["name"] or "-", "-", "(pause)" if r["started"] else "(not run)",
                         "", "", "", "", "", "", "", r["outcome"] or ("" if r["started"] else "-")])
            continue
        if not r["started"]:
            rows.append([str(r["step"]), r["name"] or "-", "-", r["configured"], "", "", "", "", "", "", "", "-"])
            continue
        m = "-" if r["measured_rate"] is None or not r["matched"] else "%s [%s, %s]%s" % (
            _pct(r["measured_rate"]), _pct(r["ci"][0]), _pct(r["ci"][1]),
            "" if r["within_ci"] else " !")
        rtx = " ".join("%s %d" % (t, n) for t, n in r["retransmits"].items() if n) or "0"
        stalls = " ".join("%s %d" % (c, n) for c, n in sorted(r["stalls"].items()) if n) or "0"
        outcome = r["outcome"]
        if len(outcome) > 40:
            outcome = outcome[:37] + "..."
        lim = r["limit_ns"]
        busy = sum(lim.values())
        top = max(lim, key=lim.get) if busy else None
        limited = "%s %d%%" % (top, round(100 * lim[top] / busy)) if top else "-"
        rows.append([str(r["step"]), r["name"] or "-", str(r["rule"]), r["configured"], str(r["matched"]),
                     str(r["dropped"]), m, rtx, stalls, limited, r["guard"] or "-", outcome])
    w = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w[i]) for i, c in enumerate(row)).rstrip() for row in rows]
    title = "scenario %s (%s): %s" % (run.get("id", 0), run.get("scenario", {}).get("name", ""), run["state"])
    if run.get("reason"):
        title += ": " + run["reason"]
    notes = ["guard: rule %s %s" % (r["rule"], r["reason"]) for r in step_rows(run) if r.get("reason")]
    return "\n".join([title] + lines + notes +
                     (["! the configured rate lies outside the measured 99.9 % interval"]
                      if any(r.get("within_ci") is False and r.get("matched") and r["rule"] is not None
                             for r in step_rows(run)) else []))


def plot(outdir, run):
    """scenario.png and .svg: per step, configured and measured loss (with the
    interval), retransmitted segments by type, stalls by cause."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise LossdInputError("the plot needs matplotlib: apt-get install python3-matplotlib (or --no-plot)")
    rows = [r for r in step_rows(run) if r["rule"] is not None and r["started"]]
    steps = run.get("steps", [])
    labels = ["%d %s%s" % (s.get("index", 0), s.get("name", ""), "" if s.get("started_unix_ns") else "\n(not run)")
              for s in steps]
    fig, ax = plt.subplots(1, 3, figsize=(18, 4.6))
    title = "scenario %s (%s): %s" % (run.get("id", 0), run.get("scenario", {}).get("name", ""), run["state"])
    fig.suptitle(title)
    xs = list(range(len(steps)))
    # Loss: configured vs measured per rule.
    for j, r in enumerate(rows):
        x = r["step"] - 1 + (j % 4) * 0.08
        if r["measured_rate"] is not None and r["matched"]:
            lo, hi = r["ci"]
            m = r["measured_rate"]
            ax[0].errorbar([x], [m * 100], yerr=[[max(0, m - (lo or 0)) * 100], [max(0, (hi or 0) - m) * 100]],
                           fmt="o", color="C0", capsize=4, label="measured (99.9 % CI)" if j == 0 else None)
        if r["configured_rate"] is not None:
            ax[0].plot([x], [r["configured_rate"] * 100], "k_", markersize=18, mew=2,
                       label="configured" if j == 0 else None)
    ax[0].set_ylabel("loss (%)")
    ax[0].set_ylim(0, 105)
    ax[0].set_title("loss per rule")
    for r in rows:  # the guards that fired, where they fired
        if r["guard"]:
            ax[0].annotate("stopped by its guard (%s)" % r["guard"], (r["step"] - 1 + 0.2, 50), ha="center",
                           fontsize=8, color="C3", rotation=90, va="center")
    # Retransmits by type, per step.
    bottom = [0] * len(steps)
    for t in RETRANSMIT_TYPES:
        vals = [0] * len(steps)
        for r in rows:
            vals[r["step"] - 1] += r["retransmits"].get(t, 0)
        if any(vals):
            ax[1].bar(xs, vals, bottom=bottom, label=t)
            bottom = [b + v for b, v in zip(bottom, vals)]
    ax[1].set_ylabel("segments")
    ax[1].set_title("retransmitted segments by type")
    # Stalls by cause, per step.
    causes = sorted({c for r in rows for c, n in r["stalls"].items() if n})
    bottom = [0] * len(steps)
    for c in causes:
        vals = [0] * len(steps)
        for r in rows:
            vals[r["step"] - 1] += r["stalls"].get(c, 0)
        ax[2].bar(xs, vals, bottom=bottom, label=c)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax[2].set_ylabel("stalls")
    ax[2].set_title("stalls on the rules' flows by cause")
    for a in ax:
        a.set_xticks(xs)
        a.set_xticklabels(labels, rotation=15, ha="right")
        a.set_xlim(-0.6, len(steps) - 0.4)
        a.grid(axis="y", alpha=0.3)
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=8)
    fig.tight_layout()
    paths = {"png": os.path.join(outdir, "scenario.png"), "svg": os.path.join(outdir, "scenario.svg")}
    fig.savefig(paths["png"], dpi=110)
    fig.savefig(paths["svg"])
    plt.close(fig)
    return paths


def write_outputs(outdir, run, plots=True):
    """scenario.json (the run as the daemon reported it), scenario.txt (the
    table) and, with plots, scenario.png/.svg."""
    os.makedirs(outdir, exist_ok=True)
    paths = {"json": os.path.join(outdir, "scenario.json"), "txt": os.path.join(outdir, "scenario.txt")}
    with open(paths["json"], "w") as f:
        json.dump(run, f, indent=1)
    with open(paths["txt"], "w") as f:
        f.write(table(run) + "\n")
    if plots:
        paths.update(plot(outdir, run))
    return paths


def exit_status(run):
    return {"done": 0, "planned": 0, "running": 0, "stopped": EXIT_STOPPED}.get(run["state"], EXIT_ERROR)


# -------------------------------------------------------------------- cli --

def _ls_line(run):
    steps = run.get("steps", [])
    cur = run.get("current_step", 0)
    prog = "step %d of %d" % (cur, len(steps)) if cur else "%d steps" % len(steps)
    if run["state"] == "running" and cur:
        st = steps[cur - 1]
        elapsed = max(0, time.time_ns() - st.get("started_unix_ns", 0))
        prog += " (%s: %s of %s)" % (st.get("name") or "-", format_duration(min(elapsed, st.get("duration_ns", 0))),
                                     format_duration(st.get("duration_ns", 0)))
    return "%-4s %-24s %-8s %-40s %s" % (run.get("id", 0), run.get("scenario", {}).get("name", ""),
                                         run["state"], prog, run.get("reason", ""))


def _plan(run):
    lines = ["scenario %s: planned, %d steps, %s in all (nothing changed)" % (
        run.get("scenario", {}).get("name", ""), len(run.get("steps", [])),
        format_duration(run.get("duration_ns", 0)))]
    for st in run.get("steps", []):
        lines.append("  +%-9s step %d %-16s %-8s %s" % (
            format_duration(st.get("offset_ns", 0)) if st.get("offset_ns") else "0s", st.get("index", 0),
            st.get("name") or "-",
            format_duration(st.get("duration_ns", 0)),
            "; ".join(_rule_text(r.get("spec", {})) for r in st.get("rules", [])) or "(pause)"))
    return "\n".join(lines)


def _emit(a, run):
    if a.output == "json":
        print(json.dumps(run, indent=1))
    elif run["state"] == "planned":
        print(_plan(run))
    else:
        print(table(run))
    sys.stdout.flush()


def _outputs(a, run):
    if not a.out:
        return 0
    try:
        paths = write_outputs(a.out, run, plots=not a.no_plot)
        print("scenario: wrote " + ", ".join(sorted(paths.values())), file=sys.stderr, flush=True)
        return 0
    except (LossdInputError, OSError) as e:
        print("scenario: %s" % (getattr(e, "message", None) or e), file=sys.stderr, flush=True)
        return EXIT_ERROR


def _follow(client, run, interval=0.25):
    """Prints each step's start and end until the run ends; Ctrl-C leaves it running."""
    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    said = set()
    while True:
        for st in run.get("steps", []):
            key = (st["index"], "start")
            if st.get("started_unix_ns") and key not in said:
                said.add(key)
                ids = [str(r.get("id", 0)) for r in st.get("rules", [])]
                print("scenario %d: step %d (%s) started%s" % (run["id"], st["index"], st.get("name") or "-",
                                                                 ": rules " + ", ".join(ids) if ids else ": a pause"),
                      file=sys.stderr, flush=True)
            key = (st["index"], "end")
            if st.get("ended_unix_ns") and key not in said:
                said.add(key)
                print("scenario %d: step %d (%s) %s" % (run["id"], st["index"], st.get("name") or "-",
                                                        st.get("outcome", "")), file=sys.stderr, flush=True)
        if run["state"] != "running":
            if run.get("settled") or stop:
                return run
            if "settle" not in said:
                said.add("settle")
                print("scenario %d: %s; its report is final once TCP's recovery of the last drops is "
                      "in (3 s)" % (run["id"], run["state"]), file=sys.stderr, flush=True)
        elif stop:
            print("scenario %d left running (lossctl scenario get %d; lossctl scenario abort %d)"
                  % (run["id"], run["id"], run["id"]), file=sys.stderr, flush=True)
            return None
        time.sleep(interval)
        run = client.get_scenario(run["id"])


def _run(a, client):
    run = client.run_scenario(a.file, dry_run=a.dry_run)
    if a.dry_run:
        _emit(a, run)
        return 0
    print("scenario %d (%s) running: %d steps, %s" % (
        run["id"], run["scenario"]["name"], len(run.get("steps", [])), format_duration(run.get("duration_ns", 0))),
        file=sys.stderr, flush=True)
    if a.detach:
        if a.output == "json":
            _emit(a, run)
        else:
            print(run["id"])
        return 0
    run = _follow(client, run)
    if run is None:
        return 0
    _emit(a, run)
    return _outputs(a, run) or exit_status(run)


def _ls(a, client):
    runs = client.scenarios()
    if a.output == "json":
        print(json.dumps({"runs": runs}, indent=1))
        return 0
    print("%-4s %-24s %-8s %-40s %s" % ("ID", "NAME", "STATE", "PROGRESS", "REASON"))
    for r in runs:
        print(_ls_line(r))
    return 0


def _get(a, client):
    run = client.get_scenario(a.id)
    _emit(a, run)
    return _outputs(a, run) or exit_status(run)


def _abort(a, client):
    run = client.abort_scenario(a.id)
    _emit(a, run)
    return _outputs(a, run)


def parse_args(argv):
    from . import cli
    prog = os.environ.get("LOSSCTL_COMMAND")
    ap = argparse.ArgumentParser(prog="lossctl " + prog if prog else "python3 -m lossd_client.scenario",
                                 description="Run a timeline of rules on lossd (docs/guards.md#scenarios).")
    sub = ap.add_subparsers(dest="cmd", required=True)

    cli.add_connection_args(ap)  # before the command (lossctl puts its own there)
    ap.add_argument("-o", "--output", dest="top_output", choices=("table", "json"),
                    help="table (default) or json; also after the command")

    def common(p, out=True):
        p.add_argument("-o", "--output", choices=("table", "json"), default=None)
        if out:
            p.add_argument("--out", metavar="DIR", help="write scenario.json, .txt, .png, .svg there")
            p.add_argument("--no-plot", action="store_true", help="with --out: no plots")
    r = sub.add_parser("run", help="run a scenario file (YAML or JSON)")
    r.add_argument("file")
    r.add_argument("--dry-run", action="store_true",
                   help="check every step against the daemon and print the timeline; change nothing")
    r.add_argument("--detach", action="store_true", help="print its id and return; it runs on")
    common(r)
    common(sub.add_parser("ls", help="the running scenarios and the last ended ones"), out=False)
    g = sub.add_parser("get", help="a scenario's progress, or its report once ended")
    g.add_argument("id", type=int)
    common(g)
    b = sub.add_parser("abort", help="end a running scenario now; prints its report")
    b.add_argument("id", type=int)
    common(b)
    a = ap.parse_args(argv)
    a.output = a.output or a.top_output or "table"
    return a


def main(argv=None):
    from . import cli
    a = parse_args(argv)
    client = cli.connect(a)
    try:
        return {"run": _run, "ls": _ls, "get": _get, "abort": _abort}[a.cmd](a, client)
    except LossdError as e:
        print("scenario: %s" % e, file=sys.stderr, flush=True)
        return EXIT_USAGE if e.local else EXIT_ERROR
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())
