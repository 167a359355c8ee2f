"""What the benchmark scripts share (stdlib only): where a result came from, the log
line, medians and shell calls."""
import datetime
import hashlib
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


def logger(name):
    """log(msg) -> 'NAME HH:MM:SS: msg' on stderr."""
    def log(msg):
        print("%s %s: %s" % (name, time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)
    return log


def med(xs):
    """Median of the values that are not None; None if there are none."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def sh(*cmd, check=True, **kw):
    """Runs cmd, output captured as text; with check, a failure raises with its stderr."""
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
    return r
