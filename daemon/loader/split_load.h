// Loading one BPF object in parts (docs/architecture.md#start-up): its maps
// first, with no program (no verifier time), then each program on its own,
// when it is needed, from another bpf_object of the same ELF whose maps reuse
// the first one's fds (bpf_map__reuse_fd). Every part then shares the same
// kernel maps: what the daemon writes into the first object's maps, every
// program sees.
#pragma once

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "base/status.h"

namespace lossd {

// Before the first load of `obj`: no program loads (only the maps).
inline void AutoloadNone(bpf_object* obj) {
  bpf_program* p;
  bpf_object__for_each_program(p, obj) bpf_program__set_autoload(p, false);
}

// Before loading `obj` (opened from the same ELF as the loaded `from`): each
// of its maps reuses the same-named map of `from`, and only program `prog`
// loads.
inline Status ReuseMapsLoadOnly(bpf_object* obj, const bpf_object* from, const char* prog) {
  bpf_map* m;
  bpf_object__for_each_map(m, obj) {
    const bpf_map* src = bpf_object__find_map_by_name(from, bpf_map__name(m));
    if (!src || bpf_map__fd(src) < 0)
      return Internal(std::string("BPF map ") + bpf_map__name(m) + " is not loaded");
    int err = bpf_map__reuse_fd(m, bpf_map__fd(src));
    if (err) return Status::FromErrno(-err, std::string("reuse BPF map ") + bpf_map__name(m));
  }
  bool found = false;
  bpf_program* p;
  bpf_object__for_each_program(p, obj) {
    bool want = std::strcmp(bpf_program__name(p), prog) == 0;
    found = found || want;
    bpf_program__set_autoload(p, want);
  }
  if (!found) return NotFound(std::string("no BPF program ") + prog);
  return Status::Ok();
}

// What loading one program cost: the verifier's work and the wall time.
struct ProgLoadStats {
  std::string name;
  uint64_t load_ns = 0;         // open + load of its bpf_object
  uint32_t verified_insns = 0;  // bpf_prog_info.verified_insns
  uint32_t xlated_insns = 0;    // instructions after the verifier (xlated_prog_len / 8)
};

inline void FillProgInfo(int prog_fd, ProgLoadStats* s) {
  struct bpf_prog_info info;
  std::memset(&info, 0, sizeof(info));
  uint32_t len = sizeof(info);
  if (prog_fd >= 0 && bpf_obj_get_info_by_fd(prog_fd, &info, &len) == 0) {
    s->verified_insns = info.verified_insns;
    s->xlated_insns = info.xlated_prog_len / 8;
  }
}

}  // namespace lossd
