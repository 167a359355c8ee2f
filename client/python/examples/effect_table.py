#!/usr/bin/python3
"""Print the effect of every lossd rule: configured rate, measured rate with
its 99.9 % confidence interval, dropped segments, and the segments the
rule's flows retransmitted, by type.

    effect_table.py                       # every rule
    effect_table.py --labels team=storage --json
    effect_table.py --rule 3 --rule 5

Exit status: 0 done, 1 lossd unreachable or a call failed, 2 bad arguments.
"""

import argparse
import dataclasses
import json
import os
import sys

try:
    import lossd_client  # noqa: F401  (PYTHONPATH=client/python)
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from lossd_client import LossdError, format_rate
from lossd_client import cli
from lossd_client.spec import RETRANSMIT_TYPES


def collect(client, args):
    """[(Rule, RuleEffect or None, error or '')] for the rules asked for."""
    if args.rule:
        rules = []
        for rid in args.rule:
            try:
                rules.append(client.get_rule(rid))
            except LossdError as e:
                if e.code != "NOT_FOUND":
                    raise
                print("rule %d: no such rule" % rid, file=sys.stderr)
                args.missing = True
    else:
        rules = client.list_rules(labels=args.labels)
    out = []
    for r in sorted(rules, key=lambda r: r.id):
        try:
            out.append((r, client.rule_effect(r), ""))
        except LossdError as e:
            if e.code == "NOT_FOUND":  # deleted since the listing
                continue
            if e.code == "UNAVAILABLE":
                raise
            out.append((r, None, str(e)))
    return out


def type_columns(rows):
    seen = set()
    for _, e, _ in rows:
        if e:
            seen.update(t for t, n in e.retransmitted_segments.items() if n)
    order = {t: i for i, t in enumerate(RETRANSMIT_TYPES)}
    return sorted(seen, key=lambda t: (order.get(t, 99), t))


def table(rows):
    types = type_columns(rows)
    head = ["ID", "STATE", "TARGET", "MATCH", "MODEL", "CONFIGURED", "MEASURED", "99.9% CI", "IN CI",
            "DROPPED SEGS", "MATCHED SEGS", "FLOWS"] + [t.upper() for t in types] + ["RETRANS"]
    lines = [head]
    for r, e, err in rows:
        line = [str(r.id), r.state, r.target, str(r.match), str(r.loss)]
        if e is None:
            line += ["error: " + err]
        else:
            n = e.counters.matched_segments
            line += [format_rate(e.configured_rate),
                     format_rate(e.measured_rate) if n else "-",
                     "%s .. %s" % (format_rate(e.rate_ci_low), format_rate(e.rate_ci_high)) if n else "-",
                     ("yes" if e.configured_within_ci else "NO") if n else "-",
                     str(e.counters.dropped_segments), str(n), str(e.flows)]
            line += [str(e.retransmitted_segments.get(t, 0)) for t in types]
            line += [str(e.retransmitted_total)]
        lines.append(line)
    numeric = set(range(5, len(head)))
    widths = [max(len(l[i]) for l in lines if i < len(l)) for i in range(len(head))]
    out = []
    for l in lines:
        cells = []
        for i, c in enumerate(l):
            if i == len(l) - 1 and len(l) < len(head):  # an error message: as is
                cells.append(c)
            elif i in numeric and l is not head:
                cells.append(c.rjust(widths[i]))
            else:
                cells.append(c.ljust(widths[i]))
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def as_json(rows):
    out = []
    for r, e, err in rows:
        d = {"id": r.id, "state": r.state, "target": r.target, "match": str(r.match),
             "model": str(r.loss), "labels": r.labels}
        if e is None:
            d["error"] = err
        else:
            d.update(configured_rate=e.configured_rate, measured_rate=e.measured_rate,
                     rate_ci=[e.rate_ci_low, e.rate_ci_high],
                     configured_within_ci=e.configured_within_ci,
                     counters=dataclasses.asdict(e.counters),
                     retransmitted_segments=e.retransmitted_segments, flows=e.flows)
        out.append(d)
    return json.dumps(out, indent=2, sort_keys=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--labels", help="only rules carrying these labels: k=v[,k=v...]")
    ap.add_argument("--rule", type=int, action="append", help="only this rule (repeatable)")
    ap.add_argument("--json", action="store_true", help="JSON instead of a table")
    cli.add_connection_args(ap)
    args = ap.parse_args(argv)
    args.missing = False
    client = cli.connect(args)
    try:
        rows = collect(client, args)
    except LossdError as e:
        cli.die(str(e), cli.EXIT_USAGE if e.local else cli.EXIT_ERROR)
    finally:
        client.close()
    if args.json:
        print(as_json(rows))
    elif not rows:
        print("no rules")
    else:
        print(table(rows))
    return 1 if args.missing or any(err for _, _, err in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
