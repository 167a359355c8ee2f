"""Daemon e2e: cause and effect, drop by drop (issue 13). The daemon runs in namespace A; the
sender too, the receiver in B. The injector's drop log (its loss_drops map, read with
bpftool from the daemon's own map: lab.bpfquery.drop_log) is the record of what was dropped;
the observer's WatchRetransmits stream is the record of what was resent.

  test_every_drop_is_resent_and_linked
      A per-segment every-150th rule on A's egress (clsact STOLEN, TCP data only) and one paced
      TCP flow A -> B of 2 MB (about 9 drops: the flow's whole log is kept). Every recorded
      range is one wire segment of the rule, and is resent; GetRuleEffect.drops_recorded ==
      the rule's dropped packets == the log's count; recovery[type].count == the sent
      resends, of that type, of a range dropped before them (each once), resent_dropped_segments
      their segments (within retransmitted_segments; `lossctl rule effect` says "N resent its
      dropped segments, M other resends"), and sum_ns / max_ns are exactly the resend time minus the newest such drop's time; the buckets add up;
      /metrics says the same (lossd_rule_drops_recorded_total, _linked_retransmits_total,
      _recovery_seconds_total).
  test_limits_of_matched_flows
      After a flow the rule matched closed: limit_ns has every key, and busy + idle is the
      flow's life as the closing summary gives it (closed flows count from their summaries).

DropStalls (a daemon with --stall-min 2ms):
  test_tail_drops_cause_tlp_and_rto_stalls
      A per-segment rule dropping 40 % of the PSH data segments (the tail of a write, and its
      resends) on A's egress, 40 requests of 4000 bytes A -> B each answered (TCP_NODELAY):
      tail loss probes, and RTOs when a probe is dropped too. stalls_on_flows
      equals the flow's own stall record by cause (count and time); the stalls linked to the
      rule's drops are all tlp or rto, and every tlp / rto stall of the flow is linked (count
      and time), and equals the WatchStalls events whose caused_by names the rule;
      /metrics: lossd_rule_caused_stalls_total / _seconds_total and
      lossd_rule_flow_stalls_total / _seconds_total say the same, lossd_rule_flow_limit_seconds
      _total has every limit and equals limit_ns.

TracedDrops (issue 24):
  test_a_traced_flow_gets_every_drop
      TraceFlow of an unpaced bulk flow, then a 2 % rule on it (its data only, per skb) for
      1.5 s: every drop of the flow arrives as a drop item (as many as the rule dropped, each once, its rule
      named), none only as a DROP_LOG gap; the injector keeps a flow's last 16, and the trace
      reads them with the flow's events (at most every 2 ms), not every 100 ms as before.

AfterTheRule (issue 24: cause and effect once the rule is gone):
  test_a_deleted_blackhole_keeps_its_effect / test_an_expired_blackhole_keeps_its_effect
      A 100 % rule on a paced bulk flow for 1.5 s, ended by DeleteRule (or by its TTL): the flow
      waits for the retransmission timer, backed off, and the stall ends after the rule is
      gone. The rule stays readable (GetRule: DELETED / EXPIRED, final counters); GetRuleEffect
      credits it with the RTO stall (stalls_caused rto >= 1), stalls_on_flows holds every
      stall it caused (count and time, by cause); a WatchStalls filtered on its id receives
      that stall, ending after the rule ended, with caused_by naming it. A second DeleteRule
      forgets it (then NOT_FOUND).
"""

import os
import signal
import time

from lab import daemon, prom, traffic, web
from lab import stalls as stalls_lib
from lab.bpfquery import drop_log
from lab import config
from lab.clients import run_client
from lab.config import main
from lab.netns import measured
from lab.daemon import DaemonTestCase, StreamReader, events_of, wait_until

LIMIT_KEYS = {"busy", "rwnd_limited", "sndbuf_limited", "cwnd_limited", "nagle_limited", "app_limited", "idle"}


def covers(r, seq):
    return (seq - r["seq"]) % (1 << 32) < r["len"]


def scrape(tc):
    """tc's daemon's /metrics, checked by promtool, parsed."""
    r = web.request(tc.d.ns, "127.0.0.1", tc.d.http_port, "/metrics")
    tc.assertEqual(r.status, 200, r)
    rc, out = prom.promtool_check_metrics(r.text())
    tc.assertEqual(rc, 0, out)
    return prom.parse(r.text())


class DropLog(DaemonTestCase):

    def rtx_type(self, t):
        return self.pb.RetransmitType.Name(t)[len("RETRANSMIT_TYPE_"):].lower()

    def test_every_drop_is_resent_and_linked(self):
        lab, d, pb = self.lab, self.d, self.pb
        port = 5311
        r = d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=port, payload="only",
                     every_nth=150, per_segment=True)
        rtx = self.watch("rtx")
        wait_until(lambda: d.health().subscribers >= 1, 10, "the stream to subscribe")
        a0 = lab.counters(lab.a)
        sender, receiver = traffic.tcp_flow(lab, lab.b, lab.a, lab.V4_B, port=port, mbytes=2, rate_mbit=100)
        da = lab.counters(lab.a) - a0
        retrans = da["Tcp.RetransSegs"]
        wait_until(lambda: sum(e.segments for e in events_of(rtx.snapshot())) >= retrans, 10,
                   "the stream to carry %d retransmitted segments" % retrans)
        events = [e for e in events_of(rtx.snapshot())
                  if e.tuple.remote_port == port and e.outcome == pb.OUTCOME_SENT]
        log = {k: v for k, v in drop_log(d.pid).items() if k[4] == port}
        self.assertEqual(len(log), 1, "one flow's log: %s" % log)
        ((fkey, flog),) = log.items()
        self.assertEqual(fkey[1], lab.V4_A)
        ranges = flog["ranges"]
        self.assertLessEqual(flog["drops"], 16, "the whole log is kept: no test of an evicted range")
        self.assertEqual(len(ranges), flog["drops"])

        # What GetRuleEffect must say, from the log and the resends alone.
        want, want_segs = {}, {}
        for e in events:
            cover = [x for x in ranges if covers(x, e.seq) and x["time_ns"] <= e.time_mono_ns]
            if cover:
                w = want.setdefault(self.rtx_type(e.type), dict(count=0, sum_ns=0, max_ns=0))
                dt = e.time_mono_ns - cover[-1]["time_ns"]  # the newest drop of that range
                want_segs[self.rtx_type(e.type)] = want_segs.get(self.rtx_type(e.type), 0) + e.segments
                w["count"] += 1
                w["sum_ns"] += dt
                w["max_ns"] = max(w["max_ns"], dt)

        def settled():
            e = d.effect(r.id)
            return e if sum(v.count for v in e.recovery.values()) >= sum(w["count"] for w in want.values()) \
                else None
        try:
            eff = wait_until(settled, 10, "the effect to link the resends")
        except AssertionError:
            eff = d.effect(r.id)
        c = eff.counters
        got = {k: dict(count=v.count, sum_ns=v.sum_ns, max_ns=v.max_ns) for k, v in eff.recovery.items()}
        numbers = dict(timeouts=da["TcpExt.TCPTimeouts"], drops=flog["drops"], dropped_pkts=c.dropped_packets, dropped_segs=c.dropped_segments,
                       drops_recorded=eff.drops_recorded, resends=len(events), retrans_segs=retrans,
                       want=want, got=got, ranges=[(x["seq"], x["len"]) for x in ranges],
                       resent_dropped=dict(eff.resent_dropped_segments), want_segs=want_segs,
                       retransmitted={k: v for k, v in eff.retransmitted_segments.items() if v},
                       bytes=receiver["bytes"])
        measured("droplog_linked", **numbers)
        self.assertEqual(receiver["bytes"], 2_000_000, numbers)
        self.assertGreaterEqual(flog["drops"], 5, "too few drops: no test (%s)" % numbers)
        self.assertEqual(c.dropped_packets, c.dropped_segments, "per-segment: one segment per skb")
        self.assertEqual(eff.drops_recorded, c.dropped_packets, numbers)
        self.assertEqual(flog["drops"], c.dropped_packets, numbers)
        for x in ranges:
            self.assertEqual((x["rule_id"], x["segs"]), (r.id, 1), x)
            self.assertTrue(0 < x["len"] <= 1448, x)
            self.assertTrue(any(covers(x, e.seq) and e.time_mono_ns >= x["time_ns"] for e in events),
                            "dropped range %s never resent (%s)" % (x, numbers))
        self.assertEqual(got, want, numbers)
        # The same resends in segments: the rule's "resends of its dropped segments", within
        # every resend on its flows (issue 24: the rest are the other resends the loss caused).
        self.assertEqual(dict(eff.resent_dropped_segments), want_segs, numbers)
        for k, v in want_segs.items():
            self.assertLessEqual(v, eff.retransmitted_segments[k], numbers)
        ctl = run_client(self.lab, [config.LOSSCTL, "--addr", d.addr, "rule", "effect", str(r.id)])
        self.assertEqual(ctl.rc, 0, ctl)
        self.assertRegex(ctl.out, r"of which +%d resent its dropped segments, %d other resends" % (
            sum(want_segs.values()), sum(eff.retransmitted_segments.values()) - sum(want_segs.values())),
            ctl.out)
        # Every drop is resent at least once (a range may be resent twice: a probe, then a
        # fast retransmission); spurious resends of ranges never dropped are not linked.
        self.assertGreaterEqual(sum(w["count"] for w in want.values()), c.dropped_packets, numbers)
        self.assertLessEqual(sum(w["count"] for w in want.values()), len(events), numbers)
        # /metrics: the same, per rule.
        m = scrape(self)
        rid = str(r.id)
        self.assertEqual(prom.one(m, "lossd_rule_drops_recorded_total", rule=rid), c.dropped_packets)
        self.assertEqual({l["type"]: v for l, v in prom.values(m, "lossd_rule_linked_retransmits_total", rule=rid)},
                         {k: w["count"] for k, w in want.items()})
        for k, w in want.items():
            self.assertAlmostEqual(prom.one(m, "lossd_rule_recovery_seconds_total", rule=rid, type=k),
                                   w["sum_ns"] / 1e9, places=6)
        for k, v in eff.recovery.items():
            self.assertEqual(len(v.bounds_ns), 16)
            self.assertEqual(list(v.bounds_ns), sorted(v.bounds_ns))
            self.assertEqual(len(v.counts), 17)
            self.assertEqual(sum(v.counts), v.count, k)

    def test_limits_of_matched_flows(self):
        lab, d, pb = self.lab, self.d, self.pb
        port = 5312
        r = d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=port, payload="only",
                     rate=0.0)
        flows = StreamReader(d.obs.WatchFlows(pb.WatchFlowsRequest(interval_ns=100_000_000), timeout=120),
                             "flows")
        self.readers.append(flows)
        wait_until(lambda: flows.snapshot(), 10, "the flow stream's snapshot")
        traffic.tcp_flow(lab, lab.b, lab.a, lab.V4_B, port=port, mbytes=1, rate_mbit=100)

        def closed():
            return [f for m in flows.snapshot() for f in m.flows if f.closed and f.tuple.remote_port == port]
        (summary,) = wait_until(closed, 10, "the flow's closing summary")
        eff = wait_until(lambda: (lambda e: e if e.limit_ns.get("busy", 0) + e.limit_ns.get("idle", 0) else None)(
            d.effect(r.id)), 10, "the closed flow's limits")
        lim = dict(eff.limit_ns)
        numbers = dict(limit_ns=lim, duration_ns=summary.duration_ns)
        measured("droplog_limits", **numbers)
        self.assertEqual(set(lim), LIMIT_KEYS, numbers)
        parts = sum(lim[k] for k in ("rwnd_limited", "sndbuf_limited", "cwnd_limited", "nagle_limited",
                                     "app_limited"))
        self.assertEqual(parts, lim["busy"], numbers)
        # The one matched flow, closed: its life is busy + idle.
        self.assertEqual(lim["busy"] + lim["idle"], max(summary.duration_ns, lim["busy"]), numbers)


class DropStalls(DaemonTestCase):
    """A daemon with --stall-min 2ms: a tail loss probe here waits 10 ms or more."""
    daemon_args = ["--stall-min", "2ms"]

    def test_tail_drops_cause_tlp_and_rto_stalls(self):
        lab, d, pb = self.lab, self.d, self.pb
        port = 5313
        r = d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=port, payload="only",
                     tcp_flags="psh", rate=0.4, seed=13, per_segment=True)
        flows = StreamReader(d.obs.WatchFlows(pb.WatchFlowsRequest(interval_ns=100_000_000), timeout=120),
                             "flows")
        stalls = StreamReader(d.obs.WatchStalls(pb.WatchStallsRequest(), timeout=120), "stalls")
        self.readers += [flows, stalls]
        wait_until(lambda: flows.snapshot(), 10, "the flow stream's snapshot")
        wait_until(lambda: d.health().subscribers >= 1, 10, "the stall stream to subscribe")
        a0 = lab.counters(lab.a)
        # 40 requests of 4000 bytes A -> B (3 segments, PSH on the last), each answered.
        out = traffic.rr(lab, lab.V4_B, port=port, count=40, resp=100, request=4000)
        da = lab.counters(lab.a) - a0

        def closed():
            return [f for m in flows.snapshot() for f in m.flows if f.closed and f.tuple.remote_port == port]
        (summary,) = wait_until(closed, 10, "the flow's closing summary")
        on_flow = {k: v for k, v in summary.stall_ns.items() if v}

        def settled():
            e = d.effect(r.id)
            return e if sum(v.count for v in e.stalls_on_flows.values()) >= summary.stalls else None
        try:
            eff = wait_until(settled, 10, "the effect to count the flow's stalls")
        except AssertionError:
            eff = d.effect(r.id)
        evs = wait_until(lambda: (lambda e: e if len(e) >= summary.stalls else None)(
            [e for e in events_of(stalls.snapshot()) if e.tuple.remote_port == port]), 10,
            "the flow's %d stall events" % summary.stalls)
        self.assertEqual([m for m in stalls.snapshot() if m.HasField("gap")], [], "the stall stream lost events")

        def cause(e):
            return pb.StallCause.Name(e.cause)[len("STALL_CAUSE_"):].lower()
        by_event = {}
        for e in evs:
            if e.caused_by.rule_id == r.id:
                n, t = by_event.get(cause(e), (0, 0))
                by_event[cause(e)] = (n + 1, t + e.duration_ns)
        caused = {k: (v.count, v.time_ns) for k, v in eff.stalls_caused.items()}
        on = {k: (v.count, v.time_ns) for k, v in eff.stalls_on_flows.items()}
        c = eff.counters
        numbers = dict(requests=out.get("requests"), dropped=c.dropped_packets, drops_recorded=eff.drops_recorded,
                       flow_stalls=summary.stalls, flow_stall_ns=on_flow, on_flows=on, caused=caused,
                       recovery={k: v.count for k, v in eff.recovery.items()},
                       probes=da["TcpExt.TCPLossProbes"], timeouts=da["TcpExt.TCPTimeouts"])
        measured("droplog_stalls", **numbers)
        self.assertEqual(out.get("requests"), 40, numbers)
        self.assertGreaterEqual(c.dropped_packets, 10, "too few tail drops: no test (%s)" % numbers)
        self.assertEqual(eff.drops_recorded, c.dropped_packets, numbers)
        # Every stall on the flow, by cause: what the flow's own record says.
        self.assertEqual(sum(n for n, _ in on.values()), summary.stalls, numbers)
        self.assertEqual({k: t for k, (n, t) in on.items()}, on_flow, numbers)
        # The tail drops caused stalls, each waiting for a probe or the timer, and every
        # such stall on the flow was one of theirs (nothing else here loses a segment).
        self.assertTrue(caused, numbers)
        self.assertLessEqual(set(caused), {"tlp", "rto"}, numbers)
        for k in ("tlp", "rto"):
            self.assertEqual(caused.get(k), on.get(k), numbers)
        self.assertLessEqual(sum(n for n, _ in caused.values()), c.dropped_packets, numbers)
        # Stall by stall: the events' caused_by (the same link, made by the stream) add up to it.
        self.assertEqual(by_event, caused, numbers)
        # /metrics: the same, per rule and cause.
        m = scrape(self)
        rid = str(r.id)
        for k, (n, t) in caused.items():
            self.assertEqual(prom.one(m, "lossd_rule_caused_stalls_total", rule=rid, cause=k), n)
            self.assertAlmostEqual(prom.one(m, "lossd_rule_caused_stall_seconds_total", rule=rid, cause=k),
                                   t / 1e9, places=6)
        for k, (n, t) in on.items():
            self.assertEqual(prom.one(m, "lossd_rule_flow_stalls_total", rule=rid, cause=k), n)
            self.assertAlmostEqual(prom.one(m, "lossd_rule_flow_stall_seconds_total", rule=rid, cause=k),
                                   t / 1e9, places=6)
        self.assertEqual({l["cause"] for l, _ in prom.values(m, "lossd_rule_caused_stalls_total", rule=rid)},
                         set(caused))
        lim = {l["limit"]: v for l, v in prom.values(m, "lossd_rule_flow_limit_seconds_total", rule=rid)}
        self.assertEqual(set(lim), LIMIT_KEYS, lim)
        for k in LIMIT_KEYS:
            self.assertAlmostEqual(lim[k], eff.limit_ns[k] / 1e9, places=6)



class TracedDrops(DaemonTestCase):

    def test_a_traced_flow_gets_every_drop(self):
        lab, d, pb = self.lab, self.d, self.pb
        port = 5323
        srv = traffic.server(lab, lab.b, "0.0.0.0", port)
        cli = traffic.sender(lab, lab.a, lab.V4_B, port, until_stdin=True, rate_mbit=0)  # unpaced
        trace = StreamReader(d.obs.TraceFlow(pb.TraceFlowRequest(
            flow=pb.EventFilter(port=pb.PortRange(lo=port, hi=port)), wait_ns=30_000_000_000), timeout=120),
            "trace")
        self.readers.append(trace)
        trace.wait_for(lambda m: m and m[0].HasField("flow"), 20, "the trace to start")
        # The rule once the trace runs: every drop it makes is one the trace must tell, even
        # those made while lossd is off the CPU (a busy machine; SIGSTOP for 1 s, inside the
        # 3 s lease), hundreds more than a flow's drop log keeps.
        r = d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=port, payload="only",
                     rate=0.02, seed=7)
        time.sleep(0.3)
        os.kill(d.pid, signal.SIGSTOP)
        try:
            time.sleep(1.0)
        finally:
            os.kill(d.pid, signal.SIGCONT)
        time.sleep(0.5)
        traffic.finish(cli, stop=True, timeout=60)
        got = traffic.finish(srv, timeout=30)
        msgs = trace.wait_for(lambda m: m and m[-1].HasField("closed"), 20, "the trace's closing summary")
        drops = [m.drop.drop for m in msgs if m.HasField("drop")]
        gaps = {pb.GapSource.Name(m.gap.source): m.gap.count for m in msgs if m.HasField("gap")}
        c = d.get(r.id).counters
        numbers = dict(bytes=got["bytes"], dropped_packets=c.dropped_packets, trace_drops=len(drops),
                       gaps=gaps, secs=round((msgs[-1].closed.duration_ns or 1) / 1e9, 2),
                       drops_per_s=round(c.dropped_packets / max(1e-9, msgs[-1].closed.duration_ns / 1e9)))
        measured("traced_drops", **numbers)
        self.assertGreater(c.dropped_packets, 50, numbers)
        self.assertEqual(gaps.get("GAP_SOURCE_DROP_LOG", 0), 0, numbers)
        self.assertEqual(len(drops), c.dropped_packets, numbers)
        self.assertEqual(len({(x.time_mono_ns, x.seq) for x in drops}), len(drops), "a drop told twice")
        self.assertTrue(all(x.rule_id == r.id for x in drops), numbers)


class AfterTheRule(DaemonTestCase):
    """One blackhole per test on its own port; the daemon keeps ended rules (the default)."""

    def blackhole(self, port, end):
        """A 100 % rule for 1.5 s on a paced bulk flow A -> B, ended by end(rule) (or its TTL:
        end None); returns (rule, the flow's stall events on the rule's filter, the mono
        time the rule ended, the receiver's result)."""
        lab, d, pb = self.lab, self.d, self.pb
        # The rule first (its program's load can take seconds on a busy machine), then the flow:
        # its handshake passes (data only), its data meets the blackhole.
        spec = dict(interface=lab.IF_A, direction="egress", protocol="tcp", dport=port, payload="only", rate=1.0)
        if end is None:
            spec["ttl_ns"] = 1_500_000_000
        created_by = time.monotonic_ns()  # before the call: its TTL runs from within it
        r = d.create(**spec)
        t0 = time.monotonic()
        stalls = StreamReader(d.obs.WatchStalls(pb.WatchStallsRequest(allow=[pb.EventFilter(rule_id=r.id)]),
                                                timeout=120), "stalls")
        self.readers.append(stalls)
        srv = traffic.server(lab, lab.b, "0.0.0.0", port)
        cli = traffic.sender(lab, lab.a, lab.V4_B, port, nbytes=30e6, rate_mbit=100)
        time.sleep(max(0.0, 1.5 - (time.monotonic() - t0)))
        # Deleted: the rule stops dropping somewhere inside the call (its withdrawal comes
        # first, the detaching after; seconds on a busy machine), so it ended no earlier
        # than the call began. By its TTL: no earlier than its TTL after the create call
        # began (not after it returned: a slow call moved that 9 ms past the end once).
        ended = time.monotonic_ns() if end is not None else created_by + spec["ttl_ns"]
        if end is not None:
            end(r)
        traffic.finish(cli, timeout=90)
        return r, stalls, ended, traffic.finish(srv, timeout=30)

    def check(self, port, end, state):
        d, pb = self.d, self.pb
        r, stalls, ended, received = self.blackhole(port, end)
        info = d.get(r.id)
        self.assertEqual(pb.RuleState.Name(info.state), state, info)
        self.assertGreater(info.counters.dropped_packets, 0, info)
        self.assertEqual(list(info.attachments), [], info)

        def cause(e):
            return stalls_lib.cause_name(e.cause)

        def linked():
            evs = [e for e in events_of(stalls.snapshot()) if e.tuple.remote_port == port]
            return evs if any(e.caused_by.rule_id == r.id and cause(e) == "rto" for e in evs) else None
        evs = wait_until(linked, 15, "the rule's filter to receive the RTO stall it caused")
        eff = d.effect(r.id)  # readable after its end
        caused = {k: (v.count, v.time_ns) for k, v in eff.stalls_caused.items() if v.count}
        on = {k: (v.count, v.time_ns) for k, v in eff.stalls_on_flows.items() if v.count}
        rto = [e for e in evs if e.caused_by.rule_id == r.id and cause(e) == "rto"]
        numbers = dict(state=state, dropped=info.counters.dropped_packets, caused=caused, on_flows=on,
                       stall_ms=[round(e.duration_ns / 1e6) for e in rto], backoff=[e.backoff for e in rto],
                       ended_before_stall_end_ms=[round((e.start_mono_ns + e.duration_ns - ended) / 1e6)
                                                  for e in rto], bytes=received["bytes"])
        measured("after_the_rule_" + state.split("_")[-1].lower(), **numbers)
        self.assertEqual(received["bytes"], 30e6, numbers)
        self.assertGreaterEqual(caused.get("rto", (0, 0))[0], 1, numbers)
        # The stall it caused outlived the rule (a 100 % rule: nothing it matched got through
        # before it ended).
        self.assertTrue(any(e.start_mono_ns + e.duration_ns > ended for e in rto), numbers)
        self.assertTrue(all(r.id in e.rule_ids for e in rto), numbers)
        # Every stall it caused is one on the flows it matched.
        for k, (n, t) in caused.items():
            self.assertGreaterEqual(on.get(k, (0, 0))[0], n, numbers)
            self.assertGreaterEqual(on.get(k, (0, 0))[1], t, numbers)
        # A second delete forgets it.
        d.delete(r.id)
        with self.assertRaises(daemon.grpc.RpcError) as cm:
            d.get(r.id)
        self.assertEqual(cm.exception.code(), daemon.grpc.StatusCode.NOT_FOUND)

    def test_a_deleted_blackhole_keeps_its_effect(self):
        self.check(5321, lambda r: self.d.delete(r.id), "RULE_STATE_DELETED")

    def test_an_expired_blackhole_keeps_its_effect(self):
        self.check(5322, None, "RULE_STATE_EXPIRED")


if __name__ == "__main__":
    main()
