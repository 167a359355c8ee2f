"""Observer e2e: a daemon on the "host" watching the network namespace of a "container".

The lab: HOST (where lossd runs), CTR (the container: its own network namespace, its
processes in a docker-layout cgroup <top>/system.slice/docker-<64 hex>.scope) and REM (a
remote peer), CTR -veth- HOST -veth- REM, HOST routing between them. Paced TCP (fact 3):
the container sends to REM:PC, the host itself sends to REM:PH; two rules on the host's
veth towards REM (clsact egress, STOLEN: network loss for both senders) drop 2 % of the
container's data segments (it sends them one per skb: no GSO on its veth) and 5 % of the
host's data skbs. A flow the container opened before the daemon started stays open
throughout (iter/tcp run inside the container's namespace picks it up).

`lossd --socket --observe-netns all` (the daemon's default) in HOST must:
  - list the container's flows with their owner (docker, the container id) and netns;
  - count the container's retransmissions in the container namespace's own totals
    (GetTotals, /metrics lossd_netns_*), equal to that namespace's MIB deltas exactly,
    and stream events (filtered by netns, and by container) that add up to them;
  - keep the host namespace's totals (GetTotals own, /metrics lossd_retransmitted_*)
    equal to the host namespace's MIB;
  - link the container flow's resends to the drops of the rule on it (GetRuleEffect).
A one-shot `lossd --observe --observe-netns /run/netns/CTR` beside it (a chosen set)
prints the container namespace's totals at exit: equal to the same MIB deltas.
"""
import binascii
import json
import os
import sys
import time
import unittest

from lab import config, daemon, traffic
from lab.clients import run_client
from lab.config import main
from lab.daemon import Daemon, StreamReader, wait_until
from lab.lossd import OUTCOMES, TYPES, Lossd
from lab.netns import Lab, measured, sh

PC, PH, PP = 5331, 5332, 5333   # container -> remote, host -> remote, the pre-existing flow
C_ADDR, HC_ADDR = "198.51.100.2", "198.51.100.1"
HR_ADDR, R_ADDR = "203.0.113.1", "203.0.113.2"
NBYTES, RATE_MBIT, LOSS = 24e6, 100, 0.02
LOSS_H = 0.05  # the host's own flow sends GSO skbs (~45 segments): fewer, bigger drops


class ContainerLab(Lab):
    """HOST routes between the container CTR and the remote REM."""

    def __init__(self):
        super().__init__(pair=False)
        try:
            self.host, self.ctr, self.rem = self.netns("host"), self.netns("ctr"), self.netns("rem")
            self.veth(self.ctr, "c0", self.host, "hc")
            self.veth(self.host, "hr", self.rem, "r0")
            self.addresses(self.ctr, "c0", C_ADDR + "/24")
            self.addresses(self.host, "hc", HC_ADDR + "/24")
            self.addresses(self.host, "hr", HR_ADDR + "/24")
            self.addresses(self.rem, "r0", R_ADDR + "/24")
            self.neighbours((self.ctr, "c0", (C_ADDR,)), (self.host, "hc", (HC_ADDR,)))
            self.neighbours((self.host, "hr", (HR_ADDR,)), (self.rem, "r0", (R_ADDR,)))
            sh("ip", "-n", self.ctr, "route", "add", "default", "via", HC_ADDR)
            sh("ip", "-n", self.rem, "route", "add", "198.51.100.0/24", "via", HR_ADDR)
            self.run(self.host, "sysctl", "-qw", "net.ipv4.ip_forward=1")
            # The container sends wire-sized segments (no GSO skbs of ~45 forwarded whole):
            # hundreds of independent drops rather than a few.
            self.run(self.ctr, "ethtool", "-K", "c0", "tso", "off", "gso", "off")
        except BaseException:
            self.close()
            raise

    def ino(self, ns):
        return os.stat("/run/netns/" + ns).st_ino


def totals_of(resp):
    """GetTotalsResponse -> {netns inode: NetnsTotals}."""
    return {n.netns_ino: n for n in resp.namespaces}


def delta(t1, t0, field):
    """One map of a NetnsTotals (t0 may be None: not there yet), t1 - t0, by type."""
    return {ty: getattr(t1, field)[ty] - (getattr(t0, field)[ty] if t0 is not None else 0) for ty in TYPES}


def metrics(lab, port):
    """GET /metrics of the daemon (listening on 127.0.0.1 inside HOST) -> {(name, labels): value}."""
    code = "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())"
    text = lab.run(lab.host, sys.executable, "-c", code, "http://127.0.0.1:%d/metrics" % port).stdout
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, value = line.rsplit(" ", 1)
        out[name_labels] = float(value)
    return out


def msum(m, name, **labels):
    """Sum of the series of family `name` whose labels include `labels`."""
    want = ['%s="%s"' % kv for kv in labels.items()]
    return sum(v for k, v in m.items()
               if k.split("{", 1)[0] == name and all(w in k for w in want))


class ContainerNetns(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        pb = daemon.pb
        cls.pb = pb
        cls.lab = lab = ContainerLab()
        try:
            cls.run_once(lab, pb)
        except BaseException:
            lab.close()
            raise

    @classmethod
    def run_once(cls, lab, pb):
        cls.cid = binascii.hexlify(os.urandom(32)).decode()
        cls.cg = lab.make_cgroup("system.slice", "docker-%s.scope" % cls.cid)
        cls.ino = {k: lab.ino(ns) for k, ns in (("host", lab.host), ("ctr", lab.ctr), ("rem", lab.rem))}
        # Open before any lossd: only the iterator, run inside CTR, can pick it up.
        cls.pre = traffic.TcpFlow(lab, lab.rem, lab.ctr, R_ADDR, PP, 1_000_000, 50, hold=True, cgroup=cls.cg)
        cls.pre.wait_sent()
        # The daemon (its default: every namespace), and a one-shot watching CTR only.
        one = Lossd(lab, lab.host, ["--observe", "--observe-netns", "/run/netns/" + lab.ctr], nsenter=True)
        cls.d = d = Daemon(lab, lab.host, ["--observe-netns", "all"], nsenter=True)
        one.wait_ready(90)
        assert d.parts.get("observer", ("",))[0] == "COMPONENT_STATE_READY", d.parts
        cls.flows_before = d.obs.ListFlows(pb.ListFlowsRequest(), timeout=10).flows
        cls.r_c = d.create(interface="hr", direction="egress", protocol="tcp", dport=PC, payload="only", rate=LOSS)
        cls.r_h = d.create(interface="hr", direction="egress", protocol="tcp", dport=PH, payload="only", rate=LOSS_H)
        F = pb.EventFilter
        rq = pb.WatchRetransmitsRequest
        cls.readers = {
            "all": StreamReader(d.obs.WatchRetransmits(rq(), timeout=300), "all"),
            "ctr_ns": StreamReader(d.obs.WatchRetransmits(rq(allow=[F(netns_ino=cls.ino["ctr"])]), timeout=300), "ctr_ns"),
            "ctr_id": StreamReader(d.obs.WatchRetransmits(rq(allow=[F(container=cls.cid[:12])]), timeout=300), "ctr_id"),
            "host_ns": StreamReader(d.obs.WatchRetransmits(rq(allow=[F(netns_ino=cls.ino["host"])]), timeout=300), "host_ns"),
            "stalls": StreamReader(d.obs.WatchStalls(pb.WatchStallsRequest(allow=[F(netns_ino=cls.ino["ctr"])]),
                                                     timeout=300), "stalls"),
        }
        wait_until(lambda: d.health().subscribers == len(cls.readers), 10, "every stream subscribed")
        # A trace of the container's flow, named by its namespace and port: it waits for it.
        cls.trace = StreamReader(d.obs.TraceFlow(pb.TraceFlowRequest(
            flow=F(netns_ino=cls.ino["ctr"], port=pb.PortRange(lo=PC, hi=PC)), wait_ns=30_000_000_000),
            timeout=300), "trace")
        k0 = {k: lab.counters(ns) for k, ns in (("host", lab.host), ("ctr", lab.ctr), ("rem", lab.rem))}
        t0 = totals_of(d.obs.GetTotals(pb.GetTotalsRequest(), timeout=10))
        m0 = metrics(lab, d.http_port)

        fc = traffic.TcpFlow(lab, lab.rem, lab.ctr, R_ADDR, PC, NBYTES, RATE_MBIT, hold=True, cgroup=cls.cg)
        fh = traffic.TcpFlow(lab, lab.rem, lab.host, R_ADDR, PH, NBYTES, RATE_MBIT, hold=True)
        try:
            fc.wait_sent()
            fh.wait_sent()
            # Every flow open: the daemon lists them.
            cls.flows_all = d.obs.ListFlows(pb.ListFlowsRequest(), timeout=10).flows
            cls.flows_ns = d.obs.ListFlows(pb.ListFlowsRequest(filter=[F(netns_ino=cls.ino["ctr"])]), timeout=10).flows
            cls.flows_id = d.obs.ListFlows(pb.ListFlowsRequest(filter=[F(container=cls.cid[:12])]), timeout=10).flows
            # The clients, by path and by inode.
            cls.ctl_flows = {}
            if config.LOSSCTL:
                for how in ("/run/netns/" + lab.ctr, str(cls.ino["ctr"])):
                    cls.ctl_flows[how] = run_client(lab, [config.LOSSCTL, "--addr", d.addr, "-o", "json",
                                                          "flows", "--netns", how])
            code = ("import json, sys; from lossd_client import Client\n"
                    "c = Client(sys.argv[1])\n"
                    "fl = c.flows(netns=sys.argv[2])\n"
                    "t = [n for n in c.totals() if n.netns_ino == int(sys.argv[3])]\n"
                    "print(json.dumps({'flows': [[f.netns_ino, f.tuple.remote_port] for f in fl],"
                    " 'totals': [n.netns_ino for n in t]}))\n")
            cls.py_flows = run_client(lab, [sys.executable, "-c", code, d.addr, "/run/netns/" + lab.ctr,
                                            str(cls.ino["ctr"])])
            cls.sent_c, _ = fc.release()
            cls.sent_h, _ = fh.release()
        finally:
            fc.close()
            fh.close()
        lab.wait_idle(lab.host, lab.ctr, lab.rem, port=PC)
        lab.wait_idle(lab.host, lab.ctr, lab.rem, port=PH)
        k1 = {k: lab.counters(ns) for k, ns in (("host", lab.host), ("ctr", lab.ctr), ("rem", lab.rem))}
        cls.dk = {k: k1[k] - k0[k] for k in k1}
        segs = lambda r: sum(m.event.segments for m in cls.readers[r].snapshot() if m.HasField("event"))
        # The streams catch up with the kernel (events are read from the ring every few ms).
        try:
            wait_until(lambda: segs("ctr_ns") == cls.dk["ctr"]["Tcp.RetransSegs"]
                       and segs("host_ns") == cls.dk["host"]["Tcp.RetransSegs"], 10, "streams settled")
        except AssertionError:
            pass
        time.sleep(0.5)
        cls.events = {k: [m.event for m in r.snapshot() if m.HasField("event")] for k, r in cls.readers.items()
                      if k != "stalls"}
        cls.gaps = {k: [m.gap for m in r.snapshot() if m.HasField("gap")] for k, r in cls.readers.items()}
        cls.stalls = [m.event for m in cls.readers["stalls"].snapshot() if m.HasField("event")]
        t1 = totals_of(d.obs.GetTotals(pb.GetTotalsRequest(), timeout=10))
        cls.t0, cls.t1 = t0, t1
        cls.own_resp = d.obs.GetTotals(pb.GetTotalsRequest(netns_ino=cls.ino["host"]), timeout=10)
        cls.m0, cls.m1 = m0, metrics(lab, d.http_port)
        cls.eff_c, cls.eff_h = d.effect(cls.r_c.id), d.effect(cls.r_h.id)
        cls.trace.wait_for(lambda m: any(x.HasField("closed") for x in m), 20, "the trace's end")
        cls.traced = cls.trace.snapshot()
        cls.trace.cancel()
        for r in cls.readers.values():
            r.cancel()
        cls.pre.release()
        rc = one.term()
        assert rc == 0, "one-shot lossd exited %d: %s" % (rc, one.stderr())
        cls.one = one.output()
        measured("observer_netns",
                 ctr_mib={k: v for k, v in cls.dk["ctr"].items() if v and k.startswith(("Tcp.Retrans", "TcpExt.TCP"))
                          and ("Retrans" in k or "Timeouts" in k or "LossProbes" in k)},
                 host_mib_retrans=cls.dk["host"]["Tcp.RetransSegs"],
                 ctr_totals=cls.ctr_delta_static("sent_segments"),
                 host_totals=dict(delta(t1[cls.ino["host"]], t0.get(cls.ino["host"]), "sent_segments")),
                 ctr_events=len(cls.events["ctr_ns"]), stalls=len(cls.stalls),
                 effect_c=dict(cls.eff_c.retransmitted_segments),
                 recovery_c={k: v.count for k, v in cls.eff_c.recovery.items()})

    @classmethod
    def ctr_delta_static(cls, field):
        return delta(cls.t1[cls.ino["ctr"]], cls.t0.get(cls.ino["ctr"]), field)

    @classmethod
    def tearDownClass(cls):
        daemon.end_daemon_and_lab(cls.d, cls.lab)

    def ctx(self):
        return json.dumps({"ctr_mib": {k: v for k, v in self.dk["ctr"].items() if v},
                           "host_mib_retrans": self.dk["host"]["Tcp.RetransSegs"],
                           "ctr_totals": self.ctr_delta_static("sent_segments"),
                           "gaps": {k: [(g.source, g.count) for g in v] for k, v in self.gaps.items()}},
                          sort_keys=True)

    def mib_relations(self, dk, sent, failed, sent_ev, failed_ev, what):
        """The exact relations (docs/observer.md) between totals by type and a namespace's MIB."""
        ctx = "%s: %s" % (what, self.ctx())
        self.assertEqual(sum(sent.values()) + sum(failed.values()), dk["Tcp.RetransSegs"], ctx)
        self.assertEqual(sent["fast"], dk["TcpExt.TCPFastRetrans"], ctx)
        self.assertEqual(sent["loss"], dk["TcpExt.TCPSlowStartRetrans"], ctx)
        self.assertEqual(sum(sent_ev[t] + failed_ev[t] for t in ("syn", "synack")), dk["TcpExt.TCPSynRetrans"], ctx)
        self.assertEqual(sum(failed.values()), dk["TcpExt.TCPRetransFail"], ctx)
        self.assertLessEqual(sent_ev["tlp"], dk["TcpExt.TCPLossProbes"], ctx)
        self.assertLessEqual(sum(sent_ev[t] + failed_ev[t] for t in ("rto", "syn")), dk["TcpExt.TCPTimeouts"], ctx)
        self.assertEqual(sent_ev["unknown"] + failed_ev["unknown"], 0, ctx)

    # ------------------------------------------------------------------ flows --
    def test_container_flows_listed_with_owner_and_netns(self):
        ctr = self.ino["ctr"]
        mine = [f for f in self.flows_all if f.tuple.remote_port == PC and f.tuple.local_addr == C_ADDR]
        self.assertEqual(len(mine), 1, self.flows_all)
        f = mine[0]
        self.assertEqual(f.netns_ino, ctr)
        self.assertEqual((f.owner.runtime, f.owner.container), ("docker", self.cid), f.owner)
        # Every namespace's flows are listed: the host's own, the remote's receiving ends.
        by_ns = {(x.netns_ino, x.tuple.local_port if x.netns_ino == self.ino["rem"] else x.tuple.remote_port)
                 for x in self.flows_all}
        for want in ((ctr, PC), (self.ino["host"], PH), (self.ino["rem"], PC), (self.ino["rem"], PH), (ctr, PP)):
            self.assertIn(want, by_ns, self.flows_all)
        # By netns and by container: the container's flows only (both open ones).
        for listed in (self.flows_ns, self.flows_id):
            self.assertEqual({(x.netns_ino, x.tuple.remote_port) for x in listed}, {(ctr, PC), (ctr, PP)}, listed)
            self.assertTrue(all(x.owner.container == self.cid for x in listed), listed)

    def test_clients_filter_by_netns(self):
        want = {(self.ino["ctr"], PC), (self.ino["ctr"], PP)}
        if not config.LOSSCTL:
            self.skipTest("no --lossctl")
        for how, r in self.ctl_flows.items():
            self.assertEqual(r.rc, 0, r)
            got = {(int(f["netns_ino"]), f["tuple"]["remote_port"])
                   for f in r.json().get("flows", [])}
            self.assertEqual(got, want, "lossctl flows --netns %s: %s" % (how, r))
        self.assertEqual(self.py_flows.rc, 0, self.py_flows)
        j = self.py_flows.json()
        self.assertEqual({tuple(x) for x in j["flows"]}, want, self.py_flows)
        self.assertEqual(j["totals"], [self.ino["ctr"]], self.py_flows)

    def test_preexisting_container_flow_picked_up_in_its_namespace(self):
        pre = [f for f in self.flows_before if f.netns_ino == self.ino["ctr"] and f.tuple.remote_port == PP]
        self.assertEqual(len(pre), 1, self.flows_before)
        self.assertTrue(pre[0].preexisting, pre[0])
        self.assertEqual(pre[0].owner.container, self.cid)

    # ----------------------------------------------------------------- totals --
    def test_container_totals_equal_its_mib(self):
        dk = self.dk["ctr"]
        self.assertGreater(dk["Tcp.RetransSegs"], 50, "the container lost (almost) nothing: " + self.ctx())
        t1, t0 = self.t1[self.ino["ctr"]], self.t0.get(self.ino["ctr"])
        self.assertFalse(t1.own)
        self.mib_relations(dk, delta(t1, t0, "sent_segments"), delta(t1, t0, "failed_segments"),
                           delta(t1, t0, "sent_events"), delta(t1, t0, "failed_events"), "container totals")
        self.assertEqual(t1.retrans_segs - (t0.retrans_segs if t0 else 0), dk["Tcp.RetransSegs"])
        # /metrics: the same, per namespace.
        name = "lossd_netns_retransmitted_segments_total"
        got = msum(self.m1, name, netns=str(self.ino["ctr"])) - msum(self.m0, name, netns=str(self.ino["ctr"]))
        self.assertEqual(got, dk["Tcp.RetransSegs"], self.ctx())

    def test_host_totals_still_equal_host_mib(self):
        dk = self.dk["host"]
        self.assertGreater(dk["Tcp.RetransSegs"], 0, "the host lost nothing: " + self.ctx())
        own = self.own_resp
        self.assertEqual(own.own_netns_ino, self.ino["host"])
        self.assertEqual(own.watching, "all")
        self.assertEqual(len(own.namespaces), 1)
        t1, t0 = self.t1[self.ino["host"]], self.t0.get(self.ino["host"])
        self.assertTrue(t1.own)
        self.mib_relations(dk, delta(t1, t0, "sent_segments"), delta(t1, t0, "failed_segments"),
                           delta(t1, t0, "sent_events"), delta(t1, t0, "failed_events"), "host totals")
        # The unlabelled families stay the daemon's own namespace's.
        name = "lossd_retransmitted_segments_total"
        self.assertEqual(msum(self.m1, name) - msum(self.m0, name), dk["Tcp.RetransSegs"], self.ctx())
        # The remote's receivers resent nothing it did not count either.
        tr1, tr0 = self.t1.get(self.ino["rem"]), self.t0.get(self.ino["rem"])
        rem = (tr1.retrans_segs if tr1 else 0) - (tr0.retrans_segs if tr0 else 0)
        self.assertEqual(rem, self.dk["rem"]["Tcp.RetransSegs"])

    def test_unwatched_or_unknown_namespace_has_no_totals(self):
        with self.assertRaises(daemon.grpc.RpcError) as e:
            self.d.obs.GetTotals(self.pb.GetTotalsRequest(netns_ino=1), timeout=10)
        self.assertEqual(e.exception.code(), daemon.grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(daemon.grpc.RpcError) as e:
            self.d.obs.GetTotals(self.pb.GetTotalsRequest(netns_ino=1 << 40), timeout=10)
        self.assertEqual(e.exception.code(), daemon.grpc.StatusCode.INVALID_ARGUMENT)

    def test_one_shot_watching_the_container_namespace(self):
        out = self.one
        lines = out.netns_totals
        ctr = [t for t in lines if t.netns_ino == self.ino["ctr"]]
        self.assertEqual(len(ctr), 1, lines)
        t = ctr[0]
        dk = self.dk["ctr"]
        # It started before the traffic and ended after it: its totals cover the whole
        # run, the pre-existing flow's close included (no loss on it).
        self.assertEqual(t.retrans_segs, dk["Tcp.RetransSegs"], t)
        self.assertEqual(t.sent_segments["fast"], dk["TcpExt.TCPFastRetrans"], t)
        self.assertEqual(t.sent_segments["loss"], dk["TcpExt.TCPSlowStartRetrans"], t)
        # Its own namespace (HOST) is not in its set: its observer_totals stay 0.
        self.assertEqual(out.totals["retrans_segs"], 0, out.totals)
        self.assertEqual({t.netns_ino for t in lines} - {0}, {self.ino["ctr"], self.ino["host"]}, lines)

    # ----------------------------------------------------------------- events --
    def test_container_events_equal_its_mib(self):
        evs = self.events["ctr_ns"]
        self.assertTrue(evs)
        self.assertEqual({e.netns_ino for e in evs}, {self.ino["ctr"]})
        self.assertEqual(self.gaps["ctr_ns"], [], self.ctx())
        name = lambda e: self.pb.RetransmitType.Name(e.type)[len("RETRANSMIT_TYPE_"):].lower()
        by = lambda outcome, f: {ty: sum(f(e) for e in evs if name(e) == ty and e.outcome == outcome) for ty in TYPES}
        seg, one = (lambda e: e.segments), (lambda e: 1)
        S, F = self.pb.OUTCOME_SENT, self.pb.OUTCOME_FAILED
        self.mib_relations(self.dk["ctr"], by(S, seg), by(F, seg), by(S, one), by(F, one), "container events")
        self.assertEqual(by(S, seg), self.ctr_delta_static("sent_segments"))
        for e in evs:
            self.assertEqual((e.tuple.local_addr, e.tuple.remote_port), (C_ADDR, PC), e)
            self.assertEqual(e.owner.container, self.cid)

    def test_filter_by_container_is_the_container_namespace(self):
        key = lambda e: (e.cookie, e.seq, e.segments, e.time_mono_ns)
        self.assertEqual(sorted(map(key, self.events["ctr_id"])), sorted(map(key, self.events["ctr_ns"])))
        # The unfiltered stream has them too, beside the host's (and maybe other labs').
        mine = [e for e in self.events["all"] if e.netns_ino == self.ino["ctr"]]
        self.assertEqual(sorted(map(key, mine)), sorted(map(key, self.events["ctr_ns"])))
        host = [e for e in self.events["all"] if e.netns_ino == self.ino["host"]]
        self.assertEqual(sorted(map(key, host)), sorted(map(key, self.events["host_ns"])))
        self.assertEqual(sum(e.segments for e in host), self.dk["host"]["Tcp.RetransSegs"], self.ctx())
        self.assertTrue(all(e.netns_ino == self.ino["ctr"] for e in self.stalls), self.stalls)

    def test_trace_of_a_container_flow_links_drops(self):
        msgs = self.traced
        self.assertTrue(msgs and msgs[0].HasField("flow"), msgs[:1])
        first = msgs[0].flow
        self.assertEqual((first.netns_ino, first.tuple.local_addr, first.tuple.remote_port),
                         (self.ino["ctr"], C_ADDR, PC))
        kinds = lambda k: [getattr(m, k) for m in msgs if m.HasField(k)]
        rtx, drops, closed = kinds("retransmit"), kinds("drop"), kinds("closed")
        self.assertTrue(rtx and drops, "trace: %d retransmits, %d drops" % (len(rtx), len(drops)))
        self.assertTrue(all(e.netns_ino == self.ino["ctr"] for e in rtx))
        self.assertTrue(all(x.drop.rule_id == self.r_c.id for x in drops), drops[:3])
        self.assertEqual(closed[-1].netns_ino, self.ino["ctr"])
        # The resends of the flow are of ranges its recorded drops cover (the container's own
        # flow: dropped on the host, resent in the container). Not every one (a drop made before
        # the trace began is not told); none left the injector's per-flow log (its last 16)
        # unread: the trace reads it with the flow's events (a DROP_LOG gap otherwise).
        ranges = [(x.drop.seq, x.drop.length) for x in drops]
        covered = [e for e in rtx if any((e.seq - s) % (1 << 32) < n for s, n in ranges)]
        lost = sum(m.gap.count for m in msgs if m.HasField("gap")
                   and m.gap.source == self.pb.GAP_SOURCE_DROP_LOG)
        measured("observer_netns_trace", retransmits=len(rtx), drops=len(drops), covered=len(covered),
                 drop_log_gaps=lost)
        self.assertGreater(len(covered), len(rtx) / 2, "resends covered by a traced drop: %d of %d "
                           "(drops that left the log unread: %d)" % (len(covered), len(rtx), lost))
        self.assertEqual(lost, 0, "drops that left the injector's log unread")

    # ---------------------------------------------------------------- effects --
    def test_rule_effect_links_container_resends_to_drops(self):
        eff = self.eff_c
        dk = self.dk["ctr"]
        self.assertEqual(sum(eff.retransmitted_segments.values()), dk["Tcp.RetransSegs"], str(eff))
        self.assertEqual(eff.flows, 1, str(eff))
        self.assertGreater(eff.counters.dropped_packets, 0, str(eff))
        self.assertGreater(eff.drops_recorded, 0, str(eff))
        linked = sum(v.count for v in eff.recovery.values())
        sent_events = sum(1 for e in self.events["ctr_ns"] if e.outcome == self.pb.OUTCOME_SENT)
        self.assertGreater(linked, 0, "no resend of the container linked to a drop: %s" % eff)
        self.assertLessEqual(linked, sent_events, str(eff))
        # Every stall on the container's flow that a drop made is linked to this rule.
        for s in self.stalls:
            if s.caused_by.rule_id:
                self.assertEqual(s.caused_by.rule_id, self.r_c.id, s)
        # The host's own flow under the other rule: its resends, not the container's.
        self.assertEqual(sum(self.eff_h.retransmitted_segments.values()), self.dk["host"]["Tcp.RetransSegs"],
                         str(self.eff_h))


if __name__ == "__main__":
    main()
