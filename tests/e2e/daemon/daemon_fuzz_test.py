"""Daemon e2e 8: structured random requests against a real daemon (issue 10, "Tests that keep
it so"). One daemon in namespace A (--max-rules 64); its only interfaces are lo and the lab's
veth, so whatever rule the fuzzer manages to create drops only lab traffic.

  test_random_requests
      N (default 3000; LOSSD_FUZZ_N) requests drawn from a seeded generator (printed;
      LOSSD_FUZZ_SEED replays one): rule specs with random targets, hooks, directions,
      matches, loss models, ttls, priorities, labels and flags, alone, in batches and as
      updates; ids (existing and random) for Get/Update/Delete/GetRuleEffect; ListRules label
      selectors; ListFlows/WatchFlows/WatchRetransmits filters, queues, intervals and windows;
      WatchRuleCounters ids and intervals; ClearRules; and raw random bytes to every method.
      Every answer is OK or a documented code (INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
      PERMISSION_DENIED, FAILED_PRECONDITION, RESOURCE_EXHAUSTED) with a non-empty message of
      bounded size; raw bytes may also get gRPC's own UNIMPLEMENTED with no message (the
      library's answer to bytes it cannot parse, grpc/grpc#30454); a stream that was accepted
      may end by the client's own short deadline. Afterwards the daemon is alive, and the
      rules ListRules shows as ACTIVE are exactly the live entries of its loss_rules map.
"""
import os
import random
import string
import time

from lab import daemon as lab_daemon
from lab.config import main
from lab.netns import log, measured
from lab.daemon import DaemonTestCase, active_rule_slots, wait_until


DOCUMENTED = {"OK", "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED",
              "FAILED_PRECONDITION", "RESOURCE_EXHAUSTED"}
MAX_MESSAGE = 4096  # error messages quote their input bounded (Shown)

METHODS = ["/lossd.v1.Injector/" + m for m in
           ("CreateRule", "CreateRules", "UpdateRule", "DeleteRule", "GetRule", "ListRules",
            "ClearRules", "GetRuleEffect")] + \
          ["/lossd.v1.Observer/ListFlows", "/lossd.v1.System/GetCapabilities", "/lossd.v1.System/GetHealth",
           "/lossd.v1.System/GetVersion"] + \
          ["/lossd.v1.Scenarios/" + m for m in ("RunScenario", "ListScenarios", "GetScenario", "AbortScenario")]
STREAMS = ["/lossd.v1.Injector/WatchRuleCounters", "/lossd.v1.Observer/WatchRetransmits",
           "/lossd.v1.Observer/WatchFlows", "/lossd.v1.Observer/WatchAggregates"]


class Gen:
    """The random parts of requests."""

    def __init__(self, rng, pb, ifname):
        self.r = rng
        self.pb = pb
        self.ifname = ifname

    def pick(self, *xs):
        return self.r.choice(xs)

    def text(self, n=None):
        n = self.r.randint(0, 40) if n is None else n
        alphabet = string.printable + "äé€\u2028\U0001f600/.-:%\\"
        return "".join(self.r.choice(alphabet) for _ in range(n))

    def u32(self):
        return self.pick(0, 1, 2, 64, 65535, 65536, 2**31 - 1, 2**32 - 1, self.r.randint(0, 2**32 - 1))

    def u64(self):
        return self.pick(0, 1, 10**8, 10**9, 3600 * 10**9, 2**63, 2**64 - 1, self.r.randint(0, 2**64 - 1))

    def double(self):
        return self.pick(0.0, 1.0, 0.01, -0.5, 1.5, float("nan"), float("inf"), -float("inf"), 1e-12,
                         self.r.random())

    def cidr(self):
        return self.pick("", "192.0.2.2", "192.0.2.0/24", "0.0.0.0/0", "::/0", "2001:db8:e2e::2/128",
                         "10.0.0.1/33", "::ffff:192.0.2.2", "1.2.3", "fe80::1%e2ea", "x" * 300,
                         "\u00e9" * 100, "1" + "\u20ac" * 50,  # quoted in part: cut inside a character?
                         self.text(), "%d.%d.%d.%d/%d" % tuple(self.r.randint(0, 300) for _ in range(5)))

    def port(self):
        pr = self.pb.PortRange()
        kind = self.r.randint(0, 3)
        if kind == 1:
            pr.lo = pr.hi = self.r.randint(1, 65535)
        elif kind == 2:
            pr.lo, pr.hi = self.u32(), self.u32()
        elif kind == 3:
            pr.lo = self.r.randint(1, 65535)
        return pr

    def spec(self):
        """Half the time a plausible rule with at most one hostile field, else hostile throughout."""
        if self.r.random() < 0.5:
            return self.hostile_spec()
        pb, r = self.pb, self.r
        s = pb.RuleSpec(interface=self.ifname, direction=self.pick(0, 1), priority=r.randint(0, 100))
        s.match.protocol = self.pick("tcp", "udp", "")
        if r.random() < 0.8:
            s.match.dport.lo = s.match.dport.hi = r.randint(1024, 65535)
        s.loss.bernoulli.rate = r.random() * 0.05
        s.ttl_ns = self.pick(0, 0, 10**9, 600 * 10**9)
        if r.random() < 0.3:
            s.labels["sweep"] = self.text(8)
        if r.random() < 0.7:
            h = self.hostile_spec()
            field = self.pick("interface", "cgroup", "hook", "direction", "match", "loss", "priority",
                              "ttl_ns", "per_segment", "labels", "force")
            if field in ("match", "loss", "labels"):
                s.ClearField(field)
                if field == "labels":
                    s.labels.update(h.labels)
                else:
                    getattr(s, field).CopyFrom(getattr(h, field))
            else:
                setattr(s, field, getattr(h, field))
        return s

    def hostile_spec(self):
        pb, r = self.pb, self.r
        s = pb.RuleSpec()
        s.interface = self.pick(self.ifname, self.ifname, self.ifname, "", "lo", "nope0", "x" * 16,
                                self.text(), "y" * 5000, "\u00e9" * 40)
        if r.random() < 0.15:
            s.cgroup = self.pick("/", "t", "t/../t", "/sys/fs/cgroup", "../../etc", self.text(), "z" * 3000)
        s.hook = self.pick(0, 0, 1, 2, 3, 4, -1, 1000)
        s.direction = self.pick(0, 0, 1, 2, 3, -7)
        m = s.match
        if r.random() < 0.5:
            m.src = self.cidr()
        if r.random() < 0.5:
            m.dst = self.cidr()
        if r.random() < 0.5:
            m.sport.CopyFrom(self.port())
        if r.random() < 0.7:
            m.dport.CopyFrom(self.port())
        m.protocol = self.pick("", "tcp", "udp", "icmp", "icmpv6", "6", "17", "256", "-1", "TCP", self.text(5))
        m.family = self.pick(0, 0, 4, 6, 5, 2**32 - 1)
        if r.random() < 0.2:
            m.tcp_flags = self.pick("syn,!ack", "syn", "!syn", "fin|rst", "bogus", "syn,syn,!syn", self.text())
        m.payload = self.pick(0, 1, 2, 3)
        model = r.randint(0, 5)
        if model == 1:
            s.loss.bernoulli.rate = self.double()
        elif model == 2:
            ge = s.loss.gilbert_elliott
            ge.p, ge.r, ge.bad_loss, ge.good_loss = (self.double() for _ in range(4))
        elif model == 3:
            s.loss.every_nth = self.u32()
        elif model == 4:
            s.loss.first_k = self.u32()
        elif model == 5:
            s.loss.bernoulli.rate = r.random() * 0.05
        if r.random() < 0.3:
            s.loss.seed = self.u64()
        s.priority = self.u32()
        s.ttl_ns = self.pick(0, 10**9, 60 * 10**9, self.u64())
        s.per_segment = r.random() < 0.1
        s.force = r.random() < 0.2
        for _ in range(self.pick(0, 0, 1, 3, 40)):
            s.labels[self.text(self.pick(1, 8, 300))] = self.text(self.pick(0, 8, 300))
        return s

    def scenario(self):
        """A scenario: half the time plausible (a good name, short steps, spec() rules), else
        hostile in its shape."""
        pb, r = self.pb, self.r
        if r.random() < 0.5:
            sc = pb.Scenario(name="fz")
            for _ in range(self.pick(1, 1, 2, 3)):
                st = sc.steps.add(duration_ns=self.pick(10**6, 5 * 10**7, 2 * 10**8))
                for _ in range(self.pick(0, 1, 1, 2)):
                    st.rules.add().CopyFrom(self.spec())
            return sc
        sc = pb.Scenario(name=self.pick("fz", "fz-1.a_b", "", "a b", "x" * 65, self.text()))
        for _ in range(self.pick(0, 1, 2, 3, 65)):
            st = sc.steps.add(name=self.pick("", "s", self.text(), "y" * 70),
                              duration_ns=self.pick(10**6, 5 * 10**7, 2 * 10**8, 0, 999_999, self.u64()))
            for _ in range(self.pick(0, 1, 2, 65)):
                st.rules.add().CopyFrom(self.spec())
        if r.random() < 0.3:
            sc.guard.stall_ns = self.pick(0, 10**6, 5 * 10**8, self.u64())
            sc.guard.rtos, sc.guard.rtos_window_ns = self.pick(0, 5, 64, self.u32()), self.pick(0, 10**9, self.u64())
        sc.continue_on_guard = r.random() < 0.5
        return sc

    def event_filter(self):
        pb, r = self.pb, self.r
        f = pb.EventFilter()
        if r.random() < 0.5:
            f.addr = self.cidr()
        if r.random() < 0.5:
            f.port.CopyFrom(self.port())
        if r.random() < 0.3:
            f.cgroup_id = self.u64()
        for _ in range(self.pick(0, 0, 1, 3, 100)):
            f.types.append(self.pick(1, 2, 5, 8, 0, 9, -3, 2**31 - 1))
        if r.random() < 0.2:
            f.rule_id = self.u32()
        return f

    def filters(self):
        return [self.event_filter() for _ in range(self.pick(0, 0, 1, 2, 5, 2000))]


class DaemonFuzz(DaemonTestCase):
    daemon_args = ["--max-rules", "64"]

    def test_random_requests(self):
        pb, d = self.pb, self.d
        grpc = lab_daemon.grpc
        seed = int(os.environ.get("LOSSD_FUZZ_SEED") or random.SystemRandom().randrange(2**32))
        n = int(os.environ.get("LOSSD_FUZZ_N") or 3000)
        log("fuzz seed %d (replay: LOSSD_FUZZ_SEED=%d), %d requests" % (seed, seed, n))
        rng = random.Random(seed)
        g = Gen(rng, pb, self.lab.IF_A)
        ch = d.channel
        raw = {m: ch.unary_unary(m, request_serializer=None, response_deserializer=None) for m in METHODS}
        raw_streams = {m: ch.unary_stream(m, request_serializer=None, response_deserializer=None)
                       for m in STREAMS}
        scenarios = lab_daemon.pbg.ScenariosStub(ch)
        ids = []
        runs = []
        codes = {}
        bad = []
        t0 = time.monotonic()

        def known_id():
            return rng.choice(ids) if ids and rng.random() < 0.7 else g.u32()

        def check(what, req, code, details, raw_bytes=False, stream=False):
            name = code.name
            codes[name] = codes.get(name, 0) + 1
            ok = name in DOCUMENTED
            if raw_bytes and name == "UNIMPLEMENTED" and not details:
                ok = True  # gRPC's own answer to bytes it cannot parse (grpc/grpc#30454)
            if stream and name == "DEADLINE_EXCEEDED":
                ok = True  # an accepted stream, ended by our own short deadline
            elif name != "OK" and not (raw_bytes and name == "UNIMPLEMENTED") and not details:
                ok = False
            if details and len(details) > MAX_MESSAGE:
                ok = False
            if not ok:
                bad.append((what, name, (details or "")[:300], str(req)[:300]))

        def unary(what, fn, req):
            try:
                resp = fn(req, timeout=30)
                if what == "CreateRule":
                    ids.append(resp.id)
                elif what == "RunScenario" and resp.id:
                    runs.append(resp.id)
                elif what == "CreateRules":
                    ids.extend(x.id for x in resp.rules)
                check(what, req, grpc.StatusCode.OK, "")
            except grpc.RpcError as e:
                check(what, req, e.code(), e.details())

        def first_of_stream(what, call, req, raw_bytes=False):
            try:
                for _ in call:
                    break
                check(what, req, grpc.StatusCode.OK, "", raw_bytes=raw_bytes, stream=True)
            except grpc.RpcError as e:
                check(what, req, e.code(), e.details(), raw_bytes=raw_bytes, stream=True)
            finally:
                call.cancel()

        for i in range(n):
            k = rng.random()
            if k < 0.30:
                unary("CreateRule", d.inj.CreateRule, pb.CreateRuleRequest(spec=g.spec()))
            elif k < 0.36:
                req = pb.CreateRulesRequest(specs=[g.spec() for _ in range(g.pick(0, 1, 3, 8))],
                                            atomic=rng.random() < 0.5)
                unary("CreateRules", d.inj.CreateRules, req)
            elif k < 0.44:
                unary("UpdateRule", d.inj.UpdateRule, pb.UpdateRuleRequest(id=known_id(), spec=g.spec()))
            elif k < 0.50:
                unary("DeleteRule", d.inj.DeleteRule, pb.DeleteRuleRequest(id=known_id()))
            elif k < 0.55:
                unary("GetRule", d.inj.GetRule, pb.GetRuleRequest(id=known_id()))
            elif k < 0.59:
                unary("GetRuleEffect", d.inj.GetRuleEffect, pb.GetRuleEffectRequest(id=known_id()))
            elif k < 0.63:
                req = pb.ListRulesRequest()
                for _ in range(g.pick(0, 1, 2, 40)):
                    req.labels[g.text(g.pick(1, 300))] = g.text()
                unary("ListRules", d.inj.ListRules, req)
            elif k < 0.6403:  # rarely: the rules left at the end are the consistency check's
                unary("ClearRules", d.inj.ClearRules, pb.ClearRulesRequest())
            elif k < 0.68:
                unary("ListFlows", d.obs.ListFlows, pb.ListFlowsRequest(filter=g.filters()))
            elif k < 0.71:
                req = pb.WatchRuleCountersRequest(ids=[known_id() for _ in range(g.pick(0, 1, 3))],
                                                  interval_ns=g.pick(0, 1, 10**8, g.u64()))
                first_of_stream("WatchRuleCounters", d.inj.WatchRuleCounters(req, timeout=0.5), req)
            elif k < 0.74:
                req = pb.WatchFlowsRequest(filter=g.filters(), interval_ns=g.pick(0, 1, 10**8, g.u64()))
                first_of_stream("WatchFlows", d.obs.WatchFlows(req, timeout=0.5), req)
            elif k < 0.76:
                req = pb.WatchRetransmitsRequest(allow=g.filters(), deny=g.filters(), queue=g.u32())
                first_of_stream("WatchRetransmits", d.obs.WatchRetransmits(req, timeout=0.2), req)
            elif k < 0.77:
                req = pb.WatchAggregatesRequest(window_ns=g.pick(0, 1, 10**8, g.u64()))
                first_of_stream("WatchAggregates", d.obs.WatchAggregates(req, timeout=0.2), req)
            elif k < 0.79:
                j = rng.random()
                run_id = rng.choice(runs) if runs and rng.random() < 0.7 else g.u64()
                if j < 0.6:
                    unary("RunScenario", scenarios.RunScenario,
                          pb.RunScenarioRequest(scenario=g.scenario(), dry_run=rng.random() < 0.7))
                elif j < 0.7:
                    unary("ListScenarios", scenarios.ListScenarios, pb.ListScenariosRequest())
                elif j < 0.85:
                    unary("GetScenario", scenarios.GetScenario, pb.GetScenarioRequest(id=run_id))
                else:
                    unary("AbortScenario", scenarios.AbortScenario, pb.AbortScenarioRequest(id=run_id))
            elif k < 0.81:
                m = rng.choice(STREAMS)
                b = rng.randbytes(g.pick(0, 1, 5, 64, 2000))
                first_of_stream("raw " + m, raw_streams[m](b, timeout=0.3), b, raw_bytes=True)
            else:
                m = rng.choice(METHODS)
                b = rng.randbytes(g.pick(0, 1, 5, 64, 2000))
                try:
                    raw[m](b, timeout=30)
                    check("raw " + m, b, grpc.StatusCode.OK, "", raw_bytes=True)
                except grpc.RpcError as e:
                    check("raw " + m, b, e.code(), e.details(), raw_bytes=True)
            if i % 200 == 0:
                self.assertIsNone(d.proc.poll(), "lossd exited (seed %d, request %d):\n%s" % (seed, i, d.stderr()))
        secs = time.monotonic() - t0

        # Alive and consistent: what ListRules shows ACTIVE is what the maps hold (the
        # scenarios still running aborted first: their next steps would add rules).
        self.assertTrue(d.alive(), "daemon died (seed %d):\n%s" % (seed, d.stderr()))
        for run in scenarios.ListScenarios(pb.ListScenariosRequest(), timeout=30).runs:
            ended = scenarios.AbortScenario(pb.AbortScenarioRequest(id=run.id), timeout=30)
            self.assertNotEqual(ended.state, pb.SCENARIO_STATE_RUNNING, ended)
        wait_until(lambda: d.health().streams == 0, 10, "the fuzzer's streams to end")
        # (a rule with a 1 s ttl may expire between the two reads: until the sweep settled)
        def both():
            listed = [r for r in d.inj.ListRules(pb.ListRulesRequest(), timeout=30).rules
                      if r.state == pb.RULE_STATE_ACTIVE]
            slots = active_rule_slots(d.pid)
            same = sorted(r.spec.match.dport.lo for r in listed) == sorted(s["dport_lo"] for s in slots)
            return listed, slots, same
        end = time.monotonic() + 5
        listed, slots, same = both()
        while not same and time.monotonic() < end:
            time.sleep(0.5)
            listed, slots, same = both()
        measured("fuzz", seed=seed, requests=n, secs=round(secs, 1), codes=codes, bad=len(bad), created=len(ids),
                 scenarios_run=len(runs),
                 active_listed=len(listed), active_slots=len(slots))
        self.assertEqual(bad, [], "seed %d: undocumented answers (first 10): %s" % (seed, bad[:10]))
        self.assertEqual(sorted(r.spec.match.dport.lo for r in listed), sorted(s["dport_lo"] for s in slots),
                         "seed %d: ListRules' ACTIVE rules are not the maps' live slots" % seed)
        self.assertGreater(codes.get("OK", 0), n // 20, "seed %d: almost nothing accepted: %s" % (seed, codes))
        d.clear()
        self.assertEqual(active_rule_slots(d.pid), [])


if __name__ == "__main__":
    main()
