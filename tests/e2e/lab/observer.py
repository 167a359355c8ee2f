"""The observer's exact relations with the kernel, and one observed scenario.

    observe(lab, ns, traffic, rules)   `lossd --observe --events` in ns beside injector
                                       rules, traffic(), the namespace's counter deltas
    reconcile(tc, out, dk)             every exact relation and documented inequality
                                       between an observer's totals and those deltas
    check_event_stream(tc, out, ctx)   --events accounting, stage by stage
    unseen(out)                        retransmitted segments no event reported
"""
import json

from lab.lossd import OUTCOMES, TYPES, outcome_name, type_name
from lab.stats import short


def spec(ns, *extra, events=True):
    """(ns, args) of `lossd --observe [--events] EXTRA`, for Lab.start()."""
    return (ns, ["--observe"] + (["--events"] if events else []) + list(extra))


def reconcile(tc, out, dk, filtered_ok=False):
    """Asserts every exact relation and documented inequality between an observer's
    totals (out) and the kernel counter deltas (dk) of its namespace."""
    t = out.totals
    tc.assertIsNotNone(t, "no observer_totals line; stderr:\n" + out.stderr)
    ctx = json.dumps({"observer": out.summary(), "kernel": short(dk)}, sort_keys=True)
    if out.retransmits or out.closes:
        gaps = unseen(out)
        if gaps:
            ctx += ("\nsegments the kernel counted (socket tcp total_retrans) with no retransmit event "
                    "[cookie, tuple, hub seq where it showed, segs]: %s" % gaps)
    for h in t["hooks"]:
        if h["name"] != "iter/tcp":
            tc.assertTrue(h["available"], "%s not attached (%s): %s" % (h["name"], h["reason"], ctx))
    # Exact.
    tc.assertEqual(t["retrans_segs"], dk["Tcp.RetransSegs"], "retrans_segs != dTcpRetransSegs: " + ctx)
    tc.assertEqual(t["retrans_segs"],
                   sum(out.segs(ty, o) for ty in TYPES for o in ("sent", "failed")),
                   "retrans_segs is not the sum of sent+failed segments: " + ctx)
    tc.assertEqual(out.segs("fast"), dk["TcpExt.TCPFastRetrans"], "fast.sent.segs != dTCPFastRetrans: " + ctx)
    tc.assertEqual(out.segs("loss"), dk["TcpExt.TCPSlowStartRetrans"],
                   "loss.sent.segs != dTCPSlowStartRetrans: " + ctx)
    tc.assertEqual(sum(out.ev(ty, o) for ty in ("syn", "synack") for o in ("sent", "failed")),
                   dk["TcpExt.TCPSynRetrans"], "syn+synack events != dTCPSynRetrans: " + ctx)
    tc.assertEqual(sum(out.segs(ty, "failed") for ty in TYPES), dk["TcpExt.TCPRetransFail"],
                   "failed segs != dTCPRetransFail: " + ctx)
    # Inequalities (research memo, section 2).
    tc.assertLessEqual(out.ev("tlp"), dk["TcpExt.TCPLossProbes"], "tlp sent > dTCPLossProbes: " + ctx)
    tc.assertLessEqual(sum(out.ev(ty, o) for ty in ("rto", "syn") for o in OUTCOMES),
                       dk["TcpExt.TCPTimeouts"], "rto+syn events > dTCPTimeouts: " + ctx)
    # Classifier and observer health.
    tc.assertEqual(sum(out.ev("unknown", o) for o in OUTCOMES), 0, "unknown retransmissions: " + ctx)
    tc.assertEqual(t["arm_failed"], 0, "sockets whose retransmission callback was not armed: " + ctx)
    tc.assertEqual(t["ring_lost"], 0, "ring_lost: " + ctx)
    # recursion_misses (tracing programs the kernel skipped because the same program ran
    # on that CPU) is not asserted: retransmissions are counted by sock_ops, which the
    # kernel never skips; the tracing programs run for every socket of the host before
    # the namespace filter, so other namespaces' traffic can cause skips.
    tc.assertEqual(t["flow_table_full"], 0, "flow_table_full: " + ctx)
    tc.assertEqual(out.bad_lines, [], "unparsable stdout lines")
    if not filtered_ok:
        tc.assertEqual(t["filtered"], 0, "filtered without filters: " + ctx)
    if out.subscriber is not None:
        check_event_stream(tc, out, ctx)
    return ctx


def check_event_stream(tc, out, ctx):
    """--events accounting: every wanted event reached the ring or was counted lost there,
    the hub published what was read, the subscriber delivered or counted the rest, and
    every delivered event was printed."""
    t, sub = out.totals, out.subscriber
    wanted = (out.all_events() - t["filtered"] + t["flows_closed"] + t["stalls"] + t["samples"]
              + t["dsacks"])
    tc.assertEqual(t["ring_consumed"] + t["ring_lost"], wanted,
                   "ring_consumed + ring_lost != wanted events (all - filtered + flow closes + "
                   "stalls + samples + dsacks): " + ctx)
    tc.assertEqual(t["hub_published"], t["ring_consumed"], "hub_published != ring_consumed: " + ctx)
    # The printer takes every kind it prints: all but the D-SACKs (counted in the totals).
    tc.assertEqual(sub["delivered"] + sub["lost"], t["hub_published"] - t["dsacks"],
                   "subscriber delivered + lost != hub_published - dsacks: " + ctx)
    tc.assertEqual(sub.get("unprinted", 0), 0, "delivered events not printed: " + ctx)
    tc.assertEqual(len(out.retransmits) + len(out.closes) + len(out.stalls), sub["delivered"],
                   "printed retransmit + flow_close + stall lines != delivered: " + ctx)
    if t["ring_lost"] == 0 and sub["lost"] == 0:
        tc.assertEqual(len(out.retransmits), out.all_events() - t["filtered"],
                       "retransmit lines != all events - filtered: " + ctx)
        tc.assertEqual(len(out.closes), t["flows_closed"], "flow_close lines != flows_closed: " + ctx)
        tc.assertEqual(len(out.stalls), t["stalls"], "stall lines != stalls: " + ctx)
        # Each flow's record counts the stall events of its socket.
        for c in out.closes:
            mine = [s for s in out.stalls if s.cookie == c.cookie]
            tc.assertEqual(c.stalls, len(mine), "stalls of flow %d: %s" % (c.cookie, ctx))
            tc.assertEqual(sum(c.stall_ns.values()), sum(s.duration_ns for s in mine),
                           "stall time of flow %d: %s" % (c.cookie, ctx))
        # Line by line, the events add up to the totals.
        for ty in TYPES:
            for o in OUTCOMES:
                evs = [e for e in out.retransmits if type_name(e) == ty and outcome_name(e) == o]
                if not t["filtered"]:
                    tc.assertEqual(len(evs), out.ev(ty, o), "%s.%s events: %s" % (ty, o, ctx))
                    tc.assertEqual(sum(e.segments for e in evs), out.segs(ty, o), "%s.%s segs: %s" % (ty, o, ctx))
    # The items are numbered from 1 without a gap; what the subscriber lost is in Gap items.
    tc.assertEqual([m.seq for m in out.items], list(range(1, len(out.items) + 1)), "item numbers")
    tc.assertEqual(sum(g.count for g in out.gaps), sub["lost"], "Gap items != the subscriber's lost")


class Run:
    """One observed scenario: the observer's output, the kernel deltas of its namespace,
    what the traffic returned, and the injectors' final events."""

    def __init__(self, out, dk, traffic, finals):
        self.out, self.dk, self.traffic, self.finals = out, dk, traffic, finals

    def numbers(self):
        n = {"kernel": short(self.dk), "observer": self.out.summary()}
        for i, f in enumerate(self.finals):
            if f:
                n["injector%d" % i] = {k: f.get(k) for k in ("matched_packets", "matched_segments",
                                                              "dropped_packets", "dropped_segments")}
        return n


def observe(lab, ns, traffic, rules=(), obs_args=(), events=True):
    """Starts `lossd --observe` in ns together with the injector rules ((ns, args) pairs;
    not a clsact egress rule in ns itself: see test_observer_start_keeps_live_egress_rule),
    waits until all are ready, runs traffic(), waits until every TCP socket of ns is
    closed, reads the kernel counters and stops everything."""
    ds = lab.start(spec(ns, *obs_args, events=events), *rules)
    obs, injs = ds[0], ds[1:]
    k0 = lab.counters(ns)
    res = traffic()
    lab.wait_idle(ns)
    k1 = lab.counters(ns)
    out = obs.stop_observer()
    finals = [d.stop() for d in injs]
    return Run(out, k1 - k0, res, finals)


def unseen(out):
    """Retransmitted segments the kernel counted on a socket but no event reported.

    Every retransmit event carries the socket's tp->total_retrans read at the
    tracepoint (after the kernel counted this retransmission); per socket, in
    time order, each increase must be exactly the segments of the events in
    between; a closed flow's retransmitted segments (by type, synack aside) must
    be its events' segments. Returns a list of (cookie, tuple, the TCP sequence
    number of the event where the gap showed or "close", missing segs).
    """
    by = {}
    for e in out.retransmits:
        if type_name(e) != "synack":
            by.setdefault(e.cookie, []).append(e)
    gaps = []
    tup = lambda t: "%s:%s>%s:%s" % (t.local_addr, t.local_port, t.remote_addr, t.remote_port)
    for cookie, evs in by.items():
        evs.sort(key=lambda e: e.time_mono_ns)
        seen = 0
        for e in evs:
            seen += e.segments
            if e.state.total_retrans != seen:
                gaps.append((cookie, tup(e.tuple), e.seq, e.state.total_retrans - seen))
                seen = e.state.total_retrans
    for c in out.closes:
        counted = sum(v for k, v in c.retransmitted_segments.items() if k != "synack")
        seen = sum(e.segments for e in by.get(c.cookie, []))
        if counted != seen:
            gaps.append((c.cookie, tup(c.tuple), "close", counted - seen))
    return gaps
