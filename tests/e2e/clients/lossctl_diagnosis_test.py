"""Client e2e: why a flow is slow, through lossctl (flows LIMIT/STALLS, stalls, flow trace).

One daemon in the sender's namespace A; a request/response client in A (tcpflow.py rr:
14,480-byte requests, 10 segments each, answered by 100 bytes from B) through a rule on A's
egress that drops 10 % of the data segments carrying PSH, the tail of each request: lost
block tails, each waited out by a tail loss probe or an RTO (a stall of ~200 ms against a
veth RTT of microseconds; 300 requests, 20 ms apart: ~30 lost tails (P(fewer than 3) < 1e-9), most waited out past the 10 ms threshold).

  test_trace_stalls_and_flows
    Started before the traffic: `lossctl stalls --port P --count 3` (text) and `-o json`;
    `lossctl flow trace --port P --wait 30s -o T.json -o T.csv --plot T.png --plot T.svg`.
    While the flow runs: `lossctl -o json flows --port P` shows a dominant limit with a
    share in (0, 1], stalls >= 1 with their time by cause; the table at COLUMNS=80 and 160
    fits the width and shows LIMIT ("app 97%") and STALLS ("2/410ms") for the flow.
    `stalls` prints three stalls with a network cause (tlp or rto) and its evidence, the
    JSON form three StallEvents of the flow, seq 1, 2, 3.
    After the flow closed: the trace command exits 0; the JSON has every message in order
    (seq 1..N without holes), the flow first and its closing summary last, samples in time
    order, snd_una non-decreasing (mod 2^32), its retransmitted segments == the closing
    summary's minus the first message's (the flow when the trace began), and the summary's
    == the namespace's TcpRetransSegs delta; its stalls likewise; the CSV has one row per sample and one per retransmit/stall/drop;
    the PNG is a valid PNG of at least 800x500 pixels and 20 KB, the SVG valid XML with
    the plot's labels. Copies go to <build>/e2e-artifacts/lossctl_trace.{json,csv,png,svg}.
"""
import csv
import json
import os
import shutil
import struct
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET

from lab import traffic
from lab.clients import ClientTestCase, client_popen, table_rows, u64
from lab.config import artifact, main
from lab.daemon import wait_until
from lab.netns import measured

PORT = 5311
REQUESTS = 300
# The rule drops the last segment of a request: TCP recovers it by a tail loss probe or an RTO, and
# on a loaded machine sometimes by RACK's fast retransmit (the next request's segments arrive first).
NETWORK_CAUSES = ("STALL_CAUSE_TLP", "STALL_CAUSE_RTO", "STALL_CAUSE_FAST_RECOVERY")


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        raise AssertionError("%s is not a PNG: %r" % (path, head[:8]))
    return struct.unpack(">II", head[16:24])


def finish(p, timeout, what):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError("%s did not end within %ss: stdout %r stderr %r" % (what, timeout, out, err))
    return p.returncode, out, err


class LossctlDiagnosis(ClientTestCase):
    def ctl_cols(self, columns, *args):
        p = client_popen(self.lab, self.d.ctl_cmd(*args), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                         env={"COLUMNS": str(columns)})
        rc, out, err = finish(p, 30, "lossctl %s" % " ".join(map(str, args)))
        self.assertEqual(rc, 0, err)
        return out

    def test_trace_stalls_and_flows(self):
        d, lab = self.d, self.lab
        tmp = tempfile.mkdtemp(prefix="lossctl-trace-")
        self.addCleanup(shutil.rmtree, tmp, True)
        files = {ext: os.path.join(tmp, "trace." + ext) for ext in ("json", "csv", "png", "svg")}
        rule = d.add_rule("--iface", lab.IF_A, "--dir", "egress", "--proto", "tcp", "--dport", str(PORT),
                          "--payload", "only", "--tcp-flags", "psh", "--rate", "10%")
        rid = rule["id"]

        stalls_t = d.ctl_popen("stalls", "--port", PORT, "--count", 3)
        stalls_j = d.ctl_popen("-o", "json", "stalls", "--port", PORT, "--count", 3)
        trace = d.ctl_popen("flow", "trace", "--port", PORT, "--wait", "30s",
                            "-o", files["json"], "-o", files["csv"],
                            "--plot", files["png"], "--plot", files["svg"])
        time.sleep(3.0)  # the three streams are open (the Python client starts in ~1 s)
        for name, p in (("stalls", stalls_t), ("stalls -o json", stalls_j), ("flow trace", trace)):
            if p.poll() is not None:
                self.fail("lossctl %s ended early: %r" % (name, p.communicate()))

        c0 = lab.counters(lab.a)
        srv = traffic.rr_server(lab, lab.b, "0.0.0.0", PORT, conns=1)
        cli = lab.popen(lab.a, traffic.rr_cmd(lab.V4_B, PORT, "--request", 14480, "--response", 100,
                                              "--count", REQUESTS, "--gap-ms", 20, "--no-latencies"),
                        stdout=subprocess.PIPE)

        # --- flows while it runs: a limit, and stalls
        def slow_flow():
            fl = [f for f in d.ctlj("flows", "--port", PORT).get("flows", [])
                  if f["tuple"]["remote_port"] == PORT and not f.get("closed")]
            if fl and fl[0].get("dominant_limit") and fl[0].get("stalls", 0) >= 1:
                return fl[0]
            return None
        f = wait_until(slow_flow, 60, "lossctl flows to show the flow with a limit and a stall", step=0.2)
        tables = {w: self.ctl_cols(w, "flows", "--port", PORT) for w in (80, 160)}
        self.assertGreater(f["dominant_share"], 0, f)
        self.assertLessEqual(f["dominant_share"], 1, f)
        self.assertGreater(u64(f["limit_ns"].get("busy")), 0, f)
        self.assertIn(f["dominant_limit"], ("rwnd_limited", "sndbuf_limited", "cwnd_limited", "nagle_limited", "app_limited"), f)
        self.assertGreater(sum(u64(v) for v in f["stall_ns"].values()), 0, f)
        lport = f["tuple"]["local_port"]
        for width, text in tables.items():
            head, rows = table_rows(text)
            for line in text.splitlines():
                self.assertLessEqual(len(line), width, text)
            self.assertIn("LIMIT", head, text)
            self.assertIn("STALLS", head, text)
            mine = [r for r in rows if r.get("LOCAL") == "%s:%d" % (lab.V4_A, lport)]
            self.assertEqual(len(mine), 1, text)
            self.assertRegex(mine[0]["LIMIT"], r"^(rwnd|sndbuf|cwnd|app) \d+%$", text)
            self.assertRegex(mine[0]["STALLS"], r"^\d+/[\d.]+(ms|s)( stalled [\d.]+(ms|s))?$", text)
        self.assertIn("COOKIE", table_rows(tables[160])[0], tables[160])

        rr = traffic.finish(cli, timeout=120)
        traffic.finish(srv, timeout=30)
        self.assertEqual(rr["requests"], REQUESTS, rr)
        lab.wait_idle(port=PORT)
        da = lab.counters(lab.a) - c0

        # --- lossctl stalls
        rc, out_t, err_t = finish(stalls_t, 30, "lossctl stalls")
        self.assertEqual(rc, 0, err_t)
        rc, out_j, err_j = finish(stalls_j, 30, "lossctl -o json stalls")
        self.assertEqual(rc, 0, err_j)
        lines = [l for l in out_t.splitlines() if l.strip()]
        self.assertEqual(len(lines), 3, out_t)
        for l in lines:
            self.assertIn("%s:%d > %s:%d" % (lab.V4_A, lport, lab.V4_B, PORT), l)
            self.assertRegex(l, r" (tlp|rto|fast_recovery) +[\d.]+(ms|s)  "
                             r"(tail loss probe|rto backoff \d+|fast retransmit after \d+ dupacks?)", l)
            if " fast_recovery " in l:  # only as the rule's doing
                self.assertRegex(l, r"caused by rule %d's drop of seq \d+\+\d+" % rid, l)
        msgs = [json.loads(l) for l in out_j.splitlines() if l.strip()]
        self.assertEqual([int(m["seq"]) for m in msgs], [1, 2, 3], out_j)
        for m in msgs:
            ev = m["event"]
            self.assertIn(ev["cause"], NETWORK_CAUSES, ev)
            self.assertEqual(ev["tuple"]["local_port"], lport, ev)
            self.assertGreater(u64(ev["duration_ns"]), u64(ev["threshold_ns"]), ev)

        # --- the trace
        rc, out, err = finish(trace, 60, "lossctl flow trace")
        self.assertEqual(rc, 0, "stdout %r stderr %r" % (out, err))
        for ext in ("json", "csv", "png", "svg"):
            shutil.copy(files[ext], artifact("lossctl_trace." + ext))
        with open(files["json"]) as fh:
            doc = json.load(fh)
        tm = doc["messages"]
        self.assertEqual([int(m["seq"]) for m in tm], list(range(1, len(tm) + 1)))
        self.assertIn("flow", tm[0])
        self.assertIn("closed", tm[-1])
        self.assertEqual(tm[0]["flow"]["tuple"]["local_port"], lport)
        closed = tm[-1]["closed"]
        samples = [m["sample"] for m in tm if "sample" in m]
        rtx = [m["retransmit"] for m in tm if "retransmit" in m]
        stalls = [m["stall"] for m in tm if "stall" in m]
        gaps = [m["gap"] for m in tm if "gap" in m]
        self.assertEqual(gaps, [])
        self.assertGreater(len(samples), REQUESTS, "an ACK at least per request")
        times = [u64(s["time_mono_ns"]) for s in samples]
        self.assertEqual(times, sorted(times))
        una = [s["snd_una"] for s in samples]
        back = [(a, b) for a, b in zip(una, una[1:]) if (b - a) % (1 << 32) >= 1 << 31]
        self.assertEqual(back, [], "snd_una went backwards")
        self.assertGreaterEqual((una[-1] - una[0]) % (1 << 32), (REQUESTS - 1) * 14480)
        rtx_segs = sum(r["segments"] for r in rtx)
        flow_segs = sum(u64(v) for v in closed["retransmitted_segments"].values())
        # The trace covers the flow from its first message (the flow as it was then) on.
        before = sum(u64(v) for v in tm[0]["flow"]["retransmitted_segments"].values())
        stalls_before = tm[0]["flow"].get("stalls", 0)
        nums = dict(samples=len(samples), retransmits=len(rtx), retransmitted_segments=rtx_segs,
                    flow_retransmitted=flow_segs, before_trace=before, stalls_before_trace=stalls_before, kernel_retrans_segs=da["Tcp.RetransSegs"],
                    stalls=len(stalls), flow_stalls=closed.get("stalls", 0),
                    causes=sorted({s["cause"] for s in stalls}),
                    stall_ns={k: u64(v) for k, v in closed["stall_ns"].items()},
                    dominant=(closed["dominant_limit"], closed["dominant_share"]), stdout=out.strip())
        measured("lossctl_trace", **nums)
        self.assertGreater(rtx_segs, 0, nums)
        self.assertEqual(rtx_segs, flow_segs - before, nums)
        self.assertEqual(flow_segs, da["Tcp.RetransSegs"], nums)
        self.assertEqual(len(stalls), closed.get("stalls", 0) - stalls_before, nums)
        # The drops' stalls are the network's (a probe's or the timer's wait, or, when a later
        # request's segment is SACKed first on a busy machine whose RTT grew past a
        # millisecond, a fast recovery that lasted over the threshold); a busy machine may add
        # a short one of its own (the receiver or the sender descheduled), which no rule caused.
        network = [s for s in stalls if s["cause"] in NETWORK_CAUSES]
        self.assertGreaterEqual(len(network), 3, nums)
        for s in stalls:
            if s["cause"] not in NETWORK_CAUSES + ("STALL_CAUSE_FAST_RECOVERY",):
                self.assertNotIn("caused_by", s, s)
        self.assertIn("%d samples" % len(samples), out)

        with open(files["csv"]) as fh:
            rows = list(csv.DictReader(fh))
        kinds = [r["kind"] for r in rows]
        self.assertEqual(kinds.count("sample"), len(samples))
        self.assertEqual(kinds.count("retransmit"), len(rtx))
        self.assertEqual(kinds.count("stall"), len(stalls))
        self.assertEqual(kinds.count("drop"), sum("drop" in m for m in tm))

        w, h = png_size(files["png"])
        self.assertGreaterEqual((w, h), (800, 500), (w, h))
        self.assertGreater(os.path.getsize(files["png"]), 20000)
        root = ET.parse(files["svg"]).getroot()
        self.assertTrue(root.tag.endswith("svg"), root.tag)
        with open(files["svg"]) as fh:
            svg = fh.read()
        for label in ("snd_una", "retransmission", "stall: ", "cwnd", "in flight", "sequence"):
            self.assertIn(label, svg)

        # The rule's effect, drop by drop: its tail drops' resends and the stalls they made.
        out = self.d.ctl_ok("rule", "effect", str(rid)).out
        caused = [l for l in out.splitlines() if l.strip().startswith("stalls caused")]
        self.assertEqual(len(caused), 1, out)
        self.assertRegex(caused[0], r"(tlp|rto) \d+/[\d.]+(ms|s)", out)
        resent = [l for l in out.splitlines() if l.strip().startswith("resent drops")]
        self.assertRegex(resent[0], r"(tlp|rto|fast|loss) \d+ \(mean [\d.]+(us|ms|s), max", out)
        logged = [l for l in out.splitlines() if l.strip().startswith("drops logged")]
        self.assertRegex(logged[0], r"drops logged +[1-9]\d* TCP data skbs", out)


if __name__ == "__main__":
    main()
