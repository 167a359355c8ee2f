#include "injector/encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "base/address.h"
#include "observe_abi.h"

namespace lossd {

uint64_t ProbabilityToThreshold(double p) {
  if (!(p > 0)) return 0;
  if (p >= 1) return LOSS_PROB_ONE;
  auto t = static_cast<uint64_t>(std::llround(std::ldexp(p, 32)));
  // A positive rate never rounds to "never": 2^-33 becomes 2^-32.
  return t == 0 ? 1 : t;
}

namespace {

void EncodeCidr(const std::optional<Cidr>& c, __u32* addr, __u32* mask) {
  uint8_t a[16] = {};
  std::array<uint8_t, 16> m = PrefixMask(c ? c->prefix : 0);
  if (c)
    for (int i = 0; i < 16; i++) a[i] = c->addr[i] & m[i];
  std::memcpy(addr, a, 16);
  std::memcpy(mask, m.data(), 16);
}

}  // namespace

struct loss_rule Encode(const RuleSpec& s, uint32_t ifindex, uint64_t cgroup_id,
                        uint8_t cgroup_level, uint64_t expires_ns, uint32_t generation,
                        uint64_t schedule_start_ns) {
  struct loss_rule r;
  std::memset(&r, 0, sizeof(r));
  auto& m = r.m;
  EncodeCidr(s.src, m.src_addr, m.src_mask);
  EncodeCidr(s.dst, m.dst_addr, m.dst_mask);
  m.sport_lo = s.sport.lo;
  m.sport_hi = s.sport.hi;
  m.dport_lo = s.dport.lo;
  m.dport_hi = s.dport.hi;
  m.family = static_cast<__u8>(s.family ? s.family
                               : s.src  ? s.src->family
                               : s.dst  ? s.dst->family
                                        : 0);
  m.l4proto = static_cast<__u8>(s.l4proto);
  m.tcp_flags_mask = s.tcp_flags_mask;
  m.tcp_flags_value = s.tcp_flags_value;
  m.dir_mask = s.dir == Direction::kIngress  ? LOSS_DIR_INGRESS
               : s.dir == Direction::kEgress ? LOSS_DIR_EGRESS
                                             : LOSS_DIR_INGRESS | LOSS_DIR_EGRESS;
  m.payload = static_cast<__u8>(s.payload);
  m.cgroup_level = cgroup_level;
  m.ifindex = ifindex;
  m.cgroup_id = cgroup_id;

  r.priority = s.priority;
  r.flags = LOSS_RULE_ACTIVE;
  if (!s.sport.Any() || !s.dport.Any()) r.flags |= LOSS_RULE_HAS_PORTS;
  if (s.guard.InKernel()) r.flags |= LOSS_RULE_GUARDED;
  if (s.seed) {
    r.flags |= LOSS_RULE_SEEDED;
    r.seed = *s.seed;
  }
  const LossModel& lm = s.model;
  switch (lm.kind) {
    case LossModel::Kind::kBernoulli:
      r.model = LOSS_MODEL_BERNOULLI;
      r.p = ProbabilityToThreshold(lm.p);
      break;
    case LossModel::Kind::kGilbertElliott:
      r.model = LOSS_MODEL_GE;
      r.p = ProbabilityToThreshold(lm.p);
      r.r = ProbabilityToThreshold(lm.r);
      r.bad_loss = ProbabilityToThreshold(lm.bad_loss);
      r.good_loss = ProbabilityToThreshold(lm.good_loss);
      break;
    case LossModel::Kind::kEveryNth:
      r.model = LOSS_MODEL_NTH;
      r.n = lm.n;
      break;
    case LossModel::Kind::kFirstK:
      r.model = LOSS_MODEL_FIRST;
      r.n = lm.n;
      break;
    case LossModel::Kind::kMarkov4:
      r.model = LOSS_MODEL_MARKOV4;
      r.p = ProbabilityToThreshold(lm.p13);
      r.r = ProbabilityToThreshold(lm.p31);
      r.bad_loss = ProbabilityToThreshold(lm.p32);
      r.good_loss = ProbabilityToThreshold(lm.p23);
      r.q = ProbabilityToThreshold(lm.p14);
      break;
    case LossModel::Kind::kPolice: {
      r.p = lm.rate_bps;
      if (lm.police_per_flow) {
        // GCRA per flow (LOSS_MODEL_POLICE_FLOW): the bucket's depth in time,
        // tau = burst * 8e9 * 16 / rate in 1/16 ns, rounded down (a packet's
        // cost, the data plane's, rounds up: never more than the bucket).
        r.model = LOSS_MODEL_POLICE_FLOW;
        if (lm.rate_bps) {
          unsigned __int128 tau = static_cast<unsigned __int128>(lm.burst_bytes) *
                                  (8ULL * 1000000000ULL * 16) / lm.rate_bps;
          r.good_loss = tau > LOSS_POLICE_TAU_MAX ? LOSS_POLICE_TAU_MAX : uint64_t(tau);
        }
        break;
      }
      // In 1e-9 bits (loss_rule's comment): the bucket holds burst * 8e9, a
      // nanosecond adds rate_bps, and from empty it is full after fill_ns.
      r.model = LOSS_MODEL_POLICE;
      r.r = lm.burst_bytes * 8 * 1000000000ULL;
      r.bad_loss = lm.rate_bps ? (r.r + lm.rate_bps - 1) / lm.rate_bps : 0;
      break;
    }
    case LossModel::Kind::kRamp: break;  // below, with its timeline
  }
  r.expires_ns = expires_ns;
  r.generation = generation;
  if (HasTimeline(s)) {
    r.start_ns = schedule_start_ns;
    r.on_ns = static_cast<uint64_t>(s.schedule.active.count());
    r.period_ns = static_cast<uint64_t>(s.schedule.Period().count());
  }
  if (lm.kind == LossModel::Kind::kRamp) {
    // One window as long as its steps: past the last it matches nothing (to
    // the ns, before its deadline retires it).
    r.model = LOSS_MODEL_RAMP;
    r.on_ns = static_cast<uint64_t>(lm.RampSpan().count());
    r.period_ns = r.on_ns + 1;
  }
  r.action = static_cast<uint32_t>(s.action);
  return r;
}

struct loss_ramp EncodeRamp(const LossModel& m, uint32_t generation) {
  struct loss_ramp rp;
  std::memset(&rp, 0, sizeof(rp));
  uint64_t end = 0;
  for (size_t i = 0; i < m.steps.size() && i < LOSS_RAMP_STEPS; i++) {
    end += static_cast<uint64_t>(m.steps[i].duration.count());
    rp.p[i] = ProbabilityToThreshold(m.steps[i].rate);
    rp.end_ns[i] = end;
    rp.n = uint32_t(i + 1);
  }
  rp.generation = generation;
  return rp;
}

struct loss_guard EncodeGuard(const Guard& guard, const struct loss_rule& rule) {
  struct loss_guard g;
  std::memset(&g, 0, sizeof(g));
  g.rule_id = rule.id;
  g.generation = rule.generation;
  g.stall_ns = uint64_t(guard.stall.count());
  g.rtos = guard.rtos;
  g.rtos_window_ns = uint64_t(guard.rtos_window.count());
  if (guard.resends_window.count()) {  // the same ring, counting every resend
    g.rtos = guard.resends | LOSS_GUARD_COUNT_RESENDS;
    g.rtos_window_ns = uint64_t(guard.resends_window.count());
  }
  if (guard.resets_window.count()) {  // ... or the flows ending in an error
    g.rtos = guard.resets | LOSS_GUARD_COUNT_RESETS;
    g.rtos_window_ns = uint64_t(guard.resets_window.count());
  }
  if (guard.retrans_window.count()) {  // checked: 1e-6 <= share < 1
    g.rate_window_ns = uint64_t(guard.retrans_window.count());
    g.rate_ppm = std::max<uint32_t>(1, uint32_t(std::llround(guard.retrans * 1e6)));
  }
  if (guard.watch_port) g.rtos |= LOSS_GUARD_WATCHING;
  const std::pair<const char*, uint32_t> causes[] = {{"rto", OBS_STALL_RTO},
                                                     {"tlp", OBS_STALL_TLP},
                                                     {"fast_recovery", OBS_STALL_FAST_RECOVERY},
                                                     {"zero_window", OBS_STALL_ZERO_WINDOW}};
  for (const auto& [name, cause] : causes)
    if (guard.stall_cause == name) g.stall_causes = 1u << cause;  // its port's flows (loss_guard_watch)
  return g;
}

}  // namespace lossd
