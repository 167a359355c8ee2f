#!/usr/bin/python3
"""The actions beside drop and the two newer loss models, measured against the receiving
kernel's own counters (docs/experiments.md#4-impairments-beside-drop).

  corrupt          --action corrupt at 1, 2, 5, 10 %: UDP with the veth's tx checksum offload
                   on (CHECKSUM_PARTIAL: the IPv4 header's identification flips) and off
                   (CHECKSUM_NONE: a payload bit flips), IPv6 with offload (nothing can be
                   corrupted: unacted); TCP (--per-segment): corrupted segments vs TcpRetransSegs;
                   which TCP packets can be corrupted (IPv4/IPv6, offload on/off, GSO or not)
  corrupt-payload  --action corrupt-payload at 1, 2, 5, 10 % (IPv4, offload on), and at 5 % for
                   IPv4/IPv6 x offload on/off: datagrams delivered with wrong bytes vs checksum errors
  duplicate        --action duplicate at 1, 2, 5, 10 %: UDP (egress; ingress at 5 %) receiver's
                   duplicates and the hook's copies; TCP (--per-segment): the receiver's D-SACKs
  ecn              UDP: ECT(0) marked (IpExt.InCEPkts), not-ECT dropped (ecn) or passed (ecn-pass);
                   TCP (cubic, net.ipv4.tcp_ecn=1 both ends, +10 ms RTT through the lab's delay
                   line): goodput, CE marks and CWR entries (the observer's Flow.ca_entries) at
                   0, 0.1, 0.3, 1, 3 % marked, against the same rates dropped
  markov           --markov 2%,25%,5%,20%,1% (seeded) on 100,000 numbered datagrams: the lengths of
                   the runs of lost datagrams against the model's distribution
  police           --police 50mbit,64kib: delivered vs offered UDP rate (1,242-byte frames), and a
                   cubic TCP flow's goodput under it (dropping, and marking with --action ecn), direct
                   and with +10 ms RTT

Every run is a one-shot lossd (build/daemon/lossd --json) in the sender's namespace on its veth,
direction egress, between two (three with the delay line) fresh network namespaces that
tests/e2e/lab creates with unique names and removes in a finally block (addresses only inside
them). Prints one JSON document; plots go to --plots (default: this directory).

Usage (root, after `make build`; ~4 min):
    /usr/bin/python3 docs/experiments/impairments.py [--only corrupt,duplicate,...]
                     [--plots DIR] [--out FILE] [--replot FILE (only redraw from a saved --out)]
"""
import argparse
import datetime
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))

EXPERIMENTS = ("corrupt", "corrupt-payload", "duplicate", "ecn", "markov", "police")
RATES = (0.01, 0.02, 0.05, 0.10)
PORT = 9400       # UDP flows
TCP_PORT = 5201   # lab.traffic's TCP flows
N = 20000         # datagrams per UDP run
CORRUPT_TCP_MB = 8  # MB per corrupt TCP run (20 for duplicate)
PPS = 20000
ECT0 = 2          # the TOS byte's ECN bits: ECT(0)
MARKOV = (0.02, 0.25, 0.05, 0.20, 0.01)  # p13, p31, p32, p23, p14
MARKOV_N = 100000
POLICE_RATE, POLICE_BURST = 50e6, 65536
POLICE_PAYLOAD = 1200  # UDP payload; the frame tc sees: + 8 + 20 + 14 = 1,242 bytes
POLICE_FRAME = POLICE_PAYLOAD + 8 + 20 + 14
DELAY_RTT_MS = 10


def log(msg):
    print("impairments %s: %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def pct(x):
    return "%g%%" % (100 * x)


def rule(*extra, proto="udp", port=PORT, rate=None, direction="egress"):
    args = ["--dir", direction, "--proto", proto, "--dport", str(port)]
    if rate is not None:
        args += ["--rate", pct(rate)]
    return args + list(extra)


def keep(final):
    """The counters of a final line worth keeping (lossd's names)."""
    return {k: v for k, v in final.items() if k not in ("rule", "hooks", "seq", "time_unix_ns", "attachments",
                                                        "rule_id", "state")}


# ---- the runs ----------------------------------------------------------------------------

def udp_run(lab, args, dst=None, count=N, pps=PPS, tos=0, size=None, iface=None, ns=None, list_missing=False):
    """A one-shot lossd (args) on A's interface (or iface in ns) while `count` numbered datagrams
    go A -> B. Returns dict(final, sent, got, db: B's MIB delta)."""
    from lab import traffic
    d = lab.lossd(ns or lab.a, ["--iface", iface or lab.IF_A] + args)
    try:
        b0 = lab.counters(lab.b)
        ((sent, got),) = traffic.udp_flows(lab, [dict(rx_ns=lab.b, tx_ns=lab.a, dst=dst or lab.V4_B, port=PORT,
                                                     flow=1, count=count, pps=pps, tos=tos, size=size,
                                                     list_missing=list_missing)])
        db = lab.counters(lab.b) - b0
    finally:
        f = d.stop()
    if db["Udp.RcvbufErrors"] + db["Snmp6.Udp6RcvbufErrors"]:
        log("warning: the receiver's socket dropped %d datagrams itself" %
            (db["Udp.RcvbufErrors"] + db["Snmp6.Udp6RcvbufErrors"]))
    return dict(final=f, sent=sent, got=got, db=db)


def tcp_run(lab, args, mbytes=20, rate_mbit=200):
    """A paced TCP transfer A -> B (lab.traffic.tcp_loss_run) under a one-shot lossd on A's
    interface."""
    from lab import traffic
    from lab.stats import retransmissions_explained
    run = traffic.tcp_loss_run(lab, lab.a, ["--iface", lab.IF_A] + args, lab.V4_B, mbytes=mbytes,
                               rate_mbit=rate_mbit)
    f, da, db = run["final"], run["da"], run["db"]
    lost = f["dropped_segments"] + f["corrupted_segments"]
    ok, numbers = retransmissions_explained(da, db, lost, run["path_drops"])
    return dict(final=keep(f), bytes=run["receiver"]["bytes"], secs=run["sender"]["secs"],
                goodput_mbit=round(8 * run["receiver"]["bytes"] / run["sender"]["secs"] / 1e6, 2),
                retrans_segs=da["Tcp.RetransSegs"], retrans_explained=ok, retrans_numbers=numbers,
                sender_dsack_recv=da["TcpExt.TCPDSACKRecv"], sender_dsack_recv_segs=da["TcpExt.TCPDSACKRecvSegs"],
                receiver_dsacks_sent=db["TcpExt.TCPDSACKOldSent"] + db["TcpExt.TCPDSACKOfoSent"],
                receiver_ip_csum_errors=db["IpExt.InCsumErrors"], receiver_tcp_csum_errors=db["Tcp.InCsumErrors"],
                receiver_in_ce=db["IpExt.InCEPkts"], sender_rtos=da["TcpExt.TCPTimeouts"],
                sender_fast_retrans=da["TcpExt.TCPFastRetrans"], sender_loss_probes=da["TcpExt.TCPLossProbes"],
                sender_dsack_ignored={k.split(".")[1]: da[k] for k in (
                    "TcpExt.TCPDSACKIgnoredOld", "TcpExt.TCPDSACKIgnoredNoUndo", "TcpExt.TCPDSACKIgnoredDubious")},
                sender_dsack_undo=da["TcpExt.TCPDSACKUndo"])


def timed_tcp(lab, ns_tx, ns_rx, iface, dst, args, secs, rate_mbit, cc="cubic", observe=True):
    """A TCP flow ns_tx -> ns_rx for `secs` seconds (paced at rate_mbit, 0: unpaced) under a one-shot
    lossd on iface (egress) in ns_tx, with the observer (--events: the closed Flow's ca_entries).
    Returns its numbers."""
    from lab import traffic
    d = lab.lossd(ns_tx, ["--iface", iface] + args + (["--events"] if observe else []))
    try:
        t0, r0 = lab.counters(ns_tx), lab.counters(ns_rx)
        srv = traffic.server(lab, ns_rx, "0.0.0.0", TCP_PORT)
        cli = traffic.sender(lab, ns_tx, dst, TCP_PORT, rate_mbit=rate_mbit, until_stdin=True, cc=cc,
                             timeout=secs + 60)
        time.sleep(secs)
        s = traffic.finish(cli, stop=True, timeout=120)
        r = traffic.finish(srv, timeout=60)
        lab.wait_idle(ns_tx, ns_rx)
        dt, dr = lab.counters(ns_tx) - t0, lab.counters(ns_rx) - r0
    finally:
        f = d.stop()
    out = dict(final=keep(f), bytes=r["bytes"], secs=s["secs"],
               goodput_mbit=round(8 * r["bytes"] / s["secs"] / 1e6, 2),
               retrans_segs=dt["Tcp.RetransSegs"], receiver_in_ce=dr["IpExt.InCEPkts"])
    if observe:
        flows = [fl for fl in d.output().closes if fl.tuple.remote_port == TCP_PORT]
        if len(flows) == 1:
            fl = flows[0]
            out["ca_entries"] = dict(fl.ca_entries)
            out["ca_ms"] = {k: round(v / 1e6, 1) for k, v in fl.ca_time_ns.items()}
            out["min_rtt_us"] = fl.min_rtt_us
        else:
            log("warning: %d closed flows of port %d reported" % (len(flows), TCP_PORT))
    return out


# ---- the experiments ---------------------------------------------------------------------

def exp_corrupt(lab, dlab):
    out = {"udp_offload_on": [], "udp_offload_off": [], "tcp": []}
    for r in RATES:
        x = udp_run(lab, rule("--action", "corrupt", rate=r))
        f, db, got = x["final"], x["db"], x["got"]
        out["udp_offload_on"].append(dict(rate=r, sent=x["sent"]["sent"], corrupted=f["corrupted_packets"],
                                          unacted=f["unacted_packets"], ip_csum_errors=db["IpExt.InCsumErrors"],
                                          ip_hdr_errors=db["Ip.InHdrErrors"], udp_csum_errors=db["Udp.InCsumErrors"],
                                          received=got["unique"], wrong_bytes=got["corrupt"]))
        log("corrupt udp offload on %s: %s" % (pct(r), out["udp_offload_on"][-1]))
    lab.run(lab.a, "ethtool", "-K", lab.IF_A, "tx", "off")
    try:
        for r in RATES:
            x = udp_run(lab, rule("--action", "corrupt", rate=r))
            f, db, got = x["final"], x["db"], x["got"]
            out["udp_offload_off"].append(dict(rate=r, sent=x["sent"]["sent"], corrupted=f["corrupted_packets"],
                                               unacted=f["unacted_packets"], ip_csum_errors=db["IpExt.InCsumErrors"],
                                               udp_csum_errors=db["Udp.InCsumErrors"], received=got["unique"],
                                               wrong_bytes=got["corrupt"]))
            log("corrupt udp offload off %s: %s" % (pct(r), out["udp_offload_off"][-1]))
    finally:
        lab.run(lab.a, "ethtool", "-K", lab.IF_A, "tx", "on")
    x = udp_run(lab, rule("--action", "corrupt", rate=0.05), dst=lab.V6_B)
    f, db, got = x["final"], x["db"], x["got"]
    out["udp6_offload_on"] = dict(rate=0.05, sent=x["sent"]["sent"], corrupted=f["corrupted_packets"],
                                  unacted=f["unacted_packets"], udp6_csum_errors=db["Snmp6.Udp6InCsumErrors"],
                                  received=got["unique"])
    log("corrupt udp6 offload on 5%%: %s" % out["udp6_offload_on"])
    for r in RATES:
        t = tcp_run(lab, rule("--action", "corrupt", "--per-segment", "--payload", "only", proto="tcp",
                              port=TCP_PORT, rate=r), mbytes=CORRUPT_TCP_MB)
        t["rate"] = r
        out["tcp"].append(t)
        log("corrupt tcp %s: corrupted %d segs, retrans %d (RTOs %d), goodput %.1f Mbit/s" %
            (pct(r), t["final"]["corrupted_segments"], t["retrans_segs"], t["sender_rtos"], t["goodput_mbit"]))
    # Which TCP packets can be corrupted at the sender's egress: 5 %, 4 MB at 100 Mbit/s each
    from lab import traffic
    out["tcp_matrix"] = []
    for fam, dst, offload, per_segment in (("IPv4", lab.V4_B, "on", True), ("IPv4", lab.V4_B, "off", True),
                                           ("IPv4", lab.V4_B, "on", False), ("IPv6", lab.V6_B, "on", True),
                                           ("IPv6", lab.V6_B, "off", True)):
        lab.run(lab.a, "ethtool", "-K", lab.IF_A, "tx", offload)
        try:
            run = traffic.tcp_loss_run(lab, lab.a, ["--iface", lab.IF_A] + rule(
                "--action", "corrupt", "--payload", "only", *(["--per-segment"] if per_segment else []),
                proto="tcp", port=TCP_PORT, rate=0.05), dst, mbytes=4, rate_mbit=100)
        finally:
            lab.run(lab.a, "ethtool", "-K", lab.IF_A, "tx", "on")
        f, da, db = run["final"], run["da"], run["db"]
        out["tcp_matrix"].append(dict(family=fam, tx_offload=offload, per_segment=per_segment, rate=0.05,
                                      matched_packets=f["matched_packets"], matched_segments=f["matched_segments"],
                                      corrupted=f["corrupted_packets"], unacted=f["unacted_packets"],
                                      retrans_segs=da["Tcp.RetransSegs"], ip_csum_errors=db["IpExt.InCsumErrors"],
                                      tcp_csum_errors=db["Tcp.InCsumErrors"]))
        log("corrupt tcp matrix: %s" % out["tcp_matrix"][-1])
    return out


def exp_corrupt_payload(lab, dlab):
    out = {"sweep": [], "matrix": []}
    for r in RATES:
        x = udp_run(lab, rule("--action", "corrupt-payload", rate=r), size=256)
        f, db, got = x["final"], x["db"], x["got"]
        out["sweep"].append(dict(rate=r, sent=x["sent"]["sent"], corrupted=f["corrupted_packets"],
                                 unacted=f["unacted_packets"], wrong_bytes=got["corrupt"], received=got["received"],
                                 csum_errors=db["Udp.InCsumErrors"] + db["IpExt.InCsumErrors"]))
        log("corrupt-payload %s: %s" % (pct(r), out["sweep"][-1]))
    for fam, dst in (("IPv4", lab.V4_B), ("IPv6", lab.V6_B)):
        for offload in ("on", "off"):
            lab.run(lab.a, "ethtool", "-K", lab.IF_A, "tx", offload)
            try:
                x = udp_run(lab, rule("--action", "corrupt-payload", rate=0.05), dst=dst, size=256)
            finally:
                lab.run(lab.a, "ethtool", "-K", lab.IF_A, "tx", "on")
            f, db, got = x["final"], x["db"], x["got"]
            out["matrix"].append(dict(family=fam, tx_offload=offload, rate=0.05, sent=x["sent"]["sent"],
                                      corrupted=f["corrupted_packets"], unacted=f["unacted_packets"],
                                      wrong_bytes=got["corrupt"], received=got["received"],
                                      csum_errors=db["Udp.InCsumErrors"] + db["IpExt.InCsumErrors"] +
                                      db["Snmp6.Udp6InCsumErrors"]))
            log("corrupt-payload %s offload %s: %s" % (fam, offload, out["matrix"][-1]))
    return out


def exp_duplicate(lab, dlab):
    out = {"udp": [], "tcp": []}
    for r in RATES:
        x = udp_run(lab, rule("--action", "duplicate", rate=r))
        f, db, got = x["final"], x["db"], x["got"]
        out["udp"].append(dict(rate=r, where="egress", sent=x["sent"]["sent"], matched=f["matched_packets"],
                               duplicated=f["duplicated_packets"], unacted=f["unacted_packets"],
                               copies_passed=f["hooks"]["tc_egress"]["copies"], receiver_dups=got["dups"],
                               unique=got["unique"], udp_in_datagrams=db["Udp.InDatagrams"]))
        log("duplicate udp %s: %s" % (pct(r), out["udp"][-1]))
    x = udp_run(lab, rule("--action", "duplicate", rate=0.05, direction="ingress"), iface=lab.IF_B, ns=lab.b)
    f, db, got = x["final"], x["db"], x["got"]
    out["udp_ingress"] = dict(rate=0.05, where="ingress", sent=x["sent"]["sent"], matched=f["matched_packets"],
                              duplicated=f["duplicated_packets"], unacted=f["unacted_packets"],
                              copies_passed=f["hooks"]["tc_ingress"]["copies"], receiver_dups=got["dups"],
                              unique=got["unique"], udp_in_datagrams=db["Udp.InDatagrams"])
    log("duplicate udp ingress 5%%: %s" % out["udp_ingress"])
    for r in RATES:
        t = tcp_run(lab, rule("--action", "duplicate", "--per-segment", "--payload", "only", proto="tcp",
                              port=TCP_PORT, rate=r))
        t["rate"] = r
        out["tcp"].append(t)
        log("duplicate tcp %s: duplicated %d, D-SACKs sent %d, recv %d (ignored %s), retrans %d" %
            (pct(r), t["final"]["duplicated_segments"], t["receiver_dsacks_sent"], t["sender_dsack_recv"],
             t["sender_dsack_ignored"], t["retrans_segs"]))
    return out


ECN_RATES = (0.0, 0.001, 0.003, 0.01, 0.03)
ECN_SECS = 4


def exp_ecn(lab, dlab):
    out = {"udp": {}, "tcp": []}
    x = udp_run(lab, rule("--action", "ecn", rate=0.05), tos=ECT0)
    f, db, got = x["final"], x["db"], x["got"]
    out["udp"]["ect0_ecn"] = dict(sent=x["sent"]["sent"], marked=f["marked_packets"], dropped=f["dropped_packets"],
                                  unacted=f["unacted_packets"], in_ce=db["IpExt.InCEPkts"], received=got["unique"])
    x = udp_run(lab, rule("--action", "ecn", rate=0.05))
    f, db, got = x["final"], x["db"], x["got"]
    out["udp"]["not_ect_ecn"] = dict(sent=x["sent"]["sent"], marked=f["marked_packets"], dropped=f["dropped_packets"],
                                     unacted=f["unacted_packets"], in_ce=db["IpExt.InCEPkts"], received=got["unique"])
    x = udp_run(lab, rule("--action", "ecn-pass", rate=0.05))
    f, db, got = x["final"], x["db"], x["got"]
    out["udp"]["not_ect_ecn_pass"] = dict(sent=x["sent"]["sent"], marked=f["marked_packets"],
                                          dropped=f["dropped_packets"], unacted=f["unacted_packets"],
                                          in_ce=db["IpExt.InCEPkts"], received=got["unique"])
    x = udp_run(lab, rule("--action", "ecn", rate=0.05), tos=ECT0, dst=lab.V6_B)
    f, db, got = x["final"], x["db"], x["got"]
    out["udp"]["ect0_ecn_ipv6"] = dict(sent=x["sent"]["sent"], marked=f["marked_packets"],
                                       dropped=f["dropped_packets"], unacted=f["unacted_packets"],
                                       in_ce=db["Snmp6.Ip6InCEPkts"], received=got["unique"])
    log("ecn udp: %s" % out["udp"])
    for ns in (dlab.c, dlab.s):
        dlab.run(ns, "sysctl", "-qw", "net.ipv4.tcp_ecn=1")
    for r in ECN_RATES:
        for action in ("ecn", "drop"):
            if r == 0 and action == "drop":
                continue  # the same run as ecn at 0
            t = timed_tcp(dlab, dlab.c, dlab.s, "c0", dlab.S_IP,
                          rule("--action", action, "--per-segment", "--payload", "only", proto="tcp",
                               port=TCP_PORT, rate=r), ECN_SECS, rate_mbit=80)
            t.update(rate=r, action=action)
            out["tcp"].append(t)
            log("ecn tcp %s %s: %.1f Mbit/s, marked %d, dropped %d, CE in %d, retrans %d, ca_entries %s" %
                (action, pct(r), t["goodput_mbit"], t["final"]["marked_segments"], t["final"]["dropped_segments"],
                 t["receiver_in_ce"], t["retrans_segs"], t.get("ca_entries")))
    return out


def markov_model(p13, p31, p32, p23, p14, kmax):
    """The 4-state chain's stationary distribution, mean loss and loss-run pmf (k = 1..kmax):
    a run starts when the chain enters 3 (from 1 or 2; then geometric, continuing with
    1 - p31 - p32) or 4 (length 1), weighted by the stationary flux into each."""
    import numpy as np
    P = np.array([[1 - p13 - p14, 0, p13, p14], [0, 1 - p23, p23, 0], [p31, p32, 1 - p31 - p32, 0],
                  [1, 0, 0, 0]])
    A = np.vstack([P.T - np.eye(4), np.ones(4)])
    pi = np.linalg.lstsq(A, np.array([0, 0, 0, 0, 1.0]), rcond=None)[0]
    f3, f4 = pi[0] * p13 + pi[1] * p23, pi[0] * p14
    c = 1 - p31 - p32
    w3, w4 = f3 / (f3 + f4), f4 / (f3 + f4)
    pmf = [w3 * (1 - c) * c ** (k - 1) + (w4 if k == 1 else 0) for k in range(1, kmax + 1)]
    return dict(pi=[float(x) for x in pi], loss=float(pi[2] + pi[3]), runs_per_packet=float(f3 + f4),
                isolated_share=float(w4), burst_continue=c, mean_run=float(w4 + w3 / (1 - c)),
                pmf=[float(x) for x in pmf])


def exp_markov(lab, dlab):
    spec = ",".join(pct(x) for x in MARKOV)
    x = udp_run(lab, rule("--markov", spec, "--seed", "7"), count=MARKOV_N, pps=25000, list_missing=True)
    f, got = x["final"], x["got"]
    missing = list(got["missing"]) + list(range(got["max_seq"] + 1, MARKOV_N))  # a tail run too
    runs = []
    for s in missing:
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    lengths = [b - a + 1 for a, b in runs]
    kmax = max(lengths)
    hist = [lengths.count(k) for k in range(1, kmax + 1)]
    model = markov_model(*MARKOV, kmax=kmax)
    out = dict(spec=spec, seed=7, sent=x["sent"]["sent"], matched=f["matched_packets"], dropped=f["dropped_packets"],
               missing=len(missing), runs=len(lengths), hist=hist, measured_loss=len(missing) / MARKOV_N,
               measured_mean_run=sum(lengths) / len(lengths), model=model,
               expected_runs=model["runs_per_packet"] * MARKOV_N)
    # Pearson's chi-square of the run lengths against the model: lengths 1..9, then >= 10 pooled
    n = len(lengths)
    obs = hist[:9] + [sum(hist[9:])]
    exp = [n * q for q in model["pmf"][:9]] + [n * (1 - sum(model["pmf"][:9]))]
    chi2 = sum((o - e) ** 2 / e for o, e in zip(obs, exp))
    out["chi2"] = dict(bins="1..9, >=10", observed=obs, expected=[round(e, 1) for e in exp], chi2=round(chi2, 2),
                       dof=len(obs) - 1)
    try:
        from scipy.stats import chi2 as chi2_dist
        out["chi2"]["p_value"] = round(float(chi2_dist.sf(chi2, len(obs) - 1)), 3)
    except ImportError:
        pass
    log("markov: %d lost of %d in %d runs (model: %.0f), loss %.4f (model %.4f), hist %s" %
        (len(missing), MARKOV_N, len(lengths), out["expected_runs"], out["measured_loss"], model["loss"], hist[:12]))
    return out


POLICE_OFFERED = (10, 20, 30, 40, 45, 50, 55, 60, 80, 100, 150)  # Mbit/s of frames as tc counts them
POLICE_SECS = 2
POLICE_TCP_SECS = 4


def exp_police(lab, dlab):
    out = {"udp": [], "tcp": []}
    spec = "50mbit,64kib"
    for mbit in POLICE_OFFERED:
        pps = mbit * 1e6 / (8 * POLICE_FRAME)
        x = udp_run(lab, rule("--police", spec), count=int(pps * POLICE_SECS), pps=pps, size=POLICE_PAYLOAD)
        f, got, sent = x["final"], x["got"], x["sent"]
        secs = sent["secs"]
        out["udp"].append(dict(offered_mbit_nominal=mbit, sent=sent["sent"], secs=secs,
                               offered_mbit=round(8 * POLICE_FRAME * sent["sent"] / secs / 1e6, 2),
                               delivered_mbit=round(8 * POLICE_FRAME * got["unique"] / secs / 1e6, 2),
                               received=got["unique"], matched=f["matched_packets"], dropped=f["dropped_packets"],
                               matched_bytes=f["matched_bytes"], dropped_bytes=f["dropped_bytes"]))
        log("police udp offered %s: %s" % (mbit, out["udp"][-1]))
    for l, name in ((lab, "direct"), (dlab, "+%d ms RTT" % DELAY_RTT_MS)):
        tx, rx, iface, dst = (l.a, l.b, l.IF_A, l.V4_B) if l is lab else (l.c, l.s, "c0", l.S_IP)
        for ns in (tx, rx):
            l.run(ns, "sysctl", "-qw", "net.ipv4.tcp_ecn=1")
        for action in ("drop", "ecn"):
            t = timed_tcp(l, tx, rx, iface, dst, rule("--police", spec, "--action", action, "--per-segment",
                                                      proto="tcp", port=TCP_PORT), POLICE_TCP_SECS, rate_mbit=200)
            t.update(path=name, action=action)
            out["tcp"].append(t)
            log("police tcp %s %s: %.1f Mbit/s, dropped %d, marked %d, retrans %d, ca %s" %
                (name, action, t["goodput_mbit"], t["final"]["dropped_segments"], t["final"]["marked_segments"],
                 t["retrans_segs"], t.get("ca_entries")))
    return out


# ---- plots -------------------------------------------------------------------------------

def plots(res, d):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 10, "axes.grid": True, "grid.alpha": 0.3})
    paths = []

    def save(fig, name):
        p = os.path.join(d, name)
        fig.tight_layout()
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)

    def bars(ax, labels, series, width=0.8):
        """Grouped bars: series [(label, values, color)], one group per label; values written above."""
        n = len(series)
        w = width / n
        xs = range(len(labels))
        for i, (lab, vals, color) in enumerate(series):
            pos = [x - width / 2 + w * (i + 0.5) for x in xs]
            bs = ax.bar(pos, vals, w, label=lab, color=color)
            for b, v in zip(bs, vals):
                ax.annotate("%d" % v, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom",
                            fontsize=7, xytext=(0, 1), textcoords="offset points")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels)

    if "corrupt" in res:
        c = res["corrupt"]
        fig, axs = plt.subplots(1, 3, figsize=(16, 5))
        ax = axs[0]
        on, off = c["udp_offload_on"], c["udp_offload_off"]
        top = max(r["corrupted"] for r in on + off) * 1.08
        ax.plot([0, top], [0, top], color="0.6", lw=1, ls="--", label="equal")
        ax.plot([r["corrupted"] for r in on], [r["ip_csum_errors"] for r in on], "o", ms=8, mfc="none",
                label="tx offload on (PARTIAL): IpExt InCsumErrors")
        ax.plot([r["corrupted"] for r in off], [r["udp_csum_errors"] for r in off], "x", ms=8,
                label="tx offload off (NONE): Udp InCsumErrors")
        ax.set_xlabel("datagrams lossd corrupted (corrupted_packets)")
        ax.set_ylabel("receiver's checksum errors (B's MIB)")
        ax.set_title("UDP/IPv4, {:,} datagrams per run,\nat 1, 2, 5 and 10 %".format(N))
        ax.legend(fontsize=8, loc="upper left")
        ax = axs[1]
        labels = [pct(t["rate"]) for t in c["tcp"]]
        bars(ax, labels, [("corrupted segments (lossd)", [t["final"]["corrupted_segments"] for t in c["tcp"]], "tab:red"),
                          ("receiver's IPv4 checksum errors", [t["receiver_ip_csum_errors"] for t in c["tcp"]],
                           "tab:orange"),
                          ("sender's TcpRetransSegs", [t["retrans_segs"] for t in c["tcp"]], "tab:blue")])
        ax.set_xlabel("--rate (--action corrupt --per-segment --payload only)")
        ax.set_ylabel("segments")
        ax.set_title("TCP, %d MB paced at 200 Mbit/s:\neach corrupted segment resent once" % CORRUPT_TCP_MB)
        ax.legend(fontsize=8, loc="upper left")
        ax = axs[2]
        ax.plot([100 * t["rate"] for t in c["tcp"]], [t["goodput_mbit"] for t in c["tcp"]], "o-")
        ax.set_xlabel("corrupted segments, configured (%)")
        ax.set_ylabel("goodput (Mbit/s)")
        ax.set_ylim(0, 220)
        ax.axhline(200, color="0.6", ls="--", lw=1, label="pacing rate")
        ax.legend(fontsize=8, loc="lower left")
        ax.set_title("TCP goodput\n(bytes received / send time)")
        save(fig, "impairments-corrupt.png")

    if "corrupt-payload" in res:
        c = res["corrupt-payload"]
        fig, axs = plt.subplots(1, 2, figsize=(13, 4.6))
        sw = c["sweep"]
        bars(axs[0], [pct(r["rate"]) for r in sw],
             [("corrupted by lossd (corrupted_packets)", [r["corrupted"] for r in sw], "tab:red"),
              ("delivered with wrong bytes (receiver)", [r["wrong_bytes"] for r in sw], "tab:purple"),
              ("checksum errors (B's MIB)", [r["csum_errors"] for r in sw], "tab:gray")])
        axs[0].set_xlabel("--rate (--action corrupt-payload), UDP/IPv4, tx offload on, 256-byte payloads")
        axs[0].set_ylabel("datagrams (of {:,} per run)".format(N))
        axs[0].set_title("Wrong bytes delivered, every checksum valid")
        axs[0].legend(fontsize=8, loc="upper left")
        m = c["matrix"]
        bars(axs[1], ["%s, offload %s" % (r["family"], r["tx_offload"]) for r in m],
             [("corrupted by lossd", [r["corrupted"] for r in m], "tab:red"),
              ("delivered with wrong bytes", [r["wrong_bytes"] for r in m], "tab:purple"),
              ("checksum errors", [r["csum_errors"] for r in m], "tab:gray")])
        axs[1].set_ylabel("datagrams (of {:,} per run)".format(N))
        axs[1].set_title("5 %: each checksum state (PARTIAL with offload, NONE without)")
        axs[1].set_ylim(0, max(r["corrupted"] for r in m) * 1.3)
        axs[1].legend(fontsize=8, loc="upper left")
        save(fig, "impairments-corrupt-payload.png")

    if "duplicate" in res:
        c = res["duplicate"]
        fig, axs = plt.subplots(1, 2, figsize=(13, 4.6))
        u = c["udp"]
        bars(axs[0], [pct(r["rate"]) for r in u],
             [("duplicated by lossd", [r["duplicated"] for r in u], "tab:green"),
              ("copies passed undecided (hook)", [r["copies_passed"] for r in u], "tab:olive"),
              ("duplicates the receiver got", [r["receiver_dups"] for r in u], "tab:cyan")])
        axs[0].set_xlabel("--rate (--action duplicate), UDP/IPv4 at A's egress")
        axs[0].set_ylabel("datagrams (of {:,} sent per run)".format(N))
        axs[0].set_title("UDP: every copy arrives, none is decided again")
        axs[0].legend(fontsize=8, loc="upper left")
        t = c["tcp"]
        bars(axs[1], [pct(r["rate"]) for r in t],
             [("duplicated segments (lossd)", [r["final"]["duplicated_segments"] for r in t], "tab:green"),
              ("D-SACKs the receiver sent", [r["receiver_dsacks_sent"] for r in t], "tab:cyan"),
              ("D-SACKs the sender got (TCPDSACKRecv)", [r["sender_dsack_recv"] for r in t], "tab:blue"),
              ("retransmitted segments", [r["retrans_segs"] for r in t], "tab:red")])
        axs[1].set_xlabel("--rate (--action duplicate --per-segment --payload only)")
        axs[1].set_ylabel("segments")
        axs[1].set_title("TCP, 20 MB paced at 200 Mbit/s: a D-SACK per copy, no resend")
        axs[1].legend(fontsize=8, loc="upper left")
        save(fig, "impairments-duplicate.png")

    if "ecn" in res:
        c = res["ecn"]["tcp"]
        fig, axs = plt.subplots(1, 2, figsize=(13, 4.6))
        xs = list(range(len(ECN_RATES)))
        labels = [pct(r) for r in ECN_RATES]

        def pick(action, key):
            by = {t["rate"]: t for t in c if t["action"] == action or t["rate"] == 0}
            return [key(by[r]) if r in by else None for r in ECN_RATES]
        axs[0].plot(xs, pick("ecn", lambda t: t["goodput_mbit"]), "o-", label="--action ecn (CE marks)")
        axs[0].plot(xs, pick("drop", lambda t: t["goodput_mbit"]), "s--", label="--action drop (losses)")
        axs[0].set_xticks(xs)
        axs[0].set_xticklabels(labels)
        axs[0].set_xlabel("share of data segments picked (--rate, --per-segment --payload only)")
        axs[0].set_ylabel("goodput (Mbit/s)")
        axs[0].set_ylim(0, 90)
        axs[0].axhline(80, color="0.6", ls="--", lw=1, label="pacing cap 80 Mbit/s")
        axs[0].set_title("cubic, ECN negotiated, RTT +%d ms, %d s per run" % (DELAY_RTT_MS, ECN_SECS))
        axs[0].legend(fontsize=8)
        w = 0.2
        series = [("CE marks (lossd marked_segments)", "ecn", lambda t: t["final"]["marked_segments"], "tab:orange"),
                  ("CWR entries (observer, ecn)", "ecn", lambda t: t.get("ca_entries", {}).get("cwr", 0), "tab:blue"),
                  ("drops (lossd dropped_segments)", "drop", lambda t: t["final"]["dropped_segments"], "tab:red"),
                  ("recovery entries (observer, drop)", "drop",
                   lambda t: t.get("ca_entries", {}).get("recovery", 0) + t.get("ca_entries", {}).get("loss", 0),
                   "tab:purple")]
        for i, (lab, action, key, color) in enumerate(series):
            vals = [v if v is not None else 0 for v in pick(action, key)]
            pos = [x - 2 * w + w * (i + 0.5) for x in xs]
            bs = axs[1].bar(pos, vals, w, label=lab, color=color)
            for b, v in zip(bs, vals):
                axs[1].annotate("%d" % v, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center",
                                va="bottom", fontsize=7, xytext=(0, 1), textcoords="offset points")
        axs[1].set_xticks(xs)
        axs[1].set_xticklabels(labels)
        axs[1].set_xlabel("share of data segments picked")
        axs[1].set_ylabel("count per run")
        axs[1].set_title("What the sender reacted to (one reaction per window)")
        axs[1].legend(fontsize=8, loc="upper left")
        save(fig, "impairments-ecn.png")

    if "markov" in res:
        m = res["markov"]
        fig, ax = plt.subplots(figsize=(9, 4.8))
        n = sum(m["hist"])
        k = list(range(1, len(m["hist"]) + 1))
        ax.bar(k, [h / n for h in m["hist"]], 0.6, color="tab:blue", label="measured: %d runs, %d datagrams lost"
               % (n, m["missing"]))
        ax.plot(k, m["model"]["pmf"], "o-", color="tab:red", ms=4,
                label="model: %.1f %% isolated (state 4) + geometric bursts (continue %.2f)"
                % (100 * m["model"]["isolated_share"], m["model"]["burst_continue"]))
        ax.set_yscale("log")
        ax.set_xlabel("loss-run length (consecutive datagrams lost)")
        ax.set_ylabel("share of runs")
        ax.set_title("--markov %s --seed 7: {:,} datagrams, loss %.2f %% (model %.2f %%)".format(MARKOV_N)
                     % (m["spec"], 100 * m["measured_loss"], 100 * m["model"]["loss"]))
        ax.set_xticks(k)
        ax.legend(fontsize=8)
        save(fig, "impairments-markov.png")

    if "police" in res:
        p = res["police"]
        fig, axs = plt.subplots(1, 2, figsize=(13, 4.8))
        u = p["udp"]
        xs = [r["offered_mbit"] for r in u]
        top = max(xs) * 1.05
        axs[0].plot([0, top], [0, top], color="0.7", lw=1, ls=":", label="delivered = offered")
        axs[0].plot([0, 50, top], [0, 50, 50], color="0.4", lw=1, ls="--", label="min(offered, 50 Mbit/s)")
        axs[0].plot(xs, [r["delivered_mbit"] for r in u], "o-", color="tab:blue", label="delivered (receiver)")
        axs[0].set_xlabel("offered (Mbit/s of %d-byte frames, as tc counts them)" % POLICE_FRAME)
        axs[0].set_ylabel("delivered (Mbit/s, same frames)")
        axs[0].set_title("UDP through --police 50mbit,64kib (%d s per point)" % POLICE_SECS)
        axs[0].legend(fontsize=8, loc="upper left")
        t = p["tcp"]
        labels = ["%s\n--action %s" % ("direct veth" if r["path"] == "direct" else r["path"], r["action"]) for r in t]
        bs = axs[1].bar(range(len(t)), [r["goodput_mbit"] for r in t],
                        color=["tab:red" if r["action"] == "drop" else "tab:orange" for r in t])
        for b, r in zip(bs, t):
            axs[1].annotate("%.1f Mbit/s\n%d dropped, %d marked" % (r["goodput_mbit"], r["final"]["dropped_segments"],
                                                                  r["final"]["marked_segments"]),
                            (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=7,
                            xytext=(0, 1), textcoords="offset points")
        axs[1].axhline(50, color="0.4", ls="--", lw=1, label="policer rate")
        axs[1].axhline(200, color="0.7", ls=":", lw=1, label="sender's pacing cap")
        axs[1].set_xticks(range(len(t)))
        axs[1].set_xticklabels(labels, fontsize=8)
        axs[1].set_ylabel("goodput (Mbit/s)")
        axs[1].set_ylim(0, max(r["goodput_mbit"] for r in t) * 1.3)
        axs[1].set_title("cubic TCP, %d s, paced at 200 Mbit/s, --per-segment" % POLICE_TCP_SECS)
        axs[1].legend(fontsize=8, loc="upper left")
        save(fig, "impairments-police.png")
    return paths


# ---- main ---------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lossd", default=os.path.join(REPO, "build", "daemon", "lossd"))
    ap.add_argument("--stubs", default=os.path.join(REPO, "build", "python"))
    ap.add_argument("--only", default=",".join(EXPERIMENTS), help="comma-separated: " + ", ".join(EXPERIMENTS))
    ap.add_argument("--plots", default=HERE, help="directory for the PNGs (default: %(default)s)")
    ap.add_argument("--out", help="also write the JSON document here")
    ap.add_argument("--replot", help="only draw the plots from this earlier JSON document")
    args = ap.parse_args()
    if args.replot:
        with open(args.replot) as f:
            doc = json.load(f)
        os.makedirs(args.plots, exist_ok=True)
        for p in plots(doc["results"], args.plots):
            log("plot " + p)
        return 0
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    for x in only:
        if x not in EXPERIMENTS:
            ap.error("--only: unknown experiment %r" % x)
    if os.geteuid() != 0:
        print("impairments.py: needs root (network namespaces, BPF)", file=sys.stderr)
        return 77
    from lab import config
    config.set_paths(lossd=os.path.abspath(args.lossd), stubs=os.path.abspath(args.stubs))
    from lab.netns import DelayLab, Lab
    doc = {"experiment": "impairments", "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "kernel": os.uname().release, "command": " ".join(sys.argv), "results": {}}
    t0 = time.monotonic()
    lab = dlab = None
    try:
        lab = Lab()
        if any(x in only for x in ("ecn", "police")):
            dlab = DelayLab(DELAY_RTT_MS)
        fns = {"corrupt": exp_corrupt, "corrupt-payload": exp_corrupt_payload, "duplicate": exp_duplicate,
               "ecn": exp_ecn, "markov": exp_markov, "police": exp_police}
        for x in EXPERIMENTS:
            if x in only:
                t = time.monotonic()
                doc["results"][x] = fns[x](lab, dlab)
                log("%s done in %.0f s" % (x, time.monotonic() - t))
        if dlab is not None:
            doc["delay_line"] = dlab.delay_report()
    finally:
        for l in (dlab, lab):
            if l is not None:
                l.close()
    doc["secs"] = round(time.monotonic() - t0, 1)
    if args.plots:
        os.makedirs(args.plots, exist_ok=True)
        doc["plots"] = plots(doc["results"], args.plots)
    text = json.dumps(doc, indent=1, sort_keys=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
