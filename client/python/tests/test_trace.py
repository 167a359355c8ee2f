"""watch_stalls() and trace_flow() against FakeLossd (a test double of the
daemon), and lossd_client.trace's files and plot from a made-up trace."""

import csv
import json
import os
import shutil
import struct
import subprocess
import tempfile
import time
import unittest

import support
from fake_lossd import FakeLossd
from support import FakeLossdTestCase
from lossd_client import (Client, DropLink, Gap, LossdError, LossdInputError, RetransmitEvent,
                          StallEvent, TraceDrop, TraceFlow, TraceSample)
from lossd_client import trace as tr
from lossd_client.types import trace_item


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", head[:8]
    return struct.unpack(">II", head[16:24])


class WrappersTest(FakeLossdTestCase):

    def test_watch_stalls_filters_and_converts(self):
        s = self.c.watch_stalls(port=9090, deny={"rule": 5}, queue=10)
        self.wait_for(lambda: self.fake.subscribers)
        self.fake.publish("stall", self.fake.stall(lport=7070))               # other port
        self.fake.publish("stall", self.fake.stall(lport=9090, rid=5))        # denied rule
        self.fake.publish("stall", self.fake.stall("rto", lport=9090, rid=3))
        self.fake.publish("gap", self.pb2.Gap(source=self.pb2.GAP_SOURCE_SUBSCRIBER, count=4))
        ev = next(s)
        self.assertIsInstance(ev, StallEvent)
        self.assertEqual((ev.seq, ev.cause, ev.backoff, ev.first_retransmit, ev.rule_ids),
                         (1, "rto", 1, "rto", (3,)))
        self.assertEqual(ev.caused_by, DropLink(3, 0, 1000, 1448, 1))
        self.assertEqual(ev.end_mono_ns - ev.start_mono_ns, 210 * 10**6)
        gap = next(s)
        self.assertIsInstance(gap, Gap)
        self.assertEqual((gap.seq, gap.source, gap.count), (2, "subscriber", 4))
        s.close()
        req = self.fake.calls("WatchStalls")[-1]
        self.assertEqual((req.allow[0].port.lo, req.deny[0].rule_id, req.queue), (9090, 5, 10))
        self.wait_for(lambda: not self.fake.subscribers)

    def test_stall_without_a_drop_has_no_cause_link(self):
        s = self.c.watch_stalls()
        self.wait_for(lambda: self.fake.subscribers)
        self.fake.publish("stall", self.fake.stall("nagle_delayed_ack"))
        ev = next(s)
        self.assertEqual((ev.cause, ev.caused_by), ("nagle_delayed_ack", None))
        s.close()

    def test_trace_flow_by_cookie_in_order(self):
        items = list(self.c.trace_flow(4242, max_samples=500, duration="5s", wait="1s"))
        req = self.fake.calls("TraceFlow")[-1]
        self.assertEqual((req.cookie, req.max_samples, req.duration_ns, req.wait_ns),
                         (4242, 500, 5 * 10**9, 10**9))
        self.assertIsInstance(items[0], TraceFlow)
        self.assertFalse(items[0].final)
        self.assertEqual(items[0].flow.cookie, 4242)
        self.assertIsInstance(items[-1], TraceFlow)
        self.assertTrue(items[-1].final)
        self.assertEqual(items[-1].flow.stall_ns, {"rto": 201 * 10**6})
        self.assertEqual(items[-1].flow.dominant_limit, "cwnd_limited")
        self.assertEqual([i.seq for i in items], list(range(1, len(items) + 1)))
        kinds = {type(i) for i in items}
        self.assertEqual(kinds, {TraceFlow, TraceSample, RetransmitEvent, StallEvent, TraceDrop,
                                 Gap})
        samples = [i for i in items if isinstance(i, TraceSample)]
        self.assertEqual(len(samples), 300)
        self.assertEqual(samples[1].snd_una - samples[0].snd_una, 1448)

    def test_trace_flow_by_address_and_port(self):
        list(self.c.trace_flow(addr="192.0.2.2", port=8080))
        req = self.fake.calls("TraceFlow")[-1]
        self.assertEqual((req.cookie, req.flow.addr, req.flow.port.lo), (0, "192.0.2.2", 8080))

    def test_trace_flow_arguments_and_errors(self):
        with self.assertRaises(LossdInputError):
            self.c.trace_flow()
        with self.assertRaises(LossdInputError):
            self.c.trace_flow(5, port=80)
        with self.assertRaises(LossdInputError):
            self.c.trace_flow(5, wait="soon")
        with self.assertRaises(LossdError) as cm:
            list(self.c.trace_flow(404))
        self.assertEqual(cm.exception.code, "NOT_FOUND")


class TraceFilesTest(support.StubsTestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="lossd-trace-test-")
        fake = FakeLossd.__new__(FakeLossd)  # only its message factory
        fake.pb2 = self.pb2
        self.msgs = fake.trace_messages()
        self.trace = tr.Trace(trace_item(m, self.pb2) for m in self.msgs)

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_unwrap_across_the_32_bit_wrap(self):
        u = tr.Unwrapper((1 << 32) - 10)
        self.assertEqual([u.advance(v) for v in ((1 << 32) - 10, (1 << 32) - 1, 5, 1000)],
                         [0, 9, 15, 1010])
        self.assertEqual(u(900), 910)  # behind the last one: negative distance, no wrap

    def test_sequence_series_is_relative_monotonic_and_marks_events(self):
        s = tr.sequence_series(self.trace)
        self.assertEqual(s["una"][0], 0)
        self.assertEqual(s["una"][-1], 299 * 1448)  # past the wrap, still counting up
        self.assertTrue(all(b >= a for a, b in zip(s["una"], s["una"][1:])))
        self.assertTrue(all(b >= a for a, b in zip(s["t"], s["t"][1:])))
        self.assertEqual(s["drop_seq"], [100 * 1448])
        self.assertEqual(s["rtx_seq"], [100 * 1448])
        self.assertEqual(s["rtx_type"], ["rto"])
        self.assertAlmostEqual(s["drop_t"][0], 0.099)
        self.assertAlmostEqual(s["rtx_t"][0], 0.2999)
        self.assertEqual(len(s["stalls"]), 1)
        x, width, cause, _ = s["stalls"][0]
        self.assertEqual(cause, "rto")
        self.assertAlmostEqual((x, width), (0.099, 0.201))

    def test_json_round_trip_keeps_every_message(self):
        path = os.path.join(self.dir, "t.json")
        tr.write_json(self.trace, path)
        with open(path) as f:
            doc = json.load(f)
        self.assertEqual(len(doc["messages"]), len(self.msgs))
        self.assertIn("flow", doc["messages"][0])
        self.assertIn("closed", doc["messages"][-1])
        self.assertEqual(sum("sample" in m for m in doc["messages"]), 300)
        back = tr.load_json(path, self.pb2)
        self.assertEqual(len(back.items), len(self.trace.items))
        self.assertEqual(back.samples, self.trace.samples)
        self.assertEqual(back.stalls[0].caused_by.rule_id, 3)
        self.assertEqual(back.summary(), self.trace.summary())

    def test_csv_has_a_row_per_sample_and_event_with_its_kind(self):
        path = os.path.join(self.dir, "t.csv")
        tr.write_csv(self.trace, path)
        with open(path) as f:
            rows = list(csv.DictReader(f))
        kinds = [r["kind"] for r in rows]
        self.assertEqual(kinds.count("sample"), 300)
        self.assertEqual([k for k in kinds if k != "sample"], ["drop", "retransmit", "stall", "gap"])
        rtx = rows[kinds.index("retransmit")]
        self.assertEqual((rtx["type"], rtx["rule_id"]), ("rto", "3"))
        stall = rows[kinds.index("stall")]
        self.assertEqual((stall["type"], stall["duration_ns"], stall["rule_id"]),
                         ("rto", str(201 * 10**6), "3"))
        self.assertEqual(rows[0]["time_s"], "0.000000")
        self.assertEqual(rows[0]["cwnd"], "10")

    def test_plot_png_and_svg(self):
        png, svg = os.path.join(self.dir, "t.png"), os.path.join(self.dir, "t.svg")
        tr.plot(self.trace, [png, svg])
        w, h = png_size(png)
        self.assertGreaterEqual((w, h), (800, 500))
        self.assertGreater(os.path.getsize(png), 20000)
        with open(svg) as f:
            text = f.read()
        self.assertIn("<svg", text)
        for label in ("snd_una", "retransmission", "dropped by a rule", "stall: rto", "cwnd",
                      "in flight", "segments", "sequence"):
            self.assertIn(label, text)

    def test_plot_without_samples_is_an_error(self):
        with self.assertRaises(LossdInputError):
            tr.plot(tr.Trace(), [os.path.join(self.dir, "x.png")])

    def test_command_line_replots_a_saved_trace(self):
        path = os.path.join(self.dir, "t.json")
        tr.write_json(self.trace, path)
        png = os.path.join(self.dir, "again.png")
        csvp = os.path.join(self.dir, "again.csv")
        env = support.child_env(os.environ.get("LOSSD_PYTHON_STUBS", ""))
        r = subprocess.run([support.PYTHON, "-m", "lossd_client.trace", "--from", path,
                            "--plot", png, "-o", csvp], env=env, capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("300 samples, 1 retransmission, 1 drop, 1 stall, 2 lost", r.stdout)
        self.assertTrue(os.path.getsize(png) > 20000)
        r = subprocess.run([support.PYTHON, "-m", "lossd_client.trace", "--cookie", "1",
                            "-o", "x.txt"], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn(".json or .csv", r.stderr)


if __name__ == "__main__":
    unittest.main()
