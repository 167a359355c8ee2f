"""Shared command-line plumbing for scripts using lossd_client (the examples).

    parser = argparse.ArgumentParser()
    cli.add_connection_args(parser)
    args = parser.parse_args()
    client = cli.connect(args)        # exits with a clear message if lossd is unreachable
"""

import os
import sys

from ._stubs import ENV_VAR, StubsNotFound
from .client import DEFAULT_SOCKET, Client
from .errors import LossdError, LossdInputError, unix_path
from .units import parse_duration

EXIT_ERROR = 1        # lossd unreachable, a call failed, stubs missing
EXIT_USAGE = 2        # bad arguments (argparse uses 2 as well)


def add_connection_args(parser):
    g = parser.add_argument_group("connection")
    g.add_argument("--socket", default=None, metavar="PATH",
                   help="lossd's Unix socket (default %s)" % DEFAULT_SOCKET)
    g.add_argument("--target", default=None, metavar="HOST:PORT",
                   help="connect over TCP instead of the Unix socket")
    g.add_argument("--tls", action="store_true", help="use TLS (with --target)")
    g.add_argument("--ca", metavar="PEM", help="CA certificates for TLS (default: system roots)")
    g.add_argument("--cert", metavar="PEM", help="client certificate for TLS")
    g.add_argument("--key", metavar="PEM", help="client key for TLS")
    g.add_argument("--server-name", metavar="NAME", help="name expected in the server certificate")
    g.add_argument("--stubs", metavar="DIR", default=None,
                   help="<build>/python holding the generated lossd/v1 modules (default $%s)" % ENV_VAR)
    g.add_argument("--rpc-timeout", type=float, default=10.0, metavar="S",
                   help="seconds for each call (default 10)")
    return parser


def durations_ns(parser, args, *names):
    """Sets args.<name>_ns from each duration option --<name> (underscores as
    dashes); a bad value is the parser's usage error naming the option."""
    for name in names:
        flag = "--" + name.replace("_", "-")
        try:
            setattr(args, name + "_ns", parse_duration(getattr(args, name), flag))
        except LossdInputError as e:
            parser.error(e.message)


def die(msg, code=EXIT_ERROR):
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "lossd_client"
    print("%s: %s" % (prog, msg), file=sys.stderr, flush=True)
    sys.exit(code)


def connect(args, check=True):
    """A Client from the parsed connection arguments; with check, ask lossd
    for its version first and exit non-zero with a clear message if that fails."""
    if args.socket and args.target:
        die("give --socket or --target, not both", EXIT_USAGE)
    try:
        client = Client(args.target or args.socket, stubs=args.stubs, tls=args.tls or None,
                        ca=args.ca, cert=args.cert, key=args.key, server_name=args.server_name,
                        timeout=args.rpc_timeout)
    except StubsNotFound as e:
        die(str(e))
    except LossdError as e:
        die(str(e), EXIT_USAGE if e.local else EXIT_ERROR)
    if check:
        try:
            client.check(timeout=min(args.rpc_timeout, 5.0))
        except LossdError as e:
            client.close()
            if e.code == "UNAVAILABLE":
                msg = e.hint or "lossd is not reachable at %s" % client.target
                if unix_path(client.target) is None:
                    msg += " (%s)" % e.message
                die(msg)
            die("lossd at %s: %s" % (client.target, e))
    return client
