"""Captures the iperf3 -J test vectors in this directory (test_sweep.py reads them): real
iperf3 runs between the e2e lab's two namespaces (root; nothing leaves them).

    sudo /usr/bin/python3 client/python/tests/iperf3/capture.py

The data segments are dropped at random (iptables statistic, 2 % of TCP data, 5 % of the UDP
datagrams) at the receiving namespace's INPUT, segmentation offloads off: so the TCP runs'
retransmits and the UDP run's lost_packets are not 0. Each run: 1 s, paced (-b).
  tcp.json      iperf3 -c B -t 1 -b 100M -J
  udp.json      iperf3 -c B -t 1 -u -b 20M -J
  reverse.json  iperf3 -c B -t 1 -b 100M -R -J         (B sends)
  bidir.json    iperf3 -c B -t 1 -b 100M --bidir -J
  refused.json  iperf3 -c B -p <nothing listens> -J    (the "error" document; iperf3 3.12 exits 0)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "..", "tests", "e2e"))

from lab import traffic  # noqa: E402
from lab.netns import Lab  # noqa: E402

PORT, CLOSED = 5201, 5299


def drop(lab, ns, proto, port_flag, probability):
    lab.run(ns, "iptables", "-A", "INPUT", "-p", proto, port_flag, str(PORT), "-m", "length", "--length",
            "1000:65535", "-m", "statistic", "--mode", "random", "--probability", str(probability), "-j", "DROP")


def main():
    with Lab() as lab:
        traffic.iperf_server(lab, lab.b, PORT)
        for ns, ifname in ((lab.a, lab.IF_A), (lab.b, lab.IF_B)):
            lab.run(ns, "ethtool", "-K", ifname, "tso", "off", "gso", "off", "gro", "off")
        drop(lab, lab.b, "tcp", "--dport", 0.02)   # A's data to B
        drop(lab, lab.a, "tcp", "--sport", 0.02)   # B's data to A (-R, --bidir)
        drop(lab, lab.b, "udp", "--dport", 0.05)
        c = ["iperf3", "-c", lab.V4_B, "-t", "1", "-J"]
        for name, args in (("tcp", ["-p", PORT, "-b", "100M"]), ("udp", ["-p", PORT, "-u", "-b", "20M"]),
                           ("reverse", ["-p", PORT, "-b", "100M", "-R"]),
                           ("bidir", ["-p", PORT, "-b", "100M", "--bidir"]), ("refused", ["-p", CLOSED])):
            r = lab.run(lab.a, *c, *map(str, args), check=False)
            with open(os.path.join(HERE, name + ".json"), "w") as f:
                f.write(r.stdout)
            print(name, "exit", r.returncode, "bytes", len(r.stdout))


if __name__ == "__main__":
    main()
