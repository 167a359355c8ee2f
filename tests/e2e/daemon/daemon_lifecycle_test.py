"""Daemon e2e: rules whose state follows the kernel's (issue 10 items 1, 2, 10, 14); each test
failed before its fix.

  InterfaceGone (daemon in A, a 100 % UDP rule at e2ea's tcx ingress)
    test_deleted_interface_fails_its_rule
        The issue's repro: after `ip link del e2ea` and a new pair of the same names, the rule
        stayed ACTIVE with "tcx ingress to e2ea" listed and counted nothing; a new rule on the
        new e2ea was ACTIVE and matched 0 of 500 (the dead attachment, cached by name,
        satisfied it). Now: FAILED with the reason, the new rule really attached (the kernel's
        BPF_PROG_QUERY lists a lossd program at the new e2ea's tcx ingress) and drops.
    test_reattach_follows_the_recreated_interface
        RuleSpec.reattach: FAILED while the interface is gone, ACTIVE again on the new one,
        counters kept.
  CgroupGone
    test_removed_cgroup_fails_its_rule
        The same for a cgroup removed under its rule (ACTIVE before, counting nothing).
  LeaseDuringLongChanges (--lease 300ms)
    test_lease_is_renewed_while_a_change_holds_the_rules
        The lease was renewed under the rules' lock: a long rule change (ClearRules of rules
        on 80 interfaces holds it throughout, each tcx detach waiting for RCU: about 1 s) let
        the lease run out, and a live rule let packets pass (the data plane's lease_expired
        counter). The lease map (loss_cfg) read meanwhile must always be ahead of the clock.
  RetiredRulesForgotten (--keep-expired 2s --keep-expired-max 2)
    test_expired_rules_are_forgotten_after_the_time_bound
        Expired rules were kept until 1,024 more expired: now for --keep-expired at most, then
        gone from ListRules, GetRule and GetRuleEffect alike; and at most --keep-expired-max.
  FlowStreams
    test_watch_flows_reports_lost_closes_as_gaps
        WatchFlows had no gap reporting: closed flows its queue could not hold vanished.
    test_watch_flows_carries_closes_of_its_first_pass
        WatchFlows dropped the closes it drained in its first pass: a flow that closed
        between its subscription and its snapshot was in neither.
    test_synack_retransmits_are_attributed_per_client
        SYN-ACK events carry the listener's cookie: the per-cookie cache gave every later
        client's SYN-ACK the first client's rules.
"""
import json
import subprocess
import threading
import time

from lab import bpfquery, daemon, traffic
from lab.config import main
from lab.daemon import DaemonTestCase, StreamReader, events_of, pids_programs, rule_spec, wait_until
from lab.netns import measured


class InterfaceGone(DaemonTestCase):
    PORT = 9400

    def ingress(self, n, port=None):
        """n datagrams B -> A's e2ea; returns how many arrived."""
        lab = self.lab
        sent, got = traffic.udp_count(lab, lab.b, lab.a, lab.V4_A, port or self.PORT, 1, n)
        self.assertEqual(sent, n)
        return got

    def delete_link(self):
        self.lab.run(self.lab.a, "ip", "link", "del", self.lab.IF_A)

    def create_link(self):
        lab = self.lab
        lab.veth(lab.a, lab.IF_A, lab.b, lab.IF_B)
        lab.addresses(lab.a, lab.IF_A, lab.V4_A + "/24", lab.V6_A + "/64")
        lab.addresses(lab.b, lab.IF_B, lab.V4_B + "/24", lab.V6_B + "/64")
        lab.neighbours((lab.a, lab.IF_A, (lab.V4_A, lab.V6_A)), (lab.b, lab.IF_B, (lab.V4_B, lab.V6_B)))

    def lossd_at_tcx_ingress(self):
        """lossd's programs the kernel runs at e2ea's tcx ingress (BPF_PROG_QUERY)."""
        return set(bpfquery.tcx_ingress_programs(self.lab, self.lab.a, self.lab.IF_A)) & pids_programs(self.d.pid)

    def state(self, rid):
        return self.d.get(rid)

    def udp_rule(self, **kw):
        return self.d.create(interface=self.lab.IF_A, protocol="udp", dport=self.PORT, rate=1.0, **kw)

    def test_deleted_interface_fails_its_rule(self):
        pb, d, lab = self.pb, self.d, self.lab
        r = self.udp_rule()
        self.assertEqual(r.state, pb.RULE_STATE_ACTIVE)
        self.assertEqual(self.ingress(500), 0)
        self.assertEqual(d.get(r.id).counters.dropped_packets, 500)
        self.assertTrue(self.lossd_at_tcx_ingress(), "no lossd program at e2ea's tcx ingress")

        self.delete_link()
        self.create_link()
        failed = wait_until(lambda: (lambda g: g if g.state == pb.RULE_STATE_FAILED else None)(d.get(r.id)),
                            5, "the rule on the deleted interface to be FAILED")
        measured("interface_gone", reason=failed.reason, attachments=list(failed.attachments))
        self.assertIn("'%s'" % lab.IF_A, failed.reason)
        self.assertIn("deleted", failed.reason)
        self.assertEqual(list(failed.attachments), [], "a FAILED rule lists no attachment")
        self.assertEqual(d.health().rules, 0, "a failed rule holds no slot")
        # It drops nothing, counts nothing more, and keeps what it counted.
        self.assertEqual(self.ingress(500), 500)
        self.assertEqual(d.get(r.id).counters.dropped_packets, 500)
        self.assertEqual(d.get(r.id).counters.matched_packets, 500)

        # A new rule on the new e2ea attaches to it for real.
        r2 = self.udp_rule()
        self.assertEqual(r2.state, pb.RULE_STATE_ACTIVE)
        self.assertTrue(self.lossd_at_tcx_ingress(), "the new rule's program is not attached to the new e2ea")
        self.assertEqual(self.ingress(500), 0)
        c = d.get(r2.id).counters
        self.assertEqual((c.matched_packets, c.dropped_packets), (500, 500))
        d.delete(r2.id)
        self.assertFalse(self.lossd_at_tcx_ingress(), "deleting the last rule left its program attached")
        self.assertEqual(self.ingress(500), 500)
        self.assertEqual(d.get(r.id).state, pb.RULE_STATE_FAILED)  # kept for inspection
        d.delete(r.id)

    def test_reattach_follows_the_recreated_interface(self):
        pb, d = self.pb, self.d
        r = self.udp_rule(reattach=True)
        self.assertTrue(r.spec.reattach)
        self.assertEqual(self.ingress(300), 0)
        self.delete_link()
        failed = wait_until(lambda: (lambda g: g if g.state == pb.RULE_STATE_FAILED else None)(d.get(r.id)),
                            5, "the rule to be FAILED while its interface is gone")
        self.assertIn("waiting", failed.reason)
        self.assertEqual(d.health().rules, 1, "a rule waiting to re-attach counts against --max-rules")
        self.create_link()
        back = wait_until(lambda: (lambda g: g if g.state == pb.RULE_STATE_ACTIVE else None)(d.get(r.id)),
                          5, "the rule to re-attach to the new interface")
        measured("interface_back", reason=failed.reason, attachments=list(back.attachments))
        self.assertIn("was recreated", back.reason)
        self.assertIn("re-attached", back.reason)
        self.assertEqual(list(back.attachments), ["tcx ingress to " + self.lab.IF_A])
        self.assertTrue(self.lossd_at_tcx_ingress())
        self.assertEqual(self.ingress(300), 0)
        c = d.get(r.id).counters
        self.assertEqual((c.matched_packets, c.dropped_packets), (600, 600), "counters kept across")
        d.delete(r.id)
        self.assertEqual(self.ingress(300), 300)


class CgroupGone(DaemonTestCase):
    daemon_nsenter = True
    PORT = 9401

    def test_removed_cgroup_fails_its_rule(self):
        # The same for a cgroup target: removed, its cgroup_skb link reports no cgroup, and
        # the rule is FAILED (re-attaching to a recreated cgroup is the service targets' job).
        import os
        pb, d, lab = self.pb, self.d, self.lab
        cg = lab.make_cgroup()
        r = d.create(cgroup=cg, hook="cgroup", direction="egress", protocol="udp", dport=self.PORT, rate=1.0)
        self.assertEqual(r.state, pb.RULE_STATE_ACTIVE)
        os.rmdir(cg)
        failed = wait_until(lambda: (lambda g: g if g.state == pb.RULE_STATE_FAILED else None)(d.get(r.id)),
                            5, "the rule on the removed cgroup to be FAILED")
        measured("cgroup_gone", reason=failed.reason)
        self.assertIn("was deleted", failed.reason)
        self.assertEqual(list(failed.attachments), [])
        d.delete(r.id)


def map_of(pid, name):
    """The id of lossd pid's BPF map `name` (by the map ids in its fds)."""
    from lab.stats import fdinfo
    for mid in {int(kv["map_id"]) for kv in fdinfo(pid) if "map_id" in kv}:
        info = json.loads(subprocess.check_output(["bpftool", "-j", "map", "show", "id", str(mid)]))
        if info.get("name") == name:
            return mid
    raise AssertionError("lossd %d holds no %s map" % (pid, name))


def map_dump(mid):
    return json.loads(subprocess.check_output(["bpftool", "-j", "map", "dump", "id", str(mid)]))


def lease_expired_total(mid):
    """loss_hook_stats' lease_expired, summed over hooks and CPUs: packets a dropping rule
    matched after the lease had run out (and let pass)."""
    return sum(int(v["value"]["lease_expired"]) for e in map_dump(mid) for v in e["formatted"]["values"])


class LeaseDuringLongChanges(DaemonTestCase):
    # A short lease (renewed every 100 ms), so that a slow change outlasts it; not the
    # shortest (200 ms), which a loaded machine's scheduler can miss.
    daemon_args = ["--lease", "300ms"]
    PORT = 9410
    LINKS = 80

    def test_lease_is_renewed_while_a_change_holds_the_rules(self):
        pb, d, lab = self.pb, self.d, self.lab
        # A rule on each of 80 interfaces (tcx ingress: attaching and detaching each waits for
        # RCU), then a live rule dropping every datagram to PORT, created last: ClearRules
        # removes the rules in id order, under the rules' lock, so that one goes last.
        links = ["lk%d" % i for i in range(self.LINKS)]
        for i, name in enumerate(links):
            lab.veth(lab.a, name, lab.a, "lq%d" % i)
        for name in links:
            d.create(interface=name, protocol="udp", dport=20000, rate=0.5)
        d.create(interface=lab.IF_A, protocol="udp", dport=self.PORT, rate=1.0)
        cfg, hooks = map_of(d.pid, "loss_cfg"), map_of(d.pid, "loss_hook_stats")
        expired_before = lease_expired_total(hooks)
        samples, stop = [], threading.Event()

        def sample():  # the lease as the data plane reads it, against the same clock
            while not stop.is_set():
                until = int(map_dump(cfg)[0]["formatted"]["value"]["lease_until_ns"])
                samples.append((time.monotonic_ns(), until))
        rx = traffic.UdpReceiver(lab, lab.a, lab.V4_A, self.PORT, 7)
        tx = lab.popen(lab.b, traffic.udp_send_cmd(lab.V4_A, self.PORT, 7, 10**6, 5000), stdout=subprocess.PIPE)
        t = threading.Thread(target=sample, daemon=True)
        t.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        d.inj.ClearRules(pb.ClearRulesRequest(), timeout=300)
        clear_secs = time.monotonic() - t0
        stop.set()
        t.join(30)
        tx.kill()
        tx.wait()
        rx.finish()
        expired = lease_expired_total(hooks) - expired_before
        during = [(now, until) for now, until in samples if now <= (t0 + clear_secs) * 1e9]
        lapsed = [(now, until) for now, until in during if until <= now]
        measured("lease_during_clear", clear_secs=round(clear_secs, 3), samples=len(during),
                 lapsed_samples=len(lapsed), lease_expired_packets=expired)
        # How long the kernel takes to detach 81 programs varies by machine (here it has
        # been 11 ms and over a second): that a change several leases long never lets the
        # lease lapse is the unit test InjectorTest.TheLeaseIsRenewedWhileAChangeHoldsTheRules
        # (its detaches wait); here, the real maps and programs during a real ClearRules.
        self.assertGreater(len(during), 5)
        self.assertEqual(lapsed, [], "the lease ran out while ClearRules held the rules")
        self.assertEqual(expired, 0, "the live rule let packets pass: its lease had run out")


class RetiredRulesForgotten(DaemonTestCase):
    daemon_args = ["--keep-expired", "2s", "--keep-expired-max", "2"]

    def test_expired_rules_are_forgotten_after_the_time_bound(self):
        pb, d, lab = self.pb, self.d, self.lab
        NOT_FOUND = daemon.grpc.StatusCode.NOT_FOUND
        ids = [d.create(interface=lab.IF_A, protocol="udp", dport=9420 + i, rate=0.5, ttl_ns=10**9).id
               for i in range(3)]
        forever = d.create(interface=lab.IF_A, protocol="udp", dport=9429, rate=0.5).id
        wait_until(lambda: d.get(ids[2]).state == pb.RULE_STATE_EXPIRED, 10, "the rules to expire")
        t_expired = time.monotonic()
        listed = {r.id: r.state for r in d.inj.ListRules(pb.ListRulesRequest(), timeout=10).rules}
        measured("expired_kept", listed=sorted(listed))
        # At most --keep-expired-max: the oldest of the three is forgotten at once, everywhere.
        self.assertEqual(listed, {ids[1]: pb.RULE_STATE_EXPIRED, ids[2]: pb.RULE_STATE_EXPIRED,
                                  forever: pb.RULE_STATE_ACTIVE})
        for call, req in ((d.inj.GetRule, pb.GetRuleRequest), (d.inj.GetRuleEffect, pb.GetRuleEffectRequest)):
            with self.assertRaises(daemon.grpc.RpcError) as cm:
                call(req(id=ids[0]), timeout=10)
            self.assertEqual(cm.exception.code(), NOT_FOUND)
        self.assertEqual(d.effect(ids[2]).id, ids[2])  # kept: still inspectable
        # It lists only what the kernel still has of it: nothing (issue 25 item 10).
        self.assertEqual(list(d.get(ids[2]).attachments), [], "an expired rule lists attachments")
        self.assertEqual(list(d.get(forever).attachments), ["tcx ingress to " + lab.IF_A])
        # Then the time bound: gone within --keep-expired (2 s) plus one reaper period (1 s).
        wait_until(lambda: ids[2] not in {r.id for r in d.inj.ListRules(pb.ListRulesRequest(), timeout=10).rules},
                   6, "the expired rules to be forgotten")
        gone_after = time.monotonic() - t_expired
        measured("expired_forgotten", secs_after_expiry=round(gone_after, 2))
        for rid in ids:
            for call, req in ((d.inj.GetRule, pb.GetRuleRequest), (d.inj.GetRuleEffect, pb.GetRuleEffectRequest)):
                with self.assertRaises(daemon.grpc.RpcError) as cm:
                    call(req(id=rid), timeout=10)
                self.assertEqual(cm.exception.code(), NOT_FOUND)
        self.assertEqual(d.get(forever).state, pb.RULE_STATE_ACTIVE)
        self.assertEqual([r.id for r in d.inj.ListRules(pb.ListRulesRequest(), timeout=10).rules], [forever])


class FlowStreams(DaemonTestCase):
    SERVER = 9430
    LISTENER = 9431

    def test_watch_flows_reports_lost_closes_as_gaps(self):
        pb, d, lab = self.pb, self.d, self.lab
        f = pb.EventFilter(port=pb.PortRange(lo=self.SERVER, hi=self.SERVER))
        r = StreamReader(d.obs.WatchFlows(pb.WatchFlowsRequest(filter=[f], queue=4, interval_ns=10**9),
                                          timeout=120), "flows")
        self.readers.append(r)
        r.wait_for(lambda m: len(m) >= 1, 10, "the snapshot")
        srv = traffic.rr_server(lab, lab.b, lab.V4_B, self.SERVER)
        cli = lab.popen(lab.a, traffic.rr_cmd(lab.V4_B, self.SERVER, "--request", 64, "--response", 64,
                                              "--count", 50, "--new-conn", "--no-latencies"),
                        stdout=subprocess.PIPE)
        self.assertEqual(traffic.finish(cli)["requests"], 50)

        def total(msgs):
            closed = sum(1 for m in msgs for fl in m.flows if fl.closed)
            lost = sum(g.count for m in msgs for g in m.gaps if g.source == pb.GAP_SOURCE_SUBSCRIBER)
            return closed, lost
        msgs = r.wait_for(lambda m: sum(total(m)) >= 50, 10, "50 closes, carried or counted as lost")
        time.sleep(1.5)  # one more message: nothing counted twice
        closed, lost = total(r.snapshot())
        measured("flow_gaps", closed_carried=closed, closed_lost=lost)
        self.assertEqual(closed + lost, 50, "every closed flow is carried or counted in a Gap")
        self.assertGreater(lost, 0)
        self.assertLessEqual(closed, 4 * len(r.snapshot()))
        srv.kill()
        with self.assertRaises(daemon.grpc.RpcError) as cm:
            list(d.obs.WatchFlows(pb.WatchFlowsRequest(queue=1 << 20), timeout=10))
        self.assertEqual(cm.exception.code(), daemon.grpc.StatusCode.INVALID_ARGUMENT)

    def test_watch_flows_carries_closes_of_its_first_pass(self):
        # WatchFlows subscribed to closes, took its snapshot, then drained the closes and
        # dropped those of the first pass: a flow that closed between the subscription and
        # the snapshot was in neither. Ground truth: a stream opened before the churn. For
        # each short stream, every flow that closed after its first message's time (taken
        # after it subscribed) must come in it as closed. 200 held flows make the snapshot
        # take a while; a churn of short connections closes flows meanwhile.
        pb, d, lab = self.pb, self.d, self.lab
        HOLD, CHURN = 9432, 9433
        held = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, HOLD, 1000, 10, conns=200, hold=True)
        try:
            held.wait_sent()
            port = pb.EventFilter(port=pb.PortRange(lo=CHURN, hi=CHURN))
            truth = StreamReader(d.obs.WatchFlows(pb.WatchFlowsRequest(filter=[port], interval_ns=10**8),
                                                  timeout=120), "truth")
            self.readers.append(truth)
            truth.wait_for(lambda m: len(m) >= 1, 10, "the snapshot")
            srv = traffic.rr_server(lab, lab.b, lab.V4_B, CHURN)
            cli = lab.popen(lab.a, traffic.rr_cmd(lab.V4_B, CHURN, "--request", 64, "--response", 64,
                                                  "--count", 0, "--seconds", 6, "--new-conn", "--no-latencies"),
                            stdout=subprocess.PIPE)
            time.sleep(0.5)
            mono_minus_unix = time.monotonic_ns() - time.time_ns()
            streams = []
            while cli.poll() is None and len(streams) < 30:
                r = StreamReader(d.obs.WatchFlows(pb.WatchFlowsRequest(filter=[port], interval_ns=10**8),
                                                  timeout=60), "short")
                self.readers.append(r)
                streams.append(r.wait_for(lambda m: len(m) >= 3, 10, "three messages"))
                r.cancel()
            traffic.finish(cli)
            srv.kill()
            time.sleep(0.5)
        finally:
            held.close()
        closes = {fl.cookie: fl.opened_mono_ns + fl.duration_ns
                  for m in truth.snapshot() for fl in m.flows if fl.closed}
        missed, window = [], 0
        for msgs in streams:
            t1 = msgs[0].time_unix_ns + mono_minus_unix
            t2 = msgs[1].time_unix_ns + mono_minus_unix
            got = {fl.cookie for m in msgs[:3] for fl in m.flows if fl.closed}
            due = {c for c, t in closes.items() if t1 + 200_000 < t < t2 - 50_000_000}
            early = {c for c, t in closes.items() if t1 + 200_000 < t < msgs[0].time_unix_ns + mono_minus_unix + 5_000_000}
            window += len(early)
            missed += sorted(due - got)
        measured("flows_first_pass", streams=len(streams), closes=len(closes),
                 closed_within_5ms_of_first_message=window, missed=len(missed))
        self.assertGreater(len(closes), 100, "the churn closed too few flows to show anything")
        self.assertEqual(missed, [], "closed flows a stream never carried")

    def test_synack_retransmits_are_attributed_per_client(self):
        pb, d, lab = self.pb, self.d, self.lab
        # Two rules at A's egress, each dropping the first SYN-ACK of the clients of one
        # source-port range; the server in A resends each, and both resends carry the
        # listener's cookie.
        rules = [d.create(interface=lab.IF_A, direction="egress", protocol="tcp", sport=self.LISTENER,
                          dport=(lo, lo + 999), tcp_flags="syn,ack", first_k=1).id for lo in (40000, 41000)]
        w = StreamReader(d.obs.WatchRetransmits(pb.WatchRetransmitsRequest(), timeout=120), "rtx")
        self.readers.append(w)
        srv = traffic.rr_server(lab, lab.a, lab.V4_A, self.LISTENER)
        for sport in (40500, 41500):
            cli = lab.popen(lab.b, traffic.rr_cmd(lab.V4_A, self.LISTENER, "--request", 64, "--response", 64,
                                                  "--count", 1, "--no-latencies", "--sport", sport),
                            stdout=subprocess.PIPE)
            self.assertEqual(traffic.finish(cli)["requests"], 1)
        srv.kill()
        evs = w.wait_for(lambda m: {e.tuple.remote_port for e in events_of(m)} >= {40500, 41500}, 15,
                         "SYN-ACK retransmits to both clients")

        def synacks(msgs):
            return [sum(1 for e in events_of(msgs) if e.type == pb.RETRANSMIT_TYPE_SYNACK
                        and e.tuple.remote_port == port) for port in (40500, 41500)]
        # The stream and the effect tracker are two subscribers of one hub: a late resend (the
        # server resends a SYN-ACK again when the client's ACK is slow) may have reached one
        # and not yet the other. Read both until they agree (or the time is up: then the
        # assertion below says how they differ).
        end = time.monotonic() + 5
        while True:
            effects = {rid: dict(d.effect(rid).retransmitted_segments) for rid in rules}
            evs = w.snapshot()
            if synacks(evs) == [effects[r].get("synack", 0) for r in rules] or time.monotonic() > end:
                break
            time.sleep(0.2)
        by_client = {}
        for e in events_of(evs):
            if e.type == pb.RETRANSMIT_TYPE_SYNACK:
                by_client.setdefault(e.tuple.remote_port, set()).update(e.rule_ids)
        measured("synack_attribution", rule_ids_by_client={k: sorted(v) for k, v in by_client.items()},
                 effects=effects)
        self.assertEqual(by_client, {40500: {rules[0]}, 41500: {rules[1]}})
        for rid in rules:
            self.assertGreaterEqual(effects[rid].get("synack", 0), 1, effects)
        # Each rule's SYN-ACKs are its own clients' only.
        self.assertEqual([effects[rules[0]]["synack"], effects[rules[1]]["synack"]], synacks(evs))


if __name__ == "__main__":
    main()
