"""What the benchmark scripts share besides the e2e lab (tests/e2e/lab, on PYTHONPATH:
bench/run_all.sh sets it): where a result came from, the log line, medians and their
intervals, /proc/stat, kernel.bpf_stats_enabled, bench/path_timer."""
import datetime
import hashlib
import json
import math
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


def argument_parser(doc):
    """The parser every daemon benchmark starts from: its description (doc's first line),
    --lossd and --stubs defaulting to the build tree beside bench/."""
    import argparse
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--lossd", default=os.path.join(here, "..", "build", "daemon", "lossd"))
    ap.add_argument("--stubs", default=os.path.join(here, "..", "build", "python"),
                    help="<build>/python (generated lossd_pb2*.py)")
    return ap


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
    # The stubs too: the lab reads one-shot lossd's JSON with the lossd.v1 types.
    config.set_paths(lossd=args.lossd, stubs=os.path.abspath(args.stubs))
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


def median_ci(xs, conf=0.95):
    """Median and a distribution-free interval [x_(k), x_(n+1-k)] for it, the widest k whose
    coverage 1 - 2 P(Bin(n, 1/2) < k) is still >= conf (k = 1 if none is: min..max)."""
    xs = sorted(x for x in xs if x is not None)
    n = len(xs)
    if not n:
        return {"median": None, "ci": None, "ci_conf": None, "n": 0}
    cdf = lambda k: sum(math.comb(n, i) for i in range(k)) / 2 ** n  # P(X < k)
    k = 1
    while k + 1 <= n // 2 and 1 - 2 * cdf(k + 1) >= conf:
        k += 1
    return {"median": statistics.median(xs), "ci": [xs[k - 1], xs[n - k]], "ci_conf": round(1 - 2 * cdf(k), 4),
            "n": n}


def rnd(d, nd=3):
    """d with every float in it rounded to nd digits."""
    if isinstance(d, dict):
        return {k: rnd(v, nd) for k, v in d.items()}
    if isinstance(d, list):
        return [rnd(v, nd) for v in d]
    if isinstance(d, float):
        return round(d, nd)
    return d


def proc_stat():
    """Jiffies of all CPUs: user nice system idle iowait irq softirq steal."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return dict(zip(("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"), v))


# ---- kernel.bpf_stats_enabled: on for the measured runs only, always restored ---------------

STATS_SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"


class BpfStatsSysctl:
    """kernel.bpf_stats_enabled: enable_fresh() zeroes the statistics' gate (0, then 1: every
    program's run_time_ns / run_cnt counts from here on); restore() puts the original back (the
    caller does, on error and on signals too)."""

    def __init__(self):
        with open(STATS_SYSCTL) as f:
            self.original = f.read().strip()

    def _write(self, v):
        with open(STATS_SYSCTL, "w") as f:
            f.write(v)

    def enable_fresh(self):
        self._write("0")
        self._write("1")

    def restore(self):
        self._write(self.original)


# ---- bench/path_timer: the kernel's own time per skb through a path --------------------------

def ifindex(lab, ns, dev):
    return json.loads(lab.run(ns, "ip", "-j", "link", "show", "dev", dev).stdout)[0]["ifindex"]


class PathTimer:
    """bench/path_timer in namespace ns for one run: the kernel's own ns per skb from entry's
    netif_receive_skb to the exit (net_dev_start_xmit on exit, or tcp_probe for local delivery
    when exit is None). Softirq time: other processes' work on the machine is not in it. Its
    tcp_probe program is attached after the programs already there, so a program on tcp_probe
    loaded before the timer starts (the observer's) runs inside the timed path."""

    def __init__(self, binary, lab, ns, entry, exit=None):
        args = [binary, "--netns-ino", str(os.stat("/run/netns/" + ns).st_ino),
                "--entry", str(ifindex(lab, ns, entry))]
        if exit:
            args += ["--exit", str(ifindex(lab, ns, exit))]
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        if '"ready"' not in line:
            self.p.kill()
            raise RuntimeError("path_timer did not start: %r" % line)

    def stop(self):
        out, _ = self.p.communicate(input="", timeout=30)  # EOF on stdin: report and exit
        if self.p.returncode != 0:
            raise RuntimeError("path_timer exited %d" % self.p.returncode)
        return json.loads(out.strip().splitlines()[-1])
