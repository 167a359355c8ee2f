"""What the kernel has attached to an interface, asked with bpf(BPF_PROG_QUERY) itself.

Debian's bpftool 7.1 lists no tcx links, so tests ask the kernel: the program ids attached at
an interface's tcx ingress (or XDP, tc egress) hook in a namespace.

    python3 bpfquery.py IFNAME [ATTACH_TYPE]   (run inside the namespace: prints JSON)
    tcx_ingress_programs(lab, ns, ifname)   the same from a test
    drop_log(pid)                           a lossd's drop log (its loss_drops map), decoded
"""
import ctypes
import json
import os
import socket
import struct
import sys

BPF_PROG_QUERY = 16
BPF_TCX_INGRESS = 46   # enum bpf_attach_type (Linux 6.6+, not in Debian 12's headers)
SYS_BPF = {"x86_64": 321, "aarch64": 280}[os.uname().machine]


def prog_query(ifindex, attach_type, max_progs=64):
    """[prog ids] attached at (ifindex, attach_type); raises OSError with the kernel's errno."""
    libc = ctypes.CDLL(None, use_errno=True)
    ids = (ctypes.c_uint32 * max_progs)()
    attr = ctypes.create_string_buffer(64)  # union bpf_attr, the query part
    struct.pack_into("=IIII", attr, 0, ifindex, attach_type, 0, 0)
    struct.pack_into("=QI", attr, 16, ctypes.addressof(ids), max_progs)
    libc.syscall.restype = ctypes.c_long
    r = libc.syscall(ctypes.c_long(SYS_BPF), ctypes.c_int(BPF_PROG_QUERY), attr, ctypes.c_uint(64))
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, "BPF_PROG_QUERY ifindex %d type %d: %s" % (ifindex, attach_type, os.strerror(e)))
    (count,) = struct.unpack_from("=I", attr, 24)
    return list(ids[:min(count, max_progs)])


def tcx_ingress_programs(lab, ns, ifname):
    """Program ids attached at ifname's tcx ingress in namespace ns (BPF_PROG_QUERY)."""
    from lab.config import PY
    out = lab.run(ns, PY, os.path.abspath(__file__), ifname, str(BPF_TCX_INGRESS)).stdout
    return json.loads(out)


def map_ids(pid):
    """Ids of the BPF maps process pid holds (its /proc/PID/fdinfo)."""
    from lab.stats import fdinfo
    return sorted({int(f["map_id"]) for f in fdinfo(pid) if "map_id" in f})


def drop_log(pid, name="loss_drops"):
    """The drop log (bpf/loss_abi.h) of the lossd process pid, read with bpftool from the map
    of that name the process holds: {(family, src, sport, dst, dport): {"drops": total,
    "ranges": [{time_ns, seq, len, rule_id, segs}, ... oldest first]}}; addresses as strings.
    BPF maps are not per namespace: this runs anywhere."""
    import subprocess
    ranges_n, range_fmt, key_fmt = 16, "=QIIIHH", "=16s16sHHHH"
    for mid in map_ids(pid):
        show = json.loads(subprocess.run(["bpftool", "-j", "map", "show", "id", str(mid)],
                                         capture_output=True, text=True, check=True).stdout)
        if show.get("name") != name:
            continue
        dump = json.loads(subprocess.run(["bpftool", "-j", "map", "dump", "id", str(mid)],
                                         capture_output=True, text=True, check=True).stdout)
        out = {}
        for e in dump:
            kb = bytes(int(x, 16) for x in e["key"])
            vb = bytes(int(x, 16) for x in e["value"])
            saddr, daddr, sport, dport, fam, _ = struct.unpack(key_fmt, kb)
            af = socket.AF_INET6 if fam == socket.AF_INET6 else socket.AF_INET
            n = 16 if af == socket.AF_INET6 else 4
            (drops,) = struct.unpack_from("=Q", vb, 0)
            size = struct.calcsize(range_fmt)
            ring = [dict(zip(("time_ns", "seq", "len", "rule_id", "segs"),
                             struct.unpack_from(range_fmt, vb, 8 + i * size)[:5])) for i in range(ranges_n)]
            kept = min(drops, ranges_n)
            ranges = [ring[i % ranges_n] for i in range(drops - kept, drops)]
            out[(4 if af == socket.AF_INET else 6, socket.inet_ntop(af, saddr[:n]), sport,
                 socket.inet_ntop(af, daddr[:n]), dport)] = dict(drops=drops, ranges=ranges)
        return out
    raise AssertionError("process %d holds no BPF map named %s" % (pid, name))


def main():
    ifname = sys.argv[1]
    attach_type = int(sys.argv[2]) if len(sys.argv) > 2 else BPF_TCX_INGRESS
    print(json.dumps(prog_query(socket.if_nametoindex(ifname), attach_type)))


if __name__ == "__main__":
    main()
