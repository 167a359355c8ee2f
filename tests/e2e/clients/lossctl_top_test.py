"""`lossctl top` against the real daemon, on a real terminal (tmux) and on a pipe.

One daemon in the sender's namespace A; a rule on A's egress (clsact, STOLEN: network loss to
the local sender) drops 2 % of the data segments of one paced flow A -> B.

  test_1_terminal   top under tmux (160x48) started before the flow: while the flow runs, the
                    screen shows the flow (its tuple, RETRANS > 0), the rule's row with a
                    measured rate and its 99.9 % interval; after the flow, the "since top
                    started" total equals the namespace's TcpRetransSegs delta and the sum of
                    the type columns; `s` changes the flows' sort; `q` exits 0 and leaves the
                    normal screen (no alternate screen). The screens are saved under
                    <build>/e2e-artifacts/ (lossctl_top_*.txt, and as HTML with its bold
                    headings: lossctl_top_running.html, for a screenshot).
  test_2_plain      stdout a pipe: `top --count 3` prints 3 plain frames (no escape codes),
                    each with the retransmit table whose TOTAL is the sum of its types, and
                    exits 0; bad --sort / --interval exit 2 before connecting.
"""
import re
import time

from lab import traffic
from lab.clients import ClientTestCase
from lab.config import artifact, main
from lab.lossd import TYPES
from lab.netns import measured
from lab.terminal import Tmux, screen_html

PORT = 5301


def retrans_row(screen, label):
    """The numbers of the retransmit table's row starting with label: {TOTAL, FAST, ..., LOST}."""
    for line in screen.splitlines():
        if line.startswith(label):
            nums = line[len(label):].split(")", 1)[-1].split()
            keys = ["TOTAL"] + [t.upper() for t in TYPES] + ["LOST"]
            if len(nums) == len(keys) and all(n.isdigit() for n in nums):
                return dict(zip(keys, map(int, nums)))
    return None


def flow_line(screen, lport):
    for line in screen.splitlines():
        if re.match(r"\s+192\.0\.2\.1:%d\s+192\.0\.2\.2:%d\s" % (lport, PORT), line):
            return line
    return None


class LossctlTop(ClientTestCase):

    def rule(self):
        lab = self.lab
        return self.d.add_rule("--iface", lab.IF_A, "--dir", "egress", "--proto", "tcp",
                               "--dport", PORT, "--payload", "only", "--rate", "2%")

    def test_1_terminal(self):
        d, lab = self.d, self.lab
        rid = self.rule()["id"]
        term = Tmux(lab, d.ctl_cmd("top", "--interval", "1s"), width=160, height=48)
        term.wait_screen(lambda s: "RETRANSMITTED SEGMENTS" in s and "since top started" in s, 15,
                         "top's first window")
        c0 = lab.counters(lab.a)
        flow = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, PORT, 80e6, 200)
        self.addCleanup(flow.close)
        # The flow and its retransmits, while it runs.
        lport = [None]

        def flow_with_retrans(s):
            for line in s.splitlines():
                m = re.match(r"\s+192\.0\.2\.1:(\d+)\s+192\.0\.2\.2:%d\s" % PORT, line)
                if m:
                    cells = re.split(r"\s{2,}", line.strip())
                    # LOCAL REMOTE CA CWND SRTT SENT RATE RETR/1s RETRANS BY-TYPE
                    if len(cells) >= 10 and cells[8].isdigit() and int(cells[8]) > 0:
                        lport[0] = int(m.group(1))
                        return True
            return False
        running = term.wait_screen(flow_with_retrans, 40, "the flow with retransmits")
        self.assertTrue(flow.running(), "the flow ended before top showed it:\n" + running)
        with open(artifact("lossctl_top_running.txt"), "w") as f:
            f.write(running)
        with open(artifact("lossctl_top_running.html"), "w") as f:
            f.write(screen_html(term.capture(escapes=True), "lossctl top"))
        line = flow_line(running, lport[0])
        cells = re.split(r"\s{2,}", line.strip())
        self.assertIn(cells[2], ("open", "disorder", "cwr", "recovery", "loss"), line)
        self.assertRegex(cells[4], r"^[\d.]+(us|ms|s)$", line)    # srtt with a unit
        self.assertRegex(cells[5], r"^[\d.]+(B|KiB|MiB|GiB)$", line)  # bytes sent
        self.assertRegex(cells[9], r"^(fast|rto|loss|tlp):\d+", line)
        # The rule: measured rate and its interval (the row starts with its id).
        rule_rows = [l for l in running.splitlines() if re.match(r"\s+%d\s+active\s" % rid, l)]
        self.assertEqual(len(rule_rows), 1, running)
        rc = re.split(r"\s{2,}", rule_rows[0].strip())
        # ID STATE TARGET DIR MATCH CONFIGURED MEASURED 99.9%-INTERVAL DROPS/s DROPPED RETRANS ...
        self.assertEqual(rc[2], lab.IF_A, rule_rows[0])
        self.assertEqual(rc[3], "egress", rule_rows[0])
        self.assertEqual(rc[5], "2%", rule_rows[0])
        self.assertRegex(rc[6], r"^[\d.]+%$", rule_rows[0])
        self.assertRegex(rc[7], r"^[\d.]+% - [\d.]+%", rule_rows[0])
        self.assertGreater(int(rc[9]), 0, rule_rows[0])

        sender, receiver = flow.wait()
        retrans = (lab.counters(lab.a) - c0)["Tcp.RetransSegs"]
        self.assertGreater(retrans, 0)
        # Every window holding the flow has been shown once "since" stops changing and
        # equals the kernel's count.
        def settled(s):
            r = retrans_row(s, "since top started")
            return r is not None and r["TOTAL"] == retrans
        try:
            done = term.wait_screen(settled, 8, "the since-start total to reach TcpRetransSegs")
        except AssertionError:
            done = term.capture()
        with open(artifact("lossctl_top_after.txt"), "w") as f:
            f.write(done)
        since = retrans_row(done, "since top started")
        measured("lossctl_top", retrans_segs=retrans, top_since_start=since,
                 socket_total_retrans=sender["total_retrans"])
        self.assertIsNotNone(since, done)
        self.assertEqual(since["TOTAL"], retrans, done)
        self.assertEqual(since["TOTAL"], sum(since[t.upper()] for t in TYPES), done)
        self.assertEqual(since["LOST"], 0, done)
        self.assertEqual(receiver["bytes"], 80_000_000)

        # s: the next sort key; q: exit 0, back to the normal screen.
        self.assertIn("flows by retrans", done)
        term.send("s")
        term.wait_screen(lambda s: "flows by total" in s, 5, "the sort to change to total")
        term.send("q")
        self.assertEqual(term.wait_exit(10), 0, term.capture())
        after = term.capture()
        self.assertNotIn("RETRANSMITTED SEGMENTS", after, "top left its screen behind")
        d.ctl_ok("rule", "rm", rid)

    def test_2_plain(self):
        d, lab = self.d, self.lab
        rid = self.rule()["id"]
        flow = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, PORT, 40e6, 200)
        self.addCleanup(flow.close)
        r = d.ctl("top", "--interval", "500ms", "--count", "3", timeout=30)
        flow.wait()
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("\x1b", r.out, "escape codes on a pipe")
        frames = ["lossctl top:" + f for f in r.out.split("lossctl top:")[1:]]
        self.assertEqual(len(frames), 3, r.out)
        for fr in frames:
            self.assertTrue(fr.startswith("lossctl top: unix:" + d.sock), fr)
            self.assertNotIn("(q quits", fr)  # no keys on a pipe
            row = retrans_row(fr, "last 500ms")
            self.assertIsNotNone(row, fr)
            self.assertEqual(row["TOTAL"], sum(row[t.upper()] for t in TYPES), fr)
            self.assertRegex(fr, r"\n\s+%d\s+active\s+%s\s+egress" % (rid, lab.IF_A))
        for bad in (("--sort", "bogus"), ("--interval", "10ms")):
            b = d.ctl("top", *bad)
            self.assertEqual(b.rc, 2, b)
            self.assertIn(bad[0], b.err)
        d.ctl_ok("rule", "rm", rid)

    def test_3_eighty_columns(self):
        # An 80-column terminal keeps what a retransmit watcher reads (issue 24: before, the
        # right edge cut RETRANS and BY TYPE first); the least useful columns go instead.
        d, lab = self.d, self.lab
        rid = self.rule()["id"]
        term = Tmux(lab, d.ctl_cmd("top", "--interval", "1s"), width=80, height=40)
        term.wait_screen(lambda s: "RETRANSMITTED SEGMENTS" in s, 15, "top's first window")
        flow = traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, PORT, 80e6, 200)
        self.addCleanup(flow.close)

        def shown(s):
            lines = s.splitlines()
            return (any(re.match(r"\s+192\.0\.2\.1:\d+\s+192\.0\.2\.2:%d\s.*\s(fast|rto|loss|tlp):\d+" % PORT, l)
                        for l in lines)
                    and any(re.match(r"\s+%d\s" % rid, l) for l in lines))
        screen = term.wait_screen(shown, 40, "the flow's retransmits by type and the rule's row")
        with open(artifact("lossctl_top_80.txt"), "w") as f:
            f.write(screen)
        with open(artifact("lossctl_top_80.html"), "w") as f:
            f.write(screen_html(term.capture(escapes=True), "lossctl top, 80 columns"))
        flow.wait()
        term.send("q")
        term.wait_exit(10)
        lines = screen.splitlines()
        self.assertTrue(all(len(l) <= 80 for l in lines), screen)
        self.assertIn("EVENTS LOST", [l for l in lines if l.startswith("RETRANSMITTED SEGMENTS")][0], screen)
        heads = [l for l in lines if l.strip().startswith("ID ") or l.strip().startswith("LOCAL ")]
        self.assertEqual(len(heads), 2, screen)
        for want in ("TARGET", "MATCH", "MEASURED", "DROPPED", "RETRANS"):
            self.assertIn(want, heads[0], screen)
        for want in ("REMOTE", "RETR/", "RETRANS", "BY TYPE"):
            self.assertIn(want, heads[1], screen)
        d.ctl_ok("rule", "rm", rid)


if __name__ == "__main__":
    main()
