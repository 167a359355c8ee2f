"""Friendly, read-only views of the API's messages.

Enums become short lowercase names ('active', 'ingress', 'fast'), port ranges
(lo, hi) tuples or None, maps plain dicts (retransmit type names normalised to
'fast', 'rto', ...). Every view keeps the message it came from in .raw.
"""

import dataclasses
import typing

from .spec import MARKOV_KEYS, RETRANSMIT_TYPES, action_name, short_name
from .units import format_duration, format_police, format_ports, format_rate


def _enum_name(enum_type, value, prefix):
    try:
        return short_name(enum_type.Name(value), prefix)
    except ValueError:  # a value newer than these stubs
        return str(value)


def _from_proto(cls, m, **given):
    """cls from message m: each field is m's field of the same name unless given
    here (converted); .raw is m."""
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in given:
            values[f.name] = given[f.name]
        elif f.name == "raw":
            values[f.name] = m
        else:
            values[f.name] = getattr(m, f.name)
    return cls(**values)


def _ports(pr):
    if pr.lo == 0 and pr.hi == 0:
        return None
    return (pr.lo, pr.hi if pr.hi else pr.lo)


def type_counts(m):
    """A retransmit-type map as {'fast': n, ...}, whatever the daemon's spelling."""
    out = {}
    for k, v in m.items():
        key = short_name(k, "RETRANSMIT_TYPE_")
        out[key] = out.get(key, 0) + v
    return out


def _sorted_types(d):
    order = {t: i for i, t in enumerate(RETRANSMIT_TYPES)}
    return sorted(d, key=lambda t: (order.get(t, len(order)), t))


# --------------------------------------------------------------- injector --

@dataclasses.dataclass(frozen=True)
class Counters:
    matched_packets: int = 0
    matched_segments: int = 0
    matched_bytes: int = 0
    dropped_packets: int = 0
    dropped_segments: int = 0
    dropped_bytes: int = 0
    # What the rule's action did to the packets its model picked (0 for the other actions);
    # those it could not act on passed unchanged: unacted_packets (lossd.v1 RuleCounters).
    corrupted_packets: int = 0
    corrupted_segments: int = 0
    corrupted_bytes: int = 0
    duplicated_packets: int = 0
    duplicated_segments: int = 0
    duplicated_bytes: int = 0
    marked_packets: int = 0
    marked_segments: int = 0
    marked_bytes: int = 0
    unacted_packets: int = 0

    @classmethod
    def from_proto(cls, m):
        # getattr: stubs of a daemon without actions have only the first six
        return cls(**{f.name: getattr(m, f.name, 0) for f in dataclasses.fields(cls)})

    @property
    def picked_packets(self):
        """The packets the rule's model picked: dropped, acted on (corrupted, duplicated,
        marked) or not (unacted_packets). With action 'ecn' the non-ECT ones are dropped."""
        return (self.dropped_packets + self.corrupted_packets + self.duplicated_packets +
                self.marked_packets + self.unacted_packets)

    @property
    def drop_rate(self):
        """Dropped / matched packets (the rule's decisions: a GSO packet is one, whatever
        segments it carries; the unit of the daemon's measured rate and interval), None
        before any match."""
        return self.dropped_packets / self.matched_packets if self.matched_packets else None

    @property
    def picked_rate(self):
        """Picked / matched packets: the daemon's measured rate whatever the action (drop_rate
        for a drop rule), None before any match."""
        return self.picked_packets / self.matched_packets if self.matched_packets else None


@dataclasses.dataclass(frozen=True)
class Match:
    src: str = ""
    dst: str = ""
    sport: typing.Optional[tuple] = None
    dport: typing.Optional[tuple] = None
    protocol: str = ""
    family: int = 0
    tcp_flags: str = ""
    payload: str = "any"

    @classmethod
    def from_proto(cls, m, pb2):
        return cls(m.src, m.dst, _ports(m.sport), _ports(m.dport), m.protocol, m.family,
                   m.tcp_flags, _enum_name(pb2.Payload, m.payload, "PAYLOAD_"))

    def __str__(self):
        parts = []
        if self.family:
            parts.append("ipv%d" % self.family)
        if self.protocol:
            parts.append(self.protocol)
        if self.src:
            parts.append("src " + self.src)
        if self.dst:
            parts.append("dst " + self.dst)
        if self.sport:
            parts.append("sport " + format_ports(self.sport))
        if self.dport:
            parts.append("dport " + format_ports(self.dport))
        if self.tcp_flags:
            parts.append("flags " + self.tcp_flags)
        if self.payload != "any":
            parts.append("payload " + self.payload)
        return " ".join(parts) or "all"


@dataclasses.dataclass(frozen=True)
class LossModel:
    kind: str = ""            # 'bernoulli', 'gilbert_elliott', 'every_nth', 'first_k', 'ramp',
                              # 'markov', 'police' or ''
    rate: float = 0.0         # bernoulli
    p: float = 0.0            # gilbert_elliott
    r: float = 0.0
    bad_loss: float = 0.0
    good_loss: float = 0.0
    n: int = 0                # every_nth / first_k
    seed: typing.Optional[int] = None
    steps: tuple = ()         # ramp: ((rate, duration_ns), ...)
    p13: float = 0.0          # markov (netem's loss state; spec.markov4)
    p31: float = 0.0
    p32: float = 0.0
    p23: float = 0.0
    p14: float = 0.0
    rate_bps: int = 0         # police: the token bucket (spec.policer)
    burst_bytes: int = 0
    per_flow: bool = False    # police: one bucket per flow (else one for the rule)

    @classmethod
    def from_proto(cls, m):
        kind = m.WhichOneof("model") or ""
        seed = m.seed if m.HasField("seed") else None
        if kind == "bernoulli":
            return cls(kind, rate=m.bernoulli.rate, seed=seed)
        if kind == "gilbert_elliott":
            g = m.gilbert_elliott
            return cls(kind, p=g.p, r=g.r, bad_loss=g.bad_loss, good_loss=g.good_loss, seed=seed)
        if kind == "every_nth":
            return cls(kind, n=m.every_nth, seed=seed)
        if kind == "first_k":
            return cls(kind, n=m.first_k, seed=seed)
        if kind == "ramp":
            return cls(kind, steps=tuple((st.rate, st.duration_ns) for st in m.ramp.steps), seed=seed)
        if kind == "markov":
            return cls(kind, seed=seed, **{k: getattr(m.markov, k) for k in MARKOV_KEYS})
        if kind == "police":
            return cls(kind, rate_bps=m.police.rate_bps, burst_bytes=m.police.burst_bytes,
                       per_flow=getattr(m.police, "per_flow", False), seed=seed)
        return cls(kind, seed=seed)

    @property
    def mean_rate(self):
        """The long-run loss rate: the Bernoulli rate, the Gilbert-Elliott's and the
        Markov chain's stationary mean, 1/n for every_nth; None for first_k and police
        (what they pick follows the traffic), as the daemon's configured rate."""
        if self.kind == "bernoulli":
            return self.rate
        if self.kind == "gilbert_elliott":
            if self.p + self.r == 0:
                return self.good_loss
            bad = self.p / (self.p + self.r)
            return bad * self.bad_loss + (1 - bad) * self.good_loss
        if self.kind == "every_nth":
            return 1.0 / self.n if self.n else 0.0
        if self.kind == "ramp":  # over its time, as if the traffic were even (the daemon's)
            t = sum(d for _, d in self.steps)
            return sum(r * d for r, d in self.steps) / t if t else 0.0
        if self.kind == "markov":
            # The stationary share of packets entering state 3 or 4 (lossd's ModelMeanLoss):
            # with pi1 = 1, pi4 = p14, pi3 = p13 / p31, pi2 = pi3 p32 / p23.
            if (self.p13 > 0 and not self.p31 > 0) or (self.p32 > 0 and not self.p23 > 0):
                return None  # a chain lossd refuses
            pi3 = self.p13 / self.p31 if self.p13 > 0 else 0.0
            pi2 = pi3 * self.p32 / self.p23 if self.p32 > 0 else 0.0
            return (pi3 + self.p14) / (1 + pi2 + pi3 + self.p14)
        return None

    def __str__(self):
        if self.kind == "bernoulli":
            s = format_rate(self.rate)
        elif self.kind == "gilbert_elliott":
            s = "ge %s,%s,%s,%s" % tuple(format_rate(x) for x in (self.p, self.r, self.bad_loss, self.good_loss))
        elif self.kind == "every_nth":
            s = "every %d" % self.n
        elif self.kind == "first_k":
            s = "first %d" % self.n
        elif self.kind == "ramp":
            s = "ramp " + ",".join("%s/%s" % (format_rate(r), format_duration(d)) for r, d in self.steps)
        elif self.kind == "markov":
            s = "markov " + ",".join(format_rate(getattr(self, k)) for k in MARKOV_KEYS)
        elif self.kind == "police":
            s = "police " + format_police(self.rate_bps, self.burst_bytes, self.per_flow)
        else:
            s = "no model"
        if self.seed is not None:
            s += " seed %d" % self.seed
        return s



def _stall_cause(guard):
    """A Guard's stall_cause as lossd's name ("rto", ...), "" for any (or a daemon without it)."""
    v = getattr(guard, "stall_cause", 0)
    if not v:
        return ""
    enum = type(guard).DESCRIPTOR.fields_by_name["stall_cause"].enum_type
    return enum.values_by_number[v].name[len("STALL_CAUSE_"):].lower() if v in enum.values_by_number else str(v)


@dataclasses.dataclass(frozen=True)
class Rule:
    id: int
    state: str                # 'active', 'expired', 'stopped' (by its guard), 'failed', 'deleted' (kept after delete_rule), 'unspecified'
    reason: str
    attachments: tuple
    interface: str
    cgroup: str
    hook: str                 # 'xdp', 'tc', 'cgroup' (as resolved), 'auto'
    direction: str            # 'ingress', 'egress', 'both'
    match: Match
    loss: LossModel
    priority: int
    ttl_ns: int
    per_segment: bool
    labels: dict
    force: bool
    created_unix_ns: int
    expires_unix_ns: int
    counters: Counters
    # What it does to the packets its model picks: 'drop', 'corrupt', 'corrupt-payload',
    # 'duplicate', 'ecn' or 'ecn-pass' (lossd.v1 Action).
    action: str = "drop"
    # A service target as asked (docs/targeting.md), and the cgroup the daemon resolved
    # the rule's target to (path below the cgroup v2 mount; "" for interface rules).
    pid: int = 0
    unit: str = ""
    container: str = ""
    pod: str = ""
    resolved_cgroup: str = ""
    cgroup_id: int = 0
    # Set while a live rule has matched no packet for the daemon's --unmatched-hint: what to
    # check ("matched no packet in 12s: it sees what arrives on eth0; ...").
    hint: str = ""
    # Its schedule (lossd.v1 Schedule; all 0: none) and the schedule's origin on the data
    # plane's clock (CLOCK_MONOTONIC) and the wall clock: active window i is
    # [start + i * (active + dormant), + active).
    start_after_ns: int = 0
    active_ns: int = 0
    dormant_ns: int = 0
    cycles: int = 0
    schedule_start_mono_ns: int = 0
    schedule_start_unix_ns: int = 0
    # Its guard (lossd.v1 Guard; all 0: none) and, once stopped by it (state 'stopped'), why:
    # the GuardStop message (condition, crossed/stopped/last_drop_mono_ns, flow, ...).
    guard_stall_ns: int = 0
    guard_rtos: int = 0
    guard_rtos_window_ns: int = 0
    guard_resends: int = 0
    guard_resends_window_ns: int = 0
    guard_resets: int = 0
    guard_resets_window_ns: int = 0
    guard_watch_port: int = 0
    guard_retrans: float = 0.0
    guard_retrans_window_ns: int = 0
    guard_misbehaves: bool = False
    guard_stall_cause: str = ""  # "rto", "tlp", "fast_recovery", "zero_window"; "": any
    guard_stop: typing.Any = None
    raw: typing.Any = dataclasses.field(repr=False, compare=False, default=None)

    @classmethod
    def from_proto(cls, m, pb2):
        s = m.spec
        if hasattr(s, "schedule"):  # stubs of a daemon with schedules
            sc = s.schedule
            sched = dict(start_after_ns=sc.start_after_ns, active_ns=sc.active_ns,
                             dormant_ns=sc.dormant_ns, cycles=sc.cycles,
                             schedule_start_mono_ns=m.schedule_start_mono_ns,
                             schedule_start_unix_ns=m.schedule_start_unix_ns)
        else:
            sched = {}
        if hasattr(s, "guard"):  # stubs of a daemon with guards
            sched.update(guard_stall_ns=s.guard.stall_ns, guard_rtos=s.guard.rtos,
                         guard_rtos_window_ns=s.guard.rtos_window_ns,
                         guard_resends=getattr(s.guard, "resends", 0),
                         guard_resends_window_ns=getattr(s.guard, "resends_window_ns", 0),
                         guard_resets=getattr(s.guard, "resets", 0),
                         guard_resets_window_ns=getattr(s.guard, "resets_window_ns", 0),
                         guard_watch_port=getattr(s.guard, "watch_port", 0),
                         guard_retrans=getattr(s.guard, "retrans", 0.0),
                         guard_retrans_window_ns=getattr(s.guard, "retrans_window_ns", 0),
                         guard_misbehaves=getattr(s.guard, "misbehaves", False),
                         guard_stall_cause=_stall_cause(s.guard),
                         guard_stop=m.guard_stop if m.HasField("guard_stop") else None)
        svc = {k: getattr(s, k) for k in ("pid", "unit", "container", "pod") if hasattr(s, k)}
        if hasattr(pb2, "Action"):  # stubs of a daemon with actions
            svc["action"] = action_name(_enum_name(pb2.Action, s.action, "ACTION_"))
        if hasattr(m, "cgroup_id"):
            svc.update(resolved_cgroup=m.cgroup, cgroup_id=m.cgroup_id)
        return cls(
            id=m.id, state=_enum_name(pb2.RuleState, m.state, "RULE_STATE_"), reason=m.reason,
            attachments=tuple(m.attachments), interface=s.interface, cgroup=s.cgroup,
            hook=_enum_name(pb2.Hook, s.hook, "HOOK_"),
            direction=_enum_name(pb2.Direction, s.direction, "DIRECTION_"),
            match=Match.from_proto(s.match, pb2), loss=LossModel.from_proto(s.loss),
            priority=s.priority, ttl_ns=s.ttl_ns, per_segment=s.per_segment, labels=dict(s.labels),
            force=s.force, created_unix_ns=m.created_unix_ns, expires_unix_ns=m.expires_unix_ns,
            counters=Counters.from_proto(m.counters), hint=getattr(m, "hint", ""), raw=m, **svc,
            **sched)

    @property
    def rate(self):
        """The configured (mean) loss rate, see LossModel.mean_rate."""
        return self.loss.mean_rate

    @property
    def target(self):
        t = []
        if self.interface:
            t.append(self.interface)
        if self.cgroup:
            t.append("cgroup " + self.cgroup)
        for kind in ("pid", "unit", "pod", "container"):
            if getattr(self, kind):
                t.append("%s %s" % (kind, getattr(self, kind)))
        if self.resolved_cgroup and not self.cgroup:
            t.append("(cgroup %s)" % self.resolved_cgroup)
        return " ".join(t) + " " + self.direction

    def __str__(self):
        s = "rule %d %s: %s %s, %s" % (self.id, self.state, self.target, self.match, self.loss)
        if self.action != "drop":
            s += ", action %s" % self.action
        if self.ttl_ns:
            s += ", ttl %s" % format_duration(self.ttl_ns)
        if self.per_segment:
            s += ", per-segment"
        if self.reason:
            s += " (%s)" % self.reason
        return s


@dataclasses.dataclass(frozen=True)
class RuleEffect:
    id: int
    configured_rate: float
    measured_rate: float
    rate_ci_low: float
    rate_ci_high: float
    configured_within_ci: bool
    counters: Counters
    retransmitted_segments: dict   # {'fast': n, 'rto': n, ...}
    flows: int
    # First-k and every-n-th drop by count: `expected_dropped` (None when it cannot be
    # stated: RuleEffect.expectation in lossd.proto) of the `expected_of` packets then
    # matched, beside the `expected_actual` drops; configured_within_ci is their equality.
    deterministic: bool = False
    expected_dropped: typing.Optional[int] = None
    expected_of: typing.Optional[int] = None
    expected_actual: typing.Optional[int] = None
    hint: str = ""                 # Rule.hint: a live rule that matched nothing yet
    # Of retransmitted_segments: the resends of its dropped segments, by type (the rest the
    # loss caused otherwise: after a timeout TCP resends what was in flight), and the ones the
    # receivers D-SACKed, by the resend's type: needless, the data had arrived.
    resent_dropped_segments: dict = dataclasses.field(default_factory=dict)
    dsacked_segments: dict = dataclasses.field(default_factory=dict)
    # A ramp: each step's effect (lossd.v1 StepEffect messages: configured_rate,
    # start_offset_ns, duration_ns, matched/dropped packets and segments, measured_rate,
    # rate_ci_low/high, configured_within_ci), in order.
    steps: tuple = ()
    # How its flows answered (summed over them, as Flow counts it): congestion state
    # entries ({'cwr': n, ...}: CWR answers an ecn rule's marks), ACKs with ECE they
    # received, and segments D-SACKed they never resent (a duplicate rule's copies).
    ca_entries: dict = dataclasses.field(default_factory=dict)
    ece_acks: int = 0
    dsacked_copies: int = 0
    raw: typing.Any = dataclasses.field(repr=False, compare=False, default=None)

    @classmethod
    def from_proto(cls, m):
        x = m.expectation if m.HasField("expectation") else None
        return cls(m.id, m.configured_rate, m.measured_rate, m.rate_ci_low, m.rate_ci_high,
                   m.configured_within_ci, Counters.from_proto(m.counters),
                   type_counts(m.retransmitted_segments), m.flows, m.deterministic,
                   x.expected_dropped_packets if x else None, x.matched_packets if x else None,
                   x.dropped_packets if x else None, hint=getattr(m, "hint", ""),
                   resent_dropped_segments=type_counts(getattr(m, "resent_dropped_segments", {})),
                   dsacked_segments=type_counts(getattr(m, "dsacked_segments", {})),
                   steps=tuple(getattr(m, "steps", ())),
                   ca_entries=dict(getattr(m, "ca_entries", {})), ece_acks=getattr(m, "ece_acks", 0),
                   dsacked_copies=getattr(m, "dsacked_copies", 0), raw=m)

    @property
    def retransmitted_total(self):
        return sum(self.retransmitted_segments.values())

    def types(self):
        """Retransmit type names present, in the API's order."""
        return _sorted_types(self.retransmitted_segments)

    def __str__(self):
        c = self.counters
        if self.deterministic:
            head = ("rule %d: expected %d drops of %d packets, dropped %d: %s"
                    % (self.id, self.expected_dropped, self.expected_of, self.expected_actual,
                       "as configured" if self.configured_within_ci else "NOT AS CONFIGURED")
                    if self.expected_dropped is not None else
                    "rule %d: expected drops unknown (the per-flow counts did not add up: traffic still moving?)" % self.id)
        elif self.configured_rate < 0:  # a policer: what it picks follows the traffic
            head = ("rule %d: no configured rate (a policer), measured %s [%s, %s]"
                    % (self.id, format_rate(self.measured_rate), format_rate(self.rate_ci_low),
                       format_rate(self.rate_ci_high)))
        else:
            head = ("rule %d: configured %s, measured %s [%s, %s] %s"
                    % (self.id, format_rate(self.configured_rate), format_rate(self.measured_rate),
                       format_rate(self.rate_ci_low), format_rate(self.rate_ci_high),
                       "ok" if self.configured_within_ci else "OUTSIDE CI"))
        s = head + ("; dropped %d of %d packets; %d flows; retransmitted %d"
                    % (c.dropped_packets, c.matched_packets, self.flows, self.retransmitted_total))
        if self.retransmitted_segments:
            s += " (%s)" % ", ".join("%s %d" % (t, self.retransmitted_segments[t]) for t in self.types())
        return s


@dataclasses.dataclass(frozen=True)
class CountersUpdate:
    seq: int
    time_unix_ns: int
    rules: tuple

    @classmethod
    def from_proto(cls, m, pb2):
        return cls(m.seq, m.time_unix_ns, tuple(Rule.from_proto(r, pb2) for r in m.rules))


# --------------------------------------------------------------- observer --

class Tuple(typing.NamedTuple):
    local_addr: str
    local_port: int
    remote_addr: str
    remote_port: int

    @classmethod
    def from_proto(cls, m):
        return cls(m.local_addr, m.local_port, m.remote_addr, m.remote_port)

    def __str__(self):
        def ep(a, p):
            return ("[%s]:%d" if ":" in a else "%s:%d") % (a, p)
        return "%s -> %s" % (ep(self.local_addr, self.local_port), ep(self.remote_addr, self.remote_port))


@dataclasses.dataclass(frozen=True)
class RetransmitEvent:
    seq: int                  # stream sequence number
    time_mono_ns: int
    cookie: int
    cgroup_id: int
    tuple: Tuple
    type: str                 # 'fast', 'rto', 'loss', 'tlp', 'syn', 'synack', 'probe0', 'unknown'
    outcome: str              # 'sent' or 'failed' (the transmit failed; see err)
    err: int
    segments: int
    tcp_seq: int              # first TCP sequence number resent (RetransmitEvent.seq)
    state: typing.Any         # the lossd.v1.SocketState message (cwnd, srtt_us, ...)
    rule_ids: tuple
    netns_ino: int = 0        # the socket's network namespace (inode)
    raw: typing.Any = dataclasses.field(repr=False, compare=False, default=None)

    @classmethod
    def from_proto(cls, seq, m, pb2):
        return cls(seq, m.time_mono_ns, m.cookie, m.cgroup_id, Tuple.from_proto(m.tuple),
                   _enum_name(pb2.RetransmitType, m.type, "RETRANSMIT_TYPE_"),
                   _enum_name(pb2.Outcome, m.outcome, "OUTCOME_"), m.err, m.segments, m.seq,
                   m.state, tuple(m.rule_ids), m.netns_ino, raw=m)

    @property
    def counted(self):
        """True when the kernel counted it as retransmitted (sent or failed after counting)."""
        return self.outcome in ("sent", "failed")


@dataclasses.dataclass(frozen=True)
class Gap:
    """Stream messages lost (count since the previous Gap of this source)."""
    seq: int
    source: str               # 'kernel_ring', 'daemon_hub', 'subscriber'
    count: int
    raw: typing.Any = dataclasses.field(repr=False, compare=False, default=None)

    @classmethod
    def from_proto(cls, seq, m, pb2):
        return cls(seq, _enum_name(pb2.GapSource, m.source, "GAP_SOURCE_"), m.count, raw=m)


@dataclasses.dataclass(frozen=True)
class Flow:
    cookie: int
    tuple: Tuple
    cgroup_id: int
    opened_mono_ns: int
    cwnd: int
    cwnd_min: int
    cwnd_max: int
    srtt_us: int
    srtt_min_us: int
    srtt_max_us: int
    bytes_acked: int
    bytes_sent: int
    retransmitted_segments: dict   # by type name
    ca_time_ns: dict               # by congestion state name
    max_backoff: int
    preexisting: bool
    ca_state: int
    closed: bool
    duration_ns: int
    # Where its time went (docs/observer.md#limits): {'busy': ns, 'rwnd_limited': ns,
    # 'sndbuf_limited', 'cwnd_limited', 'nagle_limited', 'app_limited', 'idle'}; the largest limit of
    # busy time and its share ('' while nothing was busy).
    limit_ns: dict = dataclasses.field(default_factory=dict)
    dominant_limit: str = ""
    dominant_share: float = 0.0
    stalls: int = 0                # stalls that ended
    stall_ns: dict = dataclasses.field(default_factory=dict)   # their time by cause name
    stalled_ns: int = 0            # > 0: stalled now, for this long
    min_rtt_us: int = 0
    netns_ino: int = 0             # the socket's network namespace (inode)
    dsacked_segments: int = 0      # resends the peer D-SACKed: needless (TCPDSACKRecvSegs)
    # Times it entered each congestion state (names of ca_time_ns): "cwr" answers ECN echoes.
    ca_entries: dict = dataclasses.field(default_factory=dict)
    ece_acks: int = 0              # ACKs with ECE it received: its peer's echoes of CE marks
    dsacked_copies: int = 0        # segments D-SACKed that it never resent: the path's copies
    raw: typing.Any = dataclasses.field(repr=False, compare=False, default=None)

    @classmethod
    def from_proto(cls, m):
        return _from_proto(cls, m, tuple=Tuple.from_proto(m.tuple),
                           retransmitted_segments=type_counts(m.retransmitted_segments),
                           ca_time_ns={k.lower(): v for k, v in m.ca_time_ns.items()},
                           limit_ns=dict(m.limit_ns), stall_ns=dict(m.stall_ns),
                           ca_entries=dict(m.ca_entries))

    @property
    def retransmitted_total(self):
        return sum(self.retransmitted_segments.values())

    @property
    def stall_total_ns(self):
        return sum(self.stall_ns.values())


@dataclasses.dataclass(frozen=True)
class NetnsTotals:
    """The retransmission totals of one network namespace (GetTotals): by type
    name; retrans_segs equals that namespace's Tcp RetransSegs."""
    netns_ino: int            # 0: the namespaces that found the daemon's table full
    path: str
    own: bool                 # the daemon's own namespace
    sent_segments: dict
    failed_segments: dict
    sent_events: dict
    failed_events: dict
    retrans_segs: int
    raw: typing.Any = dataclasses.field(repr=False, compare=False, default=None)

    @classmethod
    def from_proto(cls, m):
        return _from_proto(cls, m, sent_segments=dict(m.sent_segments),
                           failed_segments=dict(m.failed_segments),
                           sent_events=dict(m.sent_events), failed_events=dict(m.failed_events))


@dataclasses.dataclass(frozen=True)
class DropLink:
    """One drop of a rule as the injector recorded it (rule_id 0: none linked)."""
    rule_id: int
    time_mono_ns: int
    tcp_seq: int              # first TCP sequence number of the dropped skb
    length: int               # payload bytes
    segments: int

    @classmethod
    def from_proto(cls, m):
        return cls(m.rule_id, m.time_mono_ns, m.seq, m.length, m.segments)

    def __str__(self):
        return "rule %d's drop of seq %d+%d" % (self.rule_id, self.tcp_seq, self.length)


@dataclasses.dataclass(frozen=True)
class StallEvent:
    """A stall: data to deliver, nothing delivered past the threshold
    (docs/observer.md#stalls), with its cause and the evidence for it."""
    seq: int                  # stream sequence number
    start_mono_ns: int
    duration_ns: int
    cookie: int
    cgroup_id: int
    tuple: Tuple
    cause: str                # 'rto', 'tlp', 'fast_recovery', 'zero_window', 'rwnd_limited',
                              # 'nagle_delayed_ack', 'cwnd_limited', 'sndbuf_limited',
                              # 'app_limited', 'unknown'
    at_close: bool
    threshold_ns: int
    snd_una: int              # the hole: first byte not delivered during it
    ack_seq: int              # the ACK that ended it
    unsent_bytes: int
    first_retransmit: str     # a retransmit type name, '' when none in it
    first_retransmit_seq: int
    retransmits: int
    backoff: int
    acks: int
    min_window: int
    min_rtt_us: int
    nagle: bool
    state: typing.Any         # the lossd.v1.SocketState message at its end
    caused_by: typing.Optional[DropLink]   # the rule drop that made the hole, or None
    rule_ids: tuple
    netns_ino: int = 0        # the socket's network namespace (inode)
    closing: bool = False     # after our FIN: the application closed with data unacknowledged
    raw: typing.Any = dataclasses.field(repr=False, compare=False, default=None)

    @classmethod
    def from_proto(cls, seq, m, pb2):
        first = _enum_name(pb2.RetransmitType, m.first_retransmit, "RETRANSMIT_TYPE_")
        return cls(seq, m.start_mono_ns, m.duration_ns, m.cookie, m.cgroup_id,
                   Tuple.from_proto(m.tuple), _enum_name(pb2.StallCause, m.cause, "STALL_CAUSE_"),
                   m.at_close, m.threshold_ns, m.snd_una, m.ack_seq, m.unsent_bytes,
                   "" if first == "unspecified" else first, m.first_retransmit_seq,
                   m.retransmits, m.backoff, m.acks, m.min_window, m.min_rtt_us, m.nagle, m.state,
                   DropLink.from_proto(m.caused_by) if m.caused_by.rule_id else None,
                   tuple(m.rule_ids), m.netns_ino, m.closing, raw=m)

    @property
    def end_mono_ns(self):
        return self.start_mono_ns + self.duration_ns


@dataclasses.dataclass(frozen=True)
class TraceSample:
    """One ACK of a traced flow (TraceFlow): the sender's state before it."""
    seq: int                  # stream sequence number
    time_mono_ns: int
    ack_seq: int
    snd_una: int
    snd_nxt: int
    write_seq: int
    cwnd: int
    ssthresh: int
    srtt_us: int
    in_flight: int
    snd_wnd: int
    ack_window: int
    sacked_out: int
    lost_out: int
    ca_state: int
    delivered: int
    raw: typing.Any = dataclasses.field(repr=False, compare=False, default=None)

    FIELDS = ("time_mono_ns", "ack_seq", "snd_una", "snd_nxt", "write_seq", "cwnd", "ssthresh",
              "srtt_us", "in_flight", "snd_wnd", "ack_window", "sacked_out", "lost_out",
              "ca_state", "delivered")

    @classmethod
    def from_proto(cls, seq, m):
        return cls(seq, *(getattr(m, f) for f in cls.FIELDS), raw=m)


@dataclasses.dataclass(frozen=True)
class TraceDrop:
    """A drop of the traced flow by a rule."""
    seq: int
    drop: DropLink
    raw: typing.Any = dataclasses.field(repr=False, compare=False, default=None)

    @property
    def time_mono_ns(self):
        return self.drop.time_mono_ns


@dataclasses.dataclass(frozen=True)
class TraceFlow:
    """The traced flow: first (final False: as the trace began) and last
    (final True: its closing summary, or its state when the trace ended)."""
    seq: int
    flow: Flow
    final: bool

    @property
    def raw(self):
        return self.flow.raw


def trace_item(m, pb2):
    """A TraceMessage as its view (None: a kind these stubs do not know)."""
    which = m.WhichOneof("msg")
    if which == "sample":
        return TraceSample.from_proto(m.seq, m.sample)
    if which == "retransmit":
        return RetransmitEvent.from_proto(m.seq, m.retransmit, pb2)
    if which == "stall":
        return StallEvent.from_proto(m.seq, m.stall, pb2)
    if which == "drop":
        return TraceDrop(m.seq, DropLink.from_proto(m.drop.drop), raw=m.drop)
    if which == "gap":
        return Gap.from_proto(m.seq, m.gap, pb2)
    if which in ("flow", "closed"):
        return TraceFlow(m.seq, Flow.from_proto(getattr(m, which)), which == "closed")
    return None


# The TraceMessage field of each view (trace_item's inverse).
def trace_kind(item):
    if isinstance(item, TraceFlow):
        return "closed" if item.final else "flow"
    return {TraceSample: "sample", RetransmitEvent: "retransmit", StallEvent: "stall",
            TraceDrop: "drop", Gap: "gap"}[type(item)]


@dataclasses.dataclass(frozen=True)
class FlowUpdate:
    seq: int
    snapshot: bool
    time_unix_ns: int
    flows: tuple

    @classmethod
    def from_proto(cls, m):
        return cls(m.seq, m.snapshot, m.time_unix_ns, tuple(Flow.from_proto(f) for f in m.flows))


@dataclasses.dataclass(frozen=True)
class Aggregate:
    seq: int
    window_start_unix_ns: int
    window_ns: int
    retransmits_by_type: dict      # {'fast': segments, ...}
    retransmits_by_rule: dict      # {rule id: segments}
    retransmits_by_flow: dict      # {socket cookie: segments}
    gaps: tuple                    # Gap(seq=the aggregate's seq, ...)
    raw: typing.Any = dataclasses.field(repr=False, compare=False, default=None)

    @classmethod
    def from_proto(cls, m, pb2):
        return _from_proto(cls, m, retransmits_by_type=type_counts(m.retransmits_by_type),
                           retransmits_by_rule=dict(m.retransmits_by_rule),
                           retransmits_by_flow=dict(m.retransmits_by_flow),
                           gaps=tuple(Gap.from_proto(m.seq, g, pb2) for g in m.gaps))

    @property
    def total(self):
        return sum(self.retransmits_by_type.values())

    def types(self):
        return _sorted_types(self.retransmits_by_type)


# ----------------------------------------------------------------- system --

@dataclasses.dataclass(frozen=True)
class HookAvailability:
    name: str
    available: bool
    reason: str


@dataclasses.dataclass(frozen=True)
class Capabilities:
    kernel: str
    btf: bool
    injector_hooks: tuple
    observer_hooks: tuple
    cgroup2_mount: str
    max_rules: int
    max_ttl_ns: int
    raw: typing.Any = dataclasses.field(repr=False, compare=False, default=None)

    @classmethod
    def from_proto(cls, m):
        def hooks(hs):
            return tuple(HookAvailability(h.name, h.available, h.reason) for h in hs)
        return _from_proto(cls, m, injector_hooks=hooks(m.injector_hooks),
                           observer_hooks=hooks(m.observer_hooks))


@dataclasses.dataclass(frozen=True)
class Health:
    serving: bool
    rules: int
    lease_remaining_ns: int
    events_lost_kernel: int
    subscribers: int
    # {"injector": "READY", "observer": "LOADING", ...}: the daemon serves while its parts load
    components: typing.Dict[str, str] = dataclasses.field(default_factory=dict)
    raw: typing.Any = dataclasses.field(repr=False, compare=False, default=None)

    @classmethod
    def from_proto(cls, m):
        comps = {}
        for c in getattr(m, "components", ()):
            comps[c.name] = c.DESCRIPTOR.fields_by_name["state"].enum_type.values_by_number[c.state].name \
                .replace("COMPONENT_STATE_", "")
        return _from_proto(cls, m, components=comps)


@dataclasses.dataclass(frozen=True)
class Version:
    version: str
    api: str

    @classmethod
    def from_proto(cls, m):
        return cls(m.version, m.api)
