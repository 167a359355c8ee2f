"""Daemon e2e 5: the daemon's end. SIGTERM finishes the streams and detaches every hook;
SIGKILL leaves no loss behind (tcx at once, clsact after the lease); the next start removes
the stale filter.

  test_sigterm_ends_streams_and_detaches
      rules on tcx ingress, clsact egress and XDP of e2ea plus four open streams; SIGTERM:
      every stream ends (the client sees it close), exit 0, the socket file is gone, none of
      the daemon's BPF programs is still loaded (bpftool prog show), no lossd filter
      (tc filter show dev e2ea egress), no XDP (ip link show), and traffic passes
  test_sigkill_leaves_no_loss
      100 % on tcx ingress and on clsact egress; kill -9: ingress traffic passes at once; the
      clsact filter is still there but passes everything after the lease (3 s); the next
      daemon start removes it
"""
import json
import os
import subprocess
import time
import unittest

from lab import daemon, traffic
from lab.config import main
from lab.netns import Lab, measured
from lab.daemon import Daemon, StreamReader, pids_programs, tc_egress_filters, wait_until


LEASE = 3.0


def bpf_prog_ids():
    return {p["id"]: p.get("name", "") for p in
            json.loads(subprocess.check_output(["bpftool", "-j", "prog", "show"], text=True))}


def bpf_links():
    return json.loads(subprocess.check_output(["bpftool", "-j", "link", "show"], text=True))


class DaemonSignals(unittest.TestCase):
    def setUp(self):
        self.pb = daemon.pb
        self.lab = Lab()

    def tearDown(self):
        self.lab.close()

    def udp(self, port, tx, rx, dst, n=1000):
        sent, got = traffic.udp_count(self.lab, tx, rx, dst, port, port, n)
        self.assertEqual(sent, n)
        return got

    def ingress(self, port, n=1000):  # B -> A, through e2ea's ingress
        return self.udp(port, self.lab.b, self.lab.a, self.lab.V4_A, n)

    def egress(self, port, n=1000):  # A -> B, through e2ea's egress
        return self.udp(port, self.lab.a, self.lab.b, self.lab.V4_B, n)

    def link_show(self):
        return self.lab.run(self.lab.a, "ip", "link", "show", "dev", self.lab.IF_A).stdout

    def test_sigterm_ends_streams_and_detaches(self):
        lab, pb = self.lab, self.pb
        d = Daemon(lab, lab.a)
        rin = d.create(interface=lab.IF_A, protocol="udp", dport=9401, rate=1.0)
        reg = d.create(interface=lab.IF_A, direction="egress", protocol="udp", dport=9402, rate=1.0)
        rx = d.create(interface=lab.IF_A, hook="xdp", protocol="udp", dport=9403, rate=1.0)
        self.assertEqual(list(rin.attachments), ["tcx ingress to " + lab.IF_A])
        self.assertEqual(list(reg.attachments), ["clsact egress on " + lab.IF_A])
        self.assertRegex(rx.attachments[0], r"^XDP \((native|generic)\) to " + lab.IF_A)
        self.assertEqual((self.ingress(9401, 300), self.egress(9402, 300), self.ingress(9403, 300)), (0, 0, 0))
        self.assertIn("xdp", self.link_show())
        _, filters = tc_egress_filters(lab, lab.a, lab.IF_A)
        self.assertEqual(len(filters), 1)
        progs = pids_programs(d.proc.pid)
        names = bpf_prog_ids()
        self.assertTrue(progs, "the daemon holds no BPF programs?")
        held = {i: names.get(i) for i in progs}
        links_before = [l for l in bpf_links() if l.get("prog_id") in progs]
        streams = [
            StreamReader(d.obs.WatchRetransmits(pb.WatchRetransmitsRequest(), timeout=120), "retransmits"),
            StreamReader(d.obs.WatchFlows(pb.WatchFlowsRequest(), timeout=120), "flows"),
            StreamReader(d.obs.WatchAggregates(pb.WatchAggregatesRequest(), timeout=120), "aggregates"),
            StreamReader(d.inj.WatchRuleCounters(pb.WatchRuleCountersRequest(interval_ns=200_000_000),
                                                 timeout=120), "counters"),
        ]
        wait_until(lambda: d.health().subscribers == 2, 10, "subscribers")
        for s in streams[1:]:
            s.wait_for(lambda m: len(m) >= 1, 10, "first message")

        t0 = time.monotonic()
        d.proc.send_signal(15)
        ended = {}
        for s in streams:
            self.assertTrue(s.done.wait(20), "%s did not end after SIGTERM (the client hangs)" % s.name)
            ended[s.name] = (s.error.code().name if s.error else "OK",
                             s.error.details() if s.error else "")
        d.proc.wait(30)
        secs = round(time.monotonic() - t0, 2)
        # A removed tc filter releases its program from an RCU work item, moments after
        # the process is gone: allow the kernel 5 s.
        end = time.monotonic() + 5
        while set(progs) & set(bpf_prog_ids()) and time.monotonic() < end:
            time.sleep(0.05)
        left = set(progs) & set(bpf_prog_ids())
        links_after = [l for l in bpf_links() if l.get("prog_id") in progs]
        tc_out, tc_left = tc_egress_filters(lab, lab.a, lab.IF_A)
        link = self.link_show()
        measured("sigterm", exit=d.proc.returncode, secs_to_exit=secs, streams=ended, programs_held=held,
                 links_before=len(links_before), programs_left=sorted(left), links_left=len(links_after),
                 tc_filters_left=tc_left, xdp_left="xdp" in link)
        self.assertEqual(d.proc.returncode, 0, d.stderr())
        self.assertFalse(os.path.exists(d.sock), "the socket file is still there")
        self.assertEqual(left, set(), "BPF programs of the daemon still loaded: %s" % {i: held[i] for i in left})
        self.assertEqual(links_after, [])
        self.assertEqual(tc_left, [], tc_out)
        self.assertNotRegex(link, r"\bxdp", link)
        self.assertEqual((self.ingress(9401, 300), self.egress(9402, 300), self.ingress(9403, 300)),
                         (300, 300, 300))
        self.assertIn("signal 15", d.stderr())

    def test_sigkill_leaves_no_loss(self):
        lab = self.lab
        state = lab.tempdir()
        d = Daemon(lab, lab.a, state_dir=state)
        d.create(interface=lab.IF_A, protocol="udp", dport=9411, rate=1.0)
        d.create(interface=lab.IF_A, direction="egress", protocol="udp", dport=9412, rate=1.0)
        self.assertEqual((self.ingress(9411), self.egress(9412)), (0, 0), "the 100 % rules dropped nothing")
        d.kill9()
        killed = time.monotonic()
        got_in = self.ingress(9411)  # right away: no lease to wait for
        out, filters = tc_egress_filters(lab, lab.a, lab.IF_A)
        t_in = time.monotonic() - killed
        # Inside the lease the dead daemon's clsact filter still drops. The daemon renews the
        # lease every LEASE/3, so at least 2/3 of it was left at the kill.
        got_out_early = self.egress(9412, 200)
        t_early = time.monotonic() - killed
        time.sleep(max(0.0, LEASE + 0.5 - (time.monotonic() - killed)))
        got_out = self.egress(9412)
        _, filters_after_lease = tc_egress_filters(lab, lab.a, lab.IF_A)
        d2 = Daemon(lab, lab.a, state_dir=state)
        out3, filters3 = tc_egress_filters(lab, lab.a, lab.IF_A)
        h = d2.health()
        rules = d2.inj.ListRules(self.pb.ListRulesRequest(), timeout=10).rules
        rc = d2.term()
        measured("sigkill", ingress_received_at_once=got_in, ingress_secs_after_kill=round(t_in, 2),
                 egress_received_within_lease=got_out_early, egress_early_secs_after_kill=round(t_early, 2),
                 egress_received_after_lease=got_out, filter_after_kill=filters,
                 filter_after_lease=filters_after_lease, filters_after_restart=filters3,
                 restart_log_mentions_stale="stale" in d2.stderr())
        self.assertEqual(got_in, 1000, "a SIGKILLed daemon's tcx program still drops")
        self.assertEqual(len(filters), 1, "expected the clsact filter to outlive SIGKILL:\n" + out)
        if t_early < LEASE * 2 / 3:  # every datagram was sent while the lease surely held
            self.assertEqual(got_out_early, 0, "the clsact filter stopped dropping before its lease ran out")
        self.assertEqual(filters_after_lease, filters, "the filter should still be there, passing")
        self.assertEqual(got_out, 1000, "a dead daemon's clsact filter still drops after its lease")
        self.assertEqual(filters3, [], "the next start left the stale filter:\n" + out3)
        self.assertIn("stale", d2.stderr())
        self.assertTrue(h.serving)
        self.assertEqual(len(rules), 0)
        self.assertEqual(rc, 0)



if __name__ == "__main__":
    main()
