"""Client e2e 6: the daemon stopped under the clients' feet.

Rules made with lossctl on A's veth, one per hook, each 100 % on its own UDP port:
  9000 egress  (clsact filter, A -> B)
  9001 ingress (tcx, B -> A)
  9002 ingress --hook xdp (native XDP on the veth, B -> A)
plus (SIGTERM test) 5 % on A's egress TCP data to port 5201 so that `lossctl watch` streams.

  test_sigterm_while_watching
      `lossctl -o json watch` (events flowing), `lossctl watch --port 6000` (an established
      stream that has received nothing) and `lossctl stats` run when lossd gets SIGTERM: every
      one exits (no hang) within 8 s, 0 or 3 with a `lossctl: watch|stats: ...` message; lossd
      exits 0 and removes its socket; nothing of lossd stays attached to A's veth (ip link:
      no xdp; tc filter show dev e2ea egress/ingress: empty; bpftool net: nothing) and all
      three ports pass traffic again (the only check for tcx: bpftool 7.1 cannot tell which
      interface a tcx link is on).
      subTests: lossd finishes the streams (README: "every stream finishes") rather than
      having them cut after grpc's shutdown deadline (exit 0, well under 3 s); lossctl says
      the same thing about the same cut stream whether or not an event had arrived.
  test_sigkill_then_restart   (lossd --lease 3s)
      SIGKILL: ports 9001 (tcx) and 9002 (XDP) pass at once; port 9000 (clsact egress,
      which survives the process) still drops right after the kill (inside the lease) and
      passes once the lease ran out, its filter still attached. The next lossd start (same
      --socket path, whose stale socket file is still there, same --state-dir) serves,
      removes the stale filter (says "stale"), holds no rules.
"""
import os
import re
import select
import signal
import subprocess
import time
import unittest

from lab import traffic
from lab.config import main
from lab.netns import Lab, measured
from lab.daemon import wait_until
from lab.clients import ClientDaemon, attachments, nothing_attached


P_EG, P_TCX, P_XDP = 9000, 9001, 9002
N = 400


def add_udp_rules(d, lab):
    I = lab.IF_A
    ids = {}
    ids["egress"] = d.add_rule("--iface", I, "--dir", "egress", "--proto", "udp", "--dport", P_EG, "--rate", "100%")
    ids["tcx"] = d.add_rule("--iface", I, "--proto", "udp", "--dport", P_TCX, "--rate", "100%")
    ids["xdp"] = d.add_rule("--iface", I, "--hook", "xdp", "--proto", "udp", "--dport", P_XDP, "--rate", "100%")
    return ids


_flow_id = [100]


def received(lab, which, n=N, pps=20_000):
    """Datagrams received of n sent on the port of `which` (egress: A -> B; else B -> A)."""
    _flow_id[0] += 1
    if which == "egress":
        f = dict(rx_ns=lab.b, tx_ns=lab.a, dst=lab.V4_B, port=P_EG)
    else:
        f = dict(rx_ns=lab.a, tx_ns=lab.b, dst=lab.V4_A, port=P_TCX if which == "tcx" else P_XDP)
    f.update(flow=_flow_id[0], count=n, pps=pps)
    ((s, g),) = traffic.udp_flows(lab, [f], settle=0.1)
    assert s["sent"] == n, s
    return g["unique"]


def lossd_filters(att):
    """lossd's tc filters on the interface: their program ids."""
    return [int(m.group(1)) for m in re.finditer(r"(?m)^filter .*\blossd_\w+.* id (\d+)",
                                                 att["tc_egress"] + "\n" + att["tc_ingress"])]


class DaemonSignals(unittest.TestCase):
    def test_sigterm_while_watching(self):
        with Lab() as lab:
            d = ClientDaemon(lab, lab.a)
            ids = add_udp_rules(d, lab)
            d.add_rule("--iface", lab.IF_A, "--dir", "egress", "--proto", "tcp", "--dport", 5201,
                       "--payload", "only", "--rate", "5%")
            self.assertEqual(ids["egress"]["attachments"], ["clsact egress on %s" % lab.IF_A])
            self.assertEqual(ids["tcx"]["attachments"], ["tcx ingress to %s" % lab.IF_A])
            self.assertEqual(ids["xdp"]["attachments"], ["XDP (native) to %s" % lab.IF_A])
            before = attachments(lab, lab.a, lab.IF_A)
            self.assertTrue(before["xdp"], before)
            self.assertIn("lossd_tc_out", before["tc_egress"])
            for w in ("egress", "tcx", "xdp"):
                self.assertEqual(received(lab, w), 0, "%s rule drops nothing" % w)

            outs = {}
            watch_j = d.ctl_popen("-o", "json", "watch")
            watch_idle = d.ctl_popen("watch", "--port", "6000")
            stats = d.ctl_popen("stats")
            # 2 watches + stats (WatchAggregates counts as a subscriber too): all established
            wait_until(lambda: d.health()["subscribers"] >= 3, 10, "3 subscribers")
            flow = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, 5201, 40e6, 40)  # ~8 s
            self.addCleanup(flow.close)
            ready, _, _ = select.select([watch_j.stdout], [], [], 15)
            self.assertTrue(ready, "no retransmit event within 15 s")
            first = watch_j.stdout.readline()  # an event arrived: streaming
            self.assertTrue(first.startswith("{"), first)
            t0 = time.monotonic()
            d.proc.send_signal(signal.SIGTERM)
            for name, p in (("watch", watch_j), ("watch_idle", watch_idle), ("stats", stats)):
                left = max(0.1, t0 + 8 - time.monotonic())
                try:
                    o, e = p.communicate(timeout=left)
                    outs[name] = dict(rc=p.returncode, secs=round(time.monotonic() - t0, 3), err=e.strip(),
                                      lines=len((first if name == "watch" else "").splitlines() + o.splitlines()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.communicate()
                    outs[name] = dict(rc=None, secs=None, err="HUNG: still running 8 s after SIGTERM")
            rc = d.term(timeout=30)
            lossd_secs = time.monotonic() - t0
            after = attachments(lab, lab.a, lab.IF_A)
            flow.wait()
            passes = {w: received(lab, w) for w in ("egress", "tcx", "xdp")}
            measured("sigterm_while_watching", clients=outs, lossd_exit=rc, lossd_secs=round(lossd_secs, 3),
                     attached_before={k: bool(v) for k, v in before.items()},
                     attached_after=after, received_after=passes, sent_after=N)
            self.assertEqual(rc, 0, d.stderr())
            self.assertFalse(os.path.exists(d.sock), "lossd left its socket behind")
            for name, o in outs.items():
                self.assertIsNotNone(o["rc"], "lossctl %s hung after lossd's SIGTERM" % name)
                self.assertIn(o["rc"], (0, 3), o)
                if o["rc"]:
                    what = "stats" if name == "stats" else "watch"
                    self.assertRegex(o["err"], r"^lossctl: %s: .*lossd" % what, o)
            self.assertGreater(outs["watch"]["lines"], 0)
            self.assertTrue(nothing_attached(after), "still attached after SIGTERM: %s" % after)
            self.assertEqual(passes, {"egress": N, "tcx": N, "xdp": N})
            self.assertIn("finishing streams", d.stderr())

            with self.subTest("daemon bug: SIGTERM cuts streams at grpc's 3 s shutdown deadline "
                              "instead of finishing them"):
                for name, o in outs.items():
                    self.assertNotIn("Cancelling all calls", o["err"], o)
                    self.assertEqual(o["rc"], 0, "%s: %s" % (name, o))
                    self.assertLess(o["secs"], 2.5, o)
            with self.subTest("lossctl: the same cut stream reported as 'lossd unreachable ... "
                              "--addr names another' when no event had arrived yet"):
                self.assertNotRegex(outs["watch_idle"]["err"], r"unreachable|--addr names another",
                                    outs["watch_idle"])

    def test_sigkill_then_restart(self):
        with Lab() as lab:
            state = lab.tempdir()
            d = ClientDaemon(lab, lab.a, ["--lease", "3s"], state_dir=state)
            add_udp_rules(d, lab)
            for w in ("egress", "tcx", "xdp"):
                self.assertEqual(received(lab, w), 0, "%s rule drops nothing" % w)
            d.kill9()
            t_kill = time.monotonic()
            eg_inside = received(lab, "egress", n=200)  # well inside the lease
            eg_inside_secs = time.monotonic() - t_kill
            tcx, xdp = received(lab, "tcx"), received(lab, "xdp")
            att_killed = attachments(lab, lab.a, lab.IF_A)
            time.sleep(max(0.0, t_kill + 3.5 - time.monotonic()))
            eg_after = received(lab, "egress")
            att_after_lease = attachments(lab, lab.a, lab.IF_A)
            self.assertTrue(os.path.exists(d.sock), "no stale socket file: the restart below tests less")
            d2 = ClientDaemon(lab, lab.a, state_dir=state, sockdir=d.sockdir)
            att_restart = attachments(lab, lab.a, lab.IF_A)
            st = d2.ctl("status")
            rules = d2.ctlj("rule", "ls").get("rules", [])
            eg_restart = received(lab, "egress")
            measured("sigkill_then_restart", egress_inside_lease=[eg_inside, 200, round(eg_inside_secs, 3)],
                     tcx_after_kill=[tcx, N], xdp_after_kill=[xdp, N], egress_after_lease=[eg_after, N],
                     filters_after_kill=lossd_filters(att_killed), xdp_after_kill_attached=att_killed["xdp"],
                     filters_after_lease=lossd_filters(att_after_lease),
                     attached_after_restart=att_restart, restart_secs=round(d2.startup_secs, 2))
            self.assertEqual(tcx, N, "a SIGKILLed lossd's tcx rule still drops")
            self.assertEqual(xdp, N, "a SIGKILLed lossd's XDP rule still drops")
            self.assertFalse(att_killed["xdp"], att_killed)
            self.assertEqual(eg_inside, 0, "the egress rule stopped before its lease ran out (%.2fs)" % eg_inside_secs)
            self.assertEqual(len(lossd_filters(att_killed)), 1, att_killed)
            self.assertEqual(eg_after, N, "a dead lossd's clsact filter still drops after the lease")
            self.assertEqual(len(lossd_filters(att_after_lease)), 1, att_after_lease)
            self.assertEqual(st.rc, 0, st)
            self.assertEqual(rules, [])
            self.assertTrue(nothing_attached(att_restart), "stale filter survived the next start: %s"
                            % att_restart)
            self.assertIn("stale", d2.stderr())
            self.assertEqual(eg_restart, N)
            self.assertEqual(d2.term(), 0, d2.stderr())
            self.assertFalse(os.path.exists(d2.sock))


if __name__ == "__main__":
    main()
