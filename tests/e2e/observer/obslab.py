"""Lab for the TCP observer's end-to-end tests (stdlib only).

A Lab is two network namespaces with unique names (lossd-obs-<pid>-<hex>-a/b)
joined by a veth pair, with documentation-range addresses (198.51.100.0/24,
2001:db8:0b5::/64, nodad) that exist only inside them, and permanent
neighbour entries (no ARP/ND in any counted flow). Namespace A is the
client/sender, B the server/receiver. Lab.close() (from with/try-finally,
atexit and SIGTERM/SIGINT/SIGHUP) kills what the lab started and deletes the
namespaces; children get PR_SET_PDEATHSIG(SIGKILL), and a new Lab removes
namespaces that a dead earlier run left behind.

The observer under test is `lossd --observe` in one namespace; its totals are
checked against that namespace's /proc/net/snmp and /proc/net/netstat deltas
(reconcile()), read once every TCP socket there is closed or in TIME-WAIT.
"""

import argparse
import atexit
import ctypes
import json
import os
import queue
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

PREFIX = "lossd-obs"
HERE = os.path.dirname(os.path.abspath(__file__))
FLOW = os.path.join(HERE, "obsflow.py")
PY = "/usr/bin/python3"
TYPES = ("fast", "rto", "loss", "tlp", "syn", "synack", "probe0", "unknown")
OUTCOMES = ("sent", "failed")
LOSSD = None  # set by main()

_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent():
    _libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def log(*a):
    print("[obs %s]" % time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def measured(name, **numbers):
    log("MEASURED %s %s" % (name, json.dumps(numbers, sort_keys=True)))


def sh(*cmd, check=True, timeout=60):
    r = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s%s" % (" ".join(cmd), r.returncode, r.stdout, r.stderr))
    return r


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _ns_pids(ns):
    r = sh("ip", "netns", "pids", ns, check=False)
    return [int(x) for x in r.stdout.split()] if r.returncode == 0 else []


def _kill(pids):
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def reap_stale():
    pat = re.compile(r"^(%s-(\d+)-[0-9a-f]+-[ab])\b" % PREFIX)
    for line in sh("ip", "netns", "list", check=False).stdout.splitlines():
        m = pat.match(line.strip())
        if m and not _alive(int(m.group(2))):
            _kill(_ns_pids(m.group(1)))
            sh("ip", "netns", "del", m.group(1), check=False)
            log("removed stale namespace", m.group(1))


# ---- kernel counters ------------------------------------------------------------

class Counters(dict):
    def __sub__(self, other):
        return Counters({k: v - other.get(k, 0) for k, v in self.items()})

    def __missing__(self, k):
        return 0


def _pairs(text):
    out = {}
    lines = text.splitlines()
    for i in range(0, len(lines) - 1, 2):
        h, v = lines[i].split(), lines[i + 1].split()
        if h and v and h[0] == v[0]:
            for k, x in zip(h[1:], v[1:]):
                out[h[0].rstrip(":") + "." + k] = int(x)
    return out


KEYS = ("Tcp.RetransSegs", "TcpExt.TCPFastRetrans", "TcpExt.TCPSlowStartRetrans",
        "TcpExt.TCPLossProbes", "TcpExt.TCPSynRetrans", "TcpExt.TCPTimeouts",
        "TcpExt.TCPRetransFail", "TcpExt.TCPLostRetransmit", "TcpExt.TCPSpuriousRTOs",
        "TcpExt.TCPLossProbeRecovery", "TcpExt.TCPDSACKRecvSegs", "Tcp.OutSegs")


def short(c):
    return {k.split(".")[1]: c[k] for k in KEYS}


# ---- lossd ----------------------------------------------------------------------

class Lossd:
    """One lossd process; its JSON lines are read by a thread (which a test can pause)."""

    def __init__(self, lab, ns, args):
        self.lab = lab
        self.state_dir = lab.tempdir()
        self.stderr_path = os.path.join(lab.tempdir(), "stderr.log")
        cmd = [LOSSD, "--json", "--state-dir", self.state_dir] + list(args)
        self.cmd = cmd
        with open(self.stderr_path, "w") as err:
            self.proc = lab.popen(ns, cmd, stdout=subprocess.PIPE, stderr=err)
        self.lines = []          # every stdout line, raw
        self.gate = threading.Event()
        self.gate.set()          # clear() to stop reading stdout (back-pressure on lossd)
        self._q = queue.Queue()
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()
        self.ready = None

    def _read(self):
        for line in self.proc.stdout:
            self.gate.wait()
            self.lines.append(line)
            if '"event":"ready"' in line or '"event":"final"' in line:
                self._q.put(line)
        self._q.put(None)

    def stderr(self):
        try:
            with open(self.stderr_path) as f:
                return f.read()
        except OSError:
            return ""

    def wait_ready(self, timeout=40):
        try:
            line = self._q.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("lossd %s: not ready in %ss; stderr:\n%s" % (self.cmd, timeout, self.stderr()))
        if line is None:
            self.proc.wait()
            raise AssertionError("lossd %s exited %s before ready; stderr:\n%s"
                                 % (self.cmd, self.proc.returncode, self.stderr()))
        self.ready = json.loads(line)
        return self.ready

    def wait_exit(self, timeout=30):
        self.proc.wait(timeout=timeout)
        self._t.join(10)
        return self.proc.returncode

    def stop(self, timeout=60):
        """SIGTERM; waits for exit; returns the parsed output (see Output)."""
        self.gate.set()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("lossd did not exit on SIGTERM; stderr:\n" + self.stderr())
        self._t.join(30)
        if self.proc.returncode != 0:
            raise AssertionError("lossd exited %d; stderr:\n%s" % (self.proc.returncode, self.stderr()))
        return Output(self.lines, self.stderr())


class Output:
    """What an observer printed: totals, subscriber, flows, retransmit and flow_close events."""

    def __init__(self, lines, stderr=""):
        self.raw_lines = lines
        self.stderr = stderr
        self.events = []
        self.bad_lines = []
        for l in lines:
            l = l.strip()
            if not l:
                continue
            try:
                self.events.append(json.loads(l))
            except ValueError:
                self.bad_lines.append(l)
        by = lambda k: [e for e in self.events if e.get("event") == k]
        tot = by("observer_totals")
        self.totals = tot[-1] if tot else None
        sub = by("subscriber")
        self.subscriber = sub[-1] if sub else None
        self.flows = [e["flow"] for e in by("flow")]
        self.retransmits = by("retransmit")
        self.closes = by("flow_close")
        fin = by("final")
        self.final = fin[-1] if fin else None

    def ev(self, typ, outcome="sent"):
        return self.totals["types"][typ][outcome]["events"]

    def segs(self, typ, outcome="sent"):
        return self.totals["types"][typ][outcome]["segs"]

    def retrans_types(self):
        return {e["type"] for e in self.retransmits}

    def all_events(self):
        return sum(self.ev(t, o) for t in TYPES for o in OUTCOMES)

    def summary(self):
        t = self.totals
        out = {"retrans_segs": t["retrans_segs"]}
        for ty in TYPES:
            for o in OUTCOMES:
                x = t["types"][ty][o]
                if x["events"] or x["segs"]:
                    out["%s.%s" % (ty, o)] = [x["events"], x["segs"]]
        for k in ("ring_lost", "ring_consumed", "hub_published", "filtered", "flows_opened",
                  "flows_closed", "recursion_misses", "flow_table_full", "arm_failed", "armed_existing"):
            out[k] = t.get(k)
        if self.subscriber:
            out["sub_delivered"] = self.subscriber["delivered"]
            out["sub_lost"] = self.subscriber["lost"]
        out["retransmit_lines"] = len(self.retransmits)
        out["flow_close_lines"] = len(self.closes)
        return out


# ---- the lab --------------------------------------------------------------------

_labs = []


def _close_all():
    for lab in list(_labs):
        lab.close()


def _on_signal(sig, _frame):
    _close_all()
    os._exit(128 + sig)


atexit.register(_close_all)
for _s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(_s, _on_signal)


class Lab:
    IF_A, IF_B = "obsa", "obsb"
    V4_A, V4_B = "198.51.100.1", "198.51.100.2"
    V6_A, V6_B = "2001:db8:b5::1", "2001:db8:b5::2"

    def __init__(self):
        reap_stale()
        self.tag = "%s-%d-%06x" % (PREFIX, os.getpid(), random.getrandbits(24))
        self.a, self.b = self.tag + "-a", self.tag + "-b"
        self.procs, self.dirs, self.closed = [], [], False
        _labs.append(self)
        try:
            self._setup()
        except BaseException:
            self.close()
            raise

    def _setup(self):
        sh("ip", "netns", "add", self.a)
        sh("ip", "netns", "add", self.b)
        sh("ip", "-n", self.a, "link", "add", self.IF_A, "type", "veth", "peer", "name", self.IF_B,
           "netns", self.b)
        for ns, ifn, v4, v6 in ((self.a, self.IF_A, self.V4_A, self.V6_A),
                                (self.b, self.IF_B, self.V4_B, self.V6_B)):
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", v4 + "/24", "dev", ifn)
            sh("ip", "-n", ns, "-6", "addr", "add", v6 + "/64", "dev", ifn, "nodad")
            sh("ip", "-n", ns, "link", "set", ifn, "up")
        mac = {ns: json.loads(sh("ip", "-n", ns, "-j", "link", "show", "dev", ifn).stdout)[0]["address"]
               for ns, ifn in ((self.a, self.IF_A), (self.b, self.IF_B))}
        for ns, ifn, peer, v4, v6 in ((self.a, self.IF_A, self.b, self.V4_B, self.V6_B),
                                      (self.b, self.IF_B, self.a, self.V4_A, self.V6_A)):
            for addr in (v4, v6):
                sh("ip", "-n", ns, "neigh", "replace", addr, "lladdr", mac[peer], "dev", ifn,
                   "nud", "permanent")
        log("lab up:", self.a, self.b)

    def tempdir(self):
        d = tempfile.mkdtemp(prefix="lossd-obs-")
        self.dirs.append(d)
        return d

    def popen(self, ns, cmd, **kw):
        kw.setdefault("text", True)
        p = subprocess.Popen(["ip", "netns", "exec", ns] + list(cmd), preexec_fn=_die_with_parent, **kw)
        self.procs.append(p)
        return p

    def run(self, ns, *cmd, check=True, timeout=60):
        return sh("ip", "netns", "exec", ns, *cmd, check=check, timeout=timeout)

    def counters(self, ns):
        c = Counters()
        for f in ("/proc/net/snmp", "/proc/net/netstat"):
            c.update(_pairs(self.run(ns, "cat", f).stdout))
        return c

    # -- lossd
    def lossd(self, ns, args, wait=True):
        d = Lossd(self, ns, args)
        if wait:
            d.wait_ready()
        return d

    def start(self, *specs):
        """Starts several lossd at once ((ns, args) pairs) and waits until all are ready."""
        ds = [Lossd(self, ns, args) for ns, args in specs]
        for d in ds:
            d.wait_ready()
        return ds

    def observer(self, ns, *extra, events=True):
        return (ns, ["--observe"] + (["--events"] if events else []) + list(extra))

    # -- traffic
    def server(self, ns, bind, port, conns=1, rr_resp=0):
        p = self.popen(ns, [PY, FLOW, "recv", "--bind", bind, "--port", str(port), "--conns", str(conns)]
                       + (["--rr-resp", str(rr_resp)] if rr_resp else []),
                       stdout=subprocess.PIPE)
        line = p.stdout.readline()
        if not line.startswith("READY"):
            p.kill()
            raise AssertionError("server did not start: %r" % line)
        return p

    def sender(self, ns, dst, port, nbytes=0, rate_mbit=500, conns=1, until_stdin=False, cc=None):
        args = [PY, FLOW, "send", "--dst", dst, "--port", str(port), "--conns", str(conns),
                "--rate-mbit", str(rate_mbit)] + (["--cc", cc] if cc else [])
        args += ["--until-stdin"] if until_stdin else ["--bytes", str(int(nbytes))]
        p = self.popen(ns, args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        line = p.stdout.readline()
        if not line.startswith("STARTED"):
            p.kill()
            raise AssertionError("sender did not start: %r" % line)
        p.sports = [int(x) for x in line.split()[1:]]
        return p

    @staticmethod
    def finish(p, timeout=120, stop=False):
        if stop:
            p.stdin.write("stop\n")
            p.stdin.flush()
        out, _ = p.communicate(timeout=timeout)
        if p.returncode != 0:
            raise AssertionError("traffic process failed (%s): %r" % (p.returncode, out))
        return json.loads(out.strip().splitlines()[-1])

    def bulk(self, dst, port=5201, nbytes=150e6, rate_mbit=500, conns=1, cc=None):
        """Paced bulk transfer A -> B; returns (sender json, receiver json) once both ends closed."""
        srv = self.server(self.b, "::" if ":" in dst else "0.0.0.0", port, conns=conns)
        cli = self.sender(self.a, dst, port, nbytes=nbytes, rate_mbit=rate_mbit, conns=conns, cc=cc)
        s = self.finish(cli)
        r = self.finish(srv)
        return s, r

    def rr(self, dst, port=5201, count=1, resp=100, gap_ms=0):
        srv = self.server(self.b, "::" if ":" in dst else "0.0.0.0", port, rr_resp=resp)
        cli = self.popen(self.a, [PY, FLOW, "rr", "--dst", dst, "--port", str(port), "--count", str(count),
                                  "--resp", str(resp), "--gap-ms", str(gap_ms)], stdout=subprocess.PIPE)
        c = self.finish(cli)
        self.finish(srv)
        return c

    def wait_idle(self, *nss, timeout=30):
        """Until no TCP socket but LISTEN/TIME-WAIT is left in the namespaces (counters final)."""
        end = time.monotonic() + timeout
        busy = []
        while time.monotonic() < end:
            busy = [l for ns in (nss or (self.a, self.b))
                    for l in self.run(ns, "ss", "-Htan").stdout.splitlines()
                    if not l.startswith(("TIME-WAIT", "LISTEN"))]
            if not busy:
                return
            time.sleep(0.05)
        raise AssertionError("TCP sockets still busy: %s" % busy)

    def close(self):
        if self.closed:
            return
        self.closed = True
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.kill()
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except Exception:
                pass
            for f in (p.stdin, p.stdout, p.stderr):
                try:
                    if f:
                        f.close()
                except Exception:
                    pass
        for ns in (self.a, self.b):
            _kill(_ns_pids(ns))
            sh("ip", "netns", "del", ns, check=False)
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)
        if self in _labs:
            _labs.remove(self)
        log("lab down:", self.tag)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- the relations ------------------------------------------------------------------


def reconcile(tc, out, dk, filtered_ok=False):
    """Asserts every exact relation and documented inequality between an observer's
    totals (out) and the kernel counter deltas (dk) of its namespace."""
    t = out.totals
    tc.assertIsNotNone(t, "no observer_totals line; stderr:\n" + out.stderr)
    ctx = json.dumps({"observer": out.summary(), "kernel": short(dk)}, sort_keys=True)
    if out.retransmits or out.closes:
        gaps = unseen(out)
        if gaps:
            ctx += ("\nsegments the kernel counted (socket tcp total_retrans) with no retransmit event "
                    "[cookie, tuple, hub seq where it showed, segs]: %s" % gaps)
    for h in t["hooks"]:
        if h["name"] != "iter/tcp":
            tc.assertTrue(h["attached"], "%s not attached: %s" % (h["name"], ctx))
    # Exact.
    tc.assertEqual(t["retrans_segs"], dk["Tcp.RetransSegs"], "retrans_segs != dTcpRetransSegs: " + ctx)
    tc.assertEqual(t["retrans_segs"],
                   sum(out.segs(ty, o) for ty in TYPES for o in ("sent", "failed")),
                   "retrans_segs is not the sum of sent+failed segments: " + ctx)
    tc.assertEqual(out.segs("fast"), dk["TcpExt.TCPFastRetrans"], "fast.sent.segs != dTCPFastRetrans: " + ctx)
    tc.assertEqual(out.segs("loss"), dk["TcpExt.TCPSlowStartRetrans"],
                   "loss.sent.segs != dTCPSlowStartRetrans: " + ctx)
    tc.assertEqual(sum(out.ev(ty, o) for ty in ("syn", "synack") for o in ("sent", "failed")),
                   dk["TcpExt.TCPSynRetrans"], "syn+synack events != dTCPSynRetrans: " + ctx)
    tc.assertEqual(sum(out.segs(ty, "failed") for ty in TYPES), dk["TcpExt.TCPRetransFail"],
                   "failed segs != dTCPRetransFail: " + ctx)
    # Inequalities (research memo, section 2).
    tc.assertLessEqual(out.ev("tlp"), dk["TcpExt.TCPLossProbes"], "tlp sent > dTCPLossProbes: " + ctx)
    tc.assertLessEqual(sum(out.ev(ty, o) for ty in ("rto", "syn") for o in OUTCOMES),
                       dk["TcpExt.TCPTimeouts"], "rto+syn events > dTCPTimeouts: " + ctx)
    # Classifier and observer health.
    tc.assertEqual(sum(out.ev("unknown", o) for o in OUTCOMES), 0, "unknown retransmissions: " + ctx)
    tc.assertEqual(t["arm_failed"], 0, "sockets whose retransmission callback was not armed: " + ctx)
    tc.assertEqual(t["ring_lost"], 0, "ring_lost: " + ctx)
    # recursion_misses (tracing programs the kernel skipped because the same program ran
    # on that CPU) is not asserted: retransmissions are counted by sock_ops, which the
    # kernel never skips; the tracing programs run for every socket of the host before
    # the namespace filter, so other namespaces' traffic can cause skips.
    tc.assertEqual(t["flow_table_full"], 0, "flow_table_full: " + ctx)
    tc.assertEqual(out.bad_lines, [], "unparsable stdout lines")
    if not filtered_ok:
        tc.assertEqual(t["filtered"], 0, "filtered without filters: " + ctx)
    if out.subscriber is not None:
        check_event_stream(tc, out, ctx)
    return ctx


def check_event_stream(tc, out, ctx):
    """--events accounting: every wanted event reached the ring or was counted lost there,
    the hub published what was read, the subscriber delivered or counted the rest, and
    every delivered event was printed."""
    t, sub = out.totals, out.subscriber
    wanted = out.all_events() - t["filtered"] + t["flows_closed"]
    tc.assertEqual(t["ring_consumed"] + t["ring_lost"], wanted,
                   "ring_consumed + ring_lost != wanted events (all - filtered + flow closes): " + ctx)
    tc.assertEqual(t["hub_published"], t["ring_consumed"], "hub_published != ring_consumed: " + ctx)
    tc.assertEqual(sub["delivered"] + sub["lost"], t["hub_published"],
                   "subscriber delivered + lost != hub_published: " + ctx)
    tc.assertEqual(len(out.retransmits) + len(out.closes), sub["delivered"],
                   "printed retransmit + flow_close lines != delivered: " + ctx)
    if t["ring_lost"] == 0 and sub["lost"] == 0:
        tc.assertEqual(len(out.retransmits), out.all_events() - t["filtered"],
                       "retransmit lines != all events - filtered: " + ctx)
        tc.assertEqual(len(out.closes), t["flows_closed"], "flow_close lines != flows_closed: " + ctx)
        # Line by line, the events add up to the totals.
        for ty in TYPES:
            for o in OUTCOMES:
                evs = [e for e in out.retransmits if e["type"] == ty and e["outcome"] == o]
                if not t["filtered"]:
                    tc.assertEqual(len(evs), out.ev(ty, o), "%s.%s events: %s" % (ty, o, ctx))
                    tc.assertEqual(sum(e["segs"] for e in evs), out.segs(ty, o), "%s.%s segs: %s" % (ty, o, ctx))
    seqs = [e["seq"] for e in out.retransmits + out.closes]
    tc.assertEqual(len(seqs), len(set(seqs)), "duplicate hub sequence numbers")
    if sub["lost"] == 0:
        tc.assertEqual(sorted(seqs), list(range(1, len(seqs) + 1)), "gaps in hub sequence numbers")


class Run:
    """One observed scenario: the observer's output, the kernel deltas of its namespace,
    what the traffic returned, and the injectors' final events."""

    def __init__(self, out, dk, traffic, finals):
        self.out, self.dk, self.traffic, self.finals = out, dk, traffic, finals

    def numbers(self):
        n = {"kernel": short(self.dk), "observer": self.out.summary()}
        for i, f in enumerate(self.finals):
            if f:
                n["injector%d" % i] = {k: f.get(k) for k in ("matched_pkts", "matched_segs", "dropped_pkts",
                                                              "dropped_segs")}
        return n


def observe(lab, ns, traffic, rules=(), obs_args=(), events=True):
    """Starts `lossd --observe` in ns together with the injector rules ((ns, args) pairs;
    not a clsact egress rule in ns itself: see test_observer_start_keeps_live_egress_rule),
    waits until all are ready, runs traffic(), waits until every TCP socket of ns is
    closed, reads the kernel counters and stops everything."""
    ds = lab.start(lab.observer(ns, *obs_args, events=events), *rules)
    obs, injs = ds[0], ds[1:]
    k0 = lab.counters(ns)
    res = traffic()
    lab.wait_idle(ns)
    k1 = lab.counters(ns)
    out = obs.stop()
    finals = [d.stop().final for d in injs]
    return Run(out, k1 - k0, res, finals)


def unseen(out):
    """Retransmitted segments the kernel counted on a socket but no event reported.

    Every retransmit event carries the socket's tp->total_retrans read at the
    tracepoint (after the kernel counted this retransmission), and a flow_close
    carries the final value; per socket, in time order, each increase must be
    exactly the segments of the sent/failed events in between. Returns a list
    of (cookie, tuple, hub seq of the event where the gap showed, missing segs).
    """
    by = {}
    for e in out.retransmits:
        if e["type"] != "synack":
            by.setdefault(e["cookie"], []).append(("ev", e))
    for c in out.closes:
        by.setdefault(c["cookie"], []).append(("close", c))
    gaps = []
    for cookie, items in by.items():
        items.sort(key=lambda x: (x[1]["time_ns"], x[0] == "close"))
        seen = 0
        for kind, e in items:
            if kind == "ev" and e["outcome"] in ("sent", "failed"):
                seen += e["segs"]
            if e["total_retrans"] != seen:
                gaps.append((cookie, "%s:%s>%s:%s" % (e["saddr"], e["sport"], e["daddr"], e["dport"]),
                             e["seq"], e["total_retrans"] - seen))
                seen = e["total_retrans"]
    return gaps


def main():
    global LOSSD
    ap = argparse.ArgumentParser()
    ap.add_argument("--lossd", required=True)
    args, rest = ap.parse_known_args()
    LOSSD = os.path.abspath(args.lossd)
    if os.geteuid() != 0:
        print("skipped: the e2e tests need root (network namespaces, BPF)")
        sys.exit(77)
    import unittest
    unittest.main(module="__main__", argv=[sys.argv[0]] + rest, verbosity=2)
