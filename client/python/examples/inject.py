#!/usr/bin/python3
"""Inject loss into one service for a while, watch TCP retransmit, clean up.

    inject.py --iface eth0 --port 8080 --rate 1% --duration 30s
    inject.py --iface veth0 --addr 192.0.2.2 --dir egress --rate 0.5% --duration 1m
    inject.py --cgroup /sys/fs/cgroup/myservice --rate 5% --duration 10s

By default the rule drops packets going TO the service (dst ADDR, dport
PORT): run it with --dir ingress on the service's host, or --dir egress on a
client's host. --from-service matches the packets the service sends instead
(src ADDR, sport PORT).

Every second it prints the segments the rule dropped and the segments the
matched flows retransmitted, by type (from WatchRetransmits filtered on the
rule, or with --source aggregates from WatchAggregates: every flow of the
daemon's namespace, by type). At the end, on Ctrl-C or on SIGTERM the rule
is deleted (in a finally) and its final effect printed. The rule also
carries a TTL (duration + --grace) so it goes away by itself should this
script be killed outright.

Exit status: 0 done, 1 lossd unreachable or a call failed, 2 bad arguments,
128+signal when interrupted (after cleaning up).
"""

import argparse
import collections
import os
import signal
import sys
import threading
import time

try:
    import lossd_client  # noqa: F401  (PYTHONPATH=client/python)
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from lossd_client import (Gap, LossdError, LossdInputError, format_duration, format_rate,
                          parse_rate, wilson_interval)
from lossd_client import cli
from lossd_client.spec import RETRANSMIT_TYPES


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    t = ap.add_argument_group("service")
    t.add_argument("--iface", help="interface the rule attaches to")
    t.add_argument("--port", help="the service's port (or LO-HI)")
    t.add_argument("--addr", help="the service's address or CIDR")
    t.add_argument("--cgroup", help="the service's cgroup v2 path (cgroup_skb; with or without --iface)")
    t.add_argument("--from-service", action="store_true",
                   help="match packets from the service (src/sport) instead of to it (dst/dport)")
    t.add_argument("--proto", default="tcp", help="protocol to match (default tcp; 'any' for all)")
    r = ap.add_argument_group("loss")
    r.add_argument("--rate", default="1%", help="loss rate: '1%%', '0.005%%', 0.01 (default 1%%)")
    r.add_argument("--duration", default="30s", help="how long: '30s', '2m' (default 30s)")
    r.add_argument("--dir", default="ingress", choices=("ingress", "egress", "both"))
    r.add_argument("--hook", default="auto", choices=("auto", "xdp", "tc", "cgroup"))
    r.add_argument("--per-segment", action="store_true",
                   help="exact per-segment loss (gso_max_segs 1, GRO off while the rule lives)")
    r.add_argument("--seed", type=int, help="same seed, same drops")
    r.add_argument("--priority", type=int, default=0)
    r.add_argument("--grace", default="10s",
                   help="the rule's TTL is duration + grace: it expires even if this script is "
                        "killed (default 10s)")
    r.add_argument("--force", action="store_true",
                   help="allow a rule that would cut SSH or lossd's own control traffic")
    o = ap.add_argument_group("output")
    o.add_argument("--source", choices=("events", "aggregates"), default="events",
                   help="events: WatchRetransmits on the rule's flows (default); aggregates: "
                        "WatchAggregates, every flow")
    o.add_argument("--interval", default="1s", help="print every (default 1s)")
    cli.add_connection_args(ap)
    args = ap.parse_args(argv)
    if not (args.port or args.addr or args.cgroup):
        ap.error("name the service: --port, --addr and/or --cgroup")
    if not (args.iface or args.cgroup):
        ap.error("give --iface (or --cgroup)")
    cli.durations_ns(ap, args, "duration", "grace", "interval")
    try:
        args.rate_f = parse_rate(args.rate, "--rate")
    except LossdInputError as e:
        ap.error(e.message)
    if args.interval_ns < 100 * 10**6:
        ap.error("--interval: at least 100ms")
    return args


class Tally:
    """Retransmitted segments by type, from a stream consumed in a thread."""

    def __init__(self, stream, rule_id, source):
        self.stream, self.rule_id, self.source = stream, rule_id, source
        self.lock = threading.Lock()
        self.window = collections.Counter()   # since the last take()
        self.total = collections.Counter()
        self.rule_window = 0                  # aggregates: this rule's flows
        self.rule_total = 0
        self.gaps = collections.Counter()     # by source
        self.window_gaps = 0
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _gap(self, g):
        self.gaps[g.source] += g.count
        self.window_gaps += g.count

    def _run(self):
        try:
            for item in self.stream:
                with self.lock:
                    if isinstance(item, Gap):
                        self._gap(item)
                    elif self.source == "aggregates":
                        for t, n in item.retransmits_by_type.items():
                            self.window[t] += n
                            self.total[t] += n
                        mine = item.retransmits_by_rule.get(self.rule_id, 0)
                        self.rule_window += mine
                        self.rule_total += mine
                        for g in item.gaps:
                            self._gap(g)
                    else:
                        self.window[item.type] += item.segments
                        self.total[item.type] += item.segments
        except LossdError as e:
            self.error = e

    def take(self):
        with self.lock:
            w, self.window = self.window, collections.Counter()
            rw, self.rule_window = self.rule_window, 0
            g, self.window_gaps = self.window_gaps, 0
            return w, rw, g

    def stop(self):
        self.stream.close()
        self.thread.join(timeout=5)


def by_type(counts):
    order = {t: i for i, t in enumerate(RETRANSMIT_TYPES)}
    items = sorted(counts.items(), key=lambda kv: (order.get(kv[0], 99), kv[0]))
    return " ".join("%s %d" % (t, n) for t, n in items if n) or "-"


def main(argv=None):
    args = parse_args(argv)
    stop = threading.Event()
    got = []

    def on_signal(signum, frame):
        if got:
            os.write(2, b"\n(cleaning up, please wait)\n")  # no print(): it may be mid-print
        got.append(signum)
        stop.set()
    # Signals only set a flag: nothing is interrupted half-way (creating or
    # deleting the rule); the loop below waits on that flag and stops at once.
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    client = cli.connect(args)
    if stop.is_set():
        client.close()
        return 128 + got[0]
    where, port_key, addr_key = ("from", "sport", "src") if args.from_service else ("to", "dport", "dst")
    kw = {port_key: args.port, addr_key: args.addr}
    try:
        rule = client.add_rule(
            iface=args.iface, cgroup=args.cgroup, direction=args.dir, hook=args.hook,
            protocol=None if args.proto == "any" else args.proto,
            rate=args.rate_f, seed=args.seed, priority=args.priority,
            ttl="%dns" % (args.duration_ns + args.grace_ns), per_segment=args.per_segment, force=args.force,
            labels={"client": "inject.py", "pid": str(os.getpid())}, **kw)
    except LossdError as e:
        client.close()
        cli.die("cannot create the rule: %s" % e, cli.EXIT_USAGE if e.local else cli.EXIT_ERROR)

    status = 0
    tally = None
    try:
        print("rule %d: %s of %s [%s] (packets %s the service) for %s; attached: %s"
              % (rule.id, rule.loss, rule.target, rule.match, where,
                 format_duration(args.duration_ns), ", ".join(rule.attachments) or "-"), flush=True)
        if args.source == "events":
            stream = client.watch_retransmits(rule=rule)
        else:
            stream = client.aggregates(window=args.interval)
        tally = Tally(stream, rule.id, args.source)
        what = "retransmitted segments (flows of rule %d)" % rule.id if args.source == "events" \
            else "retransmitted segments (all flows; this rule's flows in [])"
        print("%8s %10s  %s" % ("time", "dropped", what), flush=True)

        start = time.monotonic()
        end = start + args.duration_ns / 1e9
        step = args.interval_ns / 1e9
        next_tick = start + step
        last_dropped = rule.counters.dropped_segments
        while not stop.is_set() and time.monotonic() < end:
            if stop.wait(max(0.0, min(next_tick, end) - time.monotonic())):
                break
            now = time.monotonic()
            if now < next_tick and now < end:
                continue
            next_tick += step
            try:
                cur = client.get_rule(rule)
                dropped = cur.counters.dropped_segments
                d = "%d" % (dropped - last_dropped)
                last_dropped = dropped
                if cur.state != "active":
                    print("rule %d is %s%s" % (rule.id, cur.state, ": " + cur.reason if cur.reason else ""))
                    status = cli.EXIT_ERROR
                    break
            except LossdError as e:
                d = "?"
                print("get rule %d: %s" % (rule.id, e), file=sys.stderr, flush=True)
                if e.code == "NOT_FOUND":
                    status = cli.EXIT_ERROR
                    break
            w, rw, gaps = tally.take()
            line = "%7.1fs %10s  %s" % (now - start, d, by_type(w))
            if args.source == "aggregates":
                line += "  [%d]" % rw
            if gaps:
                line += "  (%d events lost)" % gaps
            print(line, flush=True)
            if tally.error:
                print("retransmit stream ended: %s" % tally.error, file=sys.stderr, flush=True)
                status = cli.EXIT_ERROR
                break
    finally:
        if tally:
            tally.stop()
        status = cleanup(client, rule, tally, args) or status
        client.close()
    if got:
        return 128 + got[0]
    return status


def cleanup(client, rule, tally, args):
    """Delete the rule, print its final effect. Returns an exit status."""
    before = None
    try:
        before = client.rule_effect(rule)  # retransmits as of just before deletion
    except LossdError:
        pass
    try:
        final = client.delete_rule(rule)
    except LossdError as e:
        if e.code == "NOT_FOUND":
            print("rule %d was already gone" % rule.id)
        else:
            print("DELETING RULE %d FAILED: %s (it expires by its TTL at the latest)" % (rule.id, e),
                  file=sys.stderr, flush=True)
            return cli.EXIT_ERROR
        final = None
    else:
        print("rule %d deleted" % rule.id)
    after = None
    try:
        after = client.rule_effect(rule)  # a daemon may keep the effect of a deleted rule
    except LossdError:
        pass
    # What to check on a rule that matched nothing: the daemon's hint while it was live.
    hint = (before.hint if before else "") or ""
    print_effect(rule, final, after or before, after is not None, tally, hint)
    return 0


def print_effect(rule, final, effect, effect_is_final, tally, hint=""):
    c = final.counters if final else (effect.counters if effect else None)
    print("final effect of rule %d (%s):" % (rule.id, rule.match))
    if c is None:
        print("  no counters (the rule was gone and lossd has no effect for it)")
        return
    conf = rule.rate
    if effect is not None and effect.deterministic:
        # First-k, every-n-th: an expected count of drops (the data plane's per-flow
        # counts), not a rate with an interval.
        if effect.expected_dropped is None:
            print("  expected drops   unknown (the per-flow counts did not add up to the matched packets: traffic still moving?)")
        else:
            print("  expected drops   %d of %d packets; dropped %d: %s"
                  % (effect.expected_dropped, effect.expected_of, effect.expected_actual,
                     "as configured" if effect.configured_within_ci else "NOT as configured"))
    else:
        print_rate(conf, c, effect, effect_is_final, hint)
    print("  dropped          %d of %d packets (%d of %d segments)"
          % (c.dropped_packets, c.matched_packets, c.dropped_segments, c.matched_segments))
    if effect:
        print("  retransmitted    %d segments: %s  (%d flows)%s"
              % (effect.retransmitted_total, by_type(effect.retransmitted_segments), effect.flows,
                 "" if effect_is_final else " [lossd, just before deletion]"))
    if tally and tally.source == "events":
        print("  seen on stream   %d segments: %s" % (sum(tally.total.values()), by_type(tally.total)))
    elif tally:
        print("  seen on stream   %d segments on the rule's flows; all flows: %s"
              % (tally.rule_total, by_type(tally.total)))
    if tally and tally.gaps:
        print("  events lost      %s" % ", ".join("%s %d" % kv for kv in sorted(tally.gaps.items())))


def print_rate(conf, c, effect, effect_is_final, hint=""):
    # The rate counts skbs, the unit the decision is made on (docs/architecture.md#measured-rate).
    n, k = c.matched_packets, c.dropped_packets
    if n == 0:  # no trial, no interval: say what to check instead
        print("  configured rate  %s" % format_rate(conf))
        print("  measured rate    - (no packet matched: %s)"
              % (hint or "check the rule's --dir, --iface and ports against the traffic"))
        return
    if effect_is_final:
        measured, lo, hi, ok = effect.measured_rate, effect.rate_ci_low, effect.rate_ci_high, \
            effect.configured_within_ci
    else:  # the daemon's effect predates the final counters: same maths, client side
        measured = k / n if n else 0.0
        lo, hi = wilson_interval(k, n)
        ok = conf is not None and lo <= conf <= hi
    print("  configured rate  %s" % format_rate(conf))
    print("  measured rate    %s  (99.9%% CI %s .. %s: configured %s)"
          % (format_rate(measured) if n else "-", format_rate(lo), format_rate(hi),
             "inside" if ok else "OUTSIDE"))


if __name__ == "__main__":
    sys.exit(main())
