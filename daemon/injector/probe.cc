#include "injector/probe.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#include <cerrno>
#include <cstring>

#include "host/cgroup.h"

namespace lossd {
namespace {

// A pass-only program of `type` named `name` (2 instructions: r0 = ret;
// exit), for probing attach modes without loading the injector's programs.
UniqueFd PassProgram(enum bpf_prog_type type, const char* name, int ret) {
  struct bpf_insn insns[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, ret},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  return UniqueFd(bpf_prog_load(type, name, "Dual BSD/GPL", insns, 2, nullptr));
}

}  // namespace

Capabilities ProbeKernel() {
  Capabilities c;
  struct utsname u;
  if (uname(&u) == 0) c.kernel = u.release;
  struct stat st;
  c.btf = stat("/sys/kernel/btf/vmlinux", &st) == 0;
  c.xdp = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_XDP, nullptr) == 1;
  c.tc = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_SCHED_CLS, nullptr) == 1;
  c.cgroup_skb = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_CGROUP_SKB, nullptr) == 1;
  c.cgroup2 = Cgroup2Mount();
  if (c.cgroup2.empty()) c.notes.push_back("no cgroup v2 mount: cgroup targets unavailable");
  return c;
}

void ProbeAttachModes(ClsactQdiscs* qdiscs, Capabilities* c) {
  // Loopback is ifindex 1 in every network namespace.
  const int lo = 1;
  // Pass-only programs, not the injector's (which load on first use). A
  // clsact probe filter left behind by a crash is removed by the next start
  // (RemoveStaleClsactFilters); a live lossd's rule on lo never is.
  UniqueFd pass_in = PassProgram(BPF_PROG_TYPE_SCHED_CLS, kProbeProgName, -1 /* TCX_NEXT */);
  UniqueFd pass_out = PassProgram(BPF_PROG_TYPE_SCHED_CLS, kProbeProgName, 0 /* TC_ACT_OK */);
  if (!pass_in.valid() || !pass_out.valid()) {
    c->notes.push_back(std::string("tcx/clsact not probed: load a probe program: ") +
                       strerror(errno));
    return;
  }
  {
    auto a = AttachTcxIngress(pass_in.get(), lo, "lo");
    c->tcx = a.ok();
    if (!a.ok()) c->notes.push_back("tcx: " + a.status().message());
  }
  {
    auto a = AttachClsactEgress(pass_out.get(), lo, "lo", qdiscs);
    c->clsact = a.ok();
    if (!a.ok()) c->notes.push_back("clsact: " + a.status().message());
  }
}

}  // namespace lossd
