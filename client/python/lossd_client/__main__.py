"""python3 -m lossd_client COMMAND ...: the client's commands from the installed package.

    status                      lossd's version and the state of its parts
    rules [--label K=V ...]     the rules, one line each
    sweep ...                   python3 -m lossd_client.sweep (lossctl sweep)
    trace ...                   python3 -m lossd_client.trace (lossctl flow trace)
    scenario ...                python3 -m lossd_client.scenario (lossctl scenario)

Connection options (--socket, --target, --tls, ...) go after the command.
"""

import argparse
import sys

from . import cli


def _status(argv):
    ap = cli.add_connection_args(argparse.ArgumentParser(prog="python3 -m lossd_client status"))
    a = ap.parse_args(argv)
    with cli.connect(a) as c:
        v, h = c.version(), c.health()
        print("lossd %s (%s) at %s" % (v.version, v.api, c.target))
        print("serving: %s, rules: %d, subscribers: %d" % ("yes" if h.serving else "no", h.rules,
                                                           h.subscribers))
        for name, state in sorted(h.components.items()):
            print("  %-10s %s" % (name, state))
        return 0 if h.serving else 1


def _rules(argv):
    ap = cli.add_connection_args(argparse.ArgumentParser(prog="python3 -m lossd_client rules"))
    ap.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                    help="only rules carrying this label (repeatable: all of them)")
    a = ap.parse_args(argv)
    labels = {}
    for kv in a.label:
        k, sep, v = kv.partition("=")
        if not sep:
            ap.error("--label %r: KEY=VALUE" % kv)
        labels[k] = v
    with cli.connect(a) as c:
        for r in c.list_rules(labels=labels or None):
            print(r)
    return 0


def _sweep(argv):
    from . import sweep
    return sweep.main(argv)


def _trace(argv):
    from . import trace
    return trace.main(argv)


def _scenario(argv):
    from . import scenario
    return scenario.main(argv)


COMMANDS = {"status": _status, "rules": _rules, "sweep": _sweep, "trace": _trace,
            "scenario": _scenario}


def main(argv=None):
    if argv is None:
        argv = sys.argv[1:]
        sys.argv[0] = "lossd_client"  # the messages' prefix (cli.die), not "__main__.py"
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else cli.EXIT_USAGE
    cmd = COMMANDS.get(argv[0])
    if cmd is None:
        print("python3 -m lossd_client: unknown command %r (%s)" % (argv[0], ", ".join(COMMANDS)),
              file=sys.stderr)
        return cli.EXIT_USAGE
    return cmd(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
