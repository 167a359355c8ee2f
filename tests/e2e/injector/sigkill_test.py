"""e2e 5: a SIGKILLed lossd leaves no loss behind (docs/architecture.md#crash-safety).

Ingress (tcx link): the link dies with the process, so drops stop at once.
Egress (netlink clsact filter, the only way to get TC_ACT_STOLEN): the filter
survives the process, but the lease it checks in BPF runs out (--lease 1s)
and it drops nothing after; the next lossd start removes the stale filter.

The lease cannot be switched off or made too short to hold (--lease 0 used to
disable the fail-safe; under ~150 ms the programs dropped intermittently): lossd
refuses a lease outside 200 ms .. 60 s, in one-shot and daemon mode.

A one-shot run whose terminal closes (SIGHUP) or whose reader goes away
(`lossd ... | head -1`: stdout's pipe closes) detaches everything and
reports, as at SIGTERM (regressions: both used to kill it with the clsact
filter left behind).
"""
import json
import os
import shutil
import signal
import subprocess
import time
import unittest

from lab import config, traffic
from lab.config import main
from lab.netns import Lab, measured
from lab.daemon import tc_egress_filters


PORT = 9100
N = 2000


def flow(lab, port=PORT, n=N):
    ((sent, got),) = traffic.udp_flows(lab, [dict(rx_ns=lab.b, tx_ns=lab.a, dst=lab.V4_B, port=port,
                                                  flow=5, count=n, pps=20_000)], settle=0.2)
    assert sent["sent"] == n, sent
    return got["unique"]


def hook_stats_of_prog(prog_id):
    """Sums loss_hook_stats[tc_egress] of a loaded program (bpftool), or None without bpftool."""
    if not shutil.which("bpftool"):
        return None
    prog = json.loads(subprocess.check_output(["bpftool", "-j", "prog", "show", "id", str(prog_id)]))
    for mid in prog.get("map_ids", []):
        m = json.loads(subprocess.check_output(["bpftool", "-j", "map", "show", "id", str(mid)]))
        if m.get("name") == "loss_hook_stats":
            v = json.loads(subprocess.check_output(
                ["bpftool", "-j", "map", "lookup", "id", str(mid), "key", "2", "0", "0", "0"]))
            tot = {}
            for cpu in v["formatted"]["values"]:
                for k, x in cpu["value"].items():
                    tot[k] = tot.get(k, 0) + x
            return tot
    return None


class SigkillLeavesNoLoss(unittest.TestCase):
    def test_tcx_ingress_stops_dropping_at_once(self):
        with Lab() as lab:
            d = lab.lossd(lab.b, ["--iface", lab.IF_B, "--proto", "udp", "--dport", str(PORT),
                                  "--rate", "100%", "--lease", "1s", "--interval", "100ms"])
            self.assertIn("tcx ingress", d.hooks)
            self.assertEqual(flow(lab), 0, "the 100 % rule dropped nothing")
            deadline = time.monotonic() + 5
            while (d.last_counters() or {}).get("dropped_packets") != N and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(d.last_counters()["dropped_packets"], N)
            d.kill9()
            got = flow(lab)  # right away: no waiting for the lease
            measured("sigkill_tcx", before_kill_received=0, after_kill_received=got, sent=N)
            self.assertEqual(got, N, "a SIGKILLed lossd's tcx program still drops")

    def test_clsact_egress_stops_after_lease_and_next_start_removes_filter(self):
        with Lab() as lab:
            d = lab.lossd(lab.a, ["--iface", lab.IF_A, "--dir", "egress", "--proto", "udp", "--dport",
                                  str(PORT), "--rate", "100%", "--lease", "1s", "--interval", "100ms"])
            self.assertIn("clsact egress", d.hooks)
            self.assertEqual(flow(lab), 0, "the 100 % rule dropped nothing")
            d.kill9()
            out, progs = tc_egress_filters(lab, lab.a, lab.IF_A)
            self.assertEqual(len(progs), 1, "expected lossd's clsact filter to outlive SIGKILL:\n" + out)
            before = hook_stats_of_prog(progs[0])
            time.sleep(2.0)  # > the 1 s lease
            got = flow(lab)
            after = hook_stats_of_prog(progs[0])
            out2, progs2 = tc_egress_filters(lab, lab.a, lab.IF_A)
            self.assertEqual(progs2, progs, "the filter should still be there, passing:\n" + out2)
            self.assertEqual(got, N, "a dead lossd's clsact filter still drops after its lease")
            lease_expired = None
            if before is not None and after is not None:
                lease_expired = after["lease_expired"] - before["lease_expired"]
                self.assertEqual(lease_expired, N, (before, after))
                self.assertEqual(after["dropped"] - before["dropped"], 0, (before, after))
            # The next start (no rule needed) removes the stale filter.
            d2 = lab.lossd(lab.a, [])
            d2.stop(expect_final=False)
            out3, progs3 = tc_egress_filters(lab, lab.a, lab.IF_A)
            measured("sigkill_clsact", after_lease_received=got, sent=N,
                     lease_expired_counted=lease_expired, filters_after_restart=len(progs3))
            self.assertEqual(progs3, [], "stale lossd filter survived the next start:\n" + out3)
            self.assertIn("stale", d2.stderr())



EGRESS_RULE = ["--dir", "egress", "--proto", "udp", "--dport", str(PORT), "--rate", "100%",
               "--lease", "60s"]


class HangupAndClosedStdout(unittest.TestCase):
    def test_sighup_detaches_and_reports(self):
        with Lab() as lab:
            d = lab.lossd(lab.a, ["--iface", lab.IF_A] + EGRESS_RULE)
            self.assertEqual(len(tc_egress_filters(lab, lab.a, lab.IF_A)[1]), 1)
            os.kill(d.pid, signal.SIGHUP)
            rc = d.wait_exit(30)
            self.assertEqual(rc, 0, d.stderr())
            self.assertIn("final", [e.get("event") for e in d.events], d.stderr())
            out, ids = tc_egress_filters(lab, lab.a, lab.IF_A)
            self.assertEqual(ids, [], "SIGHUP left the clsact filter behind:\n" + out)
            self.assertEqual(flow(lab), N, "a dead run's rule still drops")

    def test_closed_stdout_detaches(self):
        with Lab() as lab:
            cmd = [config.LOSSD, "--json", "--state-dir", lab.tempdir(), "--interval", "100ms",
                   "--iface", lab.IF_A] + EGRESS_RULE
            p = lab.popen(lab.a, cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            ready = json.loads(p.stdout.readline())
            self.assertEqual(ready["event"], "ready", ready)
            self.assertEqual(len(tc_egress_filters(lab, lab.a, lab.IF_A)[1]), 1)
            p.stdout.close()  # as `| head -1` does once it has its line
            rc = p.wait(timeout=30)
            err = p.stderr.read()  # lab.popen opens text pipes
            self.assertEqual(rc, 0, "killed by signal %d? %s" % (-rc, err) if rc < 0 else err)
            self.assertIn("stdout closed", err)
            out, ids = tc_egress_filters(lab, lab.a, lab.IF_A)
            self.assertEqual(ids, [], "the run left the clsact filter behind:\n" + out)


    def test_lease_is_bounded(self):
        with Lab() as lab:
            sock = os.path.join(lab.tempdir(), "lossd.sock")
            for mode in (["--iface", lab.IF_A] + EGRESS_RULE[:-2], ["--socket", sock]):
                for lease in ("0", "0s", "100ms", "61s"):
                    with self.subTest(mode=mode[0], lease=lease):
                        r = lab.run(lab.a, config.LOSSD, "--state-dir", lab.tempdir(), *mode,
                                    "--lease", lease, check=False, timeout=20)
                        self.assertEqual(r.returncode, 2, r.stderr)
                        self.assertIn("--lease must lie between 200ms and 60s", r.stderr)


if __name__ == "__main__":
    main()
