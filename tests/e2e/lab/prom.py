"""A real Prometheus (Debian's `prometheus` 2.42) and node_exporter inside lab namespaces.

    Prometheus(lab, ns, jobs)   prometheus on 127.0.0.1:9090 of ns with a data dir of its own
                                (a Lab temp dir), scraping jobs {name: [host:port, ...]} every
                                second; query(), query_range(), series_values(), wait_targets_up()
    node_exporter(lab, ns, addr)   prometheus-node-exporter (netstat collector only) on addr,
                                reading the /proc/net of its own namespace
    promtool_check_metrics(text)   (rc, output) of `promtool check metrics`
    parse(text), values(samples, name, **labels), one(...)   a text exposition read back
Both processes are the Lab's: killed and removed by Lab.close().
"""

import json
import re
import os
import subprocess
import time
import urllib.parse

from lab import web

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """[(name, {labels}, value)] of a text exposition."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, line
        out.append((m.group(1), dict(LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out


def values(samples, name, **match):
    return [(l, v) for n, l, v in samples if n == name and all(l.get(k) == x for k, x in match.items())]


def one(samples, name, **match):
    got = values(samples, name, **match)
    assert len(got) == 1, (name, match, got)
    return got[0][1]


def promtool_check_metrics(text):
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True,
                       timeout=60)
    return r.returncode, (r.stdout + r.stderr).strip()


def node_exporter(lab, ns, addr):
    """node_exporter with only its netstat collector (node_netstat_*) listening on addr."""
    p = lab.popen(ns, [NODE_EXPORTER, "--web.listen-address=" + addr, "--collector.disable-defaults",
                       "--collector.netstat"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    host, port = addr.rsplit(":", 1)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        try:
            if web.request(ns, host, int(port), "/metrics", timeout=2).status == 200:
                return p
        except OSError:
            pass
        if p.poll() is not None:
            raise AssertionError("node_exporter exited %s" % p.returncode)
        time.sleep(0.1)
    raise AssertionError("node_exporter on %s did not serve" % addr)


class Prometheus:
    PORT = 9090

    def __init__(self, lab, ns, jobs, interval="1s"):
        self.lab, self.ns = lab, ns
        self.dir = lab.tempdir()
        self.config = os.path.join(self.dir, "prometheus.yml")
        lines = ["global:", "  scrape_interval: %s" % interval, "  scrape_timeout: %s" % interval,
                 "  evaluation_interval: %s" % interval, "scrape_configs:"]
        for name, targets in jobs.items():
            lines += ["  - job_name: %s" % name, "    static_configs:",
                      "      - targets: [%s]" % ", ".join('"%s"' % t for t in targets)]
        with open(self.config, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.log = os.path.join(self.dir, "prometheus.log")
        with open(self.log, "w") as log:
            self.proc = lab.popen(ns, [PROMETHEUS, "--config.file=" + self.config,
                                       "--storage.tsdb.path=" + os.path.join(self.dir, "data"),
                                       "--web.listen-address=127.0.0.1:%d" % self.PORT],
                                  stdout=log, stderr=subprocess.STDOUT)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                if web.request(ns, "127.0.0.1", self.PORT, "/-/ready", timeout=2).status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError("prometheus did not become ready:\n" + self.logs())

    def logs(self):
        with open(self.log) as f:
            return f.read()[-4000:]

    def api(self, path, **params):
        r = web.request(self.ns, "127.0.0.1", self.PORT, path + "?" + urllib.parse.urlencode(params))
        j = json.loads(r.body)
        if r.status != 200 or j.get("status") != "success":
            raise AssertionError("prometheus %s %s: %s" % (path, params, r))
        return j["data"]

    def query(self, expr, at=None):
        """An instant vector: [(labels, value)]."""
        params = {"query": expr}
        if at is not None:
            params["time"] = "%.3f" % at
        d = self.api("/api/v1/query", **params)
        return [(s["metric"], float(s["value"][1])) for s in d["result"]]

    def query_range(self, expr, start, end, step=1):
        return self.api("/api/v1/query_range", query=expr, start="%.3f" % start, end="%.3f" % end,
                        step=str(step))["result"]

    def by(self, expr, label, at=None):
        """{label value: sample value} of an instant query."""
        return {m.get(label, ""): v for m, v in self.query(expr, at)}

    def targets(self):
        return self.api("/api/v1/targets")["activeTargets"]

    def wait_targets_up(self, n, timeout=60):
        end = time.monotonic() + timeout
        t = []
        while time.monotonic() < end:
            t = self.targets()
            if len(t) == n and all(x["health"] == "up" for x in t):
                return t
            time.sleep(0.3)
        raise AssertionError("prometheus targets not all up: %s" % [(x["scrapeUrl"], x["health"], x.get("lastError"))
                                                                   for x in t])
