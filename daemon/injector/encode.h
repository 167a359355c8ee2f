// A rule's encoding into the BPF ABI (struct loss_rule in bpf/loss_abi.h).
#pragma once

#include <cstdint>

#include "loss_abi.h"
#include "rules/rule.h"

namespace lossd {

// 2^32-scaled threshold for a probability in [0, 1].
uint64_t ProbabilityToThreshold(double p);

// The kernel-side rule. ifindex/cgroup_id/level come from the injector,
// expires_ns is an absolute CLOCK_MONOTONIC time (0 = never); so is
// schedule_start_ns, the origin of spec.schedule (0: the spec has none).
struct loss_rule Encode(const RuleSpec& spec, uint32_t ifindex, uint64_t cgroup_id,
                        uint8_t cgroup_level, uint64_t expires_ns, uint32_t generation,
                        uint64_t schedule_start_ns = 0);

// The loss_ramps entry of a ramp model (steps' thresholds and ends) for the
// rule published under `generation`.
struct loss_ramp EncodeRamp(const LossModel& m, uint32_t generation);

// The loss_guards entry of `spec.guard` for `rule` (encoded and published:
// its id and generation set); the kernel's part zeroed.
struct loss_guard EncodeGuard(const Guard& guard, const struct loss_rule& rule);

}  // namespace lossd
