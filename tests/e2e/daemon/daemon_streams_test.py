"""Daemon e2e 4: streams under load: a slow subscriber's losses are reported exactly, in-band
(Gap, GAP_SOURCE_SUBSCRIBER), without slowing anyone else; many subscribers and rule
changes at once keep every stream's sequence numbers consistent.

The daemon runs in namespace A (the TCP sender's), with a 10 % rule on A's egress (clsact)
and paced parallel TCP flows A -> B that produce a few hundred retransmission events.

  test_slow_subscriber_gap_accounting
      WatchRetransmits(queue=10) that stops reading while the retransmissions happen (its
      channel has a small HTTP/2 window, so the daemon's writes back up into its queue):
      received events + the counts of its Gap messages == the events a fast subscriber got
      in the same period; the fast one got every event the daemon published (as many
      retransmitted segments as GetRuleEffect counted) and no Gap; unary RPCs are answered
      while the slow one is stuck.
  test_concurrent_subscribers_with_rule_churn
      3 WatchRetransmits + WatchAggregates + WatchFlows + WatchRuleCounters while another
      thread creates, updates and deletes rules under traffic: every stream's seq is
      1, 2, 3..., the three retransmit streams carry identical events, no gaps, the daemon
      is healthy after and has exactly the rules it should.
"""
import random
import threading
import time

from lab import traffic
from lab.config import main
from lab.netns import measured
from lab.daemon import (DaemonTestCase, SLOW_OPTIONS, StreamReader, check_seq, events_of, gaps_of,
                        key, rule_spec, wait_until)


PORT = 5201

class DaemonStreams(DaemonTestCase):

    def setUp(self):
        super().setUp()
        wait_until(lambda: self.d.health().subscribers == 0, 10, "no subscribers left")

    def settle(self, reader, rid, timeout=10):
        """Waits until reader's retransmitted segments equal GetRuleEffect's (all types) and stay
        so; returns that count."""
        last = [None]

        def same():
            a = sum(e.segments for e in events_of(reader.snapshot())
                    if e.outcome in (self.pb.OUTCOME_SENT, self.pb.OUTCOME_FAILED))
            b = sum(self.d.effect(rid).retransmitted_segments.values())
            ok = a == b and last[0] == a
            last[0] = a if a == b else None
            return ok
        wait_until(same, timeout, "%s to match GetRuleEffect" % reader.name, step=0.3)
        return last[0]

    def test_slow_subscriber_gap_accounting(self):
        pb, d, lab = self.pb, self.d, self.lab
        r = self.egress_rule()
        fast = self.watch("fast")
        ch, _, slow_obs, _ = d.stubs(SLOW_OPTIONS)
        slow = self.watch("slow", slow_obs, queue=10)
        slow.go.clear()  # takes one message, then stops reading
        wait_until(lambda: d.health().subscribers == 2, 10, "2 subscribers")
        c0 = lab.counters(lab.a)
        flow = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, PORT, 5e6, 20, hold=True, conns=8)
        flow.wait_sent()
        retrans = (lab.counters(lab.a) - c0)["Tcp.RetransSegs"]
        # The daemon serves while the slow subscriber is stuck.
        h = d.health()
        self.assertTrue(h.serving)
        self.assertEqual(h.subscribers, 2)
        self.assertEqual(d.get(r.id).id, r.id)
        # The fast subscriber got every event the daemon published: as many retransmitted
        # segments as the daemon's own effect tracker (another hub subscriber) counted.
        fast_total = self.settle(fast, r.id)
        stuck_with = len(slow.snapshot())
        slow.go.set()
        want = len(events_of(fast.snapshot()))

        def accounted(m):
            return len(events_of(m)) + sum(g.count for g in gaps_of(m)) >= want
        slow.wait_for(accounted, 10, "events + gaps == %d" % want)
        time.sleep(1.5)  # one more gap report interval: nothing more may come
        f, s = fast.snapshot(), slow.snapshot()
        fe, se, sg = events_of(f), events_of(s), gaps_of(s)
        lost = sum(g.count for g in sg)
        numbers = dict(retrans_segs=retrans, effect_segs=fast_total, fast_events=len(fe),
                       fast_segs=sum(e.segments for e in fe),
                       slow_events=len(se), slow_gap_msgs=len(sg), slow_gap_total=lost,
                       slow_had_before_resuming=stuck_with, events_lost_kernel=d.health().events_lost_kernel)
        measured("slow_subscriber", **numbers)
        flow.release()
        check_seq(self, f, "fast")
        check_seq(self, s, "slow")
        self.assertEqual(gaps_of(f), [], "the fast subscriber got a gap")
        self.assertEqual(sum(e.segments for e in fe), fast_total, numbers)
        self.assertGreater(lost, 0, "the slow subscriber lost nothing: no test")
        self.assertTrue(all(g.source == pb.GAP_SOURCE_SUBSCRIBER for g in sg), sg)
        self.assertEqual(len(se) + lost, len(fe), numbers)
        # What it did receive are fast's events, in order (a subsequence).
        fk = [key(e) for e in fe]
        pos = 0
        for e in se:
            pos = fk.index(key(e), pos) + 1
        # Gaps are aggregated, not one message per lost event.
        self.assertLess(len(sg), lost)
        self.assertEqual(numbers["events_lost_kernel"], 0)
        ch.close()

    def test_concurrent_subscribers_with_rule_churn(self):
        pb, d, lab = self.pb, self.d, self.lab
        main = self.egress_rule(rate=0.05)
        rtx = [self.watch("rtx%d" % i) for i in range(3)]
        agg = StreamReader(d.obs.WatchAggregates(pb.WatchAggregatesRequest(window_ns=100_000_000),
                                                 timeout=180), "aggregates")
        flows = StreamReader(d.obs.WatchFlows(pb.WatchFlowsRequest(interval_ns=100_000_000), timeout=180),
                             "flows")
        counters = StreamReader(d.inj.WatchRuleCounters(pb.WatchRuleCountersRequest(interval_ns=100_000_000),
                                                        timeout=180), "counters")
        self.readers += [agg, flows, counters]
        wait_until(lambda: d.health().subscribers == 4, 10, "4 subscribers (3 retransmit + aggregates)")
        c0 = lab.counters(lab.a)
        stop = threading.Event()
        churn = {"created": 0, "deleted": 0, "updated": 0, "errors": []}

        def churner():
            rng = random.Random(7)
            live = []
            while not stop.is_set():
                try:
                    k = rng.random()
                    if k < 0.45 or not live:
                        x = d.create(interface=lab.IF_A, direction=rng.choice(["ingress", "egress"]),
                                     protocol=rng.choice(["udp", "tcp"]), dport=30000 + rng.randrange(1000),
                                     rate=rng.random() * 0.5, labels={"churn": "1"})
                        live.append(x.id)
                        churn["created"] += 1
                    elif k < 0.85:
                        d.delete(live.pop(rng.randrange(len(live))))
                        churn["deleted"] += 1
                    else:
                        d.inj.UpdateRule(pb.UpdateRuleRequest(id=main.id, spec=rule_spec(
                            interface=lab.IF_A, direction="egress", protocol="tcp", dport=PORT, payload="only",
                            rate=rng.choice([0.04, 0.05, 0.06]))), timeout=20)
                        churn["updated"] += 1
                except Exception as e:  # noqa: BLE001 - reported below
                    churn["errors"].append(repr(e))
            churn["live"] = live

        t = threading.Thread(target=churner)
        t.start()
        try:
            flow = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, PORT, 4e6, 20, acked=True, conns=4)
            flow.wait_sent()
            flow.release()
        finally:
            stop.set()
            t.join(60)
        lab.wait_idle()
        retrans = (lab.counters(lab.a) - c0)["Tcp.RetransSegs"]
        total = self.settle(rtx[0], main.id)
        time.sleep(0.5)
        snaps = [r.snapshot() for r in rtx]
        for r, s in zip(rtx, snaps):
            check_seq(self, s, r.name)
            self.assertEqual(gaps_of(s), [], r.name)
        n = min(len(s) for s in snaps)
        self.assertEqual([key(e) for e in events_of(snaps[0])][:n], [key(e) for e in events_of(snaps[1])][:n])
        self.assertEqual([key(e) for e in events_of(snaps[0])][:n], [key(e) for e in events_of(snaps[2])][:n])
        self.assertEqual(len({len(s) for s in snaps}), 1, [len(s) for s in snaps])
        self.assertEqual(sum(e.segments for e in events_of(snaps[0])), total)
        for s in (agg, flows, counters):
            m = s.snapshot()
            self.assertGreater(len(m), 3, s.name)
            check_seq(self, m, s.name)
            self.assertIsNone(s.error, s.name)
        self.assertTrue(all(len(a.gaps) == 0 for a in agg.snapshot()))
        self.assertEqual(sum(sum(a.retransmits_by_type.values()) for a in agg.snapshot()), total)
        self.assertEqual(churn["errors"], [])
        h = d.health()
        self.assertTrue(h.serving)
        self.assertEqual(h.rules, 1 + len(churn["live"]))
        self.assertEqual(len(d.inj.ListRules(pb.ListRulesRequest(labels={"churn": "1"}), timeout=10).rules),
                         len(churn["live"]))
        measured("concurrent_subscribers", retrans_segs=retrans, stream_segs=total, events=len(events_of(snaps[0])),
                 created=churn["created"], deleted=churn["deleted"], updated=churn["updated"],
                 aggregates=len(agg.snapshot()), flow_msgs=len(flows.snapshot()),
                 counter_msgs=len(counters.snapshot()))
        for s in self.readers:
            s.cancel()
        wait_until(lambda: d.health().subscribers == 0, 10, "subscribers gone")


if __name__ == "__main__":
    main()
