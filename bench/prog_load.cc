// prog_load: where lossd's start-up time goes. For each BPF object lossd
// loads (the injector's loss.bpf.c, the observer's observe.bpf.c) it times
//   whole  - the object loaded at once (every program: what lossd did before
//            it loaded in parts),
//   maps   - the object with no program (maps only: what the daemon does
//            before it serves),
//   each program alone, from another bpf_object whose maps reuse the maps
//            object's (how lossd loads a program on first use),
// over --rounds rounds, and reports medians, min/max and each program's
// verified_insns (bpf_prog_info) as one JSON object on stdout. Benchmark only.
//
// Usage: prog_load [--rounds N]
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "base/clock.h"
#include "loader/split_load.h"
#include "loss.skel.h"
#include "observe.skel.h"

namespace {

using lossd::MonotonicNs;

struct Elf {
  const char* name;
  const void* bytes;
  size_t size;
};

bpf_object* Open(const Elf& e) {
  LIBBPF_OPTS(bpf_object_open_opts, opts, .object_name = e.name);
  bpf_object* o = bpf_object__open_mem(e.bytes, e.size, &opts);
  if (!o) {
    std::fprintf(stderr, "prog_load: open %s: %s\n", e.name, strerror(errno));
    std::exit(1);
  }
  return o;
}

void Load(bpf_object* o, const char* what) {
  int err = bpf_object__load(o);
  if (err) {
    std::fprintf(stderr, "prog_load: load %s: %s\n", what, strerror(-err));
    std::exit(1);
  }
}

struct Series {
  std::vector<double> ms;
  void Add(uint64_t ns) { ms.push_back(ns / 1e6); }
  std::string Json() const {
    std::vector<double> v = ms;
    std::sort(v.begin(), v.end());
    double med =
        v.empty() ? 0
                  : (v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2);
    char buf[160];
    std::snprintf(buf, sizeof(buf),
                  "{\"median_ms\":%.1f,\"min_ms\":%.1f,\"max_ms\":%.1f,\"n\":%zu}", med,
                  v.empty() ? 0 : v.front(), v.empty() ? 0 : v.back(), v.size());
    return buf;
  }
};

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
  if (rounds <= 0) {
    std::fprintf(stderr, "usage: prog_load [--rounds N]\n");
    return 2;
  }
  libbpf_set_print([](enum libbpf_print_level l, const char* f, va_list ap) {
    return l == LIBBPF_WARN ? std::vfprintf(stderr, f, ap) : 0;
  });
  Elf elfs[2] = {{"loss_bpf", nullptr, 0}, {"observe_bpf", nullptr, 0}};
  elfs[0].bytes = loss_bpf::elf_bytes(&elfs[0].size);
  elfs[1].bytes = observe_bpf::elf_bytes(&elfs[1].size);

  std::printf("{\"rounds\":%d,\"objects\":{", rounds);
  for (int e = 0; e < 2; e++) {
    const Elf& elf = elfs[e];
    Series whole, maps, sum;
    std::vector<std::string> names;
    std::map<std::string, Series> each;
    std::map<std::string, lossd::ProgLoadStats> info;
    for (int r = 0; r < rounds; r++) {
      // Interleaved: the whole object, then maps + each program, per round.
      uint64_t t0 = MonotonicNs();
      bpf_object* all = Open(elf);
      Load(all, elf.name);
      whole.Add(MonotonicNs() - t0);
      bpf_object__close(all);

      t0 = MonotonicNs();
      bpf_object* m = Open(elf);
      lossd::AutoloadNone(m);
      Load(m, "maps");
      maps.Add(MonotonicNs() - t0);
      if (names.empty()) {
        bpf_program* p;
        bpf_object__for_each_program(p, m) names.push_back(bpf_program__name(p));
      }
      uint64_t total = 0;
      for (const std::string& n : names) {
        t0 = MonotonicNs();
        bpf_object* o = Open(elf);
        lossd::Status st = lossd::ReuseMapsLoadOnly(o, m, n.c_str());
        if (!st.ok()) {
          std::fprintf(stderr, "prog_load: %s\n", st.message().c_str());
          return 1;
        }
        Load(o, n.c_str());
        uint64_t ns = MonotonicNs() - t0;
        total += ns;
        each[n].Add(ns);
        lossd::ProgLoadStats& s = info[n];
        s.name = n;
        lossd::FillProgInfo(bpf_program__fd(bpf_object__find_program_by_name(o, n.c_str())), &s);
        bpf_object__close(o);
      }
      sum.Add(total);
      bpf_object__close(m);
    }
    std::printf("%s\"%s\":{\"whole\":%s,\"maps_only\":%s,\"programs_one_by_one\":%s,\"programs\":[",
                e ? "," : "", elf.name, whole.Json().c_str(), maps.Json().c_str(),
                sum.Json().c_str());
    for (size_t i = 0; i < names.size(); i++) {
      const auto& s = info[names[i]];
      std::printf("%s{\"name\":\"%s\",\"verified_insns\":%u,\"xlated_insns\":%u,\"load\":%s}",
                  i ? "," : "", names[i].c_str(), s.verified_insns, s.xlated_insns,
                  each[names[i]].Json().c_str());
    }
    std::printf("]}");
  }
  std::printf("}}\n");
  return 0;
}
