#!/usr/bin/python3
"""A fake lossd for the client's unit tests: a TEST DOUBLE, not the daemon.

It serves the lossd.v1 API (Injector, Observer, System) on a Unix socket
from memory: rules get ids and counters, nothing touches the network. With
traffic=True (settable any time) a thread pretends every active rule matches 1000 segments/s,
drops them at the rule's rate and makes the flows retransmit each dropped
segment (mostly 'fast', some 'rto' and 'tlp'), so the Observer streams and
GetRuleEffect have something to report. Every request is recorded in
.requests for assertions.

In a test:     fake = FakeLossd(stubs).start(); ...; fake.stop()
Standalone:    fake_lossd.py --socket /tmp/x.sock --stubs <build>/python [--traffic]
"""

import argparse
import collections
import math
import os
import queue
import random
import signal
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc

TYPES = ("fast", "rto", "loss", "tlp", "syn", "synack", "probe0", "unknown")


def _wilson(k, n, z=3.2905267314919255):
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


class FakeLossd:
    def __init__(self, stubs, socket_path=None, traffic=False, seed=1):
        self.pb2 = stubs.pb2
        self.pb2_grpc = stubs.pb2_grpc
        self._tmp = None
        if socket_path is None:
            self._tmp = tempfile.mkdtemp(prefix="fake-lossd-")
            socket_path = os.path.join(self._tmp, "lossd.sock")
        self.socket_path = socket_path
        self.target = "unix://" + os.path.abspath(socket_path)
        self.lock = threading.RLock()
        self.rules = {}                       # id -> Rule message
        self.retrans = collections.defaultdict(collections.Counter)  # id -> type -> segs
        self.flows_of = collections.defaultdict(set)                 # id -> cookies
        self.next_id = 1
        self.requests = []                    # (method name, request message)
        self.subscribers = []                 # queues of ("event", RetransmitEvent) / ("gap", Gap)
        self.gap_on_subscribe = 0             # > 0: each new retransmit subscriber first gets a Gap
        self.traffic = traffic
        self.rng = random.Random(seed)
        self.stopping = threading.Event()
        self.deleted = []                     # ids deleted, in order
        self.keep_effects = False             # True: GetRuleEffect answers for deleted rules
        self.graveyard = {}                   # id -> deleted Rule (for keep_effects)
        self.server = None
        self.injector_ready_at = 0.0          # time.monotonic() until which CreateRule waits (loading)

    # ------------------------------------------------------------ plumbing --

    def start(self):
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        g = self.pb2_grpc
        fake = self

        class Injector(g.InjectorServicer):
            def __getattribute__(self, name):
                return getattr(fake, "Injector_" + name, None) or object.__getattribute__(self, name)

        class Observer(g.ObserverServicer):
            def __getattribute__(self, name):
                return getattr(fake, "Observer_" + name, None) or object.__getattribute__(self, name)

        class System(g.SystemServicer):
            def __getattribute__(self, name):
                return getattr(fake, "System_" + name, None) or object.__getattribute__(self, name)

        g.add_InjectorServicer_to_server(Injector(), self.server)
        g.add_ObserverServicer_to_server(Observer(), self.server)
        g.add_SystemServicer_to_server(System(), self.server)
        self.server.add_insecure_port("unix:" + os.path.abspath(self.socket_path))
        self.server.start()
        threading.Thread(target=self._traffic, daemon=True).start()  # idle while not .traffic
        return self

    def stop(self):
        self.stopping.set()
        if self.server:
            self.server.stop(grace=None).wait(5)
        if self._tmp:
            try:
                os.unlink(self.socket_path)
            except OSError:
                pass
            os.rmdir(self._tmp)

    def _record(self, name, req):
        with self.lock:
            self.requests.append((name, req))

    def calls(self, name):
        with self.lock:
            return [r for n, r in self.requests if n == name]

    # -------------------------------------------------------------- rules --

    def _validate(self, spec, context):
        if not spec.interface and not spec.cgroup:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "target: give an interface or a cgroup")
        if spec.interface.startswith("missing"):
            context.abort(grpc.StatusCode.NOT_FOUND, "interface %s: no such interface" % spec.interface)
        which = spec.loss.WhichOneof("model")
        if which is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          "loss: give a model (bernoulli, gilbert_elliott, every_nth, first_k, ramp, "
                          "markov or police)")
        if which == "bernoulli" and not 0 <= spec.loss.bernoulli.rate <= 1:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "loss.bernoulli.rate: must lie between 0 and 1")
        if len(self.rules) >= 4:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "rule limit (4 in the fake) reached")

    def _spec_error(self, spec):
        class Ctx:
            def abort(self, code, msg):
                raise _Abort(code, msg)
        try:
            self._validate(spec, Ctx())
        except _Abort as a:
            return a
        return None

    def _make_rule(self, spec):
        pb2 = self.pb2
        r = pb2.Rule(id=self.next_id, spec=spec, state=pb2.RULE_STATE_ACTIVE)
        self.next_id += 1
        if r.spec.hook == pb2.HOOK_AUTO:
            r.spec.hook = pb2.HOOK_CGROUP if spec.cgroup and not spec.interface else pb2.HOOK_TC
        dirs = {pb2.DIRECTION_INGRESS: ["ingress"], pb2.DIRECTION_EGRESS: ["egress"],
                pb2.DIRECTION_BOTH: ["ingress", "egress"]}[spec.direction]
        for d in dirs:
            if spec.interface:
                r.attachments.append(("tcx %s to %s" if d == "ingress" else "clsact %s on %s")
                                     % (d, spec.interface))
            else:
                r.attachments.append("cgroup_skb %s on %s" % (d, spec.cgroup))
        now = time.time_ns()
        r.created_unix_ns = now
        if spec.ttl_ns:
            r.expires_unix_ns = now + spec.ttl_ns
        self.rules[r.id] = r
        return r

    def _expire(self):
        now = time.time_ns()
        for r in self.rules.values():
            if r.state == self.pb2.RULE_STATE_ACTIVE and r.expires_unix_ns and r.expires_unix_ns <= now:
                r.state = self.pb2.RULE_STATE_EXPIRED

    def _get(self, rid, context):
        r = self.rules.get(rid)
        if r is None:
            context.abort(grpc.StatusCode.NOT_FOUND, "rule %d: no such rule" % rid)
        return r

    def _loading(self):
        return time.monotonic() < self.injector_ready_at

    def Injector_CreateRule(self, req, context):
        self._record("CreateRule", req)
        if self._loading():  # as lossd right after it starts: waits within the call's deadline
            left = context.time_remaining()
            wait = self.injector_ready_at - time.monotonic()
            if left is not None and left < wait:
                time.sleep(max(0.0, left - 0.05))
                msg = "the call's deadline passed while the injector was still loading (fake)"
                # lossd's reason, in the grpc-status-details-bin trailer (lossd.proto, "Errors")
                info = self.pb2.ErrorInfo(reason="PART_LOADING", domain="lossd",
                                          metadata={"part": "injector", "state": "loading"})
                details = self.pb2.StatusDetails(code=grpc.StatusCode.DEADLINE_EXCEEDED.value[0],
                                                 message=msg)
                any_ = details.details.add()
                any_.type_url = "type.googleapis.com/google.rpc.ErrorInfo"
                any_.value = info.SerializeToString()
                context.set_trailing_metadata((("grpc-status-details-bin", details.SerializeToString()),))
                context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, msg)
            time.sleep(max(0.0, wait))
        with self.lock:
            self._validate(req.spec, context)
            r = self.pb2.Rule()
            r.CopyFrom(self._make_rule(req.spec))
            return r

    def Injector_CreateRules(self, req, context):
        self._record("CreateRules", req)
        resp = self.pb2.CreateRulesResponse()
        with self.lock:
            errs = [self._spec_error(s) for s in req.specs]
            if req.atomic:
                bad = [(i, e) for i, e in enumerate(errs) if e]
                if bad:
                    i, e = bad[0]
                    context.abort(e.code, "spec %d: %s" % (i, e.msg))
                for s in req.specs:
                    resp.rules.append(self._make_rule(s))
                    resp.errors.append("")
                return resp
            for s in req.specs:
                e = self._spec_error(s)  # again: the limit may be reached on the way
                if e:
                    resp.errors.append(e.msg)
                else:
                    resp.rules.append(self._make_rule(s))
                    resp.errors.append("")
            return resp

    def Injector_UpdateRule(self, req, context):
        self._record("UpdateRule", req)
        with self.lock:
            r = self._get(req.id, context)
            r.spec.CopyFrom(req.spec)
            r.counters.Clear()
            return r

    def Injector_DeleteRule(self, req, context):
        self._record("DeleteRule", req)
        with self.lock:
            r = self._get(req.id, context)
            del self.rules[req.id]
            self.deleted.append(req.id)
            self.graveyard[req.id] = r
            return self.pb2.DeleteRuleResponse(rule=r)

    def Injector_GetRule(self, req, context):
        self._record("GetRule", req)
        with self.lock:
            self._expire()
            return self._get(req.id, context)

    def Injector_ListRules(self, req, context):
        self._record("ListRules", req)
        with self.lock:
            self._expire()
            rules = [r for r in self.rules.values()
                     if all(r.spec.labels.get(k) == v for k, v in req.labels.items())]
            return self.pb2.ListRulesResponse(rules=rules)

    def Injector_ClearRules(self, req, context):
        self._record("ClearRules", req)
        with self.lock:
            n = len(self.rules)
            self.deleted.extend(self.rules)
            self.rules.clear()
            return self.pb2.ClearRulesResponse(deleted=n)

    def Injector_WatchRuleCounters(self, req, context):
        self._record("WatchRuleCounters", req)
        interval = (req.interval_ns or 10**9) / 1e9
        seq = 0
        while context.is_active() and not self.stopping.is_set():
            with self.lock:
                rules = [r for r in self.rules.values() if not req.ids or r.id in req.ids]
                seq += 1
                msg = self.pb2.RuleCountersUpdate(seq=seq, time_unix_ns=time.time_ns(), rules=rules)
            yield msg
            self.stopping.wait(interval)

    def Injector_GetRuleEffect(self, req, context):
        self._record("GetRuleEffect", req)
        with self.lock:
            r = self.graveyard.get(req.id) if self.keep_effects else None
            r = r or self._get(req.id, context)
            c = r.counters
            n, k = c.matched_packets, c.dropped_packets  # skbs, as lossd (the trial unit)
            lo, hi = _wilson(k, n)
            lm = r.spec.loss
            conf = lm.bernoulli.rate if lm.WhichOneof("model") == "bernoulli" else 0.0
            e = self.pb2.RuleEffect(
                id=r.id, configured_rate=conf, measured_rate=k / n if n else 0.0,
                rate_ci_low=lo, rate_ci_high=hi, configured_within_ci=lo <= conf <= hi,
                counters=c, flows=len(self.flows_of[r.id]))
            for t, v in self.retrans[r.id].items():
                e.retransmitted_segments[t] = v
            return e

    # ------------------------------------------------------------ traffic --

    def set_counters(self, rid, matched, dropped, retrans=None, flows=1):
        """For tests: give a rule counters and retransmits ({'fast': n, ...})."""
        with self.lock:
            c = self.rules[rid].counters
            c.matched_packets = c.matched_segments = matched
            c.matched_bytes = matched * 1448
            c.dropped_packets = c.dropped_segments = dropped
            c.dropped_bytes = dropped * 1448
            self.retrans[rid] = collections.Counter(retrans or {})
            self.flows_of[rid] = set(range(1, flows + 1))

    def publish(self, kind, msg):
        with self.lock:
            for q in list(self.subscribers):
                q.put((kind, msg))

    def event(self, rid=0, type_="fast", segments=1, outcome=None, cookie=1, lport=8080):
        pb2 = self.pb2
        ev = pb2.RetransmitEvent(
            time_mono_ns=time.monotonic_ns(), cookie=cookie, cgroup_id=0,
            tuple=pb2.Tuple(local_addr="192.0.2.1", local_port=lport,
                            remote_addr="192.0.2.2", remote_port=40000 + cookie % 1000),
            type=getattr(pb2, "RETRANSMIT_TYPE_" + type_.upper()),
            outcome=pb2.OUTCOME_SENT if outcome is None else outcome,
            segments=segments, seq=12345, state=pb2.SocketState(cwnd=10, srtt_us=100),
            rule_ids=[rid] if rid else [])
        return ev

    def _traffic(self):
        tick = 0.1
        while not self.stopping.wait(tick):
            if not self.traffic:
                continue
            with self.lock:
                self._expire()
                for r in list(self.rules.values()):
                    if r.state != self.pb2.RULE_STATE_ACTIVE:
                        continue
                    lm = r.spec.loss
                    rate = lm.bernoulli.rate if lm.WhichOneof("model") == "bernoulli" else 0.01
                    matched = 100
                    dropped = sum(1 for _ in range(matched) if self.rng.random() < rate)
                    c = r.counters
                    c.matched_packets += matched
                    c.matched_segments += matched
                    c.matched_bytes += matched * 1448
                    c.dropped_packets += dropped
                    c.dropped_segments += dropped
                    c.dropped_bytes += dropped * 1448
                    lport = r.spec.match.dport.lo or 8080
                    for _ in range(dropped):
                        x = self.rng.random()
                        t = "fast" if x < 0.9 else "rto" if x < 0.95 else "tlp"
                        cookie = 1000 * r.id + self.rng.randrange(4)
                        self.retrans[r.id][t] += 1
                        self.flows_of[r.id].add(cookie)
                        self.publish("event", self.event(r.id, t, cookie=cookie, lport=lport))

    # ----------------------------------------------------------- observer --

    def _match(self, f, ev):
        t = ev.tuple
        if f.addr and f.addr.split("/")[0] not in (t.local_addr, t.remote_addr):
            return False
        if f.port.lo or f.port.hi:
            hi = f.port.hi or f.port.lo
            if not (f.port.lo <= t.local_port <= hi or f.port.lo <= t.remote_port <= hi):
                return False
        if f.cgroup_id and f.cgroup_id != ev.cgroup_id:
            return False
        if f.types and ev.type not in f.types:
            return False
        if f.rule_id and f.rule_id not in ev.rule_ids:
            return False
        return True

    def _batch(self, *items):
        return self.pb2.RetransmitStreamBatch(items=list(items))

    def Observer_WatchRetransmits(self, req, context):
        self._record("WatchRetransmits", req)
        q = queue.Queue(maxsize=req.queue or 65536)
        with self.lock:
            self.subscribers.append(q)
        seq = 0
        try:
            if self.gap_on_subscribe:
                seq += 1
                yield self._batch(self.pb2.RetransmitStreamMessage(
                    seq=seq, gap=self.pb2.Gap(source=self.pb2.GAP_SOURCE_KERNEL_RING,
                                              count=self.gap_on_subscribe)))
            while context.is_active() and not self.stopping.is_set():
                try:
                    first = q.get(timeout=0.1)
                except queue.Empty:
                    continue
                # Like lossd: what is waiting goes out as one batch, in order.
                pending = [first]
                while True:
                    try:
                        pending.append(q.get_nowait())
                    except queue.Empty:
                        break
                items = []
                for kind, msg in pending:
                    if kind == "event":
                        if req.allow and not any(self._match(f, msg) for f in req.allow):
                            continue
                        if any(self._match(f, msg) for f in req.deny):
                            continue
                        seq += 1
                        items.append(self.pb2.RetransmitStreamMessage(seq=seq, event=msg))
                    elif kind == "gap":
                        seq += 1
                        items.append(self.pb2.RetransmitStreamMessage(seq=seq, gap=msg))
                    elif kind == "abort":
                        if items:
                            yield self._batch(*items)
                            items = []
                        context.abort(msg[0], msg[1])
                if items:
                    yield self._batch(*items)
        finally:
            with self.lock:
                self.subscribers.remove(q)

    def stall(self, cause="rto", cookie=1, lport=8080, rid=0, duration_ns=210 * 10**6):
        pb2 = self.pb2
        ev = pb2.StallEvent(
            start_mono_ns=time.monotonic_ns(), duration_ns=duration_ns, cookie=cookie,
            tuple=pb2.Tuple(local_addr="192.0.2.1", local_port=lport,
                            remote_addr="192.0.2.2", remote_port=40000 + cookie % 1000),
            cause=getattr(pb2, "STALL_CAUSE_" + cause.upper()), threshold_ns=200 * 10**6,
            snd_una=1000, backoff=1 if cause == "rto" else 0, retransmits=1,
            first_retransmit=pb2.RETRANSMIT_TYPE_RTO, first_retransmit_seq=1000,
            state=pb2.SocketState(cwnd=1, srtt_us=100), rule_ids=[rid] if rid else [])
        if rid:
            ev.caused_by.CopyFrom(pb2.DropLink(rule_id=rid, seq=1000, length=1448, segments=1))
        return ev

    def Observer_WatchStalls(self, req, context):
        """Serves the stalls published as ("stall", StallEvent) or ("gap", Gap)."""
        self._record("WatchStalls", req)
        q = queue.Queue(maxsize=req.queue or 65536)
        with self.lock:
            self.subscribers.append(q)
        seq = 0
        try:
            while context.is_active() and not self.stopping.is_set():
                try:
                    kind, msg = q.get(timeout=0.1)
                except queue.Empty:
                    continue
                if kind == "stall":
                    if req.allow and not any(self._match(f, msg) for f in req.allow):
                        continue
                    if any(self._match(f, msg) for f in req.deny):
                        continue
                    seq += 1
                    yield self.pb2.StallStreamBatch(
                        items=[self.pb2.StallStreamMessage(seq=seq, event=msg)])
                elif kind == "gap":
                    seq += 1
                    yield self.pb2.StallStreamBatch(
                        items=[self.pb2.StallStreamMessage(seq=seq, gap=msg)])
        finally:
            with self.lock:
                self.subscribers.remove(q)

    def trace_messages(self, cookie=7, samples=300, start_seq=(1 << 32) - 100000):
        """A made-up trace (TraceMessage list) whose sequence numbers wrap:
        samples every ms, one drop, its RTO retransmission 200 ms later and
        the stall between, a gap, the closing summary."""
        pb2 = self.pb2
        t0 = 10**12
        tup = pb2.Tuple(local_addr="192.0.2.1", local_port=8080, remote_addr="192.0.2.2",
                        remote_port=40007)
        out = [pb2.TraceMessage(flow=pb2.Flow(cookie=cookie, tuple=tup))]
        una = start_seq
        for i in range(samples):
            t = t0 + i * 10**6 + (200 * 10**6 if i >= 100 else 0)
            if i == 100:
                drop_seq = una
                out.append(pb2.TraceMessage(drop=pb2.TraceDrop(drop=pb2.DropLink(
                    rule_id=3, time_mono_ns=t0 + 99 * 10**6, seq=drop_seq, length=1448,
                    segments=1))))
                out.append(pb2.TraceMessage(retransmit=pb2.RetransmitEvent(
                    time_mono_ns=t - 10**5, cookie=cookie, tuple=tup,
                    type=pb2.RETRANSMIT_TYPE_RTO, seq=drop_seq, segments=1, rule_ids=[3])))
                out.append(pb2.TraceMessage(stall=pb2.StallEvent(
                    start_mono_ns=t0 + 99 * 10**6, duration_ns=201 * 10**6, cookie=cookie,
                    tuple=tup, cause=pb2.STALL_CAUSE_RTO, snd_una=drop_seq, backoff=1,
                    caused_by=pb2.DropLink(rule_id=3, seq=drop_seq, length=1448))))
            if i == 150:
                out.append(pb2.TraceMessage(gap=pb2.Gap(source=pb2.GAP_SOURCE_KERNEL_RING,
                                                        count=2)))
            nxt = (una + 14480) % (1 << 32)
            out.append(pb2.TraceMessage(sample=pb2.TraceSample(
                time_mono_ns=t, ack_seq=(una + 1448) % (1 << 32), snd_una=una, snd_nxt=nxt,
                cwnd=10 if i < 100 else 1 + min(i - 100, 20), in_flight=10 if i < 100 else 1,
                srtt_us=1000, snd_wnd=65535, ack_window=65535)))
            una = (una + 1448) % (1 << 32)
        closed = pb2.Flow(cookie=cookie, tuple=tup, closed=True, stalls=1,
                          dominant_limit="cwnd_limited", dominant_share=0.8)
        closed.stall_ns["rto"] = 201 * 10**6
        closed.retransmitted_segments["rto"] = 1
        out.append(pb2.TraceMessage(closed=closed))
        for n, m in enumerate(out, 1):
            m.seq = n
        return out

    def Observer_TraceFlow(self, req, context):
        self._record("TraceFlow", req)
        if req.cookie == 404:
            context.abort(grpc.StatusCode.NOT_FOUND, "no flow with cookie 404")
        for m in self.trace_messages(cookie=req.cookie or 7):
            if not context.is_active():
                return
            yield m

    def _flows(self):
        pb2 = self.pb2
        out = []
        with self.lock:
            for rid, cookies in self.flows_of.items():
                for ck in sorted(cookies):
                    f = pb2.Flow(cookie=ck, cgroup_id=0, cwnd=10, srtt_us=100,
                                 tuple=pb2.Tuple(local_addr="192.0.2.1", local_port=8080,
                                                 remote_addr="192.0.2.2", remote_port=40000 + ck % 1000))
                    f.retransmitted_segments["fast"] = 1
                    f.ca_time_ns["open"] = 10**9
                    out.append(f)
        return out

    def Observer_ListFlows(self, req, context):
        self._record("ListFlows", req)
        return self.pb2.ListFlowsResponse(flows=self._flows())

    def Observer_WatchFlows(self, req, context):
        self._record("WatchFlows", req)
        interval = (req.interval_ns or 10**9) / 1e9
        seq = 1
        yield self.pb2.FlowStreamMessage(seq=seq, snapshot=True, time_unix_ns=time.time_ns(),
                                         flows=self._flows())
        while context.is_active() and not self.stopping.wait(interval):
            seq += 1
            yield self.pb2.FlowStreamMessage(seq=seq, time_unix_ns=time.time_ns())

    def Observer_WatchAggregates(self, req, context):
        self._record("WatchAggregates", req)
        window = req.window_ns or 10**9
        q = queue.Queue()
        with self.lock:
            self.subscribers.append(q)
        seq = 0
        try:
            while context.is_active() and not self.stopping.is_set():
                start = time.time_ns()
                deadline = time.monotonic() + window / 1e9
                agg = self.pb2.Aggregate(window_start_unix_ns=start, window_ns=window)
                while (left := deadline - time.monotonic()) > 0:
                    try:
                        kind, msg = q.get(timeout=min(left, 0.1))
                    except queue.Empty:
                        continue
                    if kind == "event":
                        name = TYPES[msg.type - 1]
                        agg.retransmits_by_type[name] += msg.segments
                        for rid in msg.rule_ids:
                            agg.retransmits_by_rule[rid] += msg.segments
                        agg.retransmits_by_flow[msg.cookie] += msg.segments
                    elif kind == "gap":
                        agg.gaps.append(msg)
                if not context.is_active():
                    break
                seq += 1
                agg.seq = seq
                yield agg
        finally:
            with self.lock:
                self.subscribers.remove(q)

    # ------------------------------------------------------------- system --

    def System_GetCapabilities(self, req, context):
        self._record("GetCapabilities", req)
        pb2 = self.pb2
        return pb2.Capabilities(
            kernel="6.1.0-fake", btf=True, cgroup2_mount="/sys/fs/cgroup", max_rules=4,
            max_ttl_ns=3600 * 10**9,
            injector_hooks=[pb2.HookAvailability(name="tcx", available=True),
                            pb2.HookAvailability(name="xdp native", available=False,
                                                 reason="no native XDP on veth (fake)")],
            observer_hooks=[pb2.HookAvailability(name="sockops/retransmit", available=True)])

    def System_GetHealth(self, req, context):
        self._record("GetHealth", req)
        with self.lock:
            pb2 = self.pb2
            state = pb2.COMPONENT_STATE_LOADING if self._loading() else pb2.COMPONENT_STATE_READY
            return pb2.Health(serving=True, rules=len(self.rules), lease_remaining_ns=3 * 10**9,
                              subscribers=len(self.subscribers),
                              components=[pb2.Component(name="injector", state=state, message="fake"),
                                          pb2.Component(name="observer", state=pb2.COMPONENT_STATE_READY)])

    def System_GetVersion(self, req, context):
        self._record("GetVersion", req)
        return self.pb2.Version(version="0.0.0-fake", api="lossd.v1")


class _Abort(Exception):
    def __init__(self, code, msg):
        super().__init__(msg)
        self.code, self.msg = code, msg


def main():
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from lossd_client import load_stubs
    ap = argparse.ArgumentParser(description="fake lossd (test double) on a Unix socket")
    ap.add_argument("--socket", required=True)
    ap.add_argument("--stubs", default=None)
    ap.add_argument("--traffic", action="store_true")
    args = ap.parse_args()
    fake = FakeLossd(load_stubs(args.stubs), args.socket, traffic=args.traffic).start()
    print("fake lossd serving on", fake.target, flush=True)
    done = threading.Event()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda *a: done.set())
    while not done.wait(0.5):
        pass
    fake.stop()
    try:
        os.unlink(args.socket)
    except OSError:
        pass


if __name__ == "__main__":
    main()

