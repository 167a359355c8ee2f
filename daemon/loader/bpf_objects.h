// Owners of libbpf objects (destroyed, detached, freed with their owner),
// and the one way lossd reads per-CPU counters.
#pragma once

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace lossd {

struct BpfLinkDeleter {
  void operator()(bpf_link* l) const { bpf_link__destroy(l); }
};
using BpfLink = std::unique_ptr<bpf_link, BpfLinkDeleter>;

struct RingBufferDeleter {
  void operator()(ring_buffer* r) const { ring_buffer__free(r); }
};
using RingBuffer = std::unique_ptr<ring_buffer, RingBufferDeleter>;

// Adds the value of `key` in a per-CPU array map, summed over CPUs, to *out.
// T is one of the ABI's counter structs: __u64 words only.
template <typename T>
Status AddPerCpu(int map_fd, uint32_t key, int ncpus, T* out) {
  static_assert(sizeof(T) % sizeof(uint64_t) == 0, "per-CPU counters are __u64 words");
  std::vector<T> v(static_cast<size_t>(ncpus));
  if (bpf_map_lookup_elem(map_fd, &key, v.data()))
    return Status::FromErrno(errno, "read per-CPU counters (key " + std::to_string(key) + ")");
  auto* sum = reinterpret_cast<uint64_t*>(out);
  for (const T& cpu : v) {
    const auto* words = reinterpret_cast<const uint64_t*>(&cpu);
    for (size_t i = 0; i < sizeof(T) / sizeof(uint64_t); i++) sum[i] += words[i];
  }
  return Status::Ok();
}

}  // namespace lossd
