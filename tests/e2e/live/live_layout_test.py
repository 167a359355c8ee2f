"""The live page as a person sees it at 1400 and 1024 px wide, with two rules and three flows:
nothing needs a sideways scroll, only the traffic's flows are listed, and a rule clicked
follows its own flows.

Two rules on A's egress (5 % of the data to port P1, 3 % of the data to port P2), a paced bulk
flow to each from A to B, and a short flow to P1 that ends early.

  test_layout_and_following_a_rule
    1. At 1400 px: the page, every card and every table inside its card fit the width (no
       element's box reaches past its card's, no scroll box scrolls sideways); the flows table
       lists the traffic's flows and none of lossd's own or port-less ones (no ":0" endpoint,
       not lossd's HTTP port); the short flow, ended, shows "closed" and no send rate.
       Screenshot live_layout_1400.png.
    2. The P1 rule clicked: the flows table shows only P1's flows; the retransmissions card
       lists the P1 flow's resends, each naming that rule and P1, and its header says whose
       they are. Screenshot live_layout_rule.png. Clicked again: both rules' flows again, the
       card hidden.
    3. At 1024 px: the same fit, the cards in one column. Screenshot live_layout_1024.png.
    No console errors.
"""
import time

from lab import traffic
from lab.browser import Browser
from lab.config import artifact, main
from lab.daemon import DaemonTestCase
from lab.netns import measured

P1, P2 = 5471, 5472

# Everything on the page that sticks out of its card (or of the page), by how many pixels: each
# card's descendants' boxes against the card's inner edge, each scroll box's sideways overflow.
OVERFLOW_JS = """
const out = [];
const doc = document.documentElement;
if (doc.scrollWidth > window.innerWidth) out.push(['page', doc.scrollWidth - window.innerWidth]);
for (const card of document.querySelectorAll('.card')) {
  if (card.offsetParent === null) continue;  // hidden
  const cr = card.getBoundingClientRect();
  if (cr.right > window.innerWidth + 0.5) out.push([card.id, cr.right - window.innerWidth]);
  for (const el of card.querySelectorAll('table, canvas, .table-box, dl, h2, div')) {
    if (el.offsetParent === null) continue;
    if (el.closest('.table-box') && !el.classList.contains('table-box')) continue;  // inside a box
    const r = el.getBoundingClientRect();
    const over = r.right - (cr.right - 1);
    if (over > 0.5) out.push([card.id + ' ' + el.tagName.toLowerCase() + (el.id ? '#' + el.id : ''), over]);
  }
  for (const box of card.querySelectorAll('.table-box')) {
    if (box.offsetParent === null) continue;
    const over = box.scrollWidth - box.clientWidth;
    if (over > 1) out.push([card.id + ' scroll box of #' + box.querySelector('table').id, over]);
  }
}
return out;
"""


class LiveLayoutTest(DaemonTestCase):
    daemon_args = ("--http", "127.0.0.1:0")

    def js(self, b, expr):
        return b.driver.execute_script("return " + expr)

    def flow_rows(self, b):
        return b.texts("#flows tbody tr")

    def test_layout_and_following_a_rule(self):
        d, lab = self.d, self.lab
        http_port = d.ready["http_port"]
        url = "http://127.0.0.1:%d/" % http_port
        r1 = d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=P1, payload="only", rate=0.05)
        r2 = d.create(interface=lab.IF_A, direction="egress", protocol="tcp", dport=P2, payload="only", rate=0.03)
        b = Browser(lab, lab.a, width=1400, height=2600)
        b.open(url)
        b.wait(lambda: b.text("#conn") == "live", 20, "the page live")

        srv1 = traffic.server(lab, lab.b, "0.0.0.0", P1, conns=2)
        srv2 = traffic.server(lab, lab.b, "0.0.0.0", P2)
        bulk1 = traffic.sender(lab, lab.a, lab.V4_B, P1, until_stdin=True, rate_mbit=20)
        bulk2 = traffic.sender(lab, lab.a, lab.V4_B, P2, until_stdin=True, rate_mbit=20)
        short = traffic.sender(lab, lab.a, lab.V4_B, P1, nbytes=5e6, rate_mbit=20)
        self.addCleanup(lambda: [p.kill() for p in (bulk1, bulk2, short, srv1, srv2) if p.poll() is None])
        traffic.finish(short, timeout=60)
        short_port = short.sports[0]

        def mine(port):
            return [r for r in self.flow_rows(b) if "192.0.2.2:%d" % port in r]

        # 1. 1400 px: the traffic's flows, the closed one closed, nothing wider than its card
        b.wait(lambda: len(mine(P1)) == 2 and len(mine(P2)) == 1, 20, "the three flows in the flows table")
        b.wait(lambda: [r for r in mine(P1) if ":%d " % short_port in r + " " and "closed" in r], 15,
               "the short flow shown closed")
        closed = [r for r in mine(P1) if ":%d" % short_port in r][0]
        b.wait(lambda: self.js(b, "document.querySelectorAll('#rules tbody tr').length") == 2, 10, "both rules")
        time.sleep(1.5)  # a few redraws with the rates in
        rows = self.flow_rows(b)
        own = [r for r in rows if ":0 " in r + " " or ":%d " % http_port in r + " "]
        over_1400 = b.driver.execute_script(OVERFLOW_JS)
        shot_1400 = b.screenshot(artifact("live_layout_1400.png"))
        # In one script: the table is redrawn in place (same rows, new contents) as it re-sorts,
        # so cells found first and read one by one could be another flow's by then.
        closed_cells = self.js(b, "[...document.querySelectorAll('#flows tbody tr.closed td')]"
                                  ".map(td => td.innerText.trim())")

        # 2. the P1 rule followed: its flows only, its resends listed
        b.click("#rules tbody tr:nth-child(1)")
        b.wait(lambda: self.flow_rows(b) and all("192.0.2.2:%d" % P1 in r for r in self.flow_rows(b)), 10,
               "the flows table filtered to the rule's flows")
        b.wait(lambda: self.js(b, "document.querySelectorAll('#events tbody tr').length") >= 3, 20,
               "the rule's retransmissions listed")
        events = b.texts("#events tbody tr")
        ev_cells = b.cells("#events tbody tr")
        title = b.text("#events-title")
        followed_rows = self.flow_rows(b)
        over_rule = b.driver.execute_script(OVERFLOW_JS)
        b.driver.execute_script("document.getElementById('card-rules').scrollIntoView()")
        time.sleep(0.3)
        shot_rule = b.screenshot(artifact("live_layout_rule.png"))
        b.driver.execute_script("window.scrollTo(0, 0)")
        b.click("#rules tbody tr:nth-child(1)")
        b.wait(lambda: mine(P2), 10, "both rules' flows again")
        hidden = "document.getElementById('card-events').offsetParent === null"
        events_hidden = b.wait(lambda: self.js(b, hidden), 5, "the retransmissions card hidden")

        # 3. 1024 px
        b.driver.set_window_size(1024, 2600)
        time.sleep(1.5)
        width = self.js(b, "window.innerWidth")
        over_1024 = b.driver.execute_script(OVERFLOW_JS)
        columns_1024 = self.js(b, "[...document.querySelectorAll('#flows thead th')]"
                                  ".filter(th => th.offsetParent !== null)"
                                  ".map(th => th.textContent + ' ' + Math.round(th.getBoundingClientRect().width))")
        one_column = self.js(b, "document.getElementById('card-health').getBoundingClientRect().top >"
                                " document.getElementById('card-rtx').getBoundingClientRect().bottom")
        shot_1024 = b.screenshot(artifact("live_layout_1024.png"))
        errors = b.console_errors()
        traffic.finish(bulk1, stop=True, timeout=60)
        traffic.finish(bulk2, stop=True, timeout=60)

        nums = dict(overflow_1400=over_1400, overflow_rule=over_rule, overflow_1024=over_1024, width_1024=width, flows_columns_1024=columns_1024,
                    one_column_1024=one_column, own_rows=own, closed_row=closed, closed_cells=closed_cells,
                    events=len(events), events_title=title, first_event=ev_cells[0] if ev_cells else None,
                    followed_rows=len(followed_rows), events_hidden_after=events_hidden,
                    screenshots=[shot_1400, shot_rule, shot_1024])
        measured("live_layout", **nums)
        self.assertEqual(over_1400, [], nums)
        self.assertEqual(over_rule, [], nums)
        self.assertEqual(over_1024, [], nums)
        self.assertTrue(one_column, nums)
        self.assertEqual(own, [], nums)
        self.assertIn("closed", closed_cells, nums)
        self.assertIn("-", closed_cells, nums)  # no send rate for a closed flow
        self.assertIn("rule %d" % r1.id, title, nums)
        for cells in ev_cells:  # time, local, remote, type, segments, seq, cwnd, rules
            self.assertEqual(cells[2], "192.0.2.2:%d" % P1, cells)
            self.assertIn(str(r1.id), cells[7].split(", "), cells)
            self.assertNotIn(str(r2.id), cells[7].split(", "), cells)
        self.assertTrue(events_hidden, nums)
        self.assertEqual(errors, [], errors)


if __name__ == "__main__":
    main()
