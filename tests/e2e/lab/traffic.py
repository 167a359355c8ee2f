"""Traffic between lab namespaces: the TCP tool (tcpflow.py) and the UDP tool (udpflow.py),
run inside them with Debian's python3 (stdlib only).

TCP
    tcp_flow(lab, server_ns, client_ns, dst)   one paced bulk transfer, both ends closed and
                                               every socket idle when it returns
    tcp_loss_run(lab, lossd_ns, args, dst)     the same A -> B under a one-shot lossd rule,
                                               with the kernel counter deltas; tcp_summary()
    server(), sender(), finish()               the two ends, separately (observer tests)
    bulk(lab, dst), rr(lab, dst)               A -> B bulk transfer / request-response
    TcpFlow                                    a flow in the background (daemon and client
                                               tests): wait_sent(), release(), wait()
    iperf_server(), iperf()                    unpaced iperf3 (benchmarks)
UDP
    udp_flows(lab, flows)                      counted, sequence-numbered flows at once
    udp_count(lab, tx_ns, rx_ns, dst, ...)     one flow: (sent, unique received)
"""

import json
import os
import subprocess
import threading
import time

from lab.config import PY
from lab.stats import TCP_KEYS, binom_interval, retransmissions_explained

HERE = os.path.dirname(os.path.abspath(__file__))
TCPFLOW = os.path.join(HERE, "tcpflow.py")
UDPFLOW = os.path.join(HERE, "udpflow.py")


def _any(dst):
    return "::" if ":" in dst else "0.0.0.0"


def _last_json(out):
    return json.loads(out.strip().splitlines()[-1])


# ---- TCP ---------------------------------------------------------------------------------

def server(lab, ns, bind, port, conns=1, cgroup=None):
    """tcpflow.py recv in ns (in cgroup, if given), once it listens."""
    p = lab.popen(ns, [PY, TCPFLOW, "recv", "--bind", bind, "--port", str(port), "--conns", str(conns)],
                  stdout=subprocess.PIPE, cgroup=cgroup)
    line = p.stdout.readline()
    if not line.startswith("READY"):
        p.kill()
        raise AssertionError("tcp receiver did not start: %r" % line)
    return p


def sender_cmd(dst, port, nbytes=0, rate_mbit=500, conns=1, until_stdin=False, cc=None, timeout=60,
               acked=False, hold=False, sndbuf=0):
    return ([PY, TCPFLOW, "send", "--dst", dst, "--port", str(port), "--conns", str(conns),
             "--rate-mbit", str(rate_mbit), "--timeout", str(timeout)]
            + (["--cc", cc] if cc else []) + (["--acked"] if acked else []) + (["--hold"] if hold else [])
            + (["--sndbuf", str(int(sndbuf))] if sndbuf else [])
            + (["--until-stdin"] if until_stdin else ["--bytes", str(int(nbytes))]))


def sender(lab, ns, dst, port, cgroup=None, **kw):
    """tcpflow.py send in ns (sender_cmd's arguments), once every connection is up; p.sports
    are their local ports."""
    p = lab.popen(ns, sender_cmd(dst, port, **kw), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                  cgroup=cgroup)
    line = p.stdout.readline()
    if not line.startswith("STARTED"):
        p.kill()
        raise AssertionError("tcp sender did not start: %r" % line)
    p.sports = [int(x) for x in line.split()[1:]]
    return p


def finish(p, timeout=120, stop=False):
    """Waits for a traffic process (after a line on its stdin, with stop); its last JSON line."""
    if stop:
        p.stdin.write("stop\n")
        p.stdin.flush()
    out, _ = p.communicate(timeout=timeout)
    if p.returncode != 0:
        raise AssertionError("traffic process failed (%s): %r" % (p.returncode, out))
    return _last_json(out)


def tcp_flow(lab, server_ns, client_ns, dst, port=5201, mbytes=150, rate_mbit=500, cgroup=None, timeout=60,
             server_cgroup=None):
    """One paced TCP bulk transfer that ends only after the receiver read every byte.

    Returns (sender json, receiver json) once both ends are closed and no TCP socket but
    TIME-WAIT/LISTEN is left in either namespace, so the kernel counters read afterwards
    are final. cgroup: the sender's, server_cgroup: the receiver's.
    """
    srv = server(lab, server_ns, _any(dst), port, cgroup=server_cgroup)
    cli = sender(lab, client_ns, dst, port, nbytes=mbytes * 1e6, rate_mbit=rate_mbit, cgroup=cgroup,
                 timeout=timeout)
    s = finish(cli, timeout=timeout + 30)
    r = finish(srv, timeout=30)
    lab.wait_idle()
    return s, r


def tcp_loss_run(lab, lossd_ns, lossd_args, dst, mbytes=187.5, rate_mbit=500, cgroup=None, nsenter=False):
    """A paced TCP transfer A -> B under a lossd rule (or none when lossd_args is None).

    Returns dict(sender, receiver, final (lossd's final counters), hooks, da/db (kernel
    counter deltas in A/B, read after every socket closed)).
    """
    d = lab.lossd(lossd_ns, lossd_args, nsenter=nsenter) if lossd_args is not None else None
    a0, b0, p0 = lab.counters(lab.a), lab.counters(lab.b), lab.path_drops()
    s, r = tcp_flow(lab, lab.b, lab.a, dst, mbytes=mbytes, rate_mbit=rate_mbit, cgroup=cgroup)
    da, db, path_drops = lab.counters(lab.a) - a0, lab.counters(lab.b) - b0, lab.path_drops() - p0
    f = d.stop() if d else None
    return dict(sender=s, receiver=r, final=f, hooks=d.hooks if d else None, da=da, db=db,
                path_drops=path_drops)


def tcp_summary(run):
    """The numbers of a tcp_loss_run worth reporting."""
    out = {"sender_" + k.split(".")[1]: run["da"][k] for k in TCP_KEYS}
    out["receiver_OutRsts"] = run["db"]["Tcp.OutRsts"]
    f = run["final"] or {}
    for k in ("matched_packets", "matched_segments", "dropped_packets", "dropped_segments"):
        if k in f:
            out[k] = f[k]
    out["bytes"] = run["receiver"]["bytes"]
    out["send_secs"] = run["sender"]["secs"]
    out["socket_total_retrans"] = run["sender"]["total_retrans"]
    out["send_errors"] = run["sender"]["errors"]
    if f.get("dropped_segments") is not None:
        out["retransmissions"] = retransmissions_explained(run["da"], run["db"], f["dropped_segments"],
                                                           run.get("path_drops", 0))[1]
    return out


def assert_network_loss(tc, run, hook, attachment, rate=0.01):
    """The checks of a tcp_loss_run whose rule drops `rate` of the data skbs at `hook`
    ("tc_ingress", "tc_egress", as lossd's final report names it) through
    `attachment` (as its ready line lists it): the transfer completed without
    error or reset, the hook dropped what the rule dropped, the dropped skbs lie
    in the binomial interval (stats.CONF), and TCP retransmitted exactly the dropped
    segments (plus the spurious ones the receiver reported back as D-SACKs; more only where
    a kernel counted another loss on the path: stats.retransmissions_explained):

        TcpRetransSegs == dropped_segs + D-SACKs == the sender's total_retrans

    Returns the final counters and the sender's MIB delta for further checks."""
    s = tcp_summary(run)
    f, da = run["final"], run["da"]
    tc.assertIn(attachment, run["hooks"])
    tc.assertEqual(run["receiver"]["bytes"], run["sender"]["bytes"], s)
    tc.assertEqual(run["sender"]["errors"], {}, s)
    tc.assertGreater(f["dropped_segments"], 0, s)
    tc.assertEqual(f["hooks"][hook]["dropped"], f["dropped_packets"], s)
    tc.assertTrue(retransmissions_explained(da, run["db"], f["dropped_segments"], run.get("path_drops", 0))[0], s)
    tc.assertEqual(run["sender"]["total_retrans"], da["Tcp.RetransSegs"], s)
    # No reset cut a retransmission short.
    tc.assertEqual(run["db"]["Tcp.OutRsts"] + da["Tcp.OutRsts"], 0, s)
    # The rate applies per skb (a GSO skb's segments are dropped together).
    lo, hi = binom_interval(f["matched_packets"], rate)
    tc.assertTrue(lo <= f["dropped_packets"] <= hi, "dropped skbs outside [%d, %d]: %s" % (lo, hi, s))
    return f, da


def bulk(lab, dst, port=5201, nbytes=150e6, rate_mbit=500, conns=1, cc=None):
    """Paced bulk transfer A -> B; returns (sender json, receiver json) once both ends closed."""
    srv = server(lab, lab.b, _any(dst), port, conns=conns)
    cli = sender(lab, lab.a, dst, port, nbytes=nbytes, rate_mbit=rate_mbit, conns=conns, cc=cc)
    return finish(cli), finish(srv)


def rr_server(lab, ns, bind, port, conns=0, response=0, cc=None):
    """tcpflow.py rr-server in ns, once it listens (conns 0: until killed; cc: the
    congestion control of its connections)."""
    p = lab.popen(ns, [PY, TCPFLOW, "rr-server", "--bind", bind, "--port", str(port), "--conns", str(conns),
                       "--response", str(response)] + (["--cc", cc] if cc else []), stdout=subprocess.PIPE)
    line = p.stdout.readline()
    if not line.startswith("READY"):
        p.kill()
        raise AssertionError("rr server did not start: %r" % line)
    return p


def rr_cmd(dst, port, *args):
    """The request/response client (a sweep workload too): tcpflow.py rr --dst --port ARGS."""
    return [PY, TCPFLOW, "rr", "--dst", dst, "--port", str(port)] + [str(a) for a in args]


def rr(lab, dst, port=5201, count=1, resp=100, gap_ms=0, request=64):
    """One connection A -> B, `count` requests of `request` bytes (one write each) each
    answered by `resp` bytes."""
    srv = rr_server(lab, lab.b, _any(dst), port, conns=1)
    cli = lab.popen(lab.a, rr_cmd(dst, port, "--request", request, "--response", resp, "--count", count,
                                  "--gap-ms", gap_ms, "--nodelay", "--no-latencies"), stdout=subprocess.PIPE)
    c = finish(cli)
    finish(srv)
    return c


class TcpFlow:
    """A paced TCP transfer in the background: C connections client_ns -> server_ns (one
    listener), nbytes on each at rate_mbit each.

    acked (default: hold): wait_sent() returns once every byte was written and acknowledged;
    hold: the flow then stays open until release(). release() returns (sender json,
    receiver json) once both ends closed; wait() does too, once no TCP socket is busy in
    the lab either (the counters are final).
    """

    def __init__(self, lab, server_ns, client_ns, dst, port, nbytes, rate_mbit, conns=1, hold=False,
                 acked=None, timeout=90, cgroup=None, cc=None):
        self.lab = lab
        self.timeout = timeout
        self.hold = hold
        self.srv = server(lab, server_ns, _any(dst), port, conns=conns)
        self.cli = sender(lab, client_ns, dst, port, nbytes=nbytes, rate_mbit=rate_mbit, conns=conns,
                          timeout=timeout, hold=hold, acked=hold if acked is None else acked, cgroup=cgroup,
                          cc=cc)
        self.t0 = time.monotonic()

    def running(self):
        return self.cli.poll() is None

    def close(self):
        """Kills both ends if still running (test cleanup after a failure)."""
        for p in (self.cli, self.srv):
            if p.poll() is None:
                p.kill()
                p.wait()

    def wait_sent(self, timeout=120):
        """Waits until the sender wrote everything and every byte was acknowledged."""
        line = self._read(self.cli.stdout.readline, timeout)
        if not line.startswith("SENT"):
            raise AssertionError("tcp sender: %r" % line)
        return json.loads(line[4:])

    def release(self, timeout=120):
        """Closes the flow; returns (sender json, receiver json)."""
        if self.hold:
            self.cli.stdin.write("go\n")
            self.cli.stdin.flush()
        # Read through the file objects: readline() above may have buffered the rest.
        cout = self._read(self.cli.stdout.read, timeout, self.cli)
        sout = self._read(self.srv.stdout.read, 30, self.srv)
        if self.cli.returncode != 0 or self.srv.returncode != 0 or not cout.strip() or not sout.strip():
            raise AssertionError("tcp flow failed: sender %r receiver %r" % (cout, sout))
        self.secs = time.monotonic() - self.t0
        return _last_json(cout), _last_json(sout)

    def wait(self):
        res = self.release(self.timeout + 30)
        self.lab.wait_idle()
        return res

    @staticmethod
    def _read(fn, timeout, proc=None):
        """fn() on a thread, at most timeout seconds; with proc: then its exit (killed if
        the read did not finish)."""
        out = []
        t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
        t.start()
        t.join(timeout)
        if proc is None:
            if not out:
                raise AssertionError("tcp flow: no output within %ss" % timeout)
            return out[0]
        if t.is_alive():
            proc.kill()
            t.join(5)
        proc.wait(timeout=10)
        return out[0] if out else ""


def iperf_server(lab, ns, port, bind=None, prefix=()):
    """iperf3 -s in ns, once it listens on port (benchmarks: unpaced TCP throughput)."""
    p = lab.popen(ns, list(prefix) + ["iperf3", "-s", "-p", str(port)] + (["-B", bind] if bind else []),
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        if lab.run(ns, "ss", "-Hltn", "sport = :%d" % port).stdout.strip():
            return p
        time.sleep(0.05)
    raise RuntimeError("iperf3 server did not listen on %d" % port)


def iperf_cmd(dst, port, secs, streams=1, prefix=()):
    return list(prefix) + ["iperf3", "-c", dst, "-p", str(port), "-t", str(secs), "-P", str(streams), "-J"]


def iperf_result(stdout):
    """{"gbps", "retransmits"} of an `iperf3 -J` client run."""
    j = json.loads(stdout)
    if "error" in j:
        raise RuntimeError("iperf3: " + j["error"])
    end = j["end"]
    return {"gbps": round(end["sum_received"]["bits_per_second"] / 1e9, 3),
            "retransmits": end["sum_sent"].get("retransmits")}


def iperf(lab, ns, dst, port, secs, streams=1, prefix=()):
    """An iperf3 client run in ns; iperf_result()."""
    r = lab.run(ns, *iperf_cmd(dst, port, secs, streams, prefix), timeout=secs + 90)
    return iperf_result(r.stdout)


# ---- UDP ---------------------------------------------------------------------------------

class UdpReceiver:
    def __init__(self, lab, ns, bind, port, flow, cgroup=None, rcvbuf=32 << 20, list_missing=False):
        cmd = [PY, UDPFLOW, "recv", "--bind", bind, "--port", str(port), "--flow", str(flow),
               "--rcvbuf", str(rcvbuf)] + (["--list-missing"] if list_missing else [])
        self.proc = lab.popen(ns, cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cgroup=cgroup)
        line = self.proc.stdout.readline()
        if not line.startswith("READY"):
            self.proc.kill()
            raise AssertionError("udp receiver did not start: %r" % line)

    def finish(self, timeout=30):
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        out, _ = self.proc.communicate(timeout=timeout)
        if self.proc.returncode != 0:
            raise AssertionError("udp receiver failed: %r" % out)
        return _last_json(out)


def udp_send_cmd(dst, port, flow, count, pps, size=None, tos=None, sport=None, times=None):
    return [PY, UDPFLOW, "send", "--dst", dst, "--port", str(port), "--flow", str(flow),
            "--count", str(count), "--pps", str(pps)] + \
        (["--size", str(size)] if size else []) + (["--tos", str(tos)] if tos else []) + \
        (["--sport", str(sport)] if sport else []) + (["--times", times] if times else [])


def finish_sender(p, count=0, pps=1):
    out, _ = p.communicate(timeout=60 + 3 * count / pps)
    if p.returncode != 0:
        raise AssertionError("udp sender failed: %r" % out)
    return _last_json(out)


def udp_flows(lab, flows, settle=0.3):
    """Runs UDP flows at once. Each flow: dict(rx_ns, tx_ns, dst, port, flow, count, pps,
    [rx_cgroup], [tx_cgroup], [list_missing], [size], [tos], [sport], [times: a file for each
    datagram's send times, udpflow's --times]). Returns [(sender result,
    receiver result)]."""
    rxs = [UdpReceiver(lab, f["rx_ns"], f["dst"], f["port"], f["flow"], cgroup=f.get("rx_cgroup"),
                       list_missing=f.get("list_missing", False))
           for f in flows]
    txs = [lab.popen(f["tx_ns"], udp_send_cmd(f["dst"], f["port"], f["flow"], f["count"], f["pps"],
                                              f.get("size"), f.get("tos"), f.get("sport"),
                                              f.get("times")),
                     stdout=subprocess.PIPE, cgroup=f.get("tx_cgroup")) for f in flows]
    sent = [finish_sender(p, f["count"], f["pps"]) for p, f in zip(txs, flows)]
    time.sleep(settle)
    return list(zip(sent, [r.finish() for r in rxs]))


def udp_count(lab, tx_ns, rx_ns, dst, port, flow, count, pps=20000):
    """Sends `count` numbered datagrams; returns (sent, unique received)."""
    ((sent, got),) = udp_flows(lab, [dict(rx_ns=rx_ns, tx_ns=tx_ns, dst=dst, port=port, flow=flow,
                                          count=count, pps=pps)], settle=0.3)
    return sent["sent"], got["unique"]
