"""Human units: rates, durations, ports, labels; and the Wilson interval.

Pure Python, no generated code needed. Every parser raises LossdInputError
(a ValueError) with a message naming the value and what was expected.
"""

import datetime
import decimal
import math
import re
import statistics

from .errors import LossdInputError

# The spellings are lossd's and lossctl's (lib/rules/rule.h): the vectors
# of tests/vectors/rule_parsers.json hold both languages to them.

MAX_INPUT = 256  # characters, as kMaxInputLength
# A number as typed: an optional sign, digits with an optional point, an
# optional exponent of up to 3 digits.
NUMBER = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]{1,3})?"

# ------------------------------------------------------------------ rates --

_RATE_RE = re.compile(r"^(%s)\s*(%%|ppm)?$" % NUMBER, re.IGNORECASE)

RATE_RESOLUTION = 2.0 ** -32  # the data plane's Bernoulli resolution


def parse_rate(value, name="rate"):
    """A loss rate as a fraction in [0, 1].

    "1%" -> 0.01, "0.005%" -> 5e-05, "50ppm" -> 5e-05, "0.01" -> 0.01,
    0.01 -> 0.01 (numbers are fractions, as in the API). Above 1 is refused:
    5 is not 5 %, write "5%". Text converts exactly (the float nearest the
    decimal value), as in lossd.
    """
    if isinstance(value, bool) or value is None:
        raise LossdInputError("%s: expected a rate like '1%%', '0.005%%' or 0.01, got %r"
                              % (name, value))
    if isinstance(value, (int, float, decimal.Decimal)):
        r = float(value)
        if not math.isfinite(r):
            raise LossdInputError("%s: %r is not a number" % (name, value))
        text, unit = str(value), None
    elif isinstance(value, str):
        text = value.strip()
        m = _RATE_RE.match(text) if len(value) <= MAX_INPUT else None
        if not m:
            raise LossdInputError("%s: cannot read %r; expected e.g. '1%%', '0.005%%', '50ppm' "
                                  "or a fraction like 0.01" % (name, value))
        unit = m.group(2) and m.group(2).lower()
        d = decimal.Decimal(m.group(1))
        if unit == "%":
            d = d.scaleb(-2)
        elif unit == "ppm":
            d = d.scaleb(-6)
        r = float(d)
        text = repr(value)
    else:
        raise LossdInputError("%s: expected a string or a number, got %s" % (name, type(value).__name__))
    if r < 0:
        raise LossdInputError("%s: %s is negative" % (name, text))
    if r > 1:
        if unit is None:
            raise LossdInputError("%s: %s is above 1; rates are fractions (0.01 = 1 %%): "
                                  "write '%s%%' for percent" % (name, text, text.strip("'")))
        raise LossdInputError("%s: %s is above 100 %%" % (name, text))
    return r


def format_rate(rate, digits=4):
    """0.01 -> '1%', 5e-05 -> '0.005%', None -> '-'."""
    if rate is None:
        return "-"
    if rate == 0:
        return "0%"
    return "%.*g%%" % (digits, rate * 100)


# -------------------------------------------------------------- durations --

_NS = {
    "ns": 1, "us": 10**3, "\u00b5s": 10**3, "\u03bcs": 10**3, "ms": 10**6, "s": 10**9, "sec": 10**9,
    "m": 60 * 10**9, "min": 60 * 10**9, "h": 3600 * 10**9, "d": 86400 * 10**9,
}
MAX_SECONDS = 30 * 366 * 86400  # as lossd's kMaxDurationSeconds; a bare number above is surely not seconds
# The units in the order lossd tries them ("ms" before "m", "min" before "m").
_DUR_PART = re.compile(r"(%s)(ns|us|\u00b5s|\u03bcs|ms|sec|min|s|m|h|d)" % NUMBER)


def _scaled(d, unit):
    """Decimal d times the integer unit, rounded to an integer half to even (exactly)."""
    with decimal.localcontext() as ctx:
        ctx.prec = 2 * MAX_INPUT + 1100  # exact for every bounded input
        return int((d * unit).to_integral_value(decimal.ROUND_HALF_EVEN))


def parse_duration(value, name="duration"):
    """A duration in integer nanoseconds.

    "30s", "500ms", "1.5s", "2m30s", "1h", "1d", "250us", "100ns" (units in
    any case, spaces allowed; each part rounded to the nanosecond); a bare
    number (int, float or numeric string) is seconds, like time.sleep(); a
    datetime.timedelta works too. Text and numbers above 30 years are
    refused: a bare number that large is nanoseconds passed by mistake.
    """
    if isinstance(value, bool) or value is None:
        raise LossdInputError("%s: expected a duration like '30s' or '500ms', got %r" % (name, value))
    if isinstance(value, datetime.timedelta):
        ns = (value.days * 86400 + value.seconds) * 10**9 + value.microseconds * 1000
    elif isinstance(value, (int, float, decimal.Decimal)):
        if isinstance(value, float) and not math.isfinite(value):
            raise LossdInputError("%s: %r is not a number" % (name, value))
        if abs(value) > MAX_SECONDS:
            raise LossdInputError("%s: %r seconds is more than 30 years; numbers are seconds "
                                  "(for nanoseconds write '%sns')" % (name, value, value))
        ns = _scaled(decimal.Decimal(repr(value) if isinstance(value, float) else value), 10**9)
    elif isinstance(value, str):
        text = value.strip()
        compact = text.replace(" ", "").lower()
        if len(value) > MAX_INPUT:
            raise LossdInputError("%s: %r is too long" % (name, value[:MAX_INPUT]))
        if re.fullmatch(NUMBER, compact):
            d = decimal.Decimal(compact)
            if d < 0:
                raise LossdInputError("%s: %r is negative" % (name, value))
            if d > MAX_SECONDS:
                raise LossdInputError("%s: %r seconds is more than 30 years; a bare number is "
                                      "seconds (for nanoseconds write '%sns')" % (name, value, text))
            ns = _scaled(d, 10**9)
        else:
            pos, ns = 0, 0
            for m in _DUR_PART.finditer(compact):
                if m.start() != pos or m.group(1).startswith("-"):
                    break
                ns += _scaled(decimal.Decimal(m.group(1)), _NS[m.group(2)])
                pos = m.end()
            if pos != len(compact) or not compact:
                raise LossdInputError("%s: cannot read %r; expected e.g. '30s', '500ms', '2m30s', "
                                      "'1d', '250us' or a number of seconds" % (name, value))
            if ns >= 1 << 64:
                raise LossdInputError("%s: %r does not fit in 64 bits of nanoseconds" % (name, value))
            if ns > MAX_SECONDS * 10**9:
                raise LossdInputError("%s: %r is more than 30 years" % (name, value))
    else:
        raise LossdInputError("%s: expected a string, a number of seconds or a timedelta, got %s"
                              % (name, type(value).__name__))
    if ns < 0:
        raise LossdInputError("%s: %r is negative" % (name, value))
    if ns >= 1 << 64:
        raise LossdInputError("%s: %r does not fit in 64 bits of nanoseconds" % (name, value))
    return ns


def format_duration(ns):
    """Nanoseconds for people: 30000000000 -> '30s', 1500000 -> '1.5ms', 150e9 -> '2m30s'."""
    if ns is None:
        return "-"
    ns = int(ns)
    if ns < 1000:
        return "%dns" % ns
    if ns < 10**6:
        return "%gus" % round(ns / 1e3, 3)
    if ns < 10**9:
        return "%gms" % round(ns / 1e6, 3)
    if ns < 60 * 10**9:
        return "%gs" % round(ns / 1e9, 3)
    s = ns // 10**9
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    out = ""
    if h:
        out += "%dh" % h
    if m:
        out += "%dm" % m
    if s or not out:
        out += "%ds" % s
    return out


# ------------------------------------------------- a policer's rate and size --

# tc's rate units, as lossd reads them: bits per second, or bytes per second (bps), x1000 each.
BIT_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12,
                  "bps": 8, "kbps": 8 * 10**3, "mbps": 8 * 10**6, "gbps": 8 * 10**9}
BIT_RATE_UNIT_NAMES = ("bit, kbit, mbit, gbit, tbit (bits per second) or bps, kbps, mbps, gbps "
                       "(bytes per second, as tc reads them)")
# Sizes in bytes, x1024 each ("": a bare number).
SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
              "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}
SIZE_UNIT_NAMES = "b, k (kb, kib), m (mb, mib) or g (gb, gib), x1024 each, or a bare number of bytes"
_WS = " \t\n\v\f\r"  # what lossd trims (C's isspace)
# A number without a sign (as NUMBER; a malformed exponent is no number, as in lossd), its unit.
_QUANTITY = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]*)?(.*)", re.DOTALL)


def parse_quantity(text, units, unit_names, example):
    """'NUMBER UNIT' (spaces around and between, the unit one of units in any case) as lossd
    reads a policer's rate or burst: the number times the unit, rounded half to even. Returns
    (value, None), or (None, why) with why quoting the text ("'5x': unknown unit 'x': ...")."""
    s = text.strip(_WS)
    quoted = repr(s)
    m = _QUANTITY.fullmatch(s)
    if not m or (m.group(2) and not re.fullmatch(r"[eE][-+]?[0-9]{1,3}", m.group(2))):
        return None, "%s is not a number with a unit, e.g. %s" % (quoted, example)
    unit = m.group(3).strip(_WS).lower()
    if unit in units:
        return _scaled(decimal.Decimal(m.group(1) + (m.group(2) or "")), units[unit]), None
    if not unit:
        return None, "%s needs a unit: %s" % (quoted, unit_names)
    return None, "%s: unknown unit %r: expected %s" % (quoted, unit, unit_names)


def _exact_text(v, units):
    for size, name in units:
        if v and v % size == 0:
            return "%d%s" % (v // size, name)
    return "%d%s" % (v, units[-1][1])


def format_bit_rate(bps):
    """Bits per second in the largest unit that divides them (what lossd reads back):
    50000000 -> '50mbit', 1500 -> '1500bit'."""
    return _exact_text(int(bps), ((10**12, "tbit"), (10**9, "gbit"), (10**6, "mbit"), (10**3, "kbit"),
                                  (1, "bit")))


def format_size(n):
    """Bytes in the largest unit that divides them: 65536 -> '64kib', 1500 -> '1500b'."""
    return _exact_text(int(n), ((1 << 30, "gib"), (1 << 20, "mib"), (1 << 10, "kib"), (1, "b")))


def format_police(rate_bps, burst_bytes, per_flow=False):
    """A policer as lossd (and spec.policer) reads it back: '50mbit,64kib', or
    '50mbit,64kib,flow' with a bucket per flow."""
    return "%s,%s%s" % (format_bit_rate(rate_bps), format_size(burst_bytes), ",flow" if per_flow else "")


# ------------------------------------------------------------------ ports --

def parse_ports(value, name="port"):
    """A port or an inclusive port range as (lo, hi), or None for any port.

    8080, "8080", "8000-8100", "8000:8100", (8000, 8100), range(8000, 8101).
    A lone 0 is refused: in the API it means "any port"; leave it unset.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise LossdInputError("%s: expected a port, got %r" % (name, value))
    if isinstance(value, int):
        lo = hi = value
    elif isinstance(value, range):
        if value.step != 1 or len(value) == 0:
            raise LossdInputError("%s: a range of ports needs step 1 and at least one port" % name)
        lo, hi = value.start, value.stop - 1
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]+)\s*(?:[-:]\s*([0-9]+)\s*)?", value) if len(value) <= MAX_INPUT else None
        if not m:
            raise LossdInputError("%s: cannot read %r; expected a port (8080) or a range (8000-8100)"
                                  % (name, value))
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
    elif isinstance(value, (tuple, list)) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        lo, hi = value
    else:
        raise LossdInputError("%s: expected a port, 'LO-HI', (lo, hi) or a range, got %r" % (name, value))
    if not (0 <= lo <= 65535 and 0 <= hi <= 65535):
        raise LossdInputError("%s: ports lie within 0-65535, got %r" % (name, value))
    if lo > hi:
        raise LossdInputError("%s: low end above high end in %r" % (name, value))
    if lo == 0 and hi == 0:
        raise LossdInputError("%s: port 0 means any port in the API; leave %s unset instead" % (name, name))
    return (lo, hi)


def format_ports(pr):
    if not pr:
        return "any"
    lo, hi = pr
    return str(lo) if lo == hi else "%d-%d" % (lo, hi)


# ----------------------------------------------------------------- labels --

def parse_labels(value, name="labels"):
    """{'k': 'v'}, 'k=v,k2=v2' or ['k=v', ...] -> dict of str."""
    if value is None:
        return {}
    if isinstance(value, dict):
        items = list(value.items())
    else:
        if isinstance(value, str):
            value = [p for p in value.split(",") if p.strip()]
        items = []
        for p in value:
            if not isinstance(p, str) or "=" not in p:
                raise LossdInputError("%s: expected key=value, got %r" % (name, p))
            k, v = p.split("=", 1)
            items.append((k.strip(), v.strip()))
    out = {}
    for k, v in items:
        if not isinstance(k, str) or not k:
            raise LossdInputError("%s: keys are non-empty strings, got %r" % (name, k))
        if not isinstance(v, str):
            raise LossdInputError("%s: value of %r must be a string, got %r" % (name, k, v))
        out[k] = v
    return out


# ---------------------------------------------------------------- Wilson --

def z_for(confidence):
    return statistics.NormalDist().inv_cdf(1 - (1 - confidence) / 2)


def wilson_interval(k, n, confidence=0.999):
    """Wilson score interval of k successes in n trials (the daemon uses 99.9 %).

    n == 0 gives (0.0, 1.0): nothing is known.
    """
    if n <= 0:
        return (0.0, 1.0)
    if k < 0 or k > n:
        raise ValueError("wilson_interval: need 0 <= k <= n, got k=%r n=%r" % (k, n))
    z = z_for(confidence)
    p = k / n
    z2 = z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    lo = 0.0 if k == 0 else max(0.0, center - half)   # exact at the edges
    hi = 1.0 if k == n else min(1.0, center + half)
    return (lo, hi)
