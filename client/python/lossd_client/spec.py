"""Building requests: rule specs and event filters, from friendly arguments.

The builders are pure Python: they validate and normalise the arguments into
dicts shaped like the proto's JSON form (field names of lossd.v1, enum value
names), which to_proto() turns into messages once the generated modules are
loaded. So they can be tested, and mistakes reported, without a daemon.
"""

import dataclasses
import ipaddress
import os
import re
import stat as _stat

from .errors import LossdInputError
from .units import (_WS, BIT_RATE_UNIT_NAMES, BIT_RATE_UNITS, MAX_INPUT, SIZE_UNIT_NAMES, SIZE_UNITS,
                    format_bit_rate, format_size, parse_duration, parse_labels, parse_ports,
                    parse_quantity, parse_rate)

# ------------------------------------------------------------------ enums --

DIRECTIONS = {
    "ingress": "DIRECTION_INGRESS", "in": "DIRECTION_INGRESS",
    "egress": "DIRECTION_EGRESS", "out": "DIRECTION_EGRESS",
    "both": "DIRECTION_BOTH",
}
HOOKS = {"auto": "HOOK_AUTO", "xdp": "HOOK_XDP", "tc": "HOOK_TC", "cgroup": "HOOK_CGROUP"}
PAYLOADS = {"any": "PAYLOAD_ANY", "only": "PAYLOAD_ONLY", "none": "PAYLOAD_NONE"}
# What a rule does to the packets its model picks ('_' for '-' too); all but drop at tc.
ACTIONS = {
    "drop": "ACTION_DROP", "corrupt": "ACTION_CORRUPT",
    "corrupt-payload": "ACTION_CORRUPT_PAYLOAD", "corrupt_payload": "ACTION_CORRUPT_PAYLOAD",
    "duplicate": "ACTION_DUPLICATE", "ecn": "ACTION_ECN", "ecn-pass": "ACTION_ECN_PASS",
    "ecn_pass": "ACTION_ECN_PASS",
}
RETRANSMIT_TYPES = ("fast", "rto", "loss", "tlp", "syn", "synack", "probe0", "unknown")
TCP_FLAGS = ("fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr")  # bit i at index i
PROTOCOLS = ("tcp", "udp", "icmp", "icmpv6")
PROTOCOL_NUMBERS = {"tcp": 6, "udp": 17, "icmp": 1, "icmpv6": 58}
PROTOCOL_ALIASES = {"icmp6": "icmpv6", "ipv6-icmp": "icmpv6", "any": "", "all": ""}
FAMILIES = {None: 0, 0: 0, 4: 4, 6: 6, "4": 4, "6": 6, "0": 0, "any": 0, "ipv4": 4, "ipv6": 6,
            "inet": 4, "inet6": 6}
MAX_PRIORITY = 1000000  # lossd's kMaxPriority


def _enum(value, table, prefix, name):
    """'ingress' / 'INGRESS' / 'DIRECTION_INGRESS' -> 'DIRECTION_INGRESS'."""
    if isinstance(value, str):
        v = value.strip().lower()
        if v.startswith(prefix.lower()):
            v = v[len(prefix):]
        if v in table:
            return table[v]
    choices = sorted(set(short_name(n, prefix) for n in table.values()))
    raise LossdInputError("%s: expected one of %s, got %r" % (name, ", ".join(choices), value))


def parse_direction(value):
    return _enum(value, DIRECTIONS, "DIRECTION_", "direction")


def parse_hook(value):
    return _enum(value, HOOKS, "HOOK_", "hook")


def parse_payload(value):
    if value is None:
        return "PAYLOAD_ANY"
    return _enum(value, PAYLOADS, "PAYLOAD_", "payload")


def parse_action(value):
    """'drop' (None or '' too), 'corrupt', 'corrupt-payload', 'duplicate', 'ecn', 'ecn-pass'
    (any case, '_' for '-', the 'ACTION_' prefix optional) -> 'ACTION_...'."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return "ACTION_DROP"
    return _enum(value, ACTIONS, "ACTION_", "action")


def action_name(enum_name):
    """'ACTION_CORRUPT_PAYLOAD' -> 'corrupt-payload' (lossd's name)."""
    return short_name(enum_name, "ACTION_").replace("_", "-")


def parse_retransmit_type(value):
    """'fast' / 'FAST' / 'RETRANSMIT_TYPE_FAST' -> 'RETRANSMIT_TYPE_FAST'."""
    if isinstance(value, str):
        v = value.strip().lower()
        if v.startswith("retransmit_type_"):
            v = v[len("retransmit_type_"):]
        if v in RETRANSMIT_TYPES:
            return "RETRANSMIT_TYPE_" + v.upper()
    raise LossdInputError("types: expected some of %s, got %r" % (", ".join(RETRANSMIT_TYPES), value))


def short_name(enum_name, prefix):
    """'RETRANSMIT_TYPE_FAST' -> 'fast' (and 'FAST' / 'fast' -> 'fast')."""
    s = str(enum_name)
    if s.upper().startswith(prefix):
        s = s[len(prefix):]
    return s.lower()


# ----------------------------------------------------------- match fields --

def parse_address(value, name):
    """A CIDR or an address, IPv4 or IPv6 (host bits clear, the prefix a
    number); returned as given (stripped)."""
    if value is None:
        return None
    if isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address,
                          ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return str(value)
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_INPUT:
        raise LossdInputError("%s: expected an address or a CIDR, got %r" % (name, value))
    v = value.strip()
    host, slash, prefix = v.partition("/")
    if slash and not re.fullmatch(r"[0-9]{1,20}", prefix):
        raise LossdInputError("%s: %r: the prefix length must be a number" % (name, value))
    try:
        net = ipaddress.ip_network(v, strict=False)
    except ValueError:
        raise LossdInputError("%s: %r is not an IPv4/IPv6 address or CIDR" % (name, value)) from None
    if net.network_address != ipaddress.ip_address(host):
        raise LossdInputError("%s: %r has host bits set beyond /%d" % (name, value, net.prefixlen))
    # An IPv4-mapped address (::ffff:a.b.c.d, as dual-stack sockets show IPv4
    # peers) is the IPv4 address on the wire, as lossd takes it.
    if net.version == 6 and net.prefixlen >= 96 and net.network_address.ipv4_mapped is not None:
        return "%s/%d" % (net.network_address.ipv4_mapped, net.prefixlen - 96)
    return v


def parse_protocol(value):
    """'tcp', 'udp', 'icmp', 'icmpv6' (or 'icmp6', 'ipv6-icmp'), 'any'/'all'
    (-> ''), or a number 0-255 (-> its digits)."""
    if value is None or value == "":
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value <= 255:
            return str(value)
    elif isinstance(value, str) and len(value) <= MAX_INPUT:
        v = value.strip().lower()
        v = PROTOCOL_ALIASES.get(v, v)
        if v in PROTOCOLS or v == "":
            return v
        if re.fullmatch(r"[0-9]{1,20}", v) and int(v) <= 255:
            return str(int(v))
    raise LossdInputError("protocol: expected tcp, udp, icmp, icmpv6, any or a number 0-255, got %r" % (value,))


def parse_family(value):
    key = value.strip().lower() if isinstance(value, str) else value
    if isinstance(key, bool) or key not in FAMILIES:
        raise LossdInputError("family: expected 4, 6 or None (any), got %r" % (value,))
    return FAMILIES[key]


def parse_tcp_flags(value):
    """'syn,!ack', 'SYN|!ACK', 'syn+ack', 'syn !ack' or ['syn', '!ack'] ->
    'syn,!ack' (lowercase, checked, in the order given)."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        text = value
    else:
        items = list(value)
        for it in items:
            if not isinstance(it, str):
                raise LossdInputError("tcp_flags: expected flag names, got %r" % (it,))
        text = ",".join(items)
    if len(text) > MAX_INPUT:
        raise LossdInputError("tcp_flags: %r is too long" % (text[:MAX_INPUT],))
    out, seen = [], set()
    # As lossd: separators , | + and spaces; '!' (then maybe spaces) clears the next flag.
    for neg, bare in re.findall(r"(!?)\s*([^,|+\s!]*)", re.sub(r"^[,|+\s]+", "", text.lower())):
        if not neg and not bare:
            continue
        if bare not in TCP_FLAGS:
            raise LossdInputError("tcp_flags: unknown flag %r in %r (flags: %s; '!' = clear)"
                                  % (bare, value, ",".join(TCP_FLAGS)))
        if bare in seen:
            raise LossdInputError("tcp_flags: %s given twice in %r" % (bare, value))
        seen.add(bare)
        out.append(neg + bare)
    if not out:
        raise LossdInputError("tcp_flags: no flag in %r" % (value,))
    return ",".join(out)


def _uint(value, name, bits=32, minimum=0, maximum=None):
    """A whole number: an int, or its digits as a string (as the flags take it)."""
    top = (1 << bits) - 1 if maximum is None else maximum
    if isinstance(value, str) and re.fullmatch(r"\s*[0-9]{1,20}\s*", value):
        number = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        number = None
    else:
        raise LossdInputError("%s: expected an integer, got %r" % (name, value))
    if number is None or number < minimum or number > top:
        raise LossdInputError("%s: invalid value %r: expected a whole number from %d to %d"
                              % (name, value, minimum, top))
    return number


def _ports_json(pr):
    return {"lo": pr[0], "hi": pr[1]}


# ------------------------------------------------------------- loss model --

def gilbert_elliott(value):
    """'p[,r[,1-h[,1-k]]]' like the CLI's --ge (netem's gemodel defaults: r = 1 - p,
    1-h = 100 %, 1-k = 0), (p, r[, bad_loss[, good_loss]]) or
    {'p':..,'r':..,'bad_loss':..,'good_loss':..}; every item a rate ('1%' or 0.01)."""
    keys = ("p", "r", "bad_loss", "good_loss")
    given, text = value, isinstance(value, str)
    if text:
        value = value[:MAX_INPUT + 1].split(",")
    if isinstance(value, dict):
        unknown = set(value) - set(keys)
        if unknown:
            raise LossdInputError("ge: unknown keys %s (keys: p, r, bad_loss, good_loss)" % sorted(unknown))
        if "p" not in value or "r" not in value:
            raise LossdInputError("ge: p and r are required")
        vals = dict(value)
    elif isinstance(value, (list, tuple)) and (1 if text else 2) <= len(value) <= 4:
        vals = dict(zip(keys, value))
    else:
        raise LossdInputError("ge: expected 'p[,r[,1-h[,1-k]]]' or (p, r[, bad_loss[, good_loss]]), got %r"
                              % (given,))
    out = {"p": parse_rate(vals["p"], "ge.p")}
    out["r"] = parse_rate(vals["r"], "ge.r") if "r" in vals else 1.0 - out["p"]
    out["bad_loss"] = parse_rate(vals.get("bad_loss", 1.0), "ge.bad_loss")
    out["good_loss"] = parse_rate(vals.get("good_loss", 0.0), "ge.good_loss")
    return out


MARKOV_KEYS = ("p13", "p31", "p32", "p23", "p14")


def markov4(value):
    """netem's 4-state Markov loss ('loss state'): 'p13[,p31[,p32[,p23[,p14]]]]' like the
    CLI's --markov (netem's defaults: p31 = 1 - p13, p32 = 0, p23 = 100 %, p14 = 0),
    (p13[, p31[, ...]]) or {'p13':.., 'p31':.., ...}; every item a rate ('1%' or 0.01). From
    state 1 to 3 with p13 and to 4 with p14, from 3 to 1 with p31 and to 2 with p32, from 2 to
    3 with p23, from 4 to 1; a packet entering 3 or 4 is picked. p13 + p14 <= 1, p31 + p32 <= 1,
    p13 > 0 needs p31 > 0 and p32 > 0 needs p23 > 0."""
    given, text = value, isinstance(value, str)
    if text:
        value = value[:MAX_INPUT + 1].split(",")
    if isinstance(value, dict):
        unknown = set(value) - set(MARKOV_KEYS)
        if unknown:
            raise LossdInputError("markov: unknown keys %s (keys: %s)"
                                  % (sorted(unknown), ", ".join(MARKOV_KEYS)))
        if "p13" not in value:
            raise LossdInputError("markov: p13 is required")
        vals = dict(value)
    elif isinstance(value, (list, tuple)) and 1 <= len(value) <= 5:
        vals = dict(zip(MARKOV_KEYS, value))
    else:
        raise LossdInputError("markov: invalid Markov model %r: expected p13[,p31[,p32[,p23[,p14]]]] as in "
                              "netem's loss state, or (p13, p31, p32, p23, p14)" % (given,))
    out = {"p13": parse_rate(vals["p13"], "markov.p13")}
    defaults = {"p31": 1.0 - out["p13"], "p32": 0.0, "p23": 1.0, "p14": 0.0}
    for k in MARKOV_KEYS[1:]:
        out[k] = parse_rate(vals[k], "markov." + k) if k in vals else defaults[k]
    why = _markov_refusal(out)
    if why:
        raise LossdInputError("markov: invalid Markov model %r: %s" % (given, why))
    return out


def _markov_refusal(m):
    """Why lossd refuses the chain (its CheckMarkov), or None. The rates are in [0, 1]."""
    one = 1 + 1e-12  # at most all of a state's packets (within rounding)
    if m["p13"] + m["p14"] > one:
        return "p13 + p14 must not exceed 100% (the ways out of state 1)"
    if m["p31"] + m["p32"] > one:
        return "p31 + p32 must not exceed 100% (the ways out of state 3)"
    if m["p13"] > 0 and m["p31"] == 0:
        return "the burst state must be left: p13 > 0 needs p31 > 0"
    if m["p32"] > 0 and m["p23"] == 0:
        return "state 2 must be left: p32 > 0 needs p23 > 0"
    return None


MIN_POLICE_BPS, MAX_POLICE_BPS, MAX_POLICE_BURST = 8, 100 * 10**9, 1 << 30  # as lossd's
POLICE_SCOPES = {"rule": False, "flow": True}  # RATE,BURST,SCOPE: a bucket per rule or per flow


def policer(value, per_flow=None):
    """A policer's token bucket (tc police): 'RATE,BURST[,flow|rule]' like the CLI's --police
    ('/' for ',' too), e.g. '50mbit,64kib' or '50mbit,64kib,flow', or (rate, burst[, 'flow' |
    'rule']), or {'rate_bps': N, 'burst_bytes': N[, 'per_flow': bool]}. RATE with tc's units, any
    case: bit, kbit, mbit, gbit, tbit (bits per second, x1000 each) or bps, kbps, mbps, gbps
    (bytes per second); a bare number is refused. BURST bytes, bare or with b, k (kb, kib), m
    (mb, mib), g (gb, gib), x1024 each. Fractions are rounded to whole bits per second and bytes
    (half to even). 8 bit/s .. 100 Gbit/s, 1 byte .. 1 GiB. The scope, any case: rule (the
    default: one bucket for the rule) or flow (one bucket per flow, per 5-tuple); the keyword
    per_flow=True / False says it too (it must not contradict the value's). What exceeds the
    bucket is picked: dropped, or marked with action='ecn'."""
    invalid = "police: invalid police model %r: " % (value,)
    scope = None
    if isinstance(value, dict):
        unknown = set(value) - {"rate_bps", "burst_bytes", "per_flow"}
        if unknown or not {"rate_bps", "burst_bytes"} <= set(value):
            raise LossdInputError("police: expected the keys rate_bps and burst_bytes (and per_flow), got %s"
                                  % sorted(value))
        out = {"rate_bps": _uint(value["rate_bps"], "police.rate_bps", bits=64),
               "burst_bytes": _uint(value["burst_bytes"], "police.burst_bytes", bits=64)}
        if "per_flow" in value:
            if not isinstance(value["per_flow"], bool):
                raise LossdInputError("police.per_flow: expected True or False, got %r" % (value["per_flow"],))
            scope = value["per_flow"]
    else:
        if isinstance(value, str) and len(value) <= MAX_INPUT:
            parts = re.split("[,/]", value)
        elif isinstance(value, (list, tuple)):
            parts = [p if isinstance(p, str) else str(p) for p in value
                     if isinstance(p, (str, int, float)) and not isinstance(p, bool)]
            parts = parts if len(parts) == len(value) else []
        else:
            parts = []
        if len(parts) not in (2, 3):
            raise LossdInputError(invalid + "expected RATE,BURST[,flow|rule], e.g. 50mbit,64kib or "
                                  "50mbit,64kib,flow")
        if len(parts) == 3:
            word = parts[2].strip(_WS)
            if word.lower() not in POLICE_SCOPES:
                raise LossdInputError(invalid + "expected RATE,BURST[,flow|rule]: the third part %r must be "
                                      "flow (a bucket per flow) or rule (one, the default)" % (word,))
            scope = POLICE_SCOPES[word.lower()]
        out = {}
        for key, what, part, units, names, example in (
                ("rate_bps", "rate", parts[0], BIT_RATE_UNITS, BIT_RATE_UNIT_NAMES, "50mbit"),
                ("burst_bytes", "burst", parts[1], SIZE_UNITS, SIZE_UNIT_NAMES, "64kib")):
            out[key], why = parse_quantity(part, units, names, example)
            if why:
                raise LossdInputError(invalid + "the %s %s" % (what, why))
    if not MIN_POLICE_BPS <= out["rate_bps"] <= MAX_POLICE_BPS:
        raise LossdInputError(invalid + "a policer's rate must lie between %s and %s"
                              % (format_bit_rate(MIN_POLICE_BPS), format_bit_rate(MAX_POLICE_BPS)))
    if not 1 <= out["burst_bytes"] <= MAX_POLICE_BURST:
        raise LossdInputError(invalid + "a policer's burst must lie between %s and %s"
                              % (format_size(1), format_size(MAX_POLICE_BURST)))
    if per_flow is not None:
        if not isinstance(per_flow, bool):
            raise LossdInputError("police: per_flow: expected True or False, got %r" % (per_flow,))
        if scope is not None and scope != per_flow:
            raise LossdInputError(invalid + "per_flow=%r contradicts its scope (%s)"
                                  % (per_flow, "flow" if scope else "rule"))
        scope = per_flow
    if scope:
        out["per_flow"] = True  # as the proto's JSON: false is left out
    return out


MAX_RAMP_STEPS = 16  # as lossd's


def _ramp(text):
    """A Ramp (lossd.v1) from 'RATE/DURATION,...' ('0.1%/2s,1%/2s,5%/2s') or
    [(rate, duration), ...]: 1 to 16 steps, each 1ms .. 1d."""
    if isinstance(text, str):
        parts = [p.strip() for p in text.split(",")]
        pairs = []
        for p in parts:
            rate_text, slash, dur = p.partition("/")
            if not slash or "/" in dur:
                raise LossdInputError("ramp: invalid ramp step %r: expected RATE/DURATION, "
                                      "e.g. 0.1%%/2s,1%%/2s,5%%/2s" % (p,))
            pairs.append((rate_text, dur))
    else:
        pairs = list(text)
    if not 1 <= len(pairs) <= MAX_RAMP_STEPS:
        raise LossdInputError("ramp: a ramp has 1 to %d steps (got %d)" % (MAX_RAMP_STEPS, len(pairs)))
    steps = []
    for i, (r, d) in enumerate(pairs):
        ns = parse_duration(d, "ramp")
        if not MIN_PULSE_NS <= ns <= MAX_PULSE_NS:
            raise LossdInputError("ramp: ramp step %d: its time must lie between 1ms and 1d, got %r"
                                  % (i + 1, d))
        steps.append({"rate": parse_rate(r, "ramp"), "duration_ns": ns})
    return {"steps": steps}


def loss_model(rate=None, ge=None, every=None, first=None, seed=None, ramp=None, markov=None,
               police=None):
    """The LossModel (lossd.v1) of exactly one of rate=, ge=, every=, first=, ramp=, markov=,
    police= (see rule_spec), and seed= (not with police: a policer draws nothing)."""
    given = [k for k, v in (("rate", rate), ("ge", ge), ("every", every), ("first", first),
                            ("ramp", ramp), ("markov", markov), ("police", police)) if v is not None]
    if len(given) != 1:
        raise LossdInputError("loss model: give exactly one of rate=, ge=, every=, first=, ramp=, markov=, "
                              "police= (got %s)" % (", ".join(given) or "none"))
    if rate is not None:
        lm = {"bernoulli": {"rate": parse_rate(rate)}}
    elif ge is not None:
        lm = {"gilbert_elliott": gilbert_elliott(ge)}
    elif markov is not None:
        lm = {"markov": markov4(markov)}
    elif police is not None:
        lm = {"police": policer(police)}
    elif ramp is not None:
        lm = {"ramp": _ramp(ramp)}
    elif every is not None:
        lm = {"every_nth": _uint(every, "every", minimum=1)}
    else:
        lm = {"first_k": _uint(first, "first", minimum=1)}
    if seed is not None:
        lm["seed"] = _uint(seed, "seed", bits=64)
        if police is not None:
            raise LossdInputError("seed: a policer draws nothing (what it drops follows the traffic): "
                                  "give no seed with police")
    return lm


# -------------------------------------------------------------- rule spec --

class Spec(dict):
    """A normalised RuleSpec in the proto's JSON shape (what rule_spec() returns)."""


def service_target(pid=None, unit=None, container=None, pod=None):
    """The service fields a rule or a filter names ({"pid": ..., "unit": ...}),
    checked; the daemon resolves them to the service's cgroup (docs/targeting.md)."""
    out = {}
    if pid is not None:
        if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 2 ** 31:
            raise LossdInputError("pid: expected a process id, got %r" % (pid,))
        out["pid"] = pid
    for key, val in (("unit", unit), ("container", container), ("pod", pod)):
        if val is None:
            continue
        if not isinstance(val, str) or not val or len(val) > 256:
            raise LossdInputError("%s: expected a name of 1 to 256 characters, got %r" % (key, val))
        out[key] = val
    return out


MIN_PULSE_NS, MAX_PULSE_NS, MAX_PULSE_CYCLES = 10**6, 86400 * 10**9, 10**6  # as lossd's


def schedule(start_after=None, pulse=None, pulse_cycles=None):
    """The Schedule of a rule (lossd.v1), {} for none: start_after a duration; pulse
    'ACTIVE/DORMANT' ('200ms/800ms') or (active, dormant); pulse_cycles its active windows."""
    out = {}
    if start_after is not None:
        ns = parse_duration(start_after, "start_after")
        if ns:
            out["start_after_ns"] = ns
    if pulse is not None:
        parts = pulse.split("/") if isinstance(pulse, str) else list(pulse)
        if len(parts) != 2:
            raise LossdInputError("pulse: expected 'ACTIVE/DORMANT' (e.g. '200ms/800ms') or "
                                  "(active, dormant), got %r" % (pulse,))
        for key, val in zip(("active_ns", "dormant_ns"), parts):
            ns = parse_duration(val, "pulse")
            if not MIN_PULSE_NS <= ns <= MAX_PULSE_NS:
                raise LossdInputError("pulse: each time must lie between 1ms and 1d, got %r" % (val,))
            out[key] = ns
    if pulse_cycles is not None:
        if pulse is None:
            raise LossdInputError("pulse_cycles: counts the active windows of a pulse: give pulse= too")
        out["cycles"] = _uint(pulse_cycles, "pulse_cycles", minimum=1, maximum=MAX_PULSE_CYCLES)
    return out


MIN_GUARD_NS, MAX_GUARD_NS, MAX_GUARD_RTOS = 10**6, 3600 * 10**9, 63  # as lossd's


_GUARD_COUNTS = {"rtos": "RTO", "resends": "resend", "resets": "reset"}  # one per guard
_STALL_CAUSES = ("rto", "tlp", "fast_recovery", "zero_window")  # stall(CAUSE)>D
_GUARD_EXPECTED = ("expected stall>DURATION, rtos>N/WINDOW, resends>N/WINDOW, resets>N/WINDOW, "
                   "retrans>RATE/WINDOW, misbehaves or watch=PORT, e.g. stall>500ms,rtos>5/2s")


def _guard(text):
    """The Guard of a rule (lossd.v1), {} for none: 'stall>500ms' (stop on a stall of a flow
    it dropped from longer than that), 'rtos>5/2s' (on more than 5 RTOs resending its drops
    within 2 s), 'resends>20/1s' (more than 20 resends of its drops of any type) or
    'resets>0/10s' (more than 0 of its flows reset or aborted), comma-separated, one count
    condition at most; 'retrans>5%/1s' (such a flow resent more than 5 % of the data segments
    it sent in 1 s); 'watch=8080' judges the flows of port 8080 instead of those it dropped
    from. Decided in the kernel (docs/guards.md); 'misbehaves' (its own measured loss above its
    rate's 99.9 % interval) by lossd."""
    if text is None:
        return {}
    if not isinstance(text, str):
        raise LossdInputError("guard: expected a string such as 'stall>500ms,rtos>5/2s', got %r"
                              % (text,))
    out, seen = {}, set()

    def within(ns, what, val):
        if not MIN_GUARD_NS <= ns <= MAX_GUARD_NS:
            raise LossdInputError("guard: a guard's %s must lie between 1ms and 1h, got %r"
                                  % (what, val))
        return ns

    for part in text.split(","):
        c = part.strip()
        cut = min((i for i in (c.find(">"), c.find("=")) if i >= 0), default=-1)
        kind = (c if cut < 0 else c[:cut]).strip().lower()
        value = "" if cut < 0 else c[cut + 1:].strip()
        cause = None
        m = re.match(r"^stall\s*\((.*)\)$", kind)
        if m:
            kind, cause = "stall", m.group(1).strip()
            if cause not in _STALL_CAUSES:
                raise LossdInputError("guard: invalid guard %r: a guard's stall cause must be rto, tlp, "
                                      "fast_recovery or zero_window, not %r" % (c, cause))
        if kind == "misbehaves" and cut < 0:
            if kind in seen:
                raise LossdInputError("guard: invalid guard %r: misbehaves given twice" % (c,))
            seen.add(kind)
            out["misbehaves"] = True
            continue
        if cut < 0 or (c[cut] == "=") != (kind == "watch") or \
                kind not in ("stall", "watch", "retrans") and kind not in _GUARD_COUNTS:
            raise LossdInputError("guard: invalid guard %r: %s" % (c, _GUARD_EXPECTED))
        if kind in seen:
            raise LossdInputError("guard: invalid guard %r: %s given twice" % (c, kind))
        if kind in _GUARD_COUNTS and (set(_GUARD_COUNTS) & seen):
            raise LossdInputError("guard: invalid guard %r: a guard counts one of RTOs, resends or "
                                  "resets, not two" % (c,))
        seen.add(kind)
        if kind == "watch":
            if not value.isdigit() or not value.isascii() or not 1 <= int(value) <= 65535:
                raise LossdInputError("guard: invalid guard %r: the watched port must be a whole "
                                      "number from 1 to 65535" % (c,))
            out["watch_port"] = int(value)
            continue
        if kind == "stall":
            out["stall_ns"] = within(parse_duration(value, "guard"), "stall", value)
            if cause:
                out["stall_cause"] = "STALL_CAUSE_" + cause.upper()  # the proto's JSON shape
            continue
        n, slash, window = value.partition("/")
        if kind == "retrans":
            if not slash:
                raise LossdInputError("guard: invalid guard %r: expected retrans>RATE/WINDOW, e.g. "
                                      "retrans>5%%/1s" % (c,))
            share = parse_rate(n.strip(), "guard: invalid guard %r: the share" % (c,))
            if not 1e-6 <= share < 1:
                raise LossdInputError("guard: invalid guard %r: a guard's retransmit share must lie "
                                      "between 1ppm and 100%% (not included)" % (c,))
            out["retrans"] = share
            out["retrans_window_ns"] = within(parse_duration(window.strip(), "guard"),
                                              "retransmit share window", window)
            continue
        if not slash:
            raise LossdInputError("guard: invalid guard %r: expected %s>N/WINDOW, e.g. %s>5/2s"
                                  % (c, kind, kind))
        n = n.strip()
        what = _GUARD_COUNTS[kind]
        if not n.isdigit() or not n.isascii() or int(n) > MAX_GUARD_RTOS:
            raise LossdInputError("guard: invalid guard %r: the %s count must be a whole number "
                                  "from 0 to %d" % (c, what, MAX_GUARD_RTOS))
        out[kind] = int(n)
        out[kind + "_window_ns"] = within(parse_duration(window, "guard"), what + " window", window)
    if "watch_port" in out and not set(out) - {"watch_port", "misbehaves"}:
        raise LossdInputError("guard: invalid guard %r: watch=PORT needs a condition, e.g. "
                              "stall>1s,watch=8080" % (text,))
    return out


def rule_spec(iface=None, *, cgroup=None, pid=None, unit=None, container=None, pod=None,
              direction="ingress", hook="auto",
              src=None, dst=None, sport=None, dport=None, protocol=None, family=None,
              tcp_flags=None, payload=None,
              rate=None, ge=None, every=None, first=None, seed=None,
              priority=0, ttl=None, per_segment=False, labels=None, force=False,
              reattach=False, start_after=None, pulse=None, pulse_cycles=None, guard=None,
              ramp=None, action=None, markov=None, police=None):
    """A RuleSpec from friendly arguments (see Client.add_rule)."""
    if not iface and not cgroup and not (pid or unit or container or pod):
        raise LossdInputError("target: give iface= and/or cgroup=, pid=, unit=, container= or pod=")
    spec = Spec()
    # A service, resolved to its cgroup by the daemon (docs/targeting.md).
    spec.update(service_target(pid, unit, container, pod))
    if iface:
        if not isinstance(iface, str) or not re.fullmatch(r"[^\s/]{1,15}", iface):
            raise LossdInputError("iface: %r is not an interface name" % (iface,))
        spec["interface"] = iface
    if cgroup:
        if not isinstance(cgroup, str):
            raise LossdInputError("cgroup: expected a cgroup v2 path, got %r" % (cgroup,))
        spec["cgroup"] = cgroup
    spec["hook"] = parse_hook(hook)
    spec["direction"] = parse_direction(direction)
    match = {}
    for key, val in (("src", src), ("dst", dst)):
        a = parse_address(val, key)
        if a:
            match[key] = a
    for key, val in (("sport", sport), ("dport", dport)):
        pr = parse_ports(val, key)
        if pr:
            match[key] = _ports_json(pr)
    proto = parse_protocol(protocol)
    if proto:
        match["protocol"] = proto
    fam = parse_family(family)
    if fam:
        match["family"] = fam
    flags = parse_tcp_flags(tcp_flags)
    if flags:
        if proto not in ("", "tcp", "6"):
            raise LossdInputError("tcp_flags: only for TCP, but protocol is %r" % proto)
        match["tcp_flags"] = flags
    pl = parse_payload(payload)
    if pl != "PAYLOAD_ANY":
        match["payload"] = pl
    if match:
        spec["match"] = match
    spec["loss"] = loss_model(rate=rate, ge=ge, every=every, first=first, seed=seed, ramp=ramp,
                              markov=markov, police=police)
    act = parse_action(action)
    if act != "ACTION_DROP":
        # As lossd's Validate: changing or copying a packet needs tc.
        name = action_name(act)
        if spec["hook"] == "HOOK_XDP":
            raise LossdInputError("action: %s changes or copies the packet, which XDP cannot here (a "
                                  "frame the device already checked, no copy): use hook tc (or auto)" % name)
        if (cgroup or pid or unit or container or pod) and spec["direction"] != "DIRECTION_EGRESS":
            raise LossdInputError("action: %s needs tc, and a cgroup target's ingress is decided by a "
                                  "cgroup_skb program, which cannot change or copy packets: use "
                                  "direction='egress' for the cgroup, or a rule on the interface its "
                                  "traffic arrives by" % name)
        spec["action"] = act
    prio = _uint(priority, "priority", maximum=MAX_PRIORITY) if priority is not None else 0
    if prio:
        spec["priority"] = prio
    if ttl is not None:  # given: 0 (or "none") is "until deleted"; else the daemon's default
        if isinstance(ttl, str) and ttl.strip().lower() in ("none", "forever"):
            spec["ttl_ns"] = 0
        else:
            spec["ttl_ns"] = parse_duration(ttl, "ttl")
    sched = schedule(start_after, pulse, pulse_cycles)
    if sched:
        spec["schedule"] = sched
    stop = _guard(guard)
    if stop:
        spec["guard"] = stop
    if per_segment:
        spec["per_segment"] = True
    if reattach:
        if not iface or parse_hook(hook) == "HOOK_CGROUP":
            raise LossdInputError("reattach: follows an interface; give iface= (hook not cgroup)")
        spec["reattach"] = True
    lab = parse_labels(labels)
    if lab:
        spec["labels"] = lab
    if force:
        spec["force"] = True
    return spec


# ----------------------------------------------------------- event filter --

def parse_cgroup_id(value):
    """A cgroup v2 id: an int as is, a path as the inode number of its directory
    (what the kernel reports as the cgroup id). Paths only work on the host
    running lossd."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _uint(value, "cgroup", bits=64, minimum=1)
    if isinstance(value, str) and value:
        try:
            st = os.stat(value)
        except OSError as e:
            raise LossdInputError("cgroup: cannot stat %r (%s); give the cgroup id instead"
                                  % (value, e.strerror)) from None
        if not _stat.S_ISDIR(st.st_mode):
            raise LossdInputError("cgroup: %r is not a cgroup directory" % value)
        return st.st_ino
    raise LossdInputError("cgroup: expected a cgroup v2 path or id, got %r" % (value,))


@dataclasses.dataclass(frozen=True)
class Filter:
    """One EventFilter (AND of its fields); a list of filters is their OR.

    Build with event_filter() (or Filter.of(...)), which checks the values.
    """
    addr: str = ""
    port: tuple = None
    cgroup_id: int = 0
    types: tuple = ()
    rule_id: int = 0
    netns_ino: int = 0
    pid: int = 0
    unit: str = ""
    container: str = ""
    pod: str = ""

    @classmethod
    def of(cls, addr=None, port=None, cgroup=None, types=None, rule=None, netns=None,
           pid=None, unit=None, container=None, pod=None):
        return event_filter(addr=addr, port=port, cgroup=cgroup, types=types, rule=rule, netns=netns,
                            pid=pid, unit=unit, container=container, pod=pod)

    def to_json(self):
        d = {}
        if self.addr:
            d["addr"] = self.addr
        if self.port:
            d["port"] = _ports_json(self.port)
        if self.cgroup_id:
            d["cgroup_id"] = self.cgroup_id
        if self.types:
            d["types"] = list(self.types)
        if self.rule_id:
            d["rule_id"] = self.rule_id
        if self.netns_ino:
            d["netns_ino"] = str(self.netns_ino)
        for key in ("pid", "unit", "container", "pod"):
            if getattr(self, key):
                d[key] = getattr(self, key)
        return d


def event_filter(addr=None, port=None, cgroup=None, types=None, rule=None, netns=None,
                 pid=None, unit=None, container=None, pod=None):
    """A Filter: addr (CIDR, local or remote), port (local or remote: port or
    range), cgroup (path or id), types ('fast', 'rto', ... one or a list),
    rule (id or Rule: flows that rule matched), netns (a network namespace:
    its inode, or a path to it: /proc/PID/ns/net, /run/netns/NAME), or a
    service as rule_spec() names one: pid, unit, container, pod (the daemon
    resolves it to that service's cgroup when the stream starts: NOT_FOUND
    for a name nothing has). A filter needs a field."""
    f = Filter(
        **service_target(pid, unit, container, pod),
        addr=parse_address(addr, "addr") or "",
        port=parse_ports(port, "port"),
        cgroup_id=parse_cgroup_id(cgroup) if cgroup is not None else 0,
        types=tuple(parse_retransmit_type(t) for t in ([types] if isinstance(types, str) else (types or ()))),
        rule_id=parse_rule_id(rule, "rule") if rule is not None else 0,
        netns_ino=parse_netns(netns) if netns is not None else 0,
    )
    if f == Filter():
        raise LossdInputError("filter: give at least one of addr, port, cgroup, types, rule, netns, "
                              "pid, unit, container, pod (an empty filter matches everything)")
    return f


def parse_netns(value, name="netns"):
    """A network namespace's inode: an int (or its digits), or a path to the
    namespace (/proc/PID/ns/net, /run/netns/NAME: stat'ed here, so on the
    daemon's host)."""
    if isinstance(value, bool):
        raise LossdInputError("%s: expected an inode or a path, got %r" % (name, value))
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        ino = int(value)
        if not 0 < ino < 1 << 32:
            raise LossdInputError("%s: a network namespace inode is 1 to 2^32-1, got %r" % (name, value))
        return ino
    if isinstance(value, str) and value.startswith("/"):
        try:
            st = os.stat(value)
        except OSError as e:
            raise LossdInputError("%s: %s: %s" % (name, value, e.strerror)) from None
        return st.st_ino
    raise LossdInputError("%s: expected an inode or a path (/proc/PID/ns/net, /run/netns/NAME), "
                          "got %r" % (name, value))


def parse_rule_id(value, name="id"):
    """An int, or anything with an int .id (a Rule)."""
    rid = getattr(value, "id", value)
    if isinstance(rid, bool) or not isinstance(rid, int) or not 0 < rid < 1 << 32:
        raise LossdInputError("%s: expected a rule id (1 to 2^32-1) or a Rule, got %r" % (name, value))
    return rid


def filters(value):
    """None, one filter or a list of them -> list of Filter (or EventFilter messages,
    passed through). A filter may be a Filter, a dict of event_filter() arguments
    or a lossd.v1.EventFilter."""
    if value is None:
        return []
    if isinstance(value, (Filter, dict)) or hasattr(value, "DESCRIPTOR"):
        value = [value]
    out = []
    for f in value:
        if isinstance(f, Filter):
            out.append(f)
        elif isinstance(f, dict):
            try:
                out.append(event_filter(**f))
            except TypeError as e:
                raise LossdInputError("filter: %s (keys: addr, port, cgroup, types, rule, netns)" % e) from None
        elif hasattr(f, "DESCRIPTOR") and f.DESCRIPTOR.name == "EventFilter":
            out.append(f)
        else:
            raise LossdInputError("filter: expected a Filter, a dict or an EventFilter, got %r" % (f,))
    return out


# ---------------------------------------------------------------- to proto --

def to_proto(json_dict, message):
    """Fill a message from a dict in the proto's JSON shape; returns the message."""
    from google.protobuf import json_format
    try:
        return json_format.ParseDict(json_dict, message)
    except json_format.ParseError as e:  # a bug here, not the caller's input
        raise LossdInputError("building %s: %s" % (message.DESCRIPTOR.name, e)) from None


def filter_to_proto(f, pb2):
    if isinstance(f, Filter):
        return to_proto(f.to_json(), pb2.EventFilter())
    return f
