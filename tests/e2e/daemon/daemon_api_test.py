"""Daemon e2e 1: every RPC of lossd.v1 through real gRPC over the daemon's Unix socket.

One daemon in namespace A (lossd --socket /tmp/lossd-e2e-<pid>-<x>/lossd.sock), rules
on A's veth end (e2ea), counted UDP datagrams and paced TCP flows between A and B.

  test_system_rpcs             GetVersion, GetCapabilities, GetHealth
  test_rule_lifecycle          CreateRule, GetRule, UpdateRule (counters restart), ListRules by
                               label, DeleteRule (final counters, exact), ClearRules
  test_batch_create            CreateRules: 1,000 specs in one call all created; an atomic batch
                               with one bad spec creates none; a non-atomic one reports it per spec
  test_watch_rule_counters     WatchRuleCounters: seq 1, 2, 3...; counters grow with traffic to the
                               exact datagram count; the stream ends NOT_FOUND when the rule goes
  test_tcp_observer_rpcs       under a 2 % egress rule and a paced TCP flow: WatchRetransmits
                               (allow/deny filters), ListFlows, WatchFlows (snapshot, updates, the
                               closed flow), WatchAggregates (by type, by rule, by flow) and
                               GetRuleEffect all account for the same retransmitted segments
"""
import os
import platform
import signal
import time

from lab import daemon, traffic
from lab.config import main
from lab.netns import measured
from lab.daemon import DaemonTestCase, StreamReader, check_seq, rule_spec, wait_until


UDP_BASE = 9200


class DaemonApi(DaemonTestCase):
    pass

    # ------------------------------------------------------------------ system
    def test_system_rpcs(self):
        pb, d = self.pb, self.d
        v = d.sys.GetVersion(pb.GetVersionRequest(), timeout=10)
        self.assertEqual(v.api, "lossd.v1")
        self.assertRegex(v.version, r"^\d+\.\d+\.\d+")
        c = d.sys.GetCapabilities(pb.GetCapabilitiesRequest(), timeout=10)
        self.assertEqual(c.kernel, platform.release())
        self.assertTrue(c.btf)
        inj = {h.name: h for h in c.injector_hooks}
        for name in ("xdp", "tcx", "clsact"):
            self.assertTrue(inj[name].available, c)
        obs = {h.name: h for h in c.observer_hooks}
        self.assertTrue(obs["sockops/retransmit"].available, c)
        self.assertEqual(c.max_rules, 10000)  # the default
        self.assertEqual(c.max_ttl_ns, 0)     # no --max-ttl
        self.assertEqual(c.default_ttl_ns, 3600 * 10**9)  # no --default-ttl: 1 h
        h = d.health()
        self.assertTrue(h.serving)
        self.assertEqual(h.rules, 0)
        self.assertEqual(h.subscribers, 0)
        self.assertEqual(h.events_lost_kernel, 0)
        r = d.create(interface=self.lab.IF_A, protocol="udp", dport=UDP_BASE, rate=0.5)
        self.assertEqual(d.health().rules, 1)
        d.delete(r.id)
        self.assertEqual(d.health().rules, 0)

    # ------------------------------------------------------------------- rules
    def test_default_ttl(self):
        """A rule that gives no TTL gets the daemon's default (1 h here), in its spec; one that
        asks for 0 is kept until deleted."""
        pb, d, lab = self.pb, self.d, self.lab
        s = rule_spec(interface=lab.IF_A, protocol="udp", dport=UDP_BASE + 7, rate=0.5)
        s.ClearField("ttl_ns")
        r = d.inj.CreateRule(pb.CreateRuleRequest(spec=s), timeout=20)
        self.assertTrue(r.spec.HasField("ttl_ns"))
        self.assertEqual(r.spec.ttl_ns, 3600 * 10**9)
        self.assertEqual(r.expires_unix_ns - r.created_unix_ns, 3600 * 10**9)
        forever = d.create(interface=lab.IF_A, protocol="udp", dport=UDP_BASE + 8, rate=0.5, ttl_ns=0)
        self.assertTrue(forever.spec.HasField("ttl_ns"))
        self.assertEqual((forever.spec.ttl_ns, forever.expires_unix_ns), (0, 0))
        # UpdateRule without one: the default again, from now.
        u = d.inj.UpdateRule(pb.UpdateRuleRequest(id=forever.id, spec=s), timeout=20)
        self.assertEqual(u.spec.ttl_ns, 3600 * 10**9)
        self.assertGreater(u.expires_unix_ns, u.created_unix_ns + 3600 * 10**9 - 1)
        for rid in (r.id, forever.id):
            d.delete(rid)

    def test_rule_lifecycle(self):
        pb, d, lab = self.pb, self.d, self.lab
        t0 = time.time_ns()
        r = d.create(interface=lab.IF_A, protocol="udp", dport=UDP_BASE + 1, rate=1.0,
                     labels={"team": "a", "env": "x"}, ttl_ns=600 * 10**9, priority=7)
        t1 = time.time_ns()
        self.assertGreater(r.id, 0)
        self.assertEqual(r.state, pb.RULE_STATE_ACTIVE)
        self.assertEqual(r.spec.interface, lab.IF_A)
        self.assertEqual(r.spec.hook, pb.HOOK_TC)  # resolved from AUTO (veth, ingress: tcx)
        self.assertEqual(r.spec.direction, pb.DIRECTION_INGRESS)
        self.assertEqual((r.spec.match.dport.lo, r.spec.match.dport.hi), (UDP_BASE + 1, UDP_BASE + 1))
        self.assertEqual(r.spec.match.protocol, "udp")
        self.assertEqual(r.spec.loss.bernoulli.rate, 1.0)
        self.assertEqual(r.spec.priority, 7)
        self.assertEqual(dict(r.spec.labels), {"team": "a", "env": "x"})
        self.assertEqual(list(r.attachments), ["tcx ingress to " + lab.IF_A])
        self.assertTrue(t0 <= r.created_unix_ns <= t1, (t0, r.created_unix_ns, t1))
        self.assertEqual(r.expires_unix_ns, r.created_unix_ns + 600 * 10**9)
        self.assertEqual(r.counters, pb.RuleCounters())

        g = d.get(r.id)
        self.assertEqual(g, r)

        # Traffic: 100 % of 1,000 datagrams to the port.
        sent, got = traffic.udp_count(lab, lab.b, lab.a, lab.V4_A, UDP_BASE + 1, 1, 1000)
        self.assertEqual((sent, got), (1000, 0))
        c = wait_until(lambda: (lambda c: c if c.matched_packets == 1000 else None)(d.get(r.id).counters),
                       5, "counters of 1,000 datagrams")
        self.assertEqual((c.matched_packets, c.matched_segments, c.dropped_packets, c.dropped_segments),
                         (1000, 1000, 1000, 1000))
        self.assertEqual(c.matched_bytes, c.dropped_bytes)
        # tc sees the frame: payload + UDP + IPv4 + Ethernet headers.
        self.assertEqual(c.matched_bytes, 1000 * (64 + 8 + 20 + 14))

        # UpdateRule: the spec is replaced, counters restart, id and creation time stay.
        u = d.inj.UpdateRule(pb.UpdateRuleRequest(id=r.id, spec=rule_spec(
            interface=lab.IF_A, protocol="udp", dport=UDP_BASE + 1, rate=0.0, labels={"team": "b"})),
            timeout=20)
        self.assertEqual(u.id, r.id)
        self.assertEqual(u.spec.loss.bernoulli.rate, 0.0)
        self.assertEqual(dict(u.spec.labels), {"team": "b"})
        self.assertEqual(u.created_unix_ns, r.created_unix_ns)
        self.assertEqual(u.expires_unix_ns, 0)
        self.assertEqual(u.counters, pb.RuleCounters())
        self.assertEqual(d.get(r.id).counters, pb.RuleCounters())
        sent, got = traffic.udp_count(lab, lab.b, lab.a, lab.V4_A, UDP_BASE + 1, 2, 500)
        self.assertEqual((sent, got), (500, 500))
        wait_until(lambda: d.get(r.id).counters.matched_packets == 500, 5, "500 matched after update")
        self.assertEqual(d.get(r.id).counters.dropped_packets, 0)

        # ListRules with a label filter.
        r2 = d.create(interface=lab.IF_A, protocol="udp", dport=UDP_BASE + 2, rate=0.5,
                      labels={"team": "a", "env": "x"})
        r3 = d.create(interface=lab.IF_A, protocol="udp", dport=UDP_BASE + 3, rate=0.5,
                      labels={"team": "a", "env": "y"})

        def ids(**labels):
            return sorted(x.id for x in d.inj.ListRules(pb.ListRulesRequest(labels=labels), timeout=10).rules)

        self.assertEqual(ids(), sorted([r.id, r2.id, r3.id]))
        self.assertEqual(ids(team="a"), sorted([r2.id, r3.id]))
        self.assertEqual(ids(team="a", env="y"), [r3.id])
        self.assertEqual(ids(team="b"), [r.id])
        self.assertEqual(ids(team="c"), [])

        # DeleteRule returns the final counters; the rule is gone after.
        sent, got = traffic.udp_count(lab, lab.b, lab.a, lab.V4_A, UDP_BASE + 2, 3, 2000)
        deleted = d.delete(r2.id)
        self.assertEqual(deleted.id, r2.id)
        fc = deleted.counters
        self.assertEqual(fc.matched_packets, 2000)
        self.assertEqual(fc.dropped_packets, 2000 - got)
        self.assertEqual(fc.dropped_segments, fc.dropped_packets)
        measured("delete_final_counters", sent=sent, received=got, matched=fc.matched_packets,
                 dropped=fc.dropped_packets)
        # Kept, DELETED, with its final counters and its effect; deleting it again forgets it.
        kept = d.get(r2.id)
        self.assertEqual(kept.state, pb.RULE_STATE_DELETED, kept)
        self.assertEqual(kept.counters, fc)
        self.assertEqual(d.effect(r2.id).counters, fc)
        self.assertNotIn(r2.id, ids())  # listed only when asked
        self.assertIn(r2.id, [x.id for x in d.inj.ListRules(pb.ListRulesRequest(include_deleted=True),
                                                            timeout=10).rules])
        self.assertEqual(d.health().rules, 2)  # the live ones
        self.assertEqual(d.delete(r2.id).counters, fc)
        for call, req in ((d.inj.GetRule, pb.GetRuleRequest(id=r2.id)),
                          (d.inj.DeleteRule, pb.DeleteRuleRequest(id=r2.id))):
            with self.assertRaises(daemon.grpc.RpcError) as cm:
                call(req, timeout=10)
            self.assertEqual(cm.exception.code(), daemon.grpc.StatusCode.NOT_FOUND)

        # ClearRules.
        self.assertEqual(d.inj.ClearRules(pb.ClearRulesRequest(), timeout=30).deleted, 2)
        self.assertEqual(ids(), [])
        self.assertEqual(d.health().rules, 0)
        self.assertEqual(d.inj.ClearRules(pb.ClearRulesRequest(), timeout=30).deleted, 0)

    def test_batch_create(self):
        pb, d, lab = self.pb, self.d, self.lab
        n = 1000
        specs = [rule_spec(interface=lab.IF_A, protocol="udp", dport=20000 + i, rate=0.01,
                           labels={"batch": "big", "i": str(i)}) for i in range(n)]
        resp = d.inj.CreateRules(pb.CreateRulesRequest(specs=specs, atomic=True), timeout=120)
        self.assertEqual(len(resp.rules), n)
        self.assertEqual(list(resp.errors), [""] * n)
        self.assertEqual(len({r.id for r in resp.rules}), n)
        self.assertEqual([r.spec.match.dport.lo for r in resp.rules], [20000 + i for i in range(n)])
        self.assertTrue(all(r.state == pb.RULE_STATE_ACTIVE for r in resp.rules))
        listed = d.inj.ListRules(pb.ListRulesRequest(labels={"batch": "big"}), timeout=30).rules
        self.assertEqual(len(listed), n)
        self.assertEqual(d.health().rules, n)
        # One of them works: 100 datagrams to port 20500 at 1 % are all matched.
        sent, got = traffic.udp_count(lab, lab.b, lab.a, lab.V4_A, 20500, 4, 1000)
        rid = resp.rules[500].id
        c = wait_until(lambda: (lambda c: c if c.matched_packets == 1000 else None)(d.get(rid).counters),
                       5, "1,000 matched")
        self.assertEqual(c.dropped_packets, 1000 - got)

        # Atomic, one bad spec in the middle: nothing is created.
        bad = [rule_spec(interface=lab.IF_A, protocol="udp", dport=30000 + i, rate=0.01,
                         labels={"batch": "atomic"}) for i in range(n)]
        bad[500].match.src = "10.0.0.300/24"
        with self.assertRaises(daemon.grpc.RpcError) as cm:
            d.inj.CreateRules(pb.CreateRulesRequest(specs=bad, atomic=True), timeout=120)
        self.assertEqual(cm.exception.code(), daemon.grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("specs[500]", cm.exception.details())
        self.assertIn("match.src", cm.exception.details())
        self.assertEqual(len(d.inj.ListRules(pb.ListRulesRequest(labels={"batch": "atomic"}), timeout=30).rules), 0)
        self.assertEqual(d.health().rules, n)
        self.assertTrue(d.alive())

        # Not atomic: the good ones are created, the bad one is reported in place.
        mixed = [rule_spec(interface=lab.IF_A, protocol="udp", dport=31000 + i, rate=0.01,
                           labels={"batch": "mixed"}) for i in range(3)]
        mixed[1].loss.bernoulli.rate = 2.0
        resp = d.inj.CreateRules(pb.CreateRulesRequest(specs=mixed, atomic=False), timeout=30)
        self.assertEqual([r.spec.match.dport.lo for r in resp.rules], [31000, 31002])
        self.assertEqual(resp.errors[0], "")
        self.assertIn("specs[1]", resp.errors[1])
        self.assertIn("loss.bernoulli.rate", resp.errors[1])
        self.assertEqual(resp.errors[2], "")
        self.assertEqual(d.inj.ClearRules(pb.ClearRulesRequest(), timeout=60).deleted, n + 2)
        self.assertEqual(d.health().rules, 0)

    def test_watch_rule_counters(self):
        pb, d, lab = self.pb, self.d, self.lab
        port = UDP_BASE + 10
        r = d.create(interface=lab.IF_A, protocol="udp", dport=port, rate=0.5)
        other = d.create(interface=lab.IF_A, protocol="udp", dport=port + 1, rate=0.5)
        w = StreamReader(d.inj.WatchRuleCounters(
            pb.WatchRuleCountersRequest(ids=[r.id], interval_ns=100_000_000), timeout=120), "counters")
        wall = StreamReader(d.inj.WatchRuleCounters(
            pb.WatchRuleCountersRequest(interval_ns=100_000_000), timeout=120), "counters-all")
        w.wait_for(lambda m: len(m) >= 1, 10, "first update")
        received = 0
        for k in range(1, 4):
            sent, got = traffic.udp_count(lab, lab.b, lab.a, lab.V4_A, port, 10 + k, 1000)
            received += got
            w.wait_for(lambda m: m and m[-1].rules[0].counters.matched_packets == 1000 * k, 10,
                       "matched_packets == %d" % (1000 * k))
        msgs = w.snapshot()
        check_seq(self, msgs, "WatchRuleCounters")
        matched = [m.rules[0].counters.matched_packets for m in msgs]
        self.assertEqual(matched, sorted(matched), "counters went backwards")
        for k in (1000, 2000, 3000):
            self.assertIn(k, matched)
        self.assertTrue(all(len(m.rules) == 1 and m.rules[0].id == r.id for m in msgs))
        times = [m.time_unix_ns for m in msgs]
        self.assertEqual(times, sorted(times))
        last = msgs[-1].rules[0].counters
        self.assertEqual(last.dropped_packets, 3000 - received)
        alls = wall.snapshot()
        check_seq(self, alls, "WatchRuleCounters (all rules)")
        self.assertEqual(sorted(x.id for x in alls[-1].rules), sorted([r.id, other.id]))

        # Its rule deleted, the stream ends with NOT_FOUND.
        final = d.delete(r.id).counters
        self.assertEqual(final, last)
        self.assertTrue(w.done.wait(10), "WatchRuleCounters did not end after DeleteRule")
        self.assertIsNotNone(w.error)
        self.assertEqual(w.error.code(), daemon.grpc.StatusCode.NOT_FOUND)
        wall.cancel()
        measured("watch_rule_counters", updates=len(msgs), matched=last.matched_packets,
                 dropped=last.dropped_packets, received=received)

    # ---------------------------------------------------------------- observer
    def test_tcp_observer_rpcs(self):
        pb, d, lab = self.pb, self.d, self.lab
        port = 5201
        # 5 % of ~190 skbs/s (TCP hands tc 64 KiB GSO skbs): ~10 drops a second.
        r = d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=port, payload="only",
                     rate=0.05)
        self.assertEqual(list(r.attachments), ["clsact egress on " + lab.IF_A])
        rtx = StreamReader(d.obs.WatchRetransmits(pb.WatchRetransmitsRequest(), timeout=120), "rtx")
        by_rule = StreamReader(d.obs.WatchRetransmits(pb.WatchRetransmitsRequest(
            allow=[pb.EventFilter(rule_id=r.id)]), timeout=120), "rtx-by-rule")
        denied = StreamReader(d.obs.WatchRetransmits(pb.WatchRetransmitsRequest(
            deny=[pb.EventFilter(port=pb.PortRange(lo=port))]), timeout=120), "rtx-deny")
        agg = StreamReader(d.obs.WatchAggregates(pb.WatchAggregatesRequest(window_ns=200_000_000),
                                                 timeout=120), "aggregates")
        flows = StreamReader(d.obs.WatchFlows(pb.WatchFlowsRequest(
            filter=[pb.EventFilter(port=pb.PortRange(lo=port))], interval_ns=200_000_000), timeout=120),
            "flows")
        wait_until(lambda: d.health().subscribers == 4, 10, "4 subscribers (3 retransmit + aggregates)")
        flows.wait_for(lambda m: len(m) >= 1, 10, "WatchFlows snapshot")

        nbytes = 30_000_000
        # 2.4 s at 100 Mbit/s: its retransmissions span many 200 ms aggregate windows even
        # when a busy machine hands the ring's events over late, in bursts.
        f = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, port, nbytes, 100, hold=True)
        # lossd off the CPU for 1.5 s mid-flow (a busy machine, SIGSTOP; the
        # 3 s lease holds the rule): the aggregate windows of that second still
        # hold its retransmissions, by the kernel's time, not all in the window
        # lossd read them in.
        time.sleep(0.6)
        os.kill(d.pid, signal.SIGSTOP)
        stopped = [time.monotonic_ns()]  # CLOCK_MONOTONIC, the events' clock
        try:
            time.sleep(1.5)
        finally:
            stopped.append(time.monotonic_ns())
            os.kill(d.pid, signal.SIGCONT)
        f.wait_sent()
        # Open and idle (every byte acknowledged): ListFlows shows it.
        lf = d.obs.ListFlows(pb.ListFlowsRequest(filter=[pb.EventFilter(port=pb.PortRange(lo=port))]),
                             timeout=10).flows
        self.assertEqual(len(lf), 1, lf)
        fl = lf[0]
        self.assertEqual((fl.tuple.local_addr, fl.tuple.remote_addr, fl.tuple.remote_port),
                         (lab.V4_A, lab.V4_B, port))
        self.assertFalse(fl.closed)
        # (tcp_probe fires before the ACK it sees is processed: the last ACK is not in it)
        self.assertTrue(0.9 * nbytes <= fl.bytes_acked <= nbytes, fl.bytes_acked)
        self.assertEqual(len(d.obs.ListFlows(pb.ListFlowsRequest(filter=[pb.EventFilter(
            port=pb.PortRange(lo=port + 1))]), timeout=10).flows), 0)
        sender, receiver = f.release()
        self.assertEqual(receiver["bytes"], nbytes)
        flows.wait_for(lambda m: any(x.closed for msg in m for x in msg.flows), 10, "closed flow")
        # The closing summary carries the final byte counts (SYN and FIN take one
        # sequence number each), not the last tcp_probe's, which misses the ACKs that
        # arrive after the FIN went out.
        closed = [x for msg in flows.snapshot() for x in msg.flows if x.closed]
        self.assertTrue(nbytes <= closed[-1].bytes_acked <= nbytes + 2, closed[-1].bytes_acked)
        time.sleep(1.0)  # one more aggregate window and counters settle

        events = [m.event for m in rtx.snapshot() if m.HasField("event")]
        seg_sum = sum(e.segments for e in events if e.outcome in (pb.OUTCOME_SENT, pb.OUTCOME_FAILED))
        self.assertGreater(len(events), 0, "no retransmission seen")
        sent_segs = sum(e.segments for e in events if e.outcome == pb.OUTCOME_SENT)
        for e in events:
            self.assertEqual(e.cookie, fl.cookie)
            self.assertEqual(list(e.rule_ids), [r.id])
            self.assertEqual((e.tuple.local_addr, e.tuple.remote_addr, e.tuple.remote_port),
                             (lab.V4_A, lab.V4_B, port))
            self.assertIn(e.type, (pb.RETRANSMIT_TYPE_FAST, pb.RETRANSMIT_TYPE_RTO, pb.RETRANSMIT_TYPE_LOSS,
                                   pb.RETRANSMIT_TYPE_TLP))
            self.assertGreater(e.segments, 0)
        for s in (rtx, by_rule, denied):
            check_seq(self, s.snapshot(), s.name)
            self.assertEqual([m for m in s.snapshot() if m.HasField("gap")], [], s.name)
        self.assertEqual([m.event for m in by_rule.snapshot()], list(events))
        self.assertEqual(denied.snapshot(), [])

        # ListFlows' record of the flow, as of the idle moment: every retransmission was done.
        self.assertEqual(sum(fl.retransmitted_segments.values()), sent_segs)

        # WatchFlows: a snapshot first, then updates; the flow appears, then closes.
        fm = flows.snapshot()
        check_seq(self, fm, "WatchFlows")
        self.assertTrue(fm[0].snapshot)
        self.assertTrue(all(not m.snapshot for m in fm[1:]))
        self.assertFalse(any(x.cookie == fl.cookie for x in fm[0].flows), "flow predates the stream?")
        upd = [x for m in fm[1:] for x in m.flows if x.cookie == fl.cookie]
        self.assertTrue(any(not x.closed for x in upd), "no update of the open flow")
        cl = [x for x in upd if x.closed]
        self.assertEqual(len(cl), 1, cl)
        self.assertGreater(cl[0].duration_ns, 0)
        self.assertEqual(sum(cl[0].retransmitted_segments.values()), sent_segs)
        self.assertEqual((cl[0].tuple.local_addr, cl[0].tuple.remote_port), (lab.V4_A, port))

        # WatchAggregates: per window, by type / rule / flow; the sums match the events.
        am = agg.snapshot()
        check_seq(self, am, "WatchAggregates")
        self.assertTrue(all(a.window_ns == 200_000_000 for a in am))
        self.assertTrue(all(len(a.gaps) == 0 for a in am))
        by_type = {}
        for a in am:
            for k, v in a.retransmits_by_type.items():
                by_type[k] = by_type.get(k, 0) + v
        ev_by_type = {}
        names = {pb.RETRANSMIT_TYPE_FAST: "fast", pb.RETRANSMIT_TYPE_RTO: "rto", pb.RETRANSMIT_TYPE_LOSS: "loss",
                 pb.RETRANSMIT_TYPE_TLP: "tlp"}
        for e in events:
            ev_by_type[names[e.type]] = ev_by_type.get(names[e.type], 0) + e.segments
        self.assertEqual({k: v for k, v in by_type.items() if v}, ev_by_type)
        self.assertEqual(sum(a.retransmits_by_rule.get(r.id, 0) for a in am), seg_sum)
        self.assertEqual(sum(a.retransmits_by_flow.get(fl.cookie, 0) for a in am), seg_sum)
        self.assertEqual(sum(sum(a.retransmits_by_flow.values()) for a in am), seg_sum)
        self.assertGreater(sum(1 for a in am if sum(a.retransmits_by_type.values())), 1,
                           "expected retransmissions in more than one window")
        # Windows in order, back to back, each once; each holds exactly the
        # retransmissions the kernel made in it (by their own time), those of
        # the 1.5 s lossd was stopped too, none late.
        starts = [a.window_start_mono_ns for a in am]
        self.assertEqual([b - a for a, b in zip(starts, starts[1:])], [200_000_000] * (len(starts) - 1))
        self.assertTrue(all(a.window_start_unix_ns - a.window_start_mono_ns
                            == am[0].window_start_unix_ns - am[0].window_start_mono_ns for a in am))
        counted = [e for e in events if e.outcome in (pb.OUTCOME_SENT, pb.OUTCOME_FAILED)]
        self.assertTrue(all(starts[0] <= e.time_mono_ns < starts[-1] + 200_000_000 for e in counted),
                        "a retransmission outside every window")
        for a in am:
            self.assertEqual(sum(a.retransmits_by_type.values()),
                             sum(e.segments for e in counted
                                 if a.window_start_mono_ns <= e.time_mono_ns < a.window_start_mono_ns + a.window_ns),
                             "window at %d" % a.window_start_mono_ns)
            self.assertEqual(a.late_segments, 0)
        while_stopped = [e for e in counted if stopped[0] <= e.time_mono_ns < stopped[1]]
        # (~14 expected: none has a chance below 1e-6)
        self.assertGreater(len(while_stopped), 0, "no retransmission while lossd was stopped")

        # GetRuleEffect: the rule's drops beside the retransmissions of the flow it matched.
        eff = d.effect(r.id)
        self.assertEqual(eff.id, r.id)
        self.assertEqual(eff.flows, 1)
        self.assertEqual({k: v for k, v in eff.retransmitted_segments.items() if v}, ev_by_type)
        self.assertEqual(eff.counters, d.get(r.id).counters)
        self.assertAlmostEqual(eff.configured_rate, 0.05)
        self.assertGreater(eff.counters.dropped_segments, 0)
        measured("tcp_observer_rpcs", events=len(events), retrans_segs=seg_sum, by_type=ev_by_type,
                 dropped_segs=eff.counters.dropped_segments, matched_segs=eff.counters.matched_segments,
                 windows=len(am), flow_msgs=len(fm), sender_total_retrans=sender["total_retrans"])
        for s in (rtx, by_rule, denied, agg, flows):
            s.cancel()
        wait_until(lambda: d.health().subscribers == 0, 10, "subscribers gone after cancel")


if __name__ == "__main__":
    main()
