"""Needless retransmissions: the resends a receiver D-SACKs (RFC 2883), per flow, per type and
per rule, against the sender namespace's own counters.

Three paced bulk flows A -> B (ports P .. P+2); then one rule on A's ingress drops every pure
ACK B sends them (100 %, payload none) for 700 ms: A hears nothing, its retransmission timer
fires and it resends segments B already holds; B answers each with a D-SACK, and those that
come after the rule ended reach A. Nothing of the data is lost: every such resend is needless.

  test_dsacks_reconcile_with_the_kernel
    - the flows' dsacked_segments add up to A's TcpExtTCPDSACKRecvSegs delta (the kernel's
      count of D-SACKed segments), each flow has some, and A's kernel ignored none as dubious;
    - the rule's GetRuleEffect: dsacked_segments (by the resend's type) add up to the flows',
      rto among them; resent_dropped_segments is empty (it dropped no data: its resends are
      all "other resends the loss caused");
    - `lossctl rule effect` says so: "needless N segs the receivers D-SACKed" and
      "0 resent its dropped segments";
    - the live page (headless Chromium) shows each flow's "(N needless)" beside its
      retransmits and the rule's "(M other, N needless)", and (opened before the traffic) the
      kernel's needless-resend and undo counters as A's MIB counted them; screenshot
      live_dsack.png.
"""
import re
import time

from lab import traffic
from lab.browser import Browser, num
from lab.clients import run_client
from lab import config
from lab.config import artifact, main
from lab.daemon import DaemonTestCase, wait_until
from lab.netns import measured
from lab.stats import NEEDLESS_KEYS

PORT = 5481


class Dsack(DaemonTestCase):
    daemon_args = ("--http", "127.0.0.1:0")

    def test_dsacks_reconcile_with_the_kernel(self):
        lab, d, pb = self.lab, self.d, self.pb
        ports = [PORT, PORT + 1, PORT + 2]
        procs = []
        self.addCleanup(lambda: [p.kill() for p in procs if p.poll() is None])
        srvs = [traffic.server(lab, lab.b, "0.0.0.0", p) for p in ports]
        procs += srvs
        # The page first: its kernel counters are deltas from when it opened.
        b = Browser(lab, lab.a, width=1600, height=1400)
        b.open("http://127.0.0.1:%d/" % d.ready["http_port"])
        b.wait(lambda: b.text("#conn") == "live" and num(b.text("#n-TCPDSACKRecvSegs")) is not None,
               20, "the page live, with the kernel's counters")
        needless0 = {k: num(b.text("#n-" + k)) for k in NEEDLESS_KEYS}
        c0 = lab.counters(lab.a)
        clis = [traffic.sender(lab, lab.a, lab.V4_B, p, until_stdin=True, rate_mbit=30) for p in ports]
        procs += clis
        time.sleep(0.5)
        r = d.create(interface=lab.IF_A, direction="ingress", protocol="tcp", sport=(PORT, PORT + 2),
                     payload="none", rate=1.0, ttl_ns=700_000_000)
        time.sleep(2.5)  # the rule's 0.7 s, the timer's resends, the D-SACKs after it

        def flows():
            fl = d.obs.ListFlows(pb.ListFlowsRequest(filter=[pb.EventFilter(port=pb.PortRange(lo=PORT, hi=PORT + 2))]),
                                 timeout=10).flows
            return fl if len(fl) == 3 else None
        fl = wait_until(flows, 10, "the three flows listed")
        da = lab.counters(lab.a) - c0
        eff = d.effect(r.id)
        info = d.get(r.id)
        ctl = run_client(lab, [config.LOSSCTL, "--addr", d.addr, "rule", "effect", str(r.id)]) if config.LOSSCTL else None
        # The daemon sees every namespace on the host (other suites run beside this one): only
        # this lab's three flows count, by their server ports.
        ours = re.compile(r"%s:(%d|%d|%d)\b" % (re.escape(lab.V4_B), *ports))

        def our_rows():
            rows = [t for t in b.texts("#flows tbody tr") if ours.search(t) and "needless" in t]
            return rows if len(rows) == 3 else None
        page_flows = b.wait(our_rows, 15, "the three flows' needless resends on the page")
        page_rule = b.wait(lambda: [t for t in b.texts("#rules tbody tr") if "needless" in t], 15,
                           "the rule's needless resends on the page")
        page_needless = {}

        def kernel_row():  # the page's needless and undo counters against A's MIB
            dk = lab.counters(lab.a) - c0
            want = {k: needless0[k] + dk["TcpExt." + k] for k in NEEDLESS_KEYS}
            page_needless.update(page={k: num(b.text("#n-" + k)) for k in NEEDLESS_KEYS}, mib=want)
            return page_needless["page"] == want
        try:
            b.wait(kernel_row, 5, "the page's needless-resend counters to equal A's MIB deltas")
        except AssertionError as e:
            raise AssertionError("%s: %s" % (e, page_needless))
        shot = b.screenshot(artifact("live_dsack.png"))
        for c in clis:
            traffic.finish(c, stop=True, timeout=60)
        for sv in srvs:
            traffic.finish(sv, timeout=30)
        per_flow = [f.dsacked_segments for f in fl]

        dsacked = {k: v for k, v in eff.dsacked_segments.items() if v}
        nums = dict(flow_dsacked=per_flow, kernel_dsack_segs=da["TcpExt.TCPDSACKRecvSegs"],
                    kernel_dsacks=da["TcpExt.TCPDSACKRecv"], kernel_dsack_ofo=da["TcpExt.TCPDSACKOfoRecv"],
                    kernel_dubious=da["TcpExt.TCPDSACKIgnoredDubious"], timeouts=da["TcpExt.TCPTimeouts"],
                    spurious_rtos=da["TcpExt.TCPSpuriousRTOs"], retrans_segs=da["Tcp.RetransSegs"],
                    rule_dropped=info.counters.dropped_packets, rule_dsacked=dsacked,
                    rule_retransmitted={k: v for k, v in eff.retransmitted_segments.items() if v},
                    rule_resent_dropped=dict(eff.resent_dropped_segments),
                    lossctl=ctl.out if ctl else None, page_flows=page_flows, page_rule=page_rule,
                    page_kernel=page_needless,
                    screenshot=shot)
        measured("dsack", **nums)
        self.assertGreater(info.counters.dropped_packets, 0, nums)
        self.assertGreaterEqual(da["TcpExt.TCPTimeouts"], 1, "no timeout: no test (%s)" % nums)
        self.assertGreaterEqual(da["TcpExt.TCPDSACKRecvSegs"], 1, "no D-SACK: no test (%s)" % nums)
        self.assertEqual(da["TcpExt.TCPDSACKIgnoredDubious"], 0, nums)
        self.assertEqual(sum(per_flow), da["TcpExt.TCPDSACKRecvSegs"], nums)
        self.assertTrue(all(per_flow), nums)
        self.assertEqual(sum(dsacked.values()), sum(per_flow), nums)
        self.assertIn("rto", dsacked, nums)
        self.assertEqual(dict(eff.resent_dropped_segments), {}, nums)  # it dropped ACKs, no data
        for f in fl:  # the page's row of each flow
            row = [t for t in page_flows if "%s:%d" % (lab.V4_B, f.tuple.remote_port) in t]
            self.assertEqual(len(row), 1, page_flows)
            self.assertIn("(%d needless)" % f.dsacked_segments, row[0], page_flows)
        self.assertIn("%d needless)" % sum(dsacked.values()), page_rule[0], page_rule)
        self.assertEqual(b.console_errors(), [])
        if ctl:
            self.assertEqual(ctl.rc, 0, ctl)
            self.assertRegex(ctl.out, r"of which +0 resent its dropped segments, %d other resends"
                             % sum(eff.retransmitted_segments.values()), ctl.out)
            self.assertRegex(ctl.out, r"needless +%d segs the receivers D-SACKed \(they had arrived\): .*rto \d+"
                             % sum(per_flow), ctl.out)


if __name__ == "__main__":
    main()
