"""What is under test, and the entry point of every e2e script.

    main()   --lossd PATH [--lossctl PATH] [--stubs DIR], then unittest's own arguments;
             exit 77 (ctest: skipped) without root.
"""
import argparse
import os
import sys

PY = "/usr/bin/python3"  # Debian's: python3-grpcio and python3-protobuf (README: the pyenv python3 on PATH has no grpcio)
HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(E2E))
PYCLIENT = os.path.join(REPO, "client", "python")

LOSSD = None    # the lossd binary under test
LOSSCTL = None  # the lossctl binary (client suites)
STUBS = None    # <build>/python: the generated lossd_pb2*.py


def set_paths(lossd=None, lossctl=None, stubs=None):
    global LOSSD, LOSSCTL, STUBS
    if lossd:
        LOSSD = os.path.abspath(lossd)
    if lossctl:
        LOSSCTL = os.path.abspath(lossctl)
    if stubs:
        STUBS = os.path.abspath(stubs)
        from lab import daemon
        daemon.load_stubs(STUBS)


def artifact(name):
    """A path under <build>/e2e-artifacts (the build tree: next to --stubs, else the working
    directory, which ctest sets to the build tree) for what a test saves for people to look
    at: screenshots, terminal captures."""
    base = os.path.dirname(STUBS) if STUBS else os.getcwd()
    d = os.path.join(base, "e2e-artifacts")
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lossd", required=True)
    ap.add_argument("--lossctl")
    ap.add_argument("--stubs", help="<build>/python (generated lossd_pb2*.py)")
    args, rest = ap.parse_known_args()
    if os.geteuid() != 0:
        print("skipped: the e2e tests need root (network namespaces, BPF)")
        sys.exit(77)
    set_paths(args.lossd, args.lossctl, args.stubs)
    import unittest
    unittest.main(module="__main__", argv=[sys.argv[0]] + rest, verbosity=2)
