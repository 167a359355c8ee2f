// Owners of libbpf objects: destroyed (detached, freed) with their owner.
#pragma once

#include <bpf/libbpf.h>

#include <memory>

namespace lossd {

struct BpfLinkDeleter {
  void operator()(bpf_link* l) const { bpf_link__destroy(l); }
};
using BpfLink = std::unique_ptr<bpf_link, BpfLinkDeleter>;

struct RingBufferDeleter {
  void operator()(ring_buffer* r) const { ring_buffer__free(r); }
};
using RingBuffer = std::unique_ptr<ring_buffer, RingBufferDeleter>;

}  // namespace lossd
