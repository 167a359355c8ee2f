"""Client: the lossd/v1 API (Injector, Observer, System) in friendly calls."""

import collections
import os
import re
import threading

import time

import grpc

from . import spec as _spec
from . import types as _t
from ._stubs import load_stubs
from .errors import LossdError, LossdInputError, from_rpc_error
from .units import parse_duration, parse_labels

DEFAULT_SOCKET = "/run/lossd/lossd.sock"
DEFAULT_TARGET = "unix://" + DEFAULT_SOCKET


def _scenario():
    """lossd_client.scenario, imported when first used: `python3 -m lossd_client.scenario`
    (lossctl scenario) must find it not yet imported by the package."""
    from . import scenario
    return scenario


def normalize_target(target=None):
    """Where to connect, as a gRPC target.

    None -> unix:///run/lossd/lossd.sock; a path ('/run/x.sock', './x.sock',
    anything with a '/' or ending in .sock) -> unix://<absolute path>;
    'unix:...', 'dns:...', 'ipv4:...', 'ipv6:...' as given; 'host:port' and
    '[v6]:port' as given (TCP).
    """
    if target is None or target == "":
        return DEFAULT_TARGET
    if not isinstance(target, str):
        target = os.fspath(target)
    t = target.strip()
    if t.startswith(("unix:", "unix-abstract:", "dns:", "ipv4:", "ipv6:", "vsock:")):
        return t
    if "/" in t or t.endswith(".sock"):
        return "unix://" + os.path.abspath(t)
    if re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^:/\s\[\]]+):[0-9]{1,5}", t):
        return t
    raise LossdInputError("target: %r is neither a socket path nor host:port" % (target,))


def _channel_credentials(tls, ca, cert, key):
    if isinstance(tls, grpc.ChannelCredentials):
        return tls

    def read(p, what):
        if p is None:
            return None
        try:
            with open(p, "rb") as f:
                return f.read()
        except OSError as e:
            raise LossdInputError("tls: cannot read the %s %r: %s" % (what, p, e.strerror)) from None
    if (cert is None) != (key is None):
        raise LossdInputError("tls: give both cert= and key= (client certificate) or neither")
    return grpc.ssl_channel_credentials(read(ca, "CA file"), read(key, "key file"),
                                        read(cert, "certificate file"))


class _Closing:
    """A with-block closes it (close())."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class Stream(_Closing):
    """An open server stream: iterate it for items; close() (or leaving a
    with-block, or breaking out and dropping it) cancels the call.

    The call starts when the Stream is created, so nothing published after
    that is missed. Errors come out of the iteration as LossdError.
    """

    def __init__(self, call, convert, target, pb2=None):
        self._call = call
        self._convert = convert
        self._target = target
        self._pb2 = pb2  # to read a refusal's reason (errors.error_info)
        self._closed = False
        self._lock = threading.Lock()
        self._pending = collections.deque()  # items of a batch not yet returned

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            if self._closed:
                raise StopIteration
            if self._pending:
                return self._pending.popleft()
            try:
                msg = next(self._call)
            except StopIteration:
                self._closed = True
                raise
            except grpc.RpcError as e:
                if self._closed and e.code() == grpc.StatusCode.CANCELLED:
                    raise StopIteration from None
                self._closed = True
                raise from_rpc_error(e, self._target, self._pb2) from None
            item = self._convert(msg)
            if isinstance(item, list):  # a batch: its items in order
                self._pending.extend(item)
            elif item is not None:
                return item

    def close(self):
        with self._lock:
            if not self._closed:
                self._closed = True
                self._call.cancel()

    cancel = close

    @property
    def closed(self):
        return self._closed

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Client(_Closing):
    """A connection to lossd.

        with Client() as c:                       # unix:///run/lossd/lossd.sock
            r = c.add_rule(iface="eth0", dport=8080, rate="1%", ttl="30s")
            ...
            print(c.delete_rule(r).counters)

    target:  None (the default socket), a socket path, 'unix:...' or 'host:port'.
    stubs:   <build>/python (else $LOSSD_PYTHON_STUBS, else an importable lossd.v1).
    tls:     True (system roots, or ca=), or grpc.ChannelCredentials; ca, cert,
             key: PEM files (cert+key: a client certificate); server_name
             overrides the name checked in the server's certificate.
    timeout: seconds for each unary call (streams have none unless given).

    Every failure is a LossdError (code name, message); bad arguments a
    LossdInputError (a LossdError and a ValueError) before any call.
    """

    def __init__(self, target=None, *, stubs=None, tls=None, ca=None, cert=None, key=None,
                 server_name=None, timeout=10.0, options=None):
        self.stubs = load_stubs(stubs)
        self.pb2 = self.stubs.pb2
        self.target = normalize_target(target)
        self.timeout = timeout
        opts = list(options or [])
        if server_name:
            opts.append(("grpc.ssl_target_name_override", server_name))
        if tls or ca or cert or key:
            creds = _channel_credentials(tls, ca, cert, key)
            self._channel = grpc.secure_channel(self.target, creds, options=opts)
        else:
            self._channel = grpc.insecure_channel(self.target, options=opts)
        g = self.stubs.pb2_grpc
        self._injector = g.InjectorStub(self._channel)
        self._observer = g.ObserverStub(self._channel)
        self._system = g.SystemStub(self._channel)
        self._scenarios = g.ScenariosStub(self._channel)

    # ---------------------------------------------------------- plumbing --

    def close(self):
        self._channel.close()

    def __repr__(self):
        return "Client(%r)" % self.target

    def _unary(self, method, request, timeout=None):
        """One call with the deadline `timeout` (the client's by default). A call that needs a
        part of lossd still loading (right after it starts) waits for it within that deadline,
        on lossd's side."""
        timeout = self.timeout if timeout is None else timeout
        try:
            return method(request, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.target, self.pb2) from None

    def wait_ready(self, components=("injector",), timeout=30.0):
        """Wait until GetHealth reports each of `components` ("injector", "observer") READY;
        returns the Health. Raises LossdError FAILED_PRECONDITION if one failed or is
        disabled, DEADLINE_EXCEEDED if still loading after `timeout` s."""
        end = time.monotonic() + timeout
        while True:
            h = self.health(timeout=max(0.5, min(5.0, end - time.monotonic())))
            states = {c: h.components.get(c, "READY") for c in components}  # an old lossd: READY
            bad = {c: s for c, s in states.items() if s in ("FAILED", "DISABLED")}
            if bad:
                raise LossdError("FAILED_PRECONDITION", "lossd's %s: %s" % (
                    ", ".join(sorted(bad)), ", ".join(bad[c] for c in sorted(bad))))
            if all(s == "READY" for s in states.values()):
                return h
            if time.monotonic() >= end:
                loading = sorted(c for c, s in states.items() if s != "READY")
                raise LossdError("DEADLINE_EXCEEDED", "lossd's parts still loading after %gs: %s"
                                 % (timeout, states), reason="PART_LOADING",
                                 metadata={"part": loading[0] if loading else "", "state": "loading"})
            time.sleep(0.1)

    def _stream(self, method, request, convert, timeout=None):
        try:
            call = method(request, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.target, self.pb2) from None
        return Stream(call, convert, self.target, self.pb2)

    def check(self, timeout=3.0):
        """Ask lossd for its version; returns it. Raises LossdError (code
        UNAVAILABLE, with a hint such as "no such socket") when lossd is not
        reachable: fails fast rather than waiting for a daemon to appear."""
        return self.version(timeout=timeout)

    # ---------------------------------------------------------- injector --

    rule_spec = staticmethod(_spec.rule_spec)

    def _spec_proto(self, s):
        if isinstance(s, _spec.Spec):
            return _spec.to_proto(s, self.pb2.RuleSpec())
        if isinstance(s, dict):
            return _spec.to_proto(_spec.rule_spec(**s), self.pb2.RuleSpec())
        if hasattr(s, "DESCRIPTOR") and s.DESCRIPTOR.name == "RuleSpec":
            return s
        raise LossdInputError("spec: expected rule_spec(...), a dict of add_rule() arguments "
                              "or a lossd.v1.RuleSpec, got %r" % (s,))

    def add_rule(self, iface=None, *, timeout=None, **kw):
        """Create a rule; returns the Rule (as resolved by the daemon).

        Target: iface= and/or cgroup= (cgroup v2 path), or a service: pid=, unit=,
          container=, pod= (docs/targeting.md); direction='ingress'
          | 'egress' | 'both'; hook='auto' | 'xdp' | 'tc' | 'cgroup'.
        Match (all optional, AND): src=/dst= (address or CIDR), sport=/dport=
          (8080, '8000-8100', (lo, hi)), protocol='tcp'|'udp'|'icmp'|'icmpv6'|N,
          family=4|6, tcp_flags='syn,!ack', payload='any'|'only'|'none'.
        Loss model, exactly one: rate='1%' (or 0.01), ge=(p, r, bad_loss,
          good_loss) or 'p,r,1-h,1-k', every=N, first=K, ramp='0.1%/2s,1%/2s',
          markov='p13,p31,p32,p23,p14' (netem's 4-state loss state, e.g.
          '1%,30%,10%,40%,0.1%'; omitted ones at netem's defaults p31 = 1 - p13,
          p32 = 0, p23 = 100 %, p14 = 0; or a tuple or a dict of them), police=
          'RATE,BURST[,flow|rule]' (a token bucket in tc's units, e.g. '50mbit,64kib':
          what exceeds it is picked; one bucket for the rule, or with ',flow' one per
          flow; or (rate, burst[, 'flow']), or {'rate_bps': N, 'burst_bytes': N[,
          'per_flow': True]});
          seed=S (not with police: a policer draws nothing).
        Action, what is done to the packets the model picks: action='drop' (default),
          'corrupt' (a flipped bit the receiver's checksum check discards),
          'corrupt-payload' (wrong bytes, valid checksums), 'duplicate', 'ecn' (ECT
          packets marked CE, the others dropped) or 'ecn-pass' (the others pass); all
          but drop run at tc: not with hook='xdp', and for a cgroup target only
          with direction='egress'. Rule.action and the counters' corrupted_*,
          duplicated_*, marked_* and unacted_packets say what it did.
        Options: priority=P, ttl='30s' (0 or 'none': until deleted; None: the
          daemon's --default-ttl, 1 h unless set), per_segment=True,
          labels={'k': 'v'}, force=True, reattach=True (the interface deleted: the
          rule is FAILED, and attaches again when one of that name appears).
        Schedule (the data plane's clock): start_after='2s', pulse='200ms/800ms'
          (active/dormant: dormant, the rule matches nothing), pulse_cycles=K (the
          rule ends after K active windows; Rule.schedule_start_mono_ns is the origin).
        Guard (decided in the kernel, docs/guards.md): guard='stall>500ms' (a flow it
          dropped from stalls that long) and/or 'rtos>5/2s' (more than 5 RTOs of its
          drops in 2 s), 'resends>20/1s' (more than 20 resends of its drops, any
          type) or 'resets>0/10s' (more than 0 of its flows reset or aborted),
          comma-separated; 'watch=8080' judges port 8080's flows instead of those it
          dropped from: the rule stops, state 'stopped', and Rule.guard_stop holds
          the evidence.
        """
        req = self.pb2.CreateRuleRequest(spec=self._spec_proto(_spec.rule_spec(iface, **kw)))
        return _t.Rule.from_proto(self._unary(self._injector.CreateRule, req, timeout), self.pb2)

    def add_rules(self, specs, atomic=True, timeout=None):
        """Create several rules in one call. specs: rule_spec(...) results,
        dicts of add_rule() arguments or RuleSpec messages.

        atomic=True: all or nothing (a failure raises LossdError). atomic=False:
        returns [(Rule or None, error message or ''), ...] in the order of specs.
        """
        specs = [self._spec_proto(s) for s in specs]
        req = self.pb2.CreateRulesRequest(specs=specs, atomic=atomic)
        resp = self._unary(self._injector.CreateRules, req, timeout)
        rules = [_t.Rule.from_proto(r, self.pb2) for r in resp.rules]
        if atomic:
            errs = ["spec %d: %s" % (i, e) for i, e in enumerate(resp.errors) if e]
            if errs:  # should come as an error status; be safe if it does not
                raise LossdError("UNKNOWN", "CreateRules (atomic): " + "; ".join(errs))
            return rules
        return _align(rules, list(resp.errors), len(specs))

    def update_rule(self, rule, iface=None, *, timeout=None, **kw):
        """Replace a rule's spec (same arguments as add_rule); counters restart."""
        req = self.pb2.UpdateRuleRequest(id=_spec.parse_rule_id(rule),
                                         spec=self._spec_proto(_spec.rule_spec(iface, **kw)))
        return _t.Rule.from_proto(self._unary(self._injector.UpdateRule, req, timeout), self.pb2)

    def delete_rule(self, rule, timeout=None):
        """Delete a rule (id or Rule); returns it with its final counters. The daemon keeps it,
        state 'deleted', with its effect (rule_effect) for --keep-expired; deleting it again
        forgets it."""
        req = self.pb2.DeleteRuleRequest(id=_spec.parse_rule_id(rule))
        return _t.Rule.from_proto(self._unary(self._injector.DeleteRule, req, timeout).rule, self.pb2)

    def get_rule(self, rule, timeout=None):
        req = self.pb2.GetRuleRequest(id=_spec.parse_rule_id(rule))
        return _t.Rule.from_proto(self._unary(self._injector.GetRule, req, timeout), self.pb2)

    def list_rules(self, labels=None, timeout=None, include_deleted=False):
        """Every rule, or those carrying all of labels ({'k': 'v'} or 'k=v,...'); deleted ones
        (kept by the daemon, state 'deleted') only with include_deleted."""
        req = self.pb2.ListRulesRequest(labels=parse_labels(labels), include_deleted=include_deleted)
        resp = self._unary(self._injector.ListRules, req, timeout)
        return [_t.Rule.from_proto(r, self.pb2) for r in resp.rules]

    def clear(self, timeout=None):
        """Delete every rule; returns how many were deleted."""
        return self._unary(self._injector.ClearRules, self.pb2.ClearRulesRequest(), timeout).deleted

    def rule_effect(self, rule, timeout=None):
        """RuleEffect: configured vs measured rate (99.9 % Wilson CI), counters,
        retransmitted segments by type of the flows the rule matched."""
        req = self.pb2.GetRuleEffectRequest(id=_spec.parse_rule_id(rule))
        return _t.RuleEffect.from_proto(self._unary(self._injector.GetRuleEffect, req, timeout))

    def watch_counters(self, rules=None, interval="1s", timeout=None):
        """Stream of CountersUpdate every interval (at least 100 ms) for rules
        (ids or Rules; None: all)."""
        ids = [_spec.parse_rule_id(r) for r in (rules or [])]
        req = self.pb2.WatchRuleCountersRequest(ids=ids, interval_ns=parse_duration(interval, "interval"))
        return self._stream(self._injector.WatchRuleCounters, req,
                            lambda m: _t.CountersUpdate.from_proto(m, self.pb2), timeout)

    # --------------------------------------------------------- scenarios --

    def run_scenario(self, scenario, dry_run=False, timeout=None):
        """Run a scenario on the daemon (docs/guards.md#scenarios): a timeline of
        steps, each with its rules for its duration. Returns its run as a dict (the
        lossd.v1 ScenarioRun's fields): id, state ('running', then 'done', 'stopped',
        'aborted' or 'failed'), steps (each with its rules and their effects).

        scenario: a file's path (YAML or JSON), its dict ({'name': ..., 'guard':
          'stall>2s', 'steps': [{'name': ..., 'duration': '10s', 'rules': [add_rule()
          arguments, ...]}]}) or a lossd.v1.Scenario.
        dry_run: the daemon checks every step (the rules, targets, limits, host
          protection) and answers the plan (state 'planned'), changing nothing.
        """
        req = self.pb2.RunScenarioRequest(scenario=_scenario().to_proto(scenario, self.pb2),
                                          dry_run=dry_run)
        return _scenario().run_dict(self._unary(self._scenarios.RunScenario, req, timeout))

    def scenarios(self, timeout=None):
        """The running scenarios and the last ended ones (dicts, as run_scenario's)."""
        resp = self._unary(self._scenarios.ListScenarios, self.pb2.ListScenariosRequest(), timeout)
        return [_scenario().run_dict(r) for r in resp.runs]

    def get_scenario(self, scenario_id, timeout=None):
        """A scenario's progress, or its report once ended."""
        req = self.pb2.GetScenarioRequest(id=_scenario().scenario_id(scenario_id))
        return _scenario().run_dict(self._unary(self._scenarios.GetScenario, req, timeout))

    def abort_scenario(self, scenario_id, timeout=None):
        """Ends a running scenario now (its step's rules end); returns its report."""
        req = self.pb2.AbortScenarioRequest(id=_scenario().scenario_id(scenario_id))
        return _scenario().run_dict(self._unary(self._scenarios.AbortScenario, req, timeout))

    # ---------------------------------------------------------- observer --

    event_filter = staticmethod(_spec.event_filter)

    def _filters(self, filters, kw, what="allow"):
        fl = _spec.filters(filters)
        if kw:
            if fl:
                raise LossdInputError("%s: give filter arguments (addr=, port=, ...) or a list "
                                      "of filters, not both" % what)
            fl = [_spec.event_filter(**kw)]
        return [_spec.filter_to_proto(f, self.pb2) for f in fl]

    def watch_retransmits(self, allow=None, *, deny=None, queue=None, timeout=None, **filter_kw):
        """Stream of RetransmitEvent and Gap records.

        Filters: keyword arguments addr=, port=, cgroup=, types=, rule=, netns=,
        pid=, unit=, container=, pod= make one filter (AND of them); or
        allow=[...] and deny=[...], lists of filters (event_filter(...) or dicts
        of those arguments), OR across a list.
        queue: this subscriber's queue length (daemon default 65536).
        """
        return self._event_stream(self._observer.WatchRetransmits, self.pb2.WatchRetransmitsRequest,
                                  _t.RetransmitEvent, allow, deny, queue, timeout, filter_kw)

    def watch_stalls(self, allow=None, *, deny=None, queue=None, timeout=None, **filter_kw):
        """Stream of StallEvent and Gap records: each stall of a flow (no
        delivery past the threshold) with its cause and evidence.

        Filters as in watch_retransmits (types= is ignored by the daemon).
        """
        return self._event_stream(self._observer.WatchStalls, self.pb2.WatchStallsRequest,
                                  _t.StallEvent, allow, deny, queue, timeout, filter_kw)

    def _event_stream(self, rpc, request, event_type, allow, deny, queue, timeout, filter_kw):
        """A filtered stream of event_type and Gap records (WatchRetransmits, WatchStalls)."""
        req = request(allow=self._filters(allow, filter_kw), deny=self._filters(deny, None, "deny"))
        if queue is not None:
            req.queue = _spec._uint(queue, "queue", minimum=1)
        pb2 = self.pb2

        def convert_one(m):
            which = m.WhichOneof("msg")
            if which == "event":
                return event_type.from_proto(m.seq, m.event, pb2)
            if which == "gap":
                return _t.Gap.from_proto(m.seq, m.gap, pb2)
            return None  # a kind these stubs do not know

        def convert(batch):
            return [x for x in map(convert_one, batch.items) if x is not None]
        return self._stream(rpc, req, convert, timeout)

    def trace_flow(self, cookie=None, *, addr=None, port=None, wait=None, max_samples=None,
                   duration=None, timeout=None):
        """Stream of one flow's trace: TraceFlow (first, final=False), then
        TraceSample (one per ACK), RetransmitEvent, StallEvent, TraceDrop and
        Gap in the order they happened, and last TraceFlow (final=True).

        The flow: cookie (ListFlows), or the first flow matching addr= and/or
        port=, waited for up to wait (default 10 s). It ends when the flow
        closes, after max_samples samples (default 100,000) or duration.
        """
        req = self.pb2.TraceFlowRequest()
        if cookie is not None:
            if addr is not None or port is not None:
                raise LossdInputError("trace_flow: give cookie or addr/port, not both")
            req.cookie = _spec._uint(cookie, "cookie", bits=64, minimum=1)
        elif addr is None and port is None:
            raise LossdInputError("trace_flow: give cookie, or addr and/or port")
        else:
            req.flow.CopyFrom(_spec.filter_to_proto(_spec.event_filter(addr=addr, port=port), self.pb2))
        if wait is not None:
            req.wait_ns = parse_duration(wait, "wait")
        if max_samples is not None:
            req.max_samples = _spec._uint(max_samples, "max_samples", minimum=1)
        if duration is not None:
            req.duration_ns = parse_duration(duration, "duration")
        pb2 = self.pb2
        return self._stream(self._observer.TraceFlow, req, lambda m: _t.trace_item(m, pb2), timeout)

    def flows(self, filters=None, timeout=None, **filter_kw):
        """The flows the observer tracks (filters as in watch_retransmits)."""
        req = self.pb2.ListFlowsRequest(filter=self._filters(filters, filter_kw, "filter"))
        return [_t.Flow.from_proto(f) for f in self._unary(self._observer.ListFlows, req, timeout).flows]

    def totals(self, netns=None, timeout=None):
        """The retransmission totals of each network namespace the daemon watches
        (NetnsTotals, by inode; netns: that one only, an inode or a path to it);
        the list ends with the "other namespaces" bucket (netns_ino 0) when netns
        is None."""
        ino = _spec.parse_netns(netns) if netns is not None else 0
        r = self._unary(self._observer.GetTotals, self.pb2.GetTotalsRequest(netns_ino=ino), timeout)
        out = [_t.NetnsTotals.from_proto(n) for n in r.namespaces]
        if not ino:
            out.append(_t.NetnsTotals.from_proto(r.other))
        return out

    def watch_flows(self, filters=None, interval="1s", timeout=None, **filter_kw):
        """Stream of FlowUpdate: first a snapshot of every flow, then the flows
        changed or closed in each interval."""
        req = self.pb2.WatchFlowsRequest(filter=self._filters(filters, filter_kw, "filter"),
                                         interval_ns=parse_duration(interval, "interval"))
        return self._stream(self._observer.WatchFlows, req, _t.FlowUpdate.from_proto, timeout)

    def aggregates(self, window="1s", timeout=None):
        """Stream of Aggregate: retransmitted segments per window by type, by
        rule and by flow, and the gaps of the window."""
        req = self.pb2.WatchAggregatesRequest(window_ns=parse_duration(window, "window"))
        return self._stream(self._observer.WatchAggregates, req,
                            lambda m: _t.Aggregate.from_proto(m, self.pb2), timeout)

    # ------------------------------------------------------------ system --

    def capabilities(self, timeout=None):
        return _t.Capabilities.from_proto(
            self._unary(self._system.GetCapabilities, self.pb2.GetCapabilitiesRequest(), timeout))

    def health(self, timeout=None):
        return _t.Health.from_proto(self._unary(self._system.GetHealth, self.pb2.GetHealthRequest(), timeout))

    def version(self, timeout=None):
        return _t.Version.from_proto(self._unary(self._system.GetVersion, self.pb2.GetVersionRequest(), timeout))


def _align(rules, errors, n):
    """CreateRules, non-atomic: rules holds only the created ones, in request
    order; errors has one entry per spec ('' when created). Pair them up."""
    if len(errors) != n:  # a daemon that left errors out: trust the rules only
        return [(r, "") for r in rules] + [(None, "no answer for this spec")] * (n - len(rules))
    out, it = [], iter(rules)
    for e in errors:
        out.append((None, e) if e else (next(it, None), ""))
    return out
