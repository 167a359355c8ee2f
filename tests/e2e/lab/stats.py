"""Numbers: kernel counters of a namespace, the binomial interval the tests assert with
(the Wilson interval is lossd_client.units.wilson_interval), CPU times from /proc (stdlib only)."""

import math
import os

CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---- kernel counters ---------------------------------------------------------------------

class Counters(dict):
    """MIB counters by "Group.Name" ("Tcp.RetransSegs", "TcpExt.TCPDSACKRecvSegs",
    "Snmp6.Udp6RcvbufErrors", ...); a missing one is 0; a - b is the delta."""

    def __sub__(self, other):
        return Counters({k: v - other.get(k, 0) for k, v in self.items()})

    def __missing__(self, k):
        return 0


# The kernel's counters of needless resends and of what TCP undid for them, as the live page
# shows them (TcpExt names; daemon/live/sse.cc KernelCounterKeys).
NEEDLESS_KEYS = ("TCPDSACKRecvSegs", "TCPDSACKRecv", "TCPSpuriousRTOs", "TCPLossUndo", "TCPFullUndo",
                 "TCPPartialUndo", "TCPDSACKUndo")


def _pairs(text):
    """/proc/net/snmp and /proc/net/netstat: a header line and a value line per group."""
    out = {}
    lines = text.splitlines()
    for i in range(0, len(lines) - 1, 2):
        h, v = lines[i].split(), lines[i + 1].split()
        if h and v and h[0] == v[0]:
            for k, x in zip(h[1:], v[1:]):
                out[h[0].rstrip(":") + "." + k] = int(x)
    return out


def mib(read):
    """The counters of /proc/net/snmp, /proc/net/netstat and /proc/net/snmp6 as read(path)
    returns them (inside a namespace: Lab.counters)."""
    c = Counters()
    for f in ("/proc/net/snmp", "/proc/net/netstat"):
        c.update(_pairs(read(f)))
    for line in read("/proc/net/snmp6").splitlines():
        parts = line.split()
        if len(parts) == 2:
            c["Snmp6." + parts[0]] = int(parts[1])
    return c


# The TCP counters worth reporting, and the observer's short form of them.
TCP_KEYS = ("Tcp.RetransSegs", "Tcp.OutSegs", "TcpExt.TCPOrigDataSent", "TcpExt.TCPDSACKRecvSegs",
            "TcpExt.TCPLossProbes", "TcpExt.TCPFastRetrans", "TcpExt.TCPSlowStartRetrans",
            "TcpExt.TCPTimeouts", "TcpExt.TCPLostRetransmit", "TcpExt.TCPRetransFail",
            "TcpExt.TCPSynRetrans", "TcpExt.TCPSpuriousRTOs", "Tcp.OutRsts")
RETRANS_KEYS = ("Tcp.RetransSegs", "TcpExt.TCPFastRetrans", "TcpExt.TCPSlowStartRetrans",
                "TcpExt.TCPLossProbes", "TcpExt.TCPSynRetrans", "TcpExt.TCPTimeouts",
                "TcpExt.TCPRetransFail", "TcpExt.TCPLostRetransmit", "TcpExt.TCPSpuriousRTOs",
                "TcpExt.TCPLossProbeRecovery", "TcpExt.TCPDSACKRecvSegs", "Tcp.OutSegs")


# Where else a data segment can vanish between two namespaces of a veth pair, by the
# kernel's own count: the receiver's TCP discarding data it had (pruned out-of-order
# segments, a full receive queue or backlog), which the sender learns of by SACK reneging.
# Those that count skbs bound the resends they cause; the prunes (and the sender's SACK
# reneging) count events that may each discard many segments.
RECEIVER_DISCARD_KEYS = ("TcpExt.TCPRcvQDrop", "TcpExt.TCPBacklogDrop", "TcpExt.TCPOFODrop",
                         "TcpExt.TCPZeroWindowDrop", "TcpExt.PFMemallocDrop")
RECEIVER_PRUNE_KEYS = ("TcpExt.OfoPruned", "TcpExt.RcvPruned")


def retransmissions_explained(da, db, dropped_segs, link_drops=0):
    """Whether the sender's retransmissions (da: its namespace's counter delta) are the
    segments the rule dropped plus those the receiver (db) saw twice, by the kernels' counts.

    Returns (ok, numbers). Exact in both directions: every dropped segment is resent once,
    and each further resend is a spurious one the receiver answered with a D-SACK. The
    sender may not count a D-SACK that reaches a socket already closed, so the receiver's
    own count of the D-SACKs it sent (TCPDSACKOldSent + TCPDSACKOfoSent) counts too. Only
    when a kernel counted another loss on the path may the resends exceed that, never fall
    below dropped + D-SACKs: by at most the skbs counted lost (link_drops: the veths' rx/tx
    dropped; the receiver's RECEIVER_DISCARD_KEYS), or by any number when the receiver
    pruned data it had queued (RECEIVER_PRUNE_KEYS, events of many segments each) or the
    sender saw SACK reneging."""
    retrans = da["Tcp.RetransSegs"]
    dsack_recv = da["TcpExt.TCPDSACKRecvSegs"]
    dsack_sent = db["TcpExt.TCPDSACKOldSent"] + db["TcpExt.TCPDSACKOfoSent"]
    skbs = {k.split(".")[1]: db[k] for k in RECEIVER_DISCARD_KEYS if db[k]}
    if link_drops:
        skbs["link_drops"] = link_drops
    prunes = {k.split(".")[1]: db[k] for k in RECEIVER_PRUNE_KEYS if db[k]}
    if da["TcpExt.TCPSACKReneging"]:
        prunes["TCPSACKReneging"] = da["TcpExt.TCPSACKReneging"]
    explained = dropped_segs + max(dsack_recv, dsack_sent)
    numbers = dict(retrans_segs=retrans, dropped_segs=dropped_segs, dsack_recv_segs=dsack_recv,
                   receiver_dsacks_sent=dsack_sent, other_losses=dict(skbs, **prunes))
    excess = retrans - explained
    ok = retrans >= dropped_segs + dsack_recv and (
        excess == 0 or (excess > 0 and (bool(prunes) or excess <= sum(skbs.values()))))
    return ok, numbers


def short(c, keys=RETRANS_KEYS):
    """{"RetransSegs": n, ...}: the counters of keys without their group."""
    return {k.split(".")[1]: c[k] for k in keys}


def softnet_dropped():
    """Host-wide backlog drops (/proc/net/softnet_stat column 2), for diagnostics."""
    total = 0
    with open("/proc/net/softnet_stat") as f:
        for line in f:
            total += int(line.split()[1], 16)
    return total


# ---- intervals --------------------------------------------------------------------------

# A run makes some 60 such checks over random drops: at 99.9 % each, about one
# run in twenty failed on chance alone (51 of 2,986 skbs for a 1 % rule, +3.9 sd,
# was one). At 1 - 1e-5 (about +-4.4 sd) chance fails about one run in 1,700.
# The price is power on small counts: for 2,986 trials at 1 % the interval is
# [9, 57] where 99.9 % gave [14, 49]; a doubled rate (mean 60) still fails more
# often than not, and those tests' exact checks (every drop retransmitted,
# counters equal to the kernel's) do not depend on the interval.
CONF = 1 - 1e-5


def binom_interval(n, p, conf=CONF):
    """Exact central interval [lo, hi] holding `conf` of Binomial(n, p)."""
    if p <= 0:
        return 0, 0
    if p >= 1:
        return n, n
    tail = (1 - conf) / 2
    mean = n * p
    sd = math.sqrt(n * p * (1 - p))
    k0 = max(0, int(mean - 12 * sd - 10))
    k1 = min(n, int(mean + 12 * sd + 10))
    lp, lq = math.log(p), math.log1p(-p)
    lgn = math.lgamma(n + 1)

    def pmf(k):
        return math.exp(lgn - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lp + (n - k) * lq)

    cdf, lo, hi = 0.0, None, None
    for k in range(k0, k1 + 1):
        cdf += pmf(k)
        if lo is None and cdf > tail:
            lo = k
        if hi is None and cdf >= 1 - tail:
            hi = k
            break
    return lo, (hi if hi is not None else k1)


# ---- CPU time ------------------------------------------------------------------------------

def _stat_cpu(raw):
    fields = raw.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def cpu_secs(pid):
    """User + system CPU seconds of a process (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        return _stat_cpu(f.read())


def thread_cpu(pid):
    """{tid: (comm, cpu seconds)} of every thread of pid."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                raw = f.read()
        except OSError:
            continue
        out[tid] = (raw[raw.index("(") + 1:raw.rindex(")")], _stat_cpu(raw))
    return out


def thread_delta(a, b):
    """CPU seconds per thread name (threads of one name summed) between two thread_cpu()s."""
    by = {}
    for tid, (comm, c) in b.items():
        d = c - a.get(tid, (comm, 0.0))[1]
        if d > 0:
            by[comm] = round(by.get(comm, 0) + d, 3)
    return dict(sorted(by.items(), key=lambda kv: -kv[1]))


def fdinfo(pid):
    """[{key: value}] of every fd of pid (/proc/PID/fdinfo): BPF programs and maps show
    prog_id / map_id there."""
    out = []
    d = "/proc/%d/fdinfo" % pid
    try:
        fds = os.listdir(d)
    except OSError:
        return out
    for fd in fds:
        try:
            with open(os.path.join(d, fd)) as f:
                out.append(dict(l.rstrip("\n").split(":\t", 1) for l in f if ":\t" in l))
        except OSError:
            pass
    return out


# ---- goodness of fit -------------------------------------------------------------------

def _gamma_q(a, x):
    """The regularised upper incomplete gamma function Q(a, x) (Numerical Recipes' series
    and continued fraction)."""
    if x <= 0:
        return 1.0
    gln = math.lgamma(a)
    if x < a + 1:  # series for P
        ap, total, term = a, 1.0 / a, 1.0 / a
        for _ in range(10000):
            ap += 1
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return 1.0 - total * math.exp(-x + a * math.log(x) - gln)
    b, c, d = x + 1 - a, 1e300, 1.0 / (x + 1 - a)
    h = d
    for i in range(1, 10000):  # Lentz's continued fraction for Q
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1e-300 if abs(d) < 1e-300 else d
        c = b + an / c
        c = 1e-300 if abs(c) < 1e-300 else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return math.exp(-x + a * math.log(x) - gln) * h


def chi2_sf(x, df):
    """P(X >= x) for X ~ chi-square with df degrees of freedom."""
    return _gamma_q(df / 2.0, x / 2.0)


def chi2_gof(observed, expected_probs, min_expected=5):
    """Pearson's goodness of fit of counts `observed` (bins) against probabilities (summing to
    1): adjacent bins from the end merged until each expects min_expected. Returns (statistic,
    degrees of freedom, p-value)."""
    n = sum(observed)
    obs, exp = list(observed), [p * n for p in expected_probs]
    while len(exp) > 2 and exp[-1] < min_expected:
        exp[-2] += exp.pop()
        obs[-2] += obs.pop()
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp) if e > 0)
    df = len(exp) - 1
    return stat, df, chi2_sf(stat, df)
