"""Observer e2e: kernel-side filters, and flows that existed before the observer.

Watch-port: two concurrent lossy flows from A (to ports WATCHED and OTHER on B,
2 % of data skbs dropped at B's ingress for both); `lossd --observe --events
--watch-port WATCHED` in A (the 16th filter, after 15 that match nothing). Only the watched flow produces retransmit and
flow_close lines, the other flow's retransmissions are counted as filtered,
and the totals (which cover every socket of the namespace) still reconcile
exactly with the kernel. Per flow, the printed events add up to the sender's
own TCP_INFO total_retrans, and the filtered rest to the other flow's.

Pre-existing: a paced flow runs before the observer starts; a second one starts
after it is ready. Stopping the observer while both live, its flow lines show
the first with preexisting 1 (picked up by iter/tcp) and the second with 0
(opened after the observer was ready).
"""
import time
import unittest

from lab import observer, traffic
from lab.config import main
from lab.netns import Lab, measured


WATCHED, OTHER = 5304, 5305
# The full table of kernel-side filters (OBS_MAX_FILTERS = 16), the watched port last: the
# program scans every filter before the one that matches (decoys: ports no flow uses).
DECOYS = [str(p) for p in range(6001, 6016)]


class WatchPort(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with Lab() as lab:
            def run_traffic():
                srvs = [traffic.server(lab, lab.b, "0.0.0.0", p) for p in (WATCHED, OTHER)]
                clis = [traffic.sender(lab, lab.a, lab.V4_B, p, nbytes=60e6, rate_mbit=300) for p in (WATCHED, OTHER)]
                sent = [traffic.finish(c) for c in clis]
                got = [traffic.finish(s) for s in srvs]
                return sent, got
            cls.run_ = observer.observe(lab, lab.a, run_traffic, obs_args=[a for p in DECOYS + [str(WATCHED)]
                                                                for a in ("--watch-port", p)],
                                        rules=[(lab.b, ["--iface", lab.IF_B, "--proto", "tcp", "--dport",
                                                        "%d-%d" % (WATCHED, OTHER), "--payload", "only",
                                                        "--rate", "2%"])])
        sent, got = cls.run_.traffic
        cls.watched, cls.other = sent[0]["conns"][0], sent[1]["conns"][0]
        measured("watch_port", watched_total_retrans=cls.watched["total_retrans"],
                 other_total_retrans=cls.other["total_retrans"], **cls.run_.numbers())

    def test_totals_cover_the_namespace_and_reconcile(self):
        r = self.run_
        observer.reconcile(self, r.out, r.dk, filtered_ok=True)
        self.assertEqual(r.out.totals["retrans_segs"],
                         self.watched["total_retrans"] + self.other["total_retrans"], r.numbers())

    def test_only_the_watched_flow_has_events(self):
        out = self.run_.out
        self.assertGreater(self.other["total_retrans"], 0, "the other flow lost nothing: nothing to filter")
        self.assertGreater(len(out.retransmits), 0, out.summary())
        for e in out.retransmits + out.closes:
            self.assertEqual((e.tuple.local_port, e.tuple.remote_port), (self.watched["sport"], WATCHED), e)
        self.assertEqual(len(out.closes), 1, out.closes)
        self.assertEqual(out.totals["flows_closed"], 1, out.summary())
        self.assertGreater(out.totals["filtered"], 0, out.summary())
        self.assertEqual(len(out.retransmits), out.all_events() - out.totals["filtered"], out.summary())

    def test_events_add_up_per_flow(self):
        out = self.run_.out
        seen = sum(e.segments for e in out.retransmits)
        self.assertEqual(seen, self.watched["total_retrans"],
                         "watched flow; unseen: %s" % observer.unseen(out))
        self.assertEqual(out.totals["retrans_segs"] - seen, self.other["total_retrans"],
                         out.summary())


class Preexisting(unittest.TestCase):
    def test_flow_open_before_the_observer_is_marked_preexisting(self):
        P1, P2 = 5306, 5307
        with Lab() as lab:
            srvs = [traffic.server(lab, lab.b, "0.0.0.0", p) for p in (P1, P2)]
            old = traffic.sender(lab, lab.a, lab.V4_B, P1, rate_mbit=500, until_stdin=True)
            time.sleep(0.5)
            t_start = time.monotonic_ns()  # CLOCK_MONOTONIC, as bpf_ktime_get_ns
            obs = lab.lossd(lab.a, ["--observe"])
            t_ready = time.monotonic_ns()
            new = traffic.sender(lab, lab.a, lab.V4_B, P2, rate_mbit=100, until_stdin=True)
            time.sleep(1)
            out = obs.stop_observer()  # both flows still live
            for c in (old, new):
                traffic.finish(c, stop=True)
            for s in srvs:
                traffic.finish(s)
        flows = {(f.tuple.local_port, f.tuple.remote_port): f for f in out.flows}
        measured("preexisting", observer_start_ns=t_start, observer_ready_ns=t_ready,
                 flows=[{k: getattr(f, k) for k in ("preexisting", "cwnd", "srtt_us", "bytes_acked",
                                                    "opened_mono_ns")} for f in out.flows])
        self.assertEqual(len(out.flows), 2, out.flows)
        a = flows[(old.sports[0], P1)]
        b = flows[(new.sports[0], P2)]
        self.assertFalse(b.preexisting, b)
        self.assertGreater(b.opened_mono_ns, t_ready, b)
        self.assertTrue(a.preexisting,
                         "flow established %.1f s before the observer started is not marked pre-existing; "
                         "its record was opened at +%.1f ms of the observer's %.1f ms start-up "
                         "(created by a tracepoint program before the iter/tcp walk?): %s"
                         % (0.5, (a.opened_mono_ns - t_start) / 1e6, (t_ready - t_start) / 1e6, a))
        for f in (a, b):
            self.assertEqual((f.tuple.local_addr, f.tuple.remote_addr), (Lab.V4_A, Lab.V4_B), f)
            self.assertGreater(f.cwnd, 0, f)
            self.assertGreater(f.srtt_us, 0, f)
            self.assertGreater(f.bytes_acked, 0, f)


if __name__ == "__main__":
    main()
