"""Client against FakeLossd (tests/fake_lossd.py), a test double of the daemon."""

import os
import tempfile
import threading
import time
import unittest

import grpc

import support
from fake_lossd import FakeLossd
from support import FakeLossdTestCase
from lossd_client import Client, Gap, LossdError, LossdInputError, RetransmitEvent, rule_spec


class ClientTest(FakeLossdTestCase):

    # ----------------------------------------------------------- start-up --

    def test_add_rule_while_lossd_is_loading(self):
        # lossd serves before its injector is loaded; the call waits for it (server side):
        # one call, no retry loop in the client.
        self.fake.injector_ready_at = time.monotonic() + 0.6
        self.assertEqual(self.c.health().components["injector"], "LOADING")
        r = self.c.add_rule(iface="eth0", dport=8080, rate="1%")
        self.assertEqual(r.id, 1)
        self.assertEqual(len(self.fake.calls("CreateRule")), 1)
        self.assertEqual(self.c.health().components, {"injector": "READY", "observer": "READY"})

    def test_loading_past_the_timeout_is_deadline_exceeded(self):
        self.fake.injector_ready_at = time.monotonic() + 30
        t0 = time.monotonic()
        with self.assertRaises(LossdError) as cm:
            self.c.add_rule(iface="eth0", dport=8080, rate="1%", timeout=0.7)
        self.assertLess(time.monotonic() - t0, 3)
        self.assertEqual(cm.exception.code, "DEADLINE_EXCEEDED")
        self.assertEqual(cm.exception.reason, "PART_LOADING")  # the detail, not the message
        self.assertEqual(cm.exception.metadata, {"part": "injector", "state": "loading"})
        self.assertIn("wait_ready", cm.exception.hint)

    def test_wait_ready(self):
        self.fake.injector_ready_at = time.monotonic() + 0.4
        h = self.c.wait_ready(("injector", "observer"), timeout=5)
        self.assertEqual(h.components["injector"], "READY")
        self.fake.injector_ready_at = time.monotonic() + 30
        with self.assertRaises(LossdError) as cm:
            self.c.wait_ready(timeout=0.3)
        self.assertEqual(cm.exception.code, "DEADLINE_EXCEEDED")

    # ------------------------------------------------------------- rules --

    def test_add_rule_sends_the_spec_and_returns_the_rule(self):
        r = self.c.add_rule(iface="eth0", dport=8080, rate="1%", ttl="30s", protocol="tcp",
                            labels={"who": "test"})
        req = self.fake.calls("CreateRule")[-1]
        self.assertEqual(req.spec.interface, "eth0")
        self.assertEqual(req.spec.loss.bernoulli.rate, 0.01)
        self.assertEqual(req.spec.ttl_ns, 30 * 10**9)
        self.assertEqual(req.spec.direction, self.pb2.DIRECTION_INGRESS)
        self.assertEqual((req.spec.match.dport.lo, req.spec.match.dport.hi), (8080, 8080))
        self.assertEqual(r.id, 1)
        self.assertEqual(r.state, "active")
        self.assertEqual(r.hook, "tc")           # resolved by the daemon
        self.assertEqual(r.attachments, ("tcx ingress to eth0",))
        self.assertEqual(r.labels, {"who": "test"})
        self.assertGreater(r.expires_unix_ns, r.created_unix_ns)

    def test_bad_input_makes_no_call(self):
        with self.assertRaises(LossdInputError) as cm:
            self.c.add_rule(iface="eth0", rate="5")
        self.assertTrue(cm.exception.local)
        self.assertEqual(self.fake.calls("CreateRule"), [])

    def test_daemon_errors_carry_code_and_message(self):
        with self.assertRaises(LossdError) as cm:
            self.c.add_rule(iface="missing0", rate=0.1)
        e = cm.exception
        self.assertEqual(e.code, "NOT_FOUND")
        self.assertEqual(e.message, "interface missing0: no such interface")
        self.assertFalse(e.local)
        self.assertEqual(str(e), "NOT_FOUND: interface missing0: no such interface")
        with self.assertRaises(LossdError) as cm:
            self.c.delete_rule(42)
        self.assertEqual(cm.exception.code, "NOT_FOUND")
        for _ in range(4):
            self.c.add_rule(iface="eth0", rate=0.1)
        with self.assertRaises(LossdError) as cm:
            self.c.add_rule(iface="eth0", rate=0.1)
        self.assertEqual(cm.exception.code, "RESOURCE_EXHAUSTED")

    def test_get_list_delete_clear(self):
        a = self.c.add_rule(iface="eth0", rate=0.1, labels="team=a")
        b = self.c.add_rule(iface="eth1", rate=0.2, labels={"team": "b"})
        self.assertEqual(self.c.get_rule(a.id).interface, "eth0")
        self.assertEqual([r.id for r in self.c.list_rules()], [a.id, b.id])
        self.assertEqual([r.id for r in self.c.list_rules(labels="team=b")], [b.id])
        self.fake.set_counters(a.id, matched=1000, dropped=100)
        gone = self.c.delete_rule(a)                 # a Rule works as an id
        self.assertEqual(gone.counters.dropped_segments, 100)
        self.assertEqual(self.c.clear(), 1)
        self.assertEqual(self.c.list_rules(), [])

    def test_update_rule(self):
        r = self.c.add_rule(iface="eth0", rate=0.1)
        self.fake.set_counters(r.id, 100, 10)
        u = self.c.update_rule(r, iface="eth0", rate="2%", direction="egress")
        self.assertEqual(u.rate, 0.02)
        self.assertEqual(u.direction, "egress")
        self.assertEqual(u.counters.matched_segments, 0)
        self.assertEqual(self.fake.calls("UpdateRule")[-1].id, r.id)

    def test_add_rules(self):
        rules = self.c.add_rules([rule_spec("eth0", rate=0.1), {"iface": "eth1", "every": 3}])
        self.assertEqual([r.interface for r in rules], ["eth0", "eth1"])
        self.assertEqual(rules[1].loss.n, 3)
        with self.assertRaises(LossdError) as cm:
            self.c.add_rules([{"iface": "eth2", "rate": 0.1}, {"iface": "missing1", "rate": 0.1}])
        self.assertEqual(cm.exception.code, "NOT_FOUND")
        self.assertEqual(len(self.c.list_rules()), 2)   # atomic: none created
        out = self.c.add_rules([{"iface": "missing1", "rate": 0.1}, {"iface": "eth2", "rate": 0.1}],
                               atomic=False)
        self.assertIsNone(out[0][0])
        self.assertIn("missing1", out[0][1])
        self.assertEqual((out[1][0].interface, out[1][1]), ("eth2", ""))

    def test_rule_effect(self):
        r = self.c.add_rule(iface="eth0", rate="1%")
        self.fake.set_counters(r.id, matched=100000, dropped=1000,
                               retrans={"fast": 900, "rto": 60, "tlp": 40}, flows=3)
        e = self.c.rule_effect(r)
        self.assertEqual(e.configured_rate, 0.01)
        self.assertEqual(e.measured_rate, 0.01)
        self.assertTrue(e.configured_within_ci)
        self.assertLess(e.rate_ci_low, 0.01)
        self.assertGreater(e.rate_ci_high, 0.01)
        self.assertEqual(e.retransmitted_segments, {"fast": 900, "rto": 60, "tlp": 40})
        self.assertEqual(e.retransmitted_total, 1000)
        self.assertEqual(e.flows, 3)
        self.assertEqual(e.counters.dropped_segments, 1000)

    def test_watch_counters(self):
        r = self.c.add_rule(iface="eth0", rate="1%")
        with self.c.watch_counters([r], interval="100ms") as s:
            u = next(s)
            self.assertEqual([x.id for x in u.rules], [r.id])
            self.assertEqual(next(s).seq, u.seq + 1)
        req = self.fake.calls("WatchRuleCounters")[-1]
        self.assertEqual((list(req.ids), req.interval_ns), ([r.id], 10**8))

    # ---------------------------------------------------------- observer --

    def test_watch_retransmits_filters_gaps_and_events(self):
        self.fake.gap_on_subscribe = 7
        s = self.c.watch_retransmits(rule=2, types=["fast", "rto"])
        first = next(s)
        self.assertIsInstance(first, Gap)
        self.assertEqual((first.source, first.count, first.seq), ("kernel_ring", 7, 1))
        self.wait_for(lambda: self.fake.subscribers)
        self.fake.publish("event", self.fake.event(rid=1, type_="fast"))      # other rule
        self.fake.publish("event", self.fake.event(rid=2, type_="tlp"))       # other type
        self.fake.publish("event", self.fake.event(rid=2, type_="rto", segments=3))
        ev = next(s)
        self.assertIsInstance(ev, RetransmitEvent)
        self.assertEqual((ev.type, ev.segments, ev.rule_ids, ev.seq, ev.outcome), ("rto", 3, (2,), 2, "sent"))
        self.assertTrue(ev.counted)
        self.assertEqual(ev.state.cwnd, 10)
        req = self.fake.calls("WatchRetransmits")[-1]
        self.assertEqual(len(req.allow), 1)
        self.assertEqual(req.allow[0].rule_id, 2)
        self.assertEqual(list(req.allow[0].types), [self.pb2.RETRANSMIT_TYPE_FAST, self.pb2.RETRANSMIT_TYPE_RTO])
        s.close()
        self.assertRaises(StopIteration, next, s)
        self.wait_for(lambda: not self.fake.subscribers)    # the call was cancelled

    def test_watch_retransmits_allow_deny_lists(self):
        s = self.c.watch_retransmits(allow=[{"port": 8080}, {"port": 9090}], deny={"types": "tlp"},
                                     queue=100)
        self.wait_for(lambda: self.fake.subscribers)
        self.fake.publish("event", self.fake.event(lport=9090, type_="tlp"))
        self.fake.publish("event", self.fake.event(lport=7070, type_="fast"))
        self.fake.publish("event", self.fake.event(lport=9090, type_="fast"))
        ev = next(s)
        self.assertEqual((ev.tuple.local_port, ev.type), (9090, "fast"))
        s.close()
        req = self.fake.calls("WatchRetransmits")[-1]
        self.assertEqual((len(req.allow), len(req.deny), req.queue), (2, 1, 100))
        with self.assertRaises(LossdInputError):
            self.c.watch_retransmits(allow=[{"port": 1}], port=2)

    def test_watch_retransmits_batches_come_out_item_by_item_in_order(self):
        s = self.c.watch_retransmits()
        self.wait_for(lambda: self.fake.subscribers)
        for port in range(1, 51):
            self.fake.publish("event", self.fake.event(lport=port))
        got = [next(s) for _ in range(50)]
        self.assertEqual([e.tuple.local_port for e in got], list(range(1, 51)))
        self.assertEqual([e.seq for e in got], list(range(1, 51)))
        s.close()

    def test_stream_error_is_a_lossd_error(self):
        s = self.c.watch_retransmits(port=1)
        self.wait_for(lambda: self.fake.subscribers)
        self.fake.publish("abort", (grpc.StatusCode.RESOURCE_EXHAUSTED, "too many subscribers"))
        with self.assertRaises(LossdError) as cm:
            next(s)
        self.assertEqual((cm.exception.code, cm.exception.message),
                         ("RESOURCE_EXHAUSTED", "too many subscribers"))

    def test_stream_closes_when_the_loop_breaks(self):
        def consume():
            for _ in self.c.watch_retransmits(port=1):
                break
        t = threading.Thread(target=consume)
        t.start()
        self.wait_for(lambda: self.fake.subscribers)
        self.fake.publish("event", self.fake.event(lport=1))
        t.join(5)
        self.assertFalse(t.is_alive())
        import gc
        gc.collect()
        self.wait_for(lambda: not self.fake.subscribers)

    def test_aggregates(self):
        with self.c.aggregates(window="200ms") as s:
            self.wait_for(lambda: self.fake.subscribers)
            self.fake.publish("event", self.fake.event(rid=5, type_="fast", segments=2, cookie=9))
            self.fake.publish("gap", self.pb2.Gap(source=self.pb2.GAP_SOURCE_DAEMON_HUB, count=1))
            total, gaps = 0, []
            for a in s:
                total += a.retransmits_by_type.get("fast", 0)
                gaps += a.gaps
                if total and gaps:
                    break
            self.assertEqual(a.window_ns, 2 * 10**8)
            self.assertEqual(total, 2)
            self.assertEqual(gaps[0].source, "daemon_hub")
        self.assertEqual(self.fake.calls("WatchAggregates")[-1].window_ns, 2 * 10**8)

    def test_flows(self):
        r = self.c.add_rule(iface="eth0", rate="1%")
        self.fake.set_counters(r.id, 10, 1, flows=2)
        fl = self.c.flows(port=8080)
        self.assertEqual(len(fl), 2)
        self.assertEqual(fl[0].retransmitted_segments, {"fast": 1})
        self.assertEqual(fl[0].ca_time_ns, {"open": 10**9})
        self.assertEqual(self.fake.calls("ListFlows")[-1].filter[0].port.lo, 8080)
        with self.c.watch_flows(interval="100ms") as s:
            snap = next(s)
            self.assertTrue(snap.snapshot)
            self.assertEqual(len(snap.flows), 2)
            self.assertFalse(next(s).snapshot)

    # ------------------------------------------------------------ system --

    def test_system(self):
        caps = self.c.capabilities()
        self.assertEqual(caps.kernel, "6.1.0-fake")
        self.assertFalse(caps.injector_hooks[1].available)
        self.assertIn("veth", caps.injector_hooks[1].reason)
        h = self.c.health()
        self.assertTrue(h.serving)
        self.assertEqual(self.c.version().api, "lossd.v1")
        self.assertEqual(self.c.check().version, "0.0.0-fake")

    def test_context_manager(self):
        with Client(self.fake.target) as c:
            self.assertTrue(c.health().serving)


class ConstructionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        support.stubs()

    def test_targets_and_tls_options(self):
        with Client() as c:
            self.assertEqual(c.target, "unix:///run/lossd/lossd.sock")
        with Client("lossd.example:50051", tls=True, server_name="lossd") as c:
            self.assertEqual(c.target, "lossd.example:50051")
        with self.assertRaisesRegex(LossdInputError, "both cert= and key="):
            Client("h:1", tls=True, cert="/x.pem")
        with self.assertRaisesRegex(LossdInputError, "cannot read the CA file"):
            Client("h:1", ca="/nonexistent/ca.pem")
        with self.assertRaisesRegex(LossdInputError, "neither a socket path nor host:port"):
            Client("localhost")


class UnreachableTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        support.stubs()

    def test_missing_socket(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "lossd.sock")
            with Client(path) as c:
                t0 = time.monotonic()
                with self.assertRaises(LossdError) as cm:
                    c.check()
                self.assertLess(time.monotonic() - t0, 3)      # fails fast
            e = cm.exception
            self.assertEqual(e.code, "UNAVAILABLE")
            self.assertIn("no such socket", e.hint)
            self.assertIn(path, str(e))

    def test_refused_tcp(self):
        with Client("127.0.0.1:1", timeout=2) as c:
            with self.assertRaises(LossdError) as cm:
                c.list_rules()
        self.assertEqual(cm.exception.code, "UNAVAILABLE")
        self.assertIn("127.0.0.1:1", str(cm.exception))

    def test_stream_on_missing_socket(self):
        with Client("/nonexistent/lossd.sock") as c:
            s = c.watch_retransmits()
            with self.assertRaises(LossdError) as cm:
                next(s)
        self.assertEqual(cm.exception.code, "UNAVAILABLE")


if __name__ == "__main__":
    unittest.main()
