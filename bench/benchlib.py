"""What the benchmark scripts share besides the e2e lab (tests/e2e/lab, on PYTHONPATH:
bench/run_all.sh sets it): where a result came from, the log line, medians."""
import datetime
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def git_describe():
    """HEAD of the source tree and whether it has uncommitted changes."""
    head = subprocess.run(["git", "-C", TOP, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", TOP, "status", "--porcelain", "--untracked-files=no"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
    if not dirty:
        return head
    diff = subprocess.run(["git", "-C", TOP, "diff", "HEAD"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL).stdout
    return "%s-dirty (uncommitted changes in %d tracked files, diff sha256 %s)" % (
        head, len(dirty.splitlines()), hashlib.sha256(diff).hexdigest()[:12])


def binary_id(path):
    """What was measured: the binary's modification time (UTC) and sha256."""
    with open(path, "rb") as f:
        h = hashlib.sha256(f.read()).hexdigest()[:16]
    mt = datetime.datetime.fromtimestamp(os.stat(path).st_mtime, datetime.timezone.utc)
    return {"mtime": mt.strftime("%Y-%m-%dT%H:%M:%SZ"), "sha256": h}


def parse_args(ap, check=None):
    """ap's arguments, and the start every benchmark shares: check(args) may
    refuse values (a message for ap.error), lossd must be a binary, and the
    benchmark needs root (network namespaces, BPF): without it, exit 77
    (skipped). Points the e2e lab at the lossd under test."""
    args = ap.parse_args()
    problem = check(args) if check else None
    if problem:
        ap.error(problem)
    args.lossd = os.path.abspath(args.lossd)
    if not os.access(args.lossd, os.X_OK):
        ap.error("no lossd binary at %s (build first, or pass --lossd)" % args.lossd)
    if os.geteuid() != 0:
        print("%s: needs root (network namespaces, BPF)" % ap.prog, file=sys.stderr)
        sys.exit(77)
    from lab import config
    config.set_paths(lossd=args.lossd)
    return args


def logger(name):
    """log(msg) -> 'NAME HH:MM:SS: msg' on stderr."""
    def log(msg):
        print("%s %s: %s" % (name, time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)
    return log


def med(xs):
    """Median of the values that are not None; None if there are none."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def report(out, problems):
    """Prints the result document with its sanity checks (not targets); the exit status:
    1 when a check failed."""
    out["checks_ok"] = not problems
    out["problems"] = problems
    print(json.dumps(out, indent=2))
    return 0 if not problems else 1
