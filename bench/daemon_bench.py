#!/usr/bin/python3
"""lossd daemon + gRPC benchmarks: rule-create-to-first-drop latency, batch rule
create/clear time, and retransmit events/s to WatchRetransmits subscribers with
every event accounted for. Prints one JSON document on stdout. Needs root.

  bench/daemon_bench.py --lossd build/daemon/lossd --stubs build/python
                        [--tries 10] [--batches 5] [--rounds 3] [--seconds 4]
                        [--subscribers 10] [--small-queue 512] [--skip-latency]
                        [--skip-batch] [--skip-events]

Setup: two network namespaces made for this run (lab.netns.Lab from tests/e2e/lab:
unique names, documentation addresses 192.0.2.0/24, removed on exit, on
failure and on SIGINT/SIGTERM/SIGHUP) joined by a veth pair; the daemon
`lossd --socket <tmp>/lossd.sock --state-dir <tmp>` runs in A. The client is
this script (Debian's /usr/bin/python3, grpcio) with the stubs generated at
build time (<build>/python), over the Unix socket. Traffic stays inside the
namespaces.

1. Create-to-first-drop. A UDP sender sends a numbered datagram every 50 us
   (busy loop, send time of each recorded); the receiver records sequence
   number and CLOCK_MONOTONIC receive time of each. For each try: CreateRule
   (100 % of UDP to the port), wait, DeleteRule, wait. The first missing
   datagram is the first sequence number, sent after the CreateRule call began,
   that never arrived and starts a run of >= 10 missing ones. Reported per
   try: the RPC latency, the time from the call to the send time of the first
   missing datagram (`to_first_drop_us`; resolution: the send interval), the
   time from the call to the arrival of the last datagram that got through
   (`last_through_us`, receive timestamp), the send gap before the first
   missing datagram (`resolution_us`: a descheduled sender makes it coarser),
   whether the first drop happened before the RPC returned, the start of the
   run of drops that lasted until DeleteRule (the rule's own), DeleteRule's
   latency and the first datagram through after it. Every 4th interval the
   sender also sends to a control port no rule matches: any control datagram
   lost is collateral damage of creating/deleting the rule. Four variants: ingress (sender in B, rule on A's
   veth ingress: tcx) and egress (sender in A, rule on A's veth egress:
   clsact), each cold (no other rule there: the call attaches the hook) and
   warm (another rule on the same hook, other port, keeps it attached).
2. CreateRules with 1,000 specs (UDP, distinct destination ports, A's veth
   ingress, 1 %), then ClearRules; each timed, --batches times.
2b. Scale (--scale N, default 10,000; 0 skips): CreateRules with N specs in one call, then
   ListRules of the N rules (also as raw bytes, to tell the server's share from Python's
   parse), then ClearRules; --scale-rounds times. Targets: create < 1 s, list < 200 ms.
3. Events/s to WatchRetransmits subscribers. Generator (the fastest found on
   this machine, see observer_bench.py): TSO/GSO off on A's veth, a one-shot
   lossd at B's ingress dropping 30 % of the data segments to the port,
   iperf3 -P 16 unpaced A -> B. Subscribers are separate processes (this
   script, `_subscribe`), each its own channel, default queue (65536).
   Configurations `1` and `N` (--subscribers) subscribers, and `1_queue<Q>`:
   one subscriber with a --small-queue queue, so that the daemon drops events
   for it and the Gap accounting is exercised; rotating order over --rounds
   rounds. Reference: the daemon's own kernel-side totals, read from
   its BPF maps (obs_totals, obs_counters) with bpftool, before the traffic
   (every subscriber subscribed: GetHealth.subscribers) and after (every TCP
   socket closed): published retransmit events = delta(sum of events over
   types and outcomes - filtered). Per subscriber: events received + the sum
   of its Gap counts must equal that, plus at most the flow-close events lost
   (flow closes share the hub and the subscriber queue but are not sent on
   this stream; a lost one is counted in a Gap). Stream sequence numbers must
   be 1..n. Before the subscribers are stopped, their counts must have stopped
   changing (polled once a second, then 2.5 s more for the last Gap reports).
   Events/s per subscriber = events received / (time from traffic start to that
   subscriber's last event). Also reported: duplicate events (two sent
   retransmit events with the same cookie, TCP sequence number, total_retrans
   and err: one attempt reported twice), the daemon's CPU time per event
   written, by thread name, and the subscribers' CPU time.
"""
import argparse
import array
import bisect
import datetime
import json
import os
import resource
import select
import socket
import struct
import subprocess
import sys
import threading
import time

from benchlib import argument_parser, binary_id, git_describe, logger, med, report, parse_args
from lab import daemon, traffic
from lab.daemon import Daemon, load_stubs
from lab.lossd import TYPES
from lab.netns import Lab
from lab.stats import cpu_secs, fdinfo, thread_cpu, thread_delta

SELF = os.path.abspath(__file__)
PY = "/usr/bin/python3"
TARGET_EVENTS_PER_S = 200000
PORT_UDP = 7000
PORT_HOLD = 7001
PORT_CTRL = 7002
PORT_TCP = 5203
BATCH_BASE_PORT = 20000
log = logger("daemon_bench")
grpc = pb = pbg = None  # use_stubs()


def use_stubs(path):
    """lab.daemon.load_stubs, and its modules as this script's globals."""
    global grpc, pb, pbg
    load_stubs(path)
    grpc, pb, pbg = daemon.grpc, daemon.pb, daemon.pbg


# ---- helpers run inside the namespaces (this script, hidden subcommands) ----------------

def _stdin_stop(flag):
    def run():
        sys.stdin.readline()
        flag.set()
    threading.Thread(target=run, daemon=True).start()


CTRL = 1 << 62  # sequence-number flag of the control flow's datagrams


def cmd_udp_send(a):
    """Busy loop: one datagram (8-byte sequence number) to --port every interval, and every
    4th interval one more to --ctrl-port (seq | CTRL); send times of the first to a file."""
    stop = threading.Event()
    _stdin_stop(stop)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((a.dst, a.port))
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.connect((a.dst, a.ctrl_port))
    mono = time.monotonic_ns
    pack = struct.Struct("!Q").pack
    ts = array.array("q")
    iv = a.interval_ns
    nxt = mono()
    seq = 0
    print("READY", flush=True)
    while not stop.is_set():
        for _ in range(200):
            now = mono()
            if now < nxt:
                continue
            ts.append(now)
            try:
                s.send(pack(seq))
                if seq % 4 == 0:
                    c.send(pack(seq | CTRL))
            except OSError:
                pass
            seq += 1
            nxt += iv
            if now - nxt > 100 * iv:  # fell far behind (descheduled): do not burst
                nxt = now + iv
    with open(a.out, "wb") as f:
        ts.tofile(f)
    print(json.dumps({"sent": seq, "ctrl_sent": (seq + 3) // 4}), flush=True)


def cmd_udp_recv(a):
    """Receives on --port and --ctrl-port; (seq, CLOCK_MONOTONIC ns) of each datagram to a file."""
    stop = threading.Event()
    _stdin_stop(stop)
    socks = []
    for port in (a.port, a.ctrl_port):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
        s.bind((a.bind, port))
        s.setblocking(False)
        socks.append(s)
    mono = time.monotonic_ns
    seqs, ts = array.array("q"), array.array("q")
    buf = bytearray(64)
    unpack = struct.Struct("!Q").unpack_from
    print("READY", flush=True)
    while not stop.is_set():
        rl, _, _ = select.select(socks, [], [], 0.1)
        for s in rl:
            while True:
                try:
                    n = s.recv_into(buf)
                except BlockingIOError:
                    break
                t = mono()
                if n >= 8:
                    seqs.append(unpack(buf)[0])
                    ts.append(t)
    with open(a.out, "wb") as f:
        seqs.tofile(f)
        ts.tofile(f)
    print(json.dumps({"received": len(seqs)}), flush=True)


def cmd_subscribe(a):
    """One WatchRetransmits subscriber: counts events and gaps until a line on stdin."""
    use_stubs(a.stubs)
    ch = grpc.insecure_channel("unix:" + a.socket)
    grpc.channel_ready_future(ch).result(timeout=20)
    stub = pbg.ObserverStub(ch)
    call = stub.WatchRetransmits(pb.WatchRetransmitsRequest(queue=a.queue))
    res = {"events": 0, "gaps": {}, "messages": 0, "seq_ok": True, "first_mono_ns": None,
           "last_mono_ns": None, "error": None}
    stop = threading.Event()
    st = {"events": 0, "gaps": {}}  # updated by the reading loop

    def control():
        # "mark": print the counts so far; "stop" (or EOF): cancel the call.
        for line in sys.stdin:
            if line.strip() == "mark":
                print(json.dumps({"mark": st["events"], "gaps": dict(st["gaps"])}), flush=True)
            else:
                break
        stop.set()
        call.cancel()
    threading.Thread(target=control, daemon=True).start()
    print("READY", flush=True)
    mono = time.monotonic_ns
    expect = 1
    gaps = 0
    first = last = None
    gap_by = st["gaps"]
    seen, dups = set(), 0  # (cookie, TCP seq, total_retrans, err): one retransmission attempt
    try:
        for m in (item for batch in call for item in batch.items):
            if m.seq != expect:
                res["seq_ok"] = False
            expect = m.seq + 1
            if m.HasField("event"):
                st["events"] += 1
                e = m.event
                key = (e.cookie, e.seq, e.state.total_retrans, e.err)
                if key in seen and e.err == 0:  # sent: a real second one has a larger total_retrans
                    dups += 1
                seen.add(key)
                last = mono()
                if first is None:
                    first = last
            else:
                k = pb.GapSource.Name(m.gap.source)
                gap_by[k] = gap_by.get(k, 0) + m.gap.count
                gaps += 1
    except grpc.RpcError as e:
        if not stop.is_set():
            res["error"] = "%s: %s" % (e.code(), e.details())
    ev = st["events"]
    ru = resource.getrusage(resource.RUSAGE_SELF)
    res.update(events=ev, gaps=gap_by, duplicates=dups, messages=ev + gaps, first_mono_ns=first,
               last_mono_ns=last,
               cpu_secs=round(ru.ru_utime + ru.ru_stime, 3))
    print(json.dumps(res), flush=True)


# ---- the lab -------------------------------------------------------------------------------

def helper(lab, ns, args, **kw):
    p = lab.popen(ns, [PY, SELF] + args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, **kw)
    line = p.stdout.readline()
    if not line.startswith("READY"):
        p.kill()
        raise RuntimeError("%s did not start: %r" % (args[0], line))
    return p


def finish(p, timeout=60):
    try:
        p.stdin.write("stop\n")
        p.stdin.flush()
    except (BrokenPipeError, ValueError):
        pass
    out, _ = p.communicate(timeout=timeout)
    lines = [l for l in out.strip().splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        raise RuntimeError("helper failed (%s): %r" % (p.returncode, out[-500:]))
    return json.loads(lines[-1])


def bpf_totals(d):
    """The daemon's observer totals, straight from its BPF maps."""
    maps = {int(kv["map_id"]): kv for kv in fdinfo(d.pid) if "map_type" in kv and "map_id" in kv}
    want = {}
    for mid in maps:
        j = json.loads(subprocess.check_output(["bpftool", "-j", "map", "show", "id", str(mid)], text=True))
        if j.get("name") in ("obs_totals", "obs_counters"):
            want[j["name"]] = mid
    if len(want) != 2:
        raise RuntimeError("daemon maps obs_totals/obs_counters not found: %s" % want)
    tot = json.loads(subprocess.check_output(["bpftool", "-j", "map", "dump", "id", str(want["obs_totals"])],
                                             text=True))
    cnt = json.loads(subprocess.check_output(["bpftool", "-j", "map", "dump", "id",
                                              str(want["obs_counters"])], text=True))

    def raw(x):  # bpftool -j: a list of "0x.." bytes (little-endian here)
        return bytes(int(b, 16) for b in x) if isinstance(x, list) else None

    events = 0
    by_type = {}
    for e in tot:
        key = int.from_bytes(raw(e["key"]), "little")
        s = sum(int.from_bytes(raw(v["value"])[0:8], "little") for v in e["values"])  # obs_total.events
        events += s
        if s:
            by_type[TYPES[key // 2] + "." + ("sent", "failed")[key % 2]] = s
    c = {}
    for e in cnt:
        key = int.from_bytes(raw(e["key"]), "little")
        c[key] = sum(int.from_bytes(raw(v["value"])[0:8], "little") for v in e["values"])
    return {"events": events, "by_type": by_type, "ring_lost": c.get(0, 0), "filtered": c.get(1, 0),
            "flows_opened": c.get(2, 0), "flows_closed": c.get(3, 0)}


def spec(interface, direction, port, rate, proto="udp"):
    s = pb.RuleSpec(interface=interface,
                    direction=pb.DIRECTION_INGRESS if direction == "ingress" else pb.DIRECTION_EGRESS,
                    match=pb.Match(protocol=proto, dport=pb.PortRange(lo=port)))
    s.loss.bernoulli.rate = rate
    return s


# ---- 1. create-to-first-drop ------------------------------------------------------------

def latency_variant(lab, d, direction, warm, tries):
    if direction == "ingress":  # B -> A, the rule on A's ingress
        tx_ns, rx_ns, dst, bind = lab.b, lab.a, lab.V4_A, lab.V4_A
    else:  # A -> B, the rule on A's egress
        tx_ns, rx_ns, dst, bind = lab.a, lab.b, lab.V4_B, lab.V4_B
    tmp = lab.tempdir()
    rx_out, tx_out = os.path.join(tmp, "rx.bin"), os.path.join(tmp, "tx.bin")
    hold = None
    if warm:
        hold = d.inj.CreateRule(pb.CreateRuleRequest(spec=spec(lab.IF_A, direction, PORT_HOLD, 1.0)),
                                timeout=30)
    rx = helper(lab, rx_ns, ["_udp-recv", "--bind", bind, "--port", str(PORT_UDP), "--ctrl-port",
                             str(PORT_CTRL), "--out", rx_out])
    tx = helper(lab, tx_ns, ["_udp-send", "--dst", dst, "--port", str(PORT_UDP), "--ctrl-port", str(PORT_CTRL),
                             "--interval-ns", "50000", "--out", tx_out])
    marks = []
    try:
        time.sleep(0.5)
        for _ in range(tries):
            t0 = time.monotonic_ns()
            r = d.inj.CreateRule(pb.CreateRuleRequest(spec=spec(lab.IF_A, direction, PORT_UDP, 1.0)), timeout=30)
            t1 = time.monotonic_ns()
            time.sleep(0.25)
            t2 = time.monotonic_ns()
            d.inj.DeleteRule(pb.DeleteRuleRequest(id=r.id), timeout=30)
            t3 = time.monotonic_ns()
            marks.append((t0, t1, t2, t3, list(r.attachments)))
            time.sleep(0.25)
    finally:
        txr = finish(tx)
        time.sleep(0.2)
        rxr = finish(rx)
        if hold is not None:
            d.inj.DeleteRule(pb.DeleteRuleRequest(id=hold.id), timeout=30)
    send_ts = array.array("q")
    with open(tx_out, "rb") as f:
        send_ts.frombytes(f.read())
    raw = array.array("q")
    with open(rx_out, "rb") as f:
        raw.frombytes(f.read())
    n = len(raw) // 2
    rseq, rts = raw[:n], raw[n:]
    got, ctrl_got = {}, set()
    for s, t in zip(rseq, rts):
        if s & CTRL:
            ctrl_got.add(s & ~CTRL)
        else:
            got.setdefault(s, t)
    ctrl_missing = [i for i in range(0, len(send_ts), 4) if i not in ctrl_got]
    ivs = [send_ts[i + 1] - send_ts[i] for i in range(len(send_ts) - 1)]
    tries_out = []
    for (t0, t1, t2, t3, att) in marks:
        lo = bisect.bisect_left(send_ts, t0)
        hi = bisect.bisect_left(send_ts, t3 + 200_000_000)  # until 200 ms after DeleteRule returned
        runs = []  # [first index, length] of each run of missing datagrams
        for i in range(lo, hi):
            if i not in got:
                if runs and runs[-1][0] + runs[-1][1] == i:
                    runs[-1][1] += 1
                else:
                    runs.append([i, 1])
        first = next((r for r in runs if r[1] >= 10), None)
        before_delete = bisect.bisect_left(send_ts, t2) - 1
        main = next((r for r in runs if r[0] <= before_delete < r[0] + r[1]), None)
        ctrl_lost = [i for i in ctrl_missing if lo <= i < hi]
        if main is None or first is None:
            tries_out.append({"rpc_us": round((t1 - t0) / 1e3, 1), "to_first_drop_us": None,
                              "missing_runs": runs[:6], "attachments": att})
            continue
        m, k = first[0], main[0] + main[1]  # first missing; first through again after the rule
        rel = lambda t, base: round((t - base) / 1e3, 1)  # noqa: E731
        last_ok = max((s for s in range(max(0, m - 2000), m) if s in got), default=None)
        tries_out.append({
            "rpc_us": rel(t1, t0),
            # the first missing datagram (starting a run of >= 10); it was sent at this time
            "to_first_drop_us": rel(send_ts[m], t0),
            # the start of the run of drops that lasted until DeleteRule (the rule's own)
            "to_rule_run_start_us": rel(send_ts[main[0]], t0),
            "first_missing_is_rule_run": first is main,
            # resolution: the send gap before the first missing datagram (the sender is a
            # busy loop; a descheduled sender leaves longer gaps)
            "resolution_us": rel(send_ts[m], send_ts[m - 1]) if m else None,
            "last_sent_before_first_drop_us": rel(send_ts[m - 1], t0) if m else None,
            "last_through_us": rel(got[last_ok], t0) if last_ok is not None else None,
            "dropped_before_rpc_returned": send_ts[m] < t1,
            "delete_rpc_us": rel(t3, t2),
            "delete_last_dropped_us": rel(send_ts[k - 1], t2),
            "delete_first_through_us": rel(send_ts[k], t2) if k < len(send_ts) else None,
            "dropped_run": main[1],
            "other_missing": sum(r[1] for r in runs if r is not main),
            "missing_runs_us": [[rel(send_ts[r[0]], t0), r[1]] for r in runs[:6]],
            "control_flow_lost": len(ctrl_lost),
            "control_flow_lost_at_us": [rel(send_ts[i], t0) for i in ctrl_lost[:6]],
            "attachments": att})
    ok = [t for t in tries_out if t.get("to_first_drop_us") is not None]
    return {
        "variant": "%s %s" % (direction, "warm" if warm else "cold"),
        "rule": "interface %s, %s, udp dport %d, rate 1.0%s" % (
            lab.IF_A, direction, PORT_UDP, " (another rule on the hook: dport %d)" % PORT_HOLD if warm else ""),
        "sent": txr["sent"], "received": rxr["received"],
        "send_interval_us": {"median": round(med(ivs) / 1e3, 1) if ivs else None,
                             "p99": round(sorted(ivs)[int(len(ivs) * 0.99)] / 1e3, 1) if ivs else None,
                             "max": round(max(ivs) / 1e3, 1) if ivs else None},
        "tries": tries_out,
        "tries_with_drop": len(ok),
        "median_rpc_us": med(t["rpc_us"] for t in tries_out),
        "median_to_first_drop_us": med(t["to_first_drop_us"] for t in ok),
        "max_to_first_drop_us": max((t["to_first_drop_us"] for t in ok), default=None),
        "median_last_through_us": med(t["last_through_us"] for t in ok),
        "median_delete_rpc_us": med(t["delete_rpc_us"] for t in ok),
        "median_delete_first_through_us": med(t["delete_first_through_us"] for t in ok),
        "median_to_rule_run_start_us": med(t["to_rule_run_start_us"] for t in ok),
        "median_resolution_us": med(t["resolution_us"] for t in ok),
        "tries_resolution_over_500us": sum(1 for t in ok if (t["resolution_us"] or 0) > 500),
        "tries_first_missing_not_rule_run": sum(1 for t in ok if not t["first_missing_is_rule_run"]),
        "tries_with_other_missing": sum(1 for t in ok if t["other_missing"]),
        "control_flow": {"port": PORT_CTRL, "interval_us": 200, "sent": (len(send_ts) + 3) // 4,
                         "lost": len(ctrl_missing),
                         "lost_in_try_windows": sum(t.get("control_flow_lost", 0) for t in tries_out)},
        "dropped_before_rpc_returned": sum(1 for t in ok if t["dropped_before_rpc_returned"]),
    }


# ---- 2. batch create / clear -----------------------------------------------------------------

def create_rules(d, req):
    """One CreateRules: its start and end (monotonic ns), rules created, the errors."""
    t0 = time.monotonic_ns()
    resp = d.inj.CreateRules(req, timeout=600)
    t1 = time.monotonic_ns()
    return t0, t1, len(resp.rules), [e for e in resp.errors if e]


def batches(lab, d, n_batches, n_rules=1000):
    runs = []
    specs = [spec(lab.IF_A, "ingress", BATCH_BASE_PORT + i, 0.01) for i in range(n_rules)]
    req = pb.CreateRulesRequest(specs=specs)
    for i in range(n_batches):
        t0, t1, created, errors = create_rules(d, req)
        listed = len(d.inj.ListRules(pb.ListRulesRequest(), timeout=60).rules)
        t2 = time.monotonic_ns()
        cl = d.inj.ClearRules(pb.ClearRulesRequest(), timeout=300)
        t3 = time.monotonic_ns()
        runs.append({"create_ms": round((t1 - t0) / 1e6, 2), "clear_ms": round((t3 - t2) / 1e6, 2),
                     "created": created, "errors": len(errors), "first_error": errors[0] if errors else None,
                     "listed": listed, "cleared": cl.deleted})
        log("batch %d: CreateRules(%d) %.1f ms, ClearRules %.1f ms (created %d, cleared %d)"
            % (i, n_rules, runs[-1]["create_ms"], runs[-1]["clear_ms"], created, cl.deleted))
    ok = all(r["created"] == n_rules and r["errors"] == 0 and r["cleared"] == n_rules for r in runs)
    return {"rules_per_batch": n_rules,
            "spec": "interface %s ingress, udp dport %d..%d, rate 0.01" % (
                lab.IF_A, BATCH_BASE_PORT, BATCH_BASE_PORT + n_rules - 1),
            "runs": runs, "all_created_and_cleared": ok,
            "median_create_ms": med(r["create_ms"] for r in runs),
            "median_clear_ms": med(r["clear_ms"] for r in runs),
            "median_create_us_per_rule": round(med(r["create_ms"] for r in runs) * 1e3 / n_rules, 2)}


# ---- 2b. rule changes at scale: one CreateRules of N rules, ListRules of N --------------------

SCALE_TARGET_CREATE_MS = 1000.0   # issue 11: 10,000 rules in one CreateRules < 1 s
SCALE_TARGET_LIST_MS = 200.0      # issue 11: ListRules of 10,000 rules < 200 ms


def scale(lab, d, n_rules, rounds):
    """Per round: CreateRules(n_rules) (distinct UDP dports on A's veth, ingress, 1 %), then
    ListRules 3 times (through the stub: the full round trip with Python's parse; and raw: the
    same call returning bytes, so the server's share is told from the client's parse), then
    ClearRules. Client-side costs are timed apart: serialising the request, parsing the reply."""
    if BATCH_BASE_PORT + n_rules > 65536:
        raise ValueError("--scale %d: ports past 65535" % n_rules)
    specs = [spec(lab.IF_A, "ingress", BATCH_BASE_PORT + i, 0.01) for i in range(n_rules)]
    req = pb.CreateRulesRequest(specs=specs)
    t0 = time.monotonic_ns()
    req_bytes = req.SerializeToString()
    ser_ms = (time.monotonic_ns() - t0) / 1e6
    raw_list = d.channel.unary_unary("/lossd.v1.Injector/ListRules",
                                     request_serializer=pb.ListRulesRequest.SerializeToString,
                                     response_deserializer=None)
    runs = []
    for i in range(rounds):
        t0, t1, created, errors = create_rules(d, req)
        lists, raws, parse = [], [], []
        listed = 0
        for _ in range(3):
            a = time.monotonic_ns()
            lr = d.inj.ListRules(pb.ListRulesRequest(), timeout=60)
            b = time.monotonic_ns()
            listed = len(lr.rules)
            raw = raw_list(pb.ListRulesRequest(), timeout=60)
            c = time.monotonic_ns()
            pb.ListRulesResponse.FromString(raw)
            e = time.monotonic_ns()
            lists.append((b - a) / 1e6)
            raws.append((c - b) / 1e6)
            parse.append((e - c) / 1e6)
        t2 = time.monotonic_ns()
        cl = d.inj.ClearRules(pb.ClearRulesRequest(), timeout=600)
        t3 = time.monotonic_ns()
        runs.append({"create_ms": round((t1 - t0) / 1e6, 2), "created": created, "errors": len(errors),
                     "first_error": errors[0] if errors else None, "listed": listed,
                     "list_ms": [round(x, 2) for x in lists], "list_raw_ms": [round(x, 2) for x in raws],
                     "list_client_parse_ms": [round(x, 2) for x in parse],
                     "list_reply_bytes": len(raw), "clear_ms": round((t3 - t2) / 1e6, 2), "cleared": cl.deleted})
        log("scale %d: CreateRules(%d) %.1f ms, ListRules %.1f ms (raw %.1f, parse %.1f), ClearRules %.1f ms"
            % (i, n_rules, runs[-1]["create_ms"], min(lists), min(raws), min(parse), runs[-1]["clear_ms"]))
    ok = all(r["created"] == n_rules and r["errors"] == 0 and r["listed"] == n_rules and r["cleared"] == n_rules
             for r in runs)
    create = med(r["create_ms"] for r in runs)
    listm = med(x for r in runs for x in r["list_ms"])
    return {"rules": n_rules, "rounds": rounds,
            "spec": "interface %s ingress, udp dport %d..%d, rate 0.01" % (
                lab.IF_A, BATCH_BASE_PORT, BATCH_BASE_PORT + n_rules - 1),
            "request_bytes": len(req_bytes), "client_serialize_request_ms": round(ser_ms, 2),
            "runs": runs, "all_created_listed_cleared": ok,
            "median_create_ms": create, "median_list_ms": listm,
            "median_list_raw_ms": med(x for r in runs for x in r["list_raw_ms"]),
            "median_list_client_parse_ms": med(x for r in runs for x in r["list_client_parse_ms"]),
            "median_clear_ms": med(r["clear_ms"] for r in runs),
            "target": {"create_lt_ms": SCALE_TARGET_CREATE_MS, "list_lt_ms": SCALE_TARGET_LIST_MS,
                       "create_pass": bool(ok and create < SCALE_TARGET_CREATE_MS),
                       "list_pass": bool(ok and listm < SCALE_TARGET_LIST_MS)}}


# ---- 3. events to subscribers -----------------------------------------------------------------

def events_round(lab, d, args, nsubs, queue=65536):
    subs = [helper(lab, lab.a, ["_subscribe", "--socket", d.sock, "--stubs", args.stubs, "--queue", str(queue)])
            for _ in range(nsubs)]
    marks = [{"mark": 0, "gaps": {}} for _ in subs]
    drained = False
    try:
        end = time.monotonic() + 30
        while d.health().subscribers < nsubs:
            if time.monotonic() > end:
                raise RuntimeError("subscribers did not register: %d of %d" % (d.health().subscribers, nsubs))
            time.sleep(0.05)
        time.sleep(1.0)  # quiet: no traffic
        ref0 = bpf_totals(d)
        for i, p in enumerate(subs):
            p.stdin.write("mark\n")
            p.stdin.flush()
            marks[i] = json.loads(p.stdout.readline())
        cpu0 = cpu_secs(d.pid)
        thr0 = thread_cpu(d.pid)
        c0 = lab.counters(lab.a)
        t0 = time.monotonic_ns()
        gbps = traffic.iperf(lab, lab.a, lab.V4_B, PORT_TCP, args.seconds, args.streams)["gbps"]
        t1 = time.monotonic_ns()
        lab.wait_idle(lab.a, port=PORT_TCP, timeout=60, check=False)
        ref1 = bpf_totals(d)
        dk = lab.counters(lab.a) - c0
        # Let every stream drain and report its last gaps (Gap messages go out once a
        # second): poll every subscriber's counts once a second until none changed for
        # two polls in a row, then 2.5 s more, then read them once more.
        def counts():
            out = []
            for p in subs:
                p.stdin.write("mark\n")
                p.stdin.flush()
                m = json.loads(p.stdout.readline())
                out.append((m["mark"], sum(m["gaps"].values())))
            return out
        prev, stable = counts(), 0
        while stable < 2 and time.monotonic_ns() - t1 < args.drain_timeout * 1e9:
            time.sleep(1.0)
            cur = counts()
            stable = stable + 1 if cur == prev else 0
            prev = cur
        drained = stable >= 2
        time.sleep(2.5)
        if counts() != prev:
            drained = False
        cpu1 = cpu_secs(d.pid)
        thr1 = thread_cpu(d.pid)
        t_stop = time.monotonic_ns()
    finally:
        results = []
        for p in subs:
            try:
                results.append(finish(p, timeout=60))
            except Exception as e:  # noqa: BLE001
                results.append({"error": str(e)})
    published = (ref1["events"] - ref0["events"]) - (ref1["filtered"] - ref0["filtered"])
    closes = ref1["flows_closed"] - ref0["flows_closed"]
    ring_lost = ref1["ring_lost"] - ref0["ring_lost"]
    per = []
    for s, mk in zip(results, marks):
        if s.get("error") and "events" not in s:
            per.append(s)
            continue
        # only what arrived after the reference was read
        s["events"] -= mk["mark"]
        for k, v in mk["gaps"].items():
            s["gaps"][k] -= v
        gaps = sum(s["gaps"].values())
        acc = s["events"] + gaps
        span = (s["last_mono_ns"] - t0) / 1e9 if s["last_mono_ns"] else None
        per.append({"events": s["events"], "gaps": s["gaps"], "received_plus_gaps": acc,
                    "minus_published": acc - published,
                    "accounted": 0 <= acc - published <= closes,
                    "exact": acc == published,
                    "seq_ok": s["seq_ok"], "error": s["error"],
                    "duplicate_events": s.get("duplicates"),
                    "events_per_s": round(s["events"] / span) if span else None,
                    "last_event_after_traffic_end_s": round((s["last_mono_ns"] - t1) / 1e9, 3)
                    if s["last_mono_ns"] else None,
                    "client_cpu_secs": s.get("cpu_secs")})
    good = [p for p in per if "events" in p]
    traffic_s = (t1 - t0) / 1e9
    out = {"subscribers": nsubs, "queue": queue, "drained_before_stop": drained, "gbps": round(gbps, 3),
           "traffic_secs": round(traffic_s, 3),
           "published_retransmit_events": published, "published_per_s": round(published / traffic_s),
           "flow_closes": closes, "ring_lost": ring_lost, "daemon_event_types": {
               k: ref1["by_type"].get(k, 0) - ref0["by_type"].get(k, 0) for k in ref1["by_type"]},
           "kernel_RetransSegs": dk["Tcp.RetransSegs"],
           "per_subscriber": per,
           "all_accounted": drained and len(good) == nsubs and all(
               p["accounted"] and p["seq_ok"] and not p["error"] for p in good),
           "max_received_plus_gaps": max((p["received_plus_gaps"] for p in good), default=None),
           "events_per_s_per_subscriber_median": med(p["events_per_s"] for p in good),
           "events_per_s_per_subscriber_min": min((p["events_per_s"] or 0 for p in good), default=None),
           "events_per_s_total": sum(p["events_per_s"] or 0 for p in good),
           "events_received_total": sum(p["events"] for p in good),
           "subscriber_gaps_total": sum(p["gaps"].get("GAP_SOURCE_SUBSCRIBER", 0) for p in good),
           "daemon_cpu_secs": round(cpu1 - cpu0, 3),
           "daemon_cpu_us_per_event_written": round((cpu1 - cpu0) / max(1, sum(p["events"] for p in good)) * 1e6, 2),
           "clients_cpu_secs": round(sum(p["client_cpu_secs"] or 0 for p in good), 3),
           "daemon_threads_cpu_secs": thread_delta(thr0, thr1),
           "window_secs": round((t_stop - t0) / 1e9, 3)}
    return out


def events(lab, d, args):
    lab.run(lab.a, "ethtool", "-K", lab.IF_A, "tso", "off", "gso", "off")
    inj = lab.lossd(lab.b, ["--iface", lab.IF_B, "--proto", "tcp", "--dport", str(PORT_TCP),
                            "--payload", "only", "--rate", args.loss, "--interval", "1h"])
    srv = traffic.iperf_server(lab, lab.b, PORT_TCP)
    # (name, subscribers, queue): the last one, a deliberately small queue, makes the
    # daemon drop events for the subscriber, so the Gap accounting is exercised too.
    configs = [("1", 1, 65536), (str(args.subscribers), args.subscribers, 65536)]
    if args.small_queue:
        configs.append(("1_queue%d" % args.small_queue, 1, args.small_queue))
    runs = {c[0]: [] for c in configs}
    for i in range(args.rounds):
        k = i % len(configs)
        for name, n, q in configs[k:] + configs[:k]:
            r = events_round(lab, d, args, n, q)
            r["round"] = i
            runs[name].append(r)
            log("events round %d, %s: published %d (%d/s), per subscriber %s/s (median), "
                "total %d/s, gaps %d, accounted %s"
                % (i, name, r["published_retransmit_events"], r["published_per_s"],
                   r["events_per_s_per_subscriber_median"], r["events_per_s_total"],
                   r["subscriber_gaps_total"], r["all_accounted"]))
    inj.stop()
    srv.kill()
    summary = {}
    for c, _, _ in configs:
        rs = runs[c]
        summary[c] = {
            "published_per_s": med(r["published_per_s"] for r in rs),
            "events_per_s_per_subscriber": med(r["events_per_s_per_subscriber_median"] for r in rs),
            "events_per_s_total": med(r["events_per_s_total"] for r in rs),
            "subscriber_gaps_total": med(r["subscriber_gaps_total"] for r in rs),
            "daemon_cpu_us_per_event_written": med(r["daemon_cpu_us_per_event_written"] for r in rs),
            "all_accounted_every_round": all(r["all_accounted"] for r in rs),
        }
    return {"generator": {"sender_offloads": "ethtool -K <A veth> tso off gso off",
                          "injector": "one-shot lossd --iface <B veth> --proto tcp --dport %d --payload only "
                                      "--rate %s (B's ingress)" % (PORT_TCP, args.loss),
                          "traffic": "iperf3 -c B -p %d -t %d -P %d" % (PORT_TCP, args.seconds, args.streams)},
            "runs": runs, "median": summary}


def main():
    if len(sys.argv) > 1 and sys.argv[1].startswith("_"):
        ap = argparse.ArgumentParser()
        ap.add_argument("cmd")
        ap.add_argument("--dst")
        ap.add_argument("--bind")
        ap.add_argument("--port", type=int)
        ap.add_argument("--ctrl-port", type=int)
        ap.add_argument("--interval-ns", type=int, default=50000)
        ap.add_argument("--out")
        ap.add_argument("--socket")
        ap.add_argument("--stubs")
        ap.add_argument("--queue", type=int, default=65536)
        a = ap.parse_args()
        {"_udp-send": cmd_udp_send, "_udp-recv": cmd_udp_recv, "_subscribe": cmd_subscribe}[a.cmd](a)
        return 0
    ap = argument_parser(__doc__)
    ap.add_argument("--tries", type=int, default=10, help="create-to-first-drop tries per variant (>= 10)")
    ap.add_argument("--batches", type=int, default=5, help="1,000-rule batches (>= 5)")
    ap.add_argument("--rounds", type=int, default=3, help="event-rate rounds per configuration")
    ap.add_argument("--seconds", type=int, default=4, help="generator traffic length")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--loss", default="30%")
    ap.add_argument("--subscribers", type=int, default=10)
    ap.add_argument("--drain-timeout", type=int, default=300,
                    help="most seconds to wait for the subscribers to drain after the traffic")
    ap.add_argument("--small-queue", type=int, default=512,
                    help="also run 1 subscriber with this queue length (Gap accounting); 0: skip")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-batch", action="store_true")
    ap.add_argument("--skip-events", action="store_true")
    ap.add_argument("--scale", type=int, default=10000,
                    help="rules in one CreateRules and one ListRules (issue 11); 0: skip")
    ap.add_argument("--scale-rounds", type=int, default=3)
    ap.add_argument("--max-rules", type=int, default=0,
                    help="lossd --max-rules (0: lossd's default, 10000)")
    args = parse_args(ap, lambda a: "--tries must be >= 10 and --batches >= 5"
                      if a.tries < 10 or a.batches < 5 else None)
    args.stubs = os.path.abspath(args.stubs)
    if not os.path.exists(os.path.join(args.stubs, "lossd", "v1", "lossd_pb2.py")):
        ap.error("no generated stubs in %s" % args.stubs)
    use_stubs(args.stubs)
    out = {"benchmark": "daemon",
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "kernel": os.uname().release, "cpus": os.cpu_count(), "lossd": args.lossd,
           "lossd_binary": binary_id(args.lossd),
           "command": " ".join([sys.executable] + sys.argv), "loadavg_1m_start": os.getloadavg()[0],
           "grpcio": grpc.__version__,
           "git_at_run": git_describe()}
    targets = {}
    with Lab() as lab:
        extra = ("--max-rules", str(args.max_rules)) if args.max_rules else ()
        d = Daemon(lab, lab.a, extra=extra, ready_timeout=180)
        out["daemon"] = {"namespace": "A", "ready_secs": round(d.startup_secs, 2),
                         "command": "lossd --json --state-dir <tmp> --socket <tmp>/lossd.sock " + " ".join(extra)}
        try:
            if not args.skip_latency:
                lat = []
                for direction in ("ingress", "egress"):
                    for warm in (False, True):
                        v = latency_variant(lab, d, direction, warm, args.tries)
                        log("latency %s: rpc %.0f us, to first drop %s us (median of %d)"
                            % (v["variant"], v["median_rpc_us"], v["median_to_first_drop_us"],
                               v["tries_with_drop"]))
                        lat.append(v)
                out["create_to_first_drop"] = lat
            if not args.skip_batch:
                out["batch"] = batches(lab, d, args.batches)
            if args.scale:
                out["scale"] = scale(lab, d, args.scale, args.scale_rounds)
                targets["scale_create_pass"] = out["scale"]["target"]["create_pass"]
                targets["scale_list_pass"] = out["scale"]["target"]["list_pass"]
            if not args.skip_events:
                out["events"] = events(lab, d, args)
                for c, s in out["events"]["median"].items():
                    targets["events_per_s_per_subscriber_%s" % c] = s["events_per_s_per_subscriber"]
                    targets["events_accounted_%s" % c] = s["all_accounted_every_round"]
                targets["events_per_s_min"] = TARGET_EVENTS_PER_S
                one = out["events"]["median"]["1"]["events_per_s_per_subscriber"]
                targets["events_pass"] = bool(one and one >= TARGET_EVENTS_PER_S
                                              and out["events"]["median"]["1"]["all_accounted_every_round"])
        finally:
            rc = d.term(60)
            if rc != 0:
                raise RuntimeError("lossd exited %d; stderr:\n%s" % (rc, d.stderr()))
    out["loadavg_1m_end"] = os.getloadavg()[0]
    targets["pass"] = all(v for k, v in targets.items() if k.endswith("_pass"))
    out["targets"] = targets
    # Sanity checks (not targets): a failed one makes the exit status 1.
    problems = []
    for v in out.get("create_to_first_drop", []):
        if v["tries_with_drop"] != len(v["tries"]):
            problems.append("%s: %d of %d tries saw no run of drops"
                            % (v["variant"], len(v["tries"]) - v["tries_with_drop"], len(v["tries"])))
    if "scale" in out and not out["scale"]["all_created_listed_cleared"]:
        problems.append("scale: not every rule was created, listed and cleared")
    if "batch" in out and not out["batch"]["all_created_and_cleared"]:
        problems.append("batch: not every rule was created and cleared")
    for c, rs in out.get("events", {}).get("runs", {}).items():
        for r in rs:
            if not r["all_accounted"]:
                problems.append("events %s round %d: not every event accounted for (drained %s)"
                                % (c, r["round"], r["drained_before_stop"]))
    return report(out, problems)


if __name__ == "__main__":
    sys.exit(main())
