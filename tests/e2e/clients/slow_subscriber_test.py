"""Client e2e 5: a slow `lossctl watch` subscriber gets Gap records; a fast one does not.

Daemon in the sender's namespace A. A 15 % --per-segment rule on A's egress (every skb one
segment, so every retransmission is one event: thousands of them) under 8 paced TCP
connections A -> B. Three `lossctl watch` processes:

  fast    -o json, stdout to a file
  slow    -o json --queue 16, stdout to a pipe (4 KiB) that nobody reads until the traffic ended
  slowt   table form, --queue 16, likewise

While the slow ones are stuck, `lossctl status` answers at once (serving, 3 subscribers).
Afterwards the pipes are drained and all three are stopped with SIGINT (exit 0).

  test_slow_subscriber_gets_gaps
      fast: no Gap, its events' segments == the rule's retransmitted segments (GetRuleEffect);
      slow: at least one Gap, every Gap GAP_SOURCE_SUBSCRIBER, fewer events than fast, and
      those are a subsequence of fast's (same order); slowt prints "-- N events lost
      (this client too slow)" lines; the daemon is healthy afterwards (status exit 0, 0 subscribers).
  subTests (daemon bugs, see the report):
      exact accounting: slow's events + the counts of its Gaps == fast's events;
      no loss without a Gap: fast's segments == the namespace's TcpRetransSegs delta.
"""
import fcntl
import json
import os
import signal
import subprocess
import time
import unittest

from lab import traffic
from lab.config import main
from lab.netns import Lab, measured
from lab.daemon import wait_until
from lab.clients import ClientDaemon, retrans_by_type, settled_effect


PORT = 5201
CONNS = 8
F_SETPIPE_SZ = 1031


def drain(fd, into, until, timeout):
    """Reads fd (non-blocking) into the bytearray until until() or timeout."""
    os.set_blocking(fd, False)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            b = os.read(fd, 1 << 16)
            if not b:
                return
            into.extend(b)
            continue
        except BlockingIOError:
            pass
        if until():
            return
        time.sleep(0.05)


class SlowSubscriber(unittest.TestCase):
    def test_slow_subscriber_gets_gaps(self):
        with Lab() as lab:
            d = ClientDaemon(lab, lab.a)
            rid = d.add_rule("--iface", lab.IF_A, "--dir", "egress", "--proto", "tcp", "--dport", PORT,
                             "--payload", "only", "--rate", "15%", "--per-segment")["id"]
            fast_path = os.path.join(lab.tempdir(), "fast.jsonl")
            with open(fast_path, "w") as f:
                fast = d.ctl_popen("-o", "json", "watch", stdout=f)
            pipes = {}
            slow = {}
            for name, args in (("slow", ["-o", "json", "watch", "--queue", "16"]),
                               ("slowt", ["watch", "--queue", "16"])):
                r, w = os.pipe()
                fcntl.fcntl(w, F_SETPIPE_SZ, 4096)
                slow[name] = d.ctl_popen(*args, stdout=w)
                os.close(w)
                pipes[name] = r
                self.addCleanup(os.close, r)
            wait_until(lambda: d.health()["subscribers"] == 3, 10, "3 subscribers")

            c0 = lab.counters(lab.a)
            flow = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, PORT, 1.5e6, 20, conns=CONNS)
            self.addCleanup(flow.close)
            # The daemon answers while the slow subscribers are stuck.
            time.sleep(1.0)
            st = d.ctl("-o", "json", "status", timeout=10)
            sender, receiver = flow.wait()
            retrans = (lab.counters(lab.a) - c0)["Tcp.RetransSegs"]
            self.assertEqual(st.rc, 0, st)
            self.assertLess(st.secs, 3, st)
            health_stuck = st.json()["health"]

            eff = settled_effect(d, rid, want=retrans)
            eff_total = sum(retrans_by_type(eff).values())

            def fast_msgs():
                with open(fast_path) as f:
                    return [json.loads(l) for l in f if l.strip()]

            def fast_events():
                return [m for m in fast_msgs() if "event" in m]
            try:
                wait_until(lambda: sum(m["event"]["segments"] for m in fast_events()) >= eff_total,
                           10, "the fast subscriber to reach the effect's total")
            except AssertionError:
                pass
            time.sleep(0.5)
            fe = fast_events()
            data = {n: bytearray() for n in pipes}

            def slow_done():
                complete = bytes(data["slow"]).rsplit(b"\n", 1)[0].decode()  # whole lines only
                ms = [json.loads(l) for l in complete.splitlines() if l.strip()]
                return len(ms) and sum(1 if "event" in m else int(m["gap"]["count"]) for m in ms) >= len(fe)
            drain(pipes["slow"], data["slow"], slow_done, 15)
            drain(pipes["slowt"], data["slowt"], lambda: False, 2)
            time.sleep(1.5)  # one more gap report interval
            drain(pipes["slow"], data["slow"], lambda: False, 0.5)
            drain(pipes["slowt"], data["slowt"], lambda: False, 0.5)
            rcs = {}
            for name, p in (("fast", fast), ("slow", slow["slow"]), ("slowt", slow["slowt"])):
                p.send_signal(signal.SIGINT)
            for name, p in (("fast", fast), ("slow", slow["slow"]), ("slowt", slow["slowt"])):
                if name in pipes:  # a slow one may be blocked writing: keep its pipe flowing
                    drain(pipes[name], data[name], lambda: p.poll() is not None, 10)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                rcs[name] = (p.returncode, p.stderr.read())

            fm = fast_msgs()
            fe = [m["event"] for m in fm if "event" in m]
            fg = [m["gap"] for m in fm if "gap" in m]
            sm = [json.loads(l) for l in data["slow"].decode().splitlines() if l.strip()]
            se = [m["event"] for m in sm if "event" in m]
            sg = [m["gap"] for m in sm if "gap" in m]
            lost = sum(int(g["count"]) for g in sg)
            tlines = data["slowt"].decode().splitlines()
            tgaps = [l for l in tlines if l.startswith("-- ")]
            health_after = wait_until(lambda: (lambda h: h if h["subscribers"] == 0 else None)(d.health()),
                                      10, "0 subscribers after the watches ended")
            fast_segs = sum(e["segments"] for e in fe)
            nums = dict(retrans_segs=retrans, effect_segs=eff_total, fast_events=len(fe), fast_segs=fast_segs,
                        fast_gaps=len(fg), slow_events=len(se), slow_gap_msgs=len(sg), slow_gap_total=lost,
                        slow_table_gap_lines=len(tgaps), slow_table_event_lines=len(tlines) - len(tgaps),
                        status_secs_while_stuck=round(st.secs, 3), health_while_stuck=health_stuck,
                        sender=sender, exit_codes={k: v[0] for k, v in rcs.items()})
            measured("slow_subscriber", **nums)

            # The fast subscriber: everything the daemon's own effect counted, no gap.
            self.assertEqual(receiver["bytes"], CONNS * 1_500_000)
            self.assertEqual(fg, [], nums)
            self.assertEqual(fast_segs, eff_total, nums)
            # The slow one: gaps, from its own queue, aggregated, events in fast's order.
            self.assertGreater(lost, 0, "the slow subscriber lost nothing: no test (%s)" % nums)
            self.assertTrue(all(g["source"] == "GAP_SOURCE_SUBSCRIBER" for g in sg), sg)
            self.assertLess(len(sg), lost)
            self.assertLess(len(se), len(fe))
            key = lambda e: (e["cookie"], e["seq"], e["time_mono_ns"])  # noqa: E731
            fk = [key(e) for e in fe]
            pos = 0
            for e in se:
                self.assertIn(key(e), fk[pos:], "slow got an event fast did not (or out of order)")
                pos = fk.index(key(e), pos) + 1
            seqs = [int(m["seq"]) for m in sm]
            self.assertEqual(seqs, sorted(seqs))
            # The table form shows its gaps too.
            self.assertTrue(tgaps, "slow table watch printed no gap line")
            for l in tgaps:
                self.assertRegex(l, r"^-- \d+ events? lost \(this client too slow\)$")
            # Healthy throughout, and every watch ended by SIGINT with 0.
            self.assertTrue(health_stuck["serving"])
            self.assertEqual(health_stuck["subscribers"], 3)
            self.assertTrue(health_after["serving"])
            for name, (rc, err) in rcs.items():
                self.assertEqual(rc, 0, "%s: exit %s, stderr %r" % (name, rc, err))
            self.assertEqual(d.ctl("status").rc, 0)

            with self.subTest("daemon bug: a slow subscriber's Gap counts include events its stream "
                              "would never carry"):
                self.assertEqual(len(se) + lost, len(fe), nums)
            with self.subTest("daemon bug: retransmissions reach no subscriber (no Gap either)"):
                self.assertEqual(fast_segs, retrans, nums)
            self.assertEqual(d.term(), 0, d.stderr())


if __name__ == "__main__":
    main()
