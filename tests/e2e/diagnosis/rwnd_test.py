"""Diagnosis 3 (issue 13, the seed's case 3): a receiver window stuck at 32 KB.

lab.DelayLab with 20 ms added to the round trip; the daemon runs in the sender's namespace c.
The receiver's SO_RCVBUF is 28 KiB (the kernel doubles it to 56 KiB and stops tuning it; the
window it advertises is about 32.5 KB of that here), the sender unpaced CUBIC for 5 s.

  test_small_window  lossd: dominant limit rwnd_limited for >= 90 % of busy time, as the
                     kernel's own chrono says (ss -ti rwnd_limited); the window of the trace's
                     samples is the kernel's snd_wnd; throughput bounded by window / min RTT
                     and at least half of window / srtt
  test_raised        SO_RCVBUF 1 MiB: throughput at least twice that, rwnd share under 50 %
"""

import re

from lab import stalls
from lab.config import main
from lab.daemon import DaemonTestCase
from lab.netns import DelayLab, measured

SMALL, LARGE = 28672, 1 << 20


def rwnd_share(c):
    lim = c.limits()
    return lim.get("rwnd_limited", 0) / lim["busy"] if lim.get("busy") else None


class Rwnd(DaemonTestCase):
    lab_class = DelayLab
    lab_args = (20,)
    daemon_ns = "c"
    small = None

    def small_case(self):
        if Rwnd.small is None:
            Rwnd.small = stalls.rwnd(self.lab, self.d, rcvbuf=SMALL)
        return Rwnd.small

    def check(self, c, n, streams=("flows",)):
        for s in streams:  # the ones this case reads
            self.assertNotIn(s, c.errors, "lossd's stream failed")
        self.assertEqual(len(c.flows), 1, n)

    def test_small_window(self):
        c = self.small_case()
        n = c.numbers()
        win = [s.snd_wnd for s in c.samples()]
        n["trace_snd_wnd_median"] = sorted(win)[len(win) // 2] if win else None
        n["rwnd_share"] = rwnd_share(c)
        measured("rwnd_small", **n)
        self.check(c, n, ("flows", "trace"))
        f = c.flows[0]
        self.assertEqual(f.dominant_limit, "rwnd_limited", n)
        self.assertGreaterEqual(f.dominant_share, 0.90, n)
        self.assertGreaterEqual(n["rwnd_share"], 0.90, n)
        # The kernel's own chrono of the flow says so too.
        m = re.search(r"busy:(\d+)ms rwnd_limited:(\d+)ms", c.extra["ss"])
        self.assertIsNotNone(m, c.extra["ss"])
        self.assertGreaterEqual(int(m.group(2)) / int(m.group(1)), 0.90, c.extra["ss"])
        # The window lossd saw is the kernel's.
        kwin = c.extra["snd_wnd"]
        self.assertTrue(win, "no trace samples")
        self.assertLessEqual(abs(n["trace_snd_wnd_median"] - kwin), 0.05 * kwin, n)
        self.assertLess(kwin, 2 * SMALL, n)
        # Throughput bounded by the window over the round trip.
        bound = 8 * kwin / (f.min_rtt_us / 1e6) / 1e6
        srtt = float(re.search(r"rtt:([\d.]+)/", c.extra["ss"]).group(1)) / 1e3
        self.assertLessEqual(c.workload["mbit"], 1.05 * bound, n)
        self.assertGreaterEqual(c.workload["mbit"], 0.5 * 8 * kwin / srtt / 1e6, n)

    def test_raised(self):
        small = self.small_case()
        c = stalls.rwnd(self.lab, self.d, rcvbuf=LARGE, trace=False)
        n = c.numbers()
        n["rwnd_share"] = rwnd_share(c)
        measured("rwnd_raised", raised=n, small_mbit=small.workload["mbit"], small_rwnd_share=rwnd_share(small))
        self.check(c, n)
        self.assertGreaterEqual(c.workload["mbit"], 2 * small.workload["mbit"], n)
        self.assertLess(n["rwnd_share"], 0.5, n)


if __name__ == "__main__":
    main()
