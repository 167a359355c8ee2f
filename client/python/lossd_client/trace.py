"""One flow's trace: its per-ACK samples with drops, retransmissions and
stalls, written as JSON or CSV and drawn as a time-sequence plot.

    python3 -m lossd_client.trace --cookie 4242 -o trace.json --plot trace.png
    python3 -m lossd_client.trace --addr 10.0.0.2 --port 8080 --duration 10s -o trace.csv
    python3 -m lossd_client.trace --from trace.json --plot trace.svg     (no daemon)
    lossctl flow trace ...          (the same; lossctl runs this module)

The trace (lossd's TraceFlow) runs until the flow closes, --duration passes,
--max-samples samples arrived or Ctrl-C; what arrived until then is written.

JSON: {"messages": [...]}, every TraceMessage in stream order as proto3 JSON
(field names as in the .proto, 64-bit integers as strings): first "flow", then
"sample", "retransmit", "stall", "drop", "gap", and last "closed".
CSV: one row per sample, plus one per drop, retransmission, stall and gap, in
stream order, with a kind column; time_s is relative to the first sample.
Plot (PNG or SVG, matplotlib): sequence number relative to the first snd_una
against time, snd_una and snd_nxt, retransmissions and the rules' drops
marked, stalls shaded and labelled with their cause; cwnd and in flight below.
"""

import argparse
import csv
import json
import os
import signal
import sys

from . import cli
from .errors import LossdError, LossdInputError
from .types import (Gap, RetransmitEvent, StallEvent, TraceDrop, TraceFlow, TraceSample,
                    trace_item, trace_kind)

MOD = 1 << 32


class Trace:
    """A flow's trace as it arrived: items in stream order, split by kind."""

    def __init__(self, items=()):
        self.items = []
        self.flow = None          # TraceFlow (final False)
        self.closed = None        # TraceFlow (final True)
        self.samples, self.retransmits, self.stalls, self.drops, self.gaps = [], [], [], [], []
        for it in items:
            self.add(it)

    def add(self, item):
        self.items.append(item)
        if isinstance(item, TraceFlow):
            if item.final:
                self.closed = item
            else:
                self.flow = item
        elif isinstance(item, TraceSample):
            self.samples.append(item)
        elif isinstance(item, RetransmitEvent):
            self.retransmits.append(item)
        elif isinstance(item, StallEvent):
            self.stalls.append(item)
        elif isinstance(item, TraceDrop):
            self.drops.append(item)
        elif isinstance(item, Gap):
            self.gaps.append(item)

    @property
    def last_flow(self):
        f = self.closed or self.flow
        return f.flow if f else None

    def origin_ns(self):
        """Time zero: the first sample, else the first timed item."""
        times = [s.time_mono_ns for s in self.samples[:1]]
        if not times:
            times = [t for t in (_time_of(i) for i in self.items) if t]
        return min(times) if times else 0

    def summary(self):
        lost = sum(g.count for g in self.gaps)
        f = self.last_flow
        who = ("flow %d %s" % (f.cookie, f.tuple)) if f else "no flow"
        def n(count, what):
            return "%d %s%s" % (count, what, "" if count == 1 else "s")
        return "%s: %s, %s, %s, %s%s" % (
            who, n(len(self.samples), "sample"), n(len(self.retransmits), "retransmission"),
            n(len(self.drops), "drop"), n(len(self.stalls), "stall"),
            ", %d lost" % lost if lost else "")


def _time_of(item):
    if isinstance(item, StallEvent):
        return item.start_mono_ns
    return getattr(item, "time_mono_ns", 0)


class Unwrapper:
    """32-bit TCP sequence numbers as bytes past a base, across wraps: each
    value is taken as the nearest to the last one (within 2 GiB)."""

    def __init__(self, base):
        self.base = base
        self.last_raw = base
        self.last = 0

    def __call__(self, raw):
        d = (raw - self.last_raw) % MOD
        if d >= MOD // 2:
            d -= MOD
        return self.last + d

    def advance(self, raw):
        v = self(raw)
        self.last_raw, self.last = raw, v
        return v


def sequence_series(trace):
    """The plot's data: times in seconds from origin and sequence numbers in
    bytes relative to the first snd_una, for samples (una, nxt), retransmits,
    drops and stalls. Out-of-band points are placed against the snd_una of
    their time."""
    t0 = trace.origin_ns()
    base = trace.samples[0].snd_una if trace.samples else (
        trace.retransmits[0].tcp_seq if trace.retransmits else 0)
    un = Unwrapper(base)
    timed = sorted(((_time_of(i), n, i) for n, i in enumerate(trace.items)
                    if isinstance(i, (TraceSample, RetransmitEvent, TraceDrop, StallEvent))),
                   key=lambda x: (x[0], x[1]))
    out = {"t": [], "una": [], "nxt": [], "cwnd": [], "in_flight": [],
           "rtx_t": [], "rtx_seq": [], "rtx_type": [], "drop_t": [], "drop_seq": [],
           "stalls": []}
    for t, _, i in timed:
        x = (t - t0) / 1e9
        if isinstance(i, TraceSample):
            out["t"].append(x)
            out["una"].append(un.advance(i.snd_una))
            out["nxt"].append(un(i.snd_nxt))
            out["cwnd"].append(i.cwnd)
            out["in_flight"].append(i.in_flight)
        elif isinstance(i, RetransmitEvent):
            out["rtx_t"].append(x)
            out["rtx_seq"].append(un(i.tcp_seq))
            out["rtx_type"].append(i.type)
        elif isinstance(i, TraceDrop):
            out["drop_t"].append(x)
            out["drop_seq"].append(un(i.drop.tcp_seq))
        elif isinstance(i, StallEvent):
            out["stalls"].append((x, i.duration_ns / 1e9, i.cause, i.duration_ns))
    return out


# ------------------------------------------------------------------ files --

def _json_of(item):
    from google.protobuf import json_format
    kind = trace_kind(item)
    body = json_format.MessageToDict(item.raw, preserving_proto_field_name=True,
                                     including_default_value_fields=True)
    return {"seq": str(item.seq), kind: body}


def write_json(trace, path):
    with open(path, "w") as f:
        json.dump({"messages": [_json_of(i) for i in trace.items]}, f, indent=1)
        f.write("\n")


def load_json(path, pb2):
    """A Trace from write_json's file (needs the stubs to parse it)."""
    from google.protobuf import json_format
    with open(path) as f:
        doc = json.load(f)
    items = []
    for d in doc.get("messages", []):
        m = json_format.ParseDict(d, pb2.TraceMessage(), ignore_unknown_fields=True)
        it = trace_item(m, pb2)
        if it is not None:
            items.append(it)
    return Trace(items)


CSV_SAMPLE = TraceSample.FIELDS[1:]   # time_mono_ns has its own column
CSV_COLUMNS = (("kind", "seq", "time_s", "time_mono_ns") + CSV_SAMPLE +
               ("type", "tcp_seq", "length", "segments", "duration_ns", "rule_id", "count"))


def csv_rows(trace):
    t0 = trace.origin_ns()
    for i in trace.items:
        if isinstance(i, TraceFlow):
            continue
        row = {"kind": trace_kind(i), "seq": i.seq}
        t = _time_of(i)
        if t:
            row.update(time_s="%.6f" % ((t - t0) / 1e9), time_mono_ns=t)
        if isinstance(i, TraceSample):
            row.update({f: getattr(i, f) for f in CSV_SAMPLE})
        elif isinstance(i, RetransmitEvent):
            row.update(type=i.type, tcp_seq=i.tcp_seq, segments=i.segments,
                       rule_id=",".join(map(str, i.rule_ids)))
        elif isinstance(i, TraceDrop):
            row.update(tcp_seq=i.drop.tcp_seq, length=i.drop.length, segments=i.drop.segments,
                       rule_id=i.drop.rule_id)
        elif isinstance(i, StallEvent):
            row.update(type=i.cause, tcp_seq=i.snd_una, duration_ns=i.duration_ns,
                       rule_id=i.caused_by.rule_id if i.caused_by else "")
        elif isinstance(i, Gap):
            row.update(type=i.source, count=i.count)
        yield row


def write_csv(trace, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for row in csv_rows(trace):
            w.writerow(row)


# ------------------------------------------------------------------- plot --

STALL_COLORS = {"rto": "#d62728", "tlp": "#ff7f0e", "fast_recovery": "#bcbd22",
                "zero_window": "#9467bd", "rwnd_limited": "#8c564b",
                "nagle_delayed_ack": "#e377c2", "cwnd_limited": "#17becf",
                "sndbuf_limited": "#7f7f7f", "app_limited": "#c7c7c7", "unknown": "#000000"}
MAX_STALL_LABELS = 12


def _short_duration(ns):
    """Three significant digits: '208ms', '1.23s', '12.5ms'."""
    for unit, div in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= div:
            v = ns / div
            return ("%.0f" if v >= 100 else "%.1f" if v >= 10 else "%.2f") % v + unit
    return "%dns" % ns


def _byte_scale(top):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if top >= 4 * div:
            return unit, div
    return "bytes", 1


def plot(trace, paths):
    """Draws the time-sequence plot into each path (.png or .svg)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        raise LossdInputError("the plot needs matplotlib: apt-get install python3-matplotlib")
    s = sequence_series(trace)
    if not s["t"]:
        raise LossdInputError("nothing to plot: the trace has no samples")
    top = max(s["nxt"] + s["una"]) if s["nxt"] else 1
    unit, div = _byte_scale(top)
    fig, (ax, ax2) = plt.subplots(2, 1, sharex=True, figsize=(11, 7),
                                  gridspec_kw={"height_ratios": [3, 1]})
    ax.step(s["t"], [v / div for v in s["una"]], where="post", color="#1f77b4", lw=1.4,
            label="snd_una (acknowledged)")
    ax.step(s["t"], [v / div for v in s["nxt"]], where="post", color="#2ca02c", lw=0.9,
            alpha=0.8, label="snd_nxt (sent)")
    if s["rtx_t"]:
        ax.scatter(s["rtx_t"], [v / div for v in s["rtx_seq"]], marker="x", color="#d62728",
                   s=28, lw=1.2, zorder=4, label="retransmission (%d)" % len(s["rtx_t"]))
    if s["drop_t"]:
        ax.scatter(s["drop_t"], [v / div for v in s["drop_seq"]], marker="v", color="black",
                   s=22, zorder=5, label="dropped by a rule (%d)" % len(s["drop_t"]))
    causes = []
    longest = sorted(s["stalls"], key=lambda x: -x[1])[:MAX_STALL_LABELS]
    for x, width, cause, ns in s["stalls"]:
        color = STALL_COLORS.get(cause, "#000000")
        for a in (ax, ax2):
            a.axvspan(x, x + width, color=color, alpha=0.18, lw=0)
        if cause not in causes:
            causes.append(cause)
    # Labels (rotated, one line high) of the longest stalls, none closer than 1.2 % of
    # the time axis to another.
    span = (max(s["t"]) - min(s["t"])) or 1.0
    placed = []
    for x, width, cause, ns in longest:
        if any(abs(x - p) < 0.012 * span for p in placed):
            continue
        placed.append(x)
        ax.annotate("%s %s" % (cause.replace("_", " "), _short_duration(ns)), xy=(x, 1),
                    xycoords=("data", "axes fraction"), xytext=(2, -4),
                    textcoords="offset points", va="top", ha="left", fontsize=7, rotation=90,
                    color=STALL_COLORS.get(cause, "#000000"))
    handles, labels = ax.get_legend_handles_labels()
    for c in causes:
        handles.append(Patch(color=STALL_COLORS.get(c, "#000000"), alpha=0.3))
        labels.append("stall: " + c.replace("_", " "))
    ax.legend(handles, labels, loc="lower right", fontsize=8, framealpha=0.85)  # sequence grows: empty there
    ax.set_ylabel("sequence (%s from the first)" % unit)
    ax.grid(True, alpha=0.3)
    f = trace.last_flow
    title = "time-sequence plot"
    if f:
        title = "flow %s (cookie %d)" % (f.tuple, f.cookie)
        if f.dominant_limit:
            title += ", %s %.0f%% of busy time" % (f.dominant_limit, 100 * f.dominant_share)
    ax.set_title(title + "\n" + trace.summary().split(": ", 1)[-1], fontsize=10)
    ax2.step(s["t"], s["cwnd"], where="post", color="#9467bd", lw=1.2, label="cwnd")
    ax2.step(s["t"], s["in_flight"], where="post", color="#ff7f0e", lw=0.9, label="in flight")
    ax2.set_ylabel("segments")
    ax2.set_xlabel("time (s from the first ACK)")
    ax2.set_ylim(bottom=0)
    ax2.grid(True, alpha=0.3)
    ax2.legend(loc="upper left", fontsize=8, framealpha=0.85)
    fig.tight_layout()
    for p in paths:
        fig.savefig(p, dpi=110)
    plt.close(fig)


# -------------------------------------------------------------------- CLI --

def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="lossctl flow trace" if os.environ.get("LOSSCTL_COMMAND") == "flow trace"
        else "lossd_client.trace",
        description="Trace one flow (per-ACK samples, drops, retransmissions, stalls) into "
                    "JSON or CSV and draw its time-sequence plot.")
    w = p.add_argument_group("the flow")
    w.add_argument("--cookie", help="the flow's socket cookie (lossctl flows)")
    w.add_argument("--addr", help="the first flow with this local or remote address/CIDR")
    w.add_argument("--port", help="the first flow with this local or remote port")
    w.add_argument("--wait", help="how long to wait for a flow matching --addr/--port "
                   "(default 10s)")
    w.add_argument("--duration", help="end the trace after this long (default: when the flow "
                   "closes; Ctrl-C ends it too)")
    w.add_argument("--max-samples", help="end the trace after this many samples "
                   "(default 100000)")
    w.add_argument("--from", dest="from_file", metavar="FILE.json",
                   help="read a trace written before instead of asking lossd")
    o = p.add_argument_group("output")
    o.add_argument("-o", "--output", action="append", default=[], metavar="FILE",
                   help="FILE.json (every message) or FILE.csv (a row per sample, drop, "
                        "retransmission, stall); repeatable")
    o.add_argument("--plot", action="append", default=[], metavar="FILE",
                   help="the time-sequence plot, FILE.png or FILE.svg; repeatable")
    cli.add_connection_args(p)
    a = p.parse_args(argv)
    if not a.output and not a.plot:
        p.error("give -o FILE.json|FILE.csv and/or --plot FILE.png|FILE.svg")
    for f in a.output:
        if os.path.splitext(f)[1].lower() not in (".json", ".csv"):
            p.error("-o %s: the file name must end in .json or .csv" % f)
    for f in a.plot:
        if os.path.splitext(f)[1].lower() not in (".png", ".svg"):
            p.error("--plot %s: the file name must end in .png or .svg" % f)
    if a.from_file:
        if a.cookie or a.addr or a.port:
            p.error("--from reads a file: no --cookie/--addr/--port")
    elif a.cookie and (a.addr or a.port):
        p.error("give --cookie or --addr/--port, not both")
    elif not (a.cookie or a.addr or a.port):
        p.error("name the flow: --cookie N, or --addr A and/or --port P")
    return p, a


def record(client, a, stop_on=()):
    """Runs the trace until it ends or a signal in stop_on arrives; returns the Trace."""
    trace = Trace()
    stream = client.trace_flow(cookie=a.cookie, addr=a.addr, port=a.port, wait=a.wait,
                               max_samples=a.max_samples, duration=a.duration)
    previous = {}

    def stop(signum, frame):
        stream.close()
    for sig in stop_on:
        previous[sig] = signal.signal(sig, stop)
    try:
        for item in stream:
            trace.add(item)
    finally:
        stream.close()
        for sig, h in previous.items():
            signal.signal(sig, h)
    return trace


def write(trace, a):
    written = []
    for f in a.output:
        (write_json if f.lower().endswith(".json") else write_csv)(trace, f)
        written.append(f)
    if a.plot:
        plot(trace, a.plot)
        written += a.plot
    return written


def main(argv=None):
    p, a = parse_args(argv)
    if a.from_file:
        from ._stubs import load_stubs
        try:
            trace = load_json(a.from_file, load_stubs(a.stubs).pb2)
        except (OSError, ValueError) as e:
            cli.die("--from %s: %s" % (a.from_file, e), cli.EXIT_USAGE)
    else:
        client = cli.connect(a)
        try:
            trace = record(client, a, stop_on=(signal.SIGINT, signal.SIGTERM))
        except LossdError as e:
            cli.die("trace: %s" % e, cli.EXIT_USAGE if e.local else cli.EXIT_ERROR)
        finally:
            client.close()
    try:
        written = write(trace, a)
    except LossdInputError as e:
        cli.die(e.message)
    except OSError as e:
        cli.die(str(e))
    print("%s; wrote %s" % (trace.summary(), ", ".join(written)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
