"""A lossd process inside a lab namespace, and what it printed.

    Lossd(lab, ns, args)   lossd --json --state-dir TMP ARGS (a rule: one-shot injector;
                           --observe: the observer; --socket: the daemon, see lab.daemon)
    Output(lines)          an observer's JSON lines: totals, subscriber, flows, events
    counters(line)         a one-shot counters/final line as plain numbers
    totals(line)           an observer_totals line as a dict

One-shot --json carries the API's messages in the API's JSON (docs/observer.md#one-shot-json):
they are read here with the generated lossd.v1 types (json_format, which refuses a name or enum
spelling the API does not have), so every suite that reads a one-shot line checks its shape.
"""

import json
import os
import queue
import signal
import subprocess
import threading
import time

from lab import config

# Retransmission types and outcomes, in the observer's order (and the daemon's BPF maps').
TYPES = ("fast", "rto", "loss", "tlp", "syn", "synack", "probe0", "unknown")
OUTCOMES = ("sent", "failed")
COUNTERS = ("matched_packets", "matched_segments", "matched_bytes", "dropped_packets",
            "dropped_segments", "dropped_bytes",
            # what a rule's action did (lossd.v1 Action): 0 for a drop rule
            "corrupted_packets", "corrupted_segments", "corrupted_bytes", "duplicated_packets",
            "duplicated_segments", "duplicated_bytes", "marked_packets", "marked_segments",
            "marked_bytes", "unacted_packets")


def api():
    """The generated lossd.v1 module (lab.daemon.load_stubs: every e2e suite gets --stubs)."""
    from lab import daemon
    if daemon.pb is None:
        raise AssertionError("reading lossd's JSON needs the lossd.v1 stubs: --stubs <build>/python")
    return daemon.pb


def parse(obj, message):
    """obj (a dict of the API's JSON) as the lossd.v1 `message` (a name: "Rule"); an unknown
    field or enum spelling is an AssertionError naming it."""
    from google.protobuf import json_format
    try:
        return json_format.ParseDict(obj, getattr(api(), message)())
    except json_format.ParseError as e:
        raise AssertionError("not the API's %s JSON: %s: %s" % (message, e, json.dumps(obj)[:2000]))


def type_name(e):
    """A RetransmitEvent's type as the observer's short name ("rto")."""
    return api().RetransmitType.Name(e.type)[len("RETRANSMIT_TYPE_"):].lower()


def outcome_name(e):
    return api().Outcome.Name(e.outcome)[len("OUTCOME_"):].lower()


def tuple_of(m):
    """A RetransmitEvent's, StallEvent's or Flow's tuple: (local_addr, local_port, remote_addr,
    remote_port)."""
    t = m.tuple
    return (t.local_addr, t.local_port, t.remote_addr, t.remote_port)


def counters(ev):
    """A one-shot counters/final line (a RuleCountersUpdate with the hooks' totals) as plain
    numbers: rule_id, the six RuleCounters, state, attachments, hooks, rule (a lossd.v1.Rule);
    None for None."""
    if ev is None:
        return None
    body = {k: v for k, v in ev.items() if k not in ("event", "hooks", "rule_id", "error")}
    u = parse(body, "RuleCountersUpdate")
    out = {"hooks": ev.get("hooks", {}), "seq": u.seq, "time_unix_ns": u.time_unix_ns}
    if not u.rules:
        out.update(rule_id=ev.get("rule_id"), error=ev.get("error", ""), status="gone")
        return out
    r = u.rules[0]
    out.update({k: getattr(r.counters, k) for k in COUNTERS})
    out.update(rule_id=r.id, rule=r, state=api().RuleState.Name(r.state), attachments=list(r.attachments))
    return out


class Lossd:
    """One lossd process; its stdout lines are read by a thread (which a test can pause:
    gate.clear() stops reading, so lossd's writes back up into the pipe)."""

    def __init__(self, lab, ns, args, nsenter=False, state_dir=None, lossd=None, stdout_path=None,
                 wrap=()):
        """stdout_path: lossd's stdout goes to that file, unread (benchmarks: no Python
        reader in the way); wait_ready() polls it, output() parses it. wrap: a command that
        execs lossd (e.g. setpriv with fewer capabilities)."""
        self.lab = lab
        self.ns = ns
        self.state_dir = state_dir or lab.tempdir()
        self.stderr_path = os.path.join(lab.tempdir(), "lossd-stderr.log")
        self.stdout_path = stdout_path
        args = list(args)
        # The suites count every event a daemon sees against its lab namespace's MIB while
        # other suites run beside them: they watch their own namespace unless they ask for
        # more (lossd's daemon default is every namespace: tests/e2e/observer/netns_test.py).
        if lossd is None and not any(a == "--observe-netns" or a.startswith("--observe-netns=") for a in args):
            args = ["--observe-netns", "own"] + args
        # Hermetic: this build's lossd reads no /etc/lossd/lossd.conf unless a test names one.
        if lossd is None and not any(a == "--config" or a.startswith("--config=") for a in args):
            args = ["--config", ""] + args
        self.cmd = list(wrap) + [lossd or config.LOSSD, "--json", "--state-dir", self.state_dir] + args
        with open(self.stderr_path, "w") as err, open(stdout_path or os.devnull, "w") as out:
            self.proc = lab.popen(ns, self.cmd, stdout=out if stdout_path else subprocess.PIPE, stderr=err,
                                  nsenter=nsenter)
        self.pid = self.proc.pid  # ip netns exec, nsenter (and a wrap) exec lossd: the same pid
        self.lines = []   # every stdout line, raw
        self.events = []  # the JSON ones, parsed
        self.gate = threading.Event()
        self.gate.set()
        self._q = queue.Queue()
        self._t = threading.Thread(target=self._read if stdout_path is None else self._read_file, daemon=True)
        self._t.start()
        self.ready = None  # the ready line (a one-shot rule's: with its lossd.v1 Rule as .rule)
        self.rule = None
        self.hooks = ""    # a one-shot rule's attachments, ", "-joined
        self.final = None

    def _read(self):
        for line in self.proc.stdout:
            self.gate.wait()
            self.lines.append(line)
            s = line.strip()
            if not s.startswith("{"):
                continue
            try:
                ev = json.loads(s)
            except ValueError:
                continue
            self.events.append(ev)
            self._q.put(ev)
        self._q.put(None)

    def _read_file(self):
        """Until ready (or exit): the events at the start of stdout_path."""
        done = 0
        while True:
            exited = self.proc.poll() is not None
            with open(self.stdout_path) as f:
                lines = f.readlines()
            for line in lines[done:]:
                if not line.endswith("\n"):
                    break
                done += 1
                if line.startswith("{"):
                    ev = json.loads(line)
                    self._q.put(ev)
                    if ev.get("event") == "ready":
                        return
            if exited:
                self._q.put(None)
                return
            time.sleep(0.05)

    def size(self):
        """Bytes lossd has written to stdout_path."""
        return os.stat(self.stdout_path).st_size

    def stderr(self):
        try:
            with open(self.stderr_path) as f:
                return f.read()
        except OSError:
            return ""

    def wait_event(self, kind, timeout=40):
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError("lossd %s: no %s event in %ss; stderr:\n%s"
                                     % (self.cmd, kind, timeout, self.stderr()))
            try:
                ev = self._q.get(timeout=left)
            except queue.Empty:
                continue
            if ev is None:
                self.proc.wait()
                raise AssertionError("lossd %s exited (%s) before %s; stderr:\n%s"
                                     % (self.cmd, self.proc.returncode, kind, self.stderr()))
            if ev.get("event") == kind:
                return ev

    def wait_ready(self, timeout=40):
        self.ready = self.wait_event("ready", timeout)
        if "rule" in self.ready:
            self.rule = parse(self.ready["rule"], "Rule")
            self.hooks = ", ".join(self.rule.attachments)
        return self.ready

    def last_counters(self):
        """The last counters (or final) line, as counters()."""
        for ev in reversed(self.events):
            if ev.get("event") in ("counters", "final"):
                return counters(ev)
        return None

    def wait_exit(self, timeout=30):
        self.proc.wait(timeout=timeout)
        self._t.join(10)
        return self.proc.returncode

    def term(self, timeout=60):
        """SIGTERM (reading stdout again); waits for the exit; returns the exit code."""
        self.gate.set()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("lossd did not exit on SIGTERM; stderr:\n" + self.stderr())
        self._t.join(30)
        if self.stdout_path:  # the final event, without parsing every line
            with open(self.stdout_path, "rb") as f:
                self.events += [json.loads(l) for l in f if l.startswith(b'{"event":"final"')]
        return self.proc.returncode

    def stop(self, timeout=60, expect_final=True):
        """SIGTERM, wait, exit 0; returns the final counters (counters(); a lossd without a
        rule prints none)."""
        rc = self.term(timeout)
        finals = [e for e in self.events if e.get("event") == "final"]
        self.final = counters(finals[-1]) if finals else None
        if rc != 0:
            raise AssertionError("lossd exited %d; stderr:\n%s" % (rc, self.stderr()))
        if self.final is None and expect_final:
            raise AssertionError("lossd printed no final event; stderr:\n" + self.stderr())
        return self.final

    def stop_observer(self, timeout=60):
        """stop() of a lossd --observe; returns its Output."""
        self.stop(timeout, expect_final=False)
        return self.output()

    def output(self):
        if self.stdout_path:
            with open(self.stdout_path) as f:
                return Output(f.readlines(), self.stderr())
        return Output(self.lines, self.stderr())

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._t.join(5)


class Output:
    """What an observer printed: its totals (a dict: the observer's counters, retrans_segs and
    hooks, with the NetnsTotals as "netns"), subscriber, flows (lossd.v1.Flow), and the event
    items (lossd.v1.TraceMessage: retransmits, closes and stalls are their payloads)."""

    STREAM = ("retransmit", "stall", "closed", "sample", "gap")

    def __init__(self, lines, stderr=""):
        self.raw_lines = lines
        self.stderr = stderr
        self.events = []
        self.bad_lines = []
        for l in lines:
            l = l.strip()
            if not l:
                continue
            try:
                self.events.append(json.loads(l))
            except ValueError:
                self.bad_lines.append(l)
        by = lambda k: [e for e in self.events if e.get("event") == k]
        strip = lambda e: {k: v for k, v in e.items() if k != "event"}
        self.items = [parse(strip(e), "TraceMessage") for e in self.events if e.get("event") in self.STREAM]
        tot = by("observer_totals")
        self.totals = totals(tot[-1]) if tot else None
        self.netns_totals = [parse(e["totals"], "NetnsTotals") for e in by("netns_totals")]
        sub = by("subscriber")
        self.subscriber = sub[-1] if sub else None
        self.flows = [parse(e["flow"], "Flow") for e in by("flow")]
        self.retransmits = [m.retransmit for m in self.items if m.HasField("retransmit")]
        self.closes = [m.closed for m in self.items if m.HasField("closed")]
        self.stalls = [m.stall for m in self.items if m.HasField("stall")]
        self.gaps = [m.gap for m in self.items if m.HasField("gap")]
        fin = by("final")
        self.final = counters(fin[-1]) if fin else None

    def ev(self, typ, outcome="sent"):
        return ev_count(self.totals, typ, outcome)

    def segs(self, typ, outcome="sent"):
        return seg_count(self.totals, typ, outcome)

    def retrans_types(self):
        return {type_name(e) for e in self.retransmits}

    def all_events(self):
        return all_events(self.totals)

    def summary(self):
        t = self.totals
        out = {"retrans_segs": t["retrans_segs"]}
        for ty in TYPES:
            for o in OUTCOMES:
                x = [self.ev(ty, o), self.segs(ty, o)]
                if any(x):
                    out["%s.%s" % (ty, o)] = x
        for k in ("ring_lost", "ring_consumed", "hub_published", "filtered", "flows_opened",
                  "flows_closed", "recursion_misses", "flow_table_full", "arm_failed", "armed_existing",
                  "stalls", "samples", "dsacks"):
            out[k] = t.get(k)
        if self.subscriber:
            out["sub_delivered"] = self.subscriber["delivered"]
            out["sub_lost"] = self.subscriber["lost"]
        out["retransmit_lines"] = len(self.retransmits)
        out["flow_close_lines"] = len(self.closes)
        out["stall_lines"] = len(self.stalls)
        return out


def totals(ev):
    """An observer_totals line as a dict: the observer's own counters (ring_lost, filtered,
    ...), retrans_segs, hooks (name, available, reason) and its NetnsTotals as "netns"."""
    nt = parse(ev["totals"], "NetnsTotals")
    hooks = [parse(h, "HookAvailability") for h in ev["hooks"]]
    return dict(ev["observer"], retrans_segs=nt.retrans_segs, netns=nt,
                hooks=[{"name": h.name, "available": h.available, "reason": h.reason} for h in hooks])


def ev_count(totals, typ, outcome="sent"):
    """Retransmit events of a type and outcome in an Output's totals."""
    return getattr(totals["netns"], outcome + "_events")[typ]


def seg_count(totals, typ, outcome="sent"):
    return getattr(totals["netns"], outcome + "_segments")[typ]


def all_events(totals):
    """Retransmit events of every type and outcome in an Output's totals."""
    return sum(ev_count(totals, ty, o) for ty in TYPES for o in OUTCOMES)
