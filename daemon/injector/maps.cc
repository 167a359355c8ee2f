#include "injector/maps.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "loader/bpf_objects.h"
#include "loader/split_load.h"
#include "loss.skel.h"

namespace lossd {

RuleCounters Sum(const RuleCounters& a, const RuleCounters& b) {
  RuleCounters s;
  s.matched_pkts = a.matched_pkts + b.matched_pkts;
  s.matched_segs = a.matched_segs + b.matched_segs;
  s.matched_bytes = a.matched_bytes + b.matched_bytes;
  s.dropped_pkts = a.dropped_pkts + b.dropped_pkts;
  s.dropped_segs = a.dropped_segs + b.dropped_segs;
  s.dropped_bytes = a.dropped_bytes + b.dropped_bytes;
  s.logged_pkts = a.logged_pkts + b.logged_pkts;
  s.acted_pkts = a.acted_pkts + b.acted_pkts;
  s.acted_segs = a.acted_segs + b.acted_segs;
  s.acted_bytes = a.acted_bytes + b.acted_bytes;
  s.unacted_pkts = a.unacted_pkts + b.unacted_pkts;
  return s;
}

loss_drop_key DropKey(int family, const uint32_t src[4], uint16_t sport, const uint32_t dst[4],
                      uint16_t dport) {
  loss_drop_key k;
  std::memset(&k, 0, sizeof(k));
  std::memcpy(k.saddr, src, sizeof(k.saddr));
  std::memcpy(k.daddr, dst, sizeof(k.daddr));
  k.sport = sport;
  k.dport = dport;
  k.family = static_cast<uint16_t>(family);
  return k;
}

LossObject LossObject::Open() {
  LossObject o;
  o.skel_ = loss_bpf__open();
  return o;
}

LossObject& LossObject::operator=(LossObject&& o) noexcept {
  if (this != &o) {
    if (skel_) loss_bpf__destroy(skel_);
    skel_ = o.skel_;
    o.skel_ = nullptr;
  }
  return *this;
}

LossObject::~LossObject() {
  if (skel_) loss_bpf__destroy(skel_);
}

bpf_object* LossObject::get() const {
  return skel_ ? skel_->obj : nullptr;
}

int LossObject::Load() {
  return loss_bpf__load(skel_);
}

Result<std::unique_ptr<BpfMaps>> BpfMaps::Create() {
  std::unique_ptr<BpfMaps> m(new BpfMaps());
  m->obj_ = LossObject::Open();
  if (!m->obj_) return Status::FromErrno(errno, "open BPF object");
  AutoloadNone(m->obj_.get());  // the maps only; programs load on first use
  int err = m->obj_.Load();
  if (err)
    return Status::FromErrno(-err, "create the injector's BPF maps (see the libbpf log above)");
  int n = libbpf_num_possible_cpus();
  if (n <= 0) return Status::FromErrno(-n, "count possible CPUs");
  m->ncpus_ = n;
  const auto& maps = m->obj_.skel_->maps;
  m->rules_fd_ = bpf_map__fd(maps.loss_rules);
  m->stats_fd_ = bpf_map__fd(maps.loss_rule_stats);
  m->port_fd_ = bpf_map__fd(maps.loss_port_idx);
  m->host_fd_ = bpf_map__fd(maps.loss_host_idx);
  m->bloom_fd_ = bpf_map__fd(maps.loss_host_bloom);
  m->cfg_fd_ = bpf_map__fd(maps.loss_cfg);
  m->hook_stats_fd_ = bpf_map__fd(maps.loss_hook_stats);
  m->drops_fd_ = bpf_map__fd(maps.loss_drops);
  m->cg_self_fd_ = bpf_map__fd(maps.loss_cg_self);
  m->flow_state_fd_ = bpf_map__fd(maps.loss_flow_state);
  m->traced_fd_ = bpf_map__fd(maps.loss_traced);
  m->drop_ring_fd_ = bpf_map__fd(maps.loss_drop_ring);
  m->guards_fd_ = bpf_map__fd(maps.loss_guards);
  m->watch_fd_ = bpf_map__fd(maps.loss_guard_watch);
  m->ramps_fd_ = bpf_map__fd(maps.loss_ramps);
  m->ramp_stats_fd_ = bpf_map__fd(maps.loss_ramp_stats);
  return m;
}

Status BpfMaps::WriteRule(uint32_t slot, const struct loss_rule& r) {
  if (bpf_map_update_elem(rules_fd_, &slot, &r, BPF_ANY))
    return Status::FromErrno(errno, "write rule slot " + std::to_string(slot));
  return Status::Ok();
}

Status BpfMaps::ResetCounters(uint32_t slot) {
  std::vector<struct loss_rule_stats> zero(ncpus_);
  std::memset(zero.data(), 0, zero.size() * sizeof(zero[0]));
  if (bpf_map_update_elem(stats_fd_, &slot, zero.data(), BPF_ANY))
    return Status::FromErrno(errno, "reset counters of slot " + std::to_string(slot));
  return Status::Ok();
}

Result<RuleCounters> BpfMaps::ReadCounters(uint32_t slot) const {
  RuleCounters c;
  Status st = AddPerCpu<loss_rule_stats>(stats_fd_, slot, ncpus_, &c);
  if (!st.ok())
    return Status(st.code(), "counters of slot " + std::to_string(slot) + ": " + st.message());
  return c;
}

Status BpfMaps::WritePortList(uint32_t key, const struct loss_bucket& b) {
  if (bpf_map_update_elem(port_fd_, &key, &b, BPF_ANY))
    return Status::FromErrno(errno, "write port index");
  return Status::Ok();
}

Status BpfMaps::WriteHostList(const struct loss_host_key& key, const struct loss_bucket& b) {
  if (bpf_map_update_elem(host_fd_, &key, &b, BPF_ANY))
    return Status::FromErrno(errno, "write host index");
  return Status::Ok();
}

Status BpfMaps::DeleteHostList(const struct loss_host_key& key) {
  if (bpf_map_delete_elem(host_fd_, &key) && errno != ENOENT)
    return Status::FromErrno(errno, "delete host index entry");
  return Status::Ok();
}

Status BpfMaps::WriteBloomWord(uint32_t word, uint64_t bits) {
  if (bpf_map_update_elem(bloom_fd_, &word, &bits, BPF_ANY))
    return Status::FromErrno(errno, "write host pre-filter");
  return Status::Ok();
}

Status BpfMaps::WriteConfig(const struct loss_config& cfg) {
  uint32_t zero = 0;
  if (bpf_map_update_elem(cfg_fd_, &zero, &cfg, BPF_ANY))
    return Status::FromErrno(errno, "write loss_cfg");
  return Status::Ok();
}

HookCounters BpfMaps::ReadHookTotals(uint32_t hook) const {
  HookCounters c;
  AddPerCpu<loss_hook_stats>(hook_stats_fd_, hook, ncpus_, &c);
  return c;
}

Result<bool> BpfMaps::ReadDrops(const loss_drop_key& key, loss_drop_log* log) const {
  if (bpf_map_lookup_elem(drops_fd_, &key, log)) {
    if (errno == ENOENT) return false;
    return Status::FromErrno(errno, "read the drop log");
  }
  return true;
}

Status BpfMaps::SetTraced(const loss_drop_key& key, bool on) {
  if (on) {
    loss_traced zero{};
    if (bpf_map_update_elem(traced_fd_, &key, &zero, BPF_NOEXIST) && errno != EEXIST)
      return Status::FromErrno(errno, "mark a flow traced (loss_traced, " +
                                          std::to_string(LOSS_TRACED_FLOWS) + " flows at most)");
  } else if (bpf_map_delete_elem(traced_fd_, &key) && errno != ENOENT) {
    return Status::FromErrno(errno, "unmark a traced flow (loss_traced)");
  }
  return Status::Ok();
}

Status BpfMaps::WriteRamp(uint32_t slot, const struct loss_ramp& r) {
  std::vector<struct loss_ramp_stats> zero(ncpus_);
  std::memset(zero.data(), 0, zero.size() * sizeof(zero[0]));
  if (bpf_map_update_elem(ramp_stats_fd_, &slot, zero.data(), BPF_ANY) ||
      bpf_map_update_elem(ramps_fd_, &slot, &r, BPF_ANY)) {
    if (errno == E2BIG || errno == ENOMEM)
      return ResourceExhausted("at most " + std::to_string(LOSS_MAX_RAMPS) +
                               " ramped rules at once (loss_ramps is full)");
    return Status::FromErrno(errno, "write the ramp of slot " + std::to_string(slot));
  }
  return Status::Ok();
}

Result<std::vector<StepCounters>> BpfMaps::ReadRampStats(uint32_t slot, size_t steps) const {
  std::vector<struct loss_ramp_stats> per_cpu(ncpus_);
  if (bpf_map_lookup_elem(ramp_stats_fd_, &slot, per_cpu.data()))
    return Status::FromErrno(errno, "read the ramp counters of slot " + std::to_string(slot));
  std::vector<StepCounters> out(std::min<size_t>(steps, LOSS_RAMP_STEPS));
  for (const auto& c : per_cpu)
    for (size_t i = 0; i < out.size(); i++) {
      out[i].matched_pkts += c.matched_pkts[i];
      out[i].matched_segs += c.matched_segs[i];
      out[i].dropped_pkts += c.dropped_pkts[i];
      out[i].dropped_segs += c.dropped_segs[i];
    }
  return out;
}

Status BpfMaps::DeleteRamp(uint32_t slot) {
  for (int fd : {ramps_fd_, ramp_stats_fd_})
    if (bpf_map_delete_elem(fd, &slot) && errno != ENOENT)
      return Status::FromErrno(errno, "delete the ramp of slot " + std::to_string(slot));
  return Status::Ok();
}

Status BpfMaps::WriteGuard(uint32_t slot, const struct loss_guard& g) {
  if (bpf_map_update_elem(guards_fd_, &slot, &g, BPF_ANY)) {
    if (errno == E2BIG || errno == ENOMEM)
      return ResourceExhausted("at most " + std::to_string(LOSS_MAX_GUARDED) +
                               " rules with a guard at once (loss_guards is full)");
    return Status::FromErrno(errno, "write the guard of slot " + std::to_string(slot));
  }
  return Status::Ok();
}

Status BpfMaps::DeleteGuard(uint32_t slot) {
  if (bpf_map_delete_elem(guards_fd_, &slot) && errno != ENOENT)
    return Status::FromErrno(errno, "delete the guard of slot " + std::to_string(slot));
  return Status::Ok();
}

Status BpfMaps::WriteWatch(uint32_t port, const struct loss_guard_watch& w) {
  int err = w.n ? bpf_map_update_elem(watch_fd_, &port, &w, BPF_ANY)
                : bpf_map_delete_elem(watch_fd_, &port);
  if (err && !(errno == ENOENT && !w.n)) {
    if (errno == E2BIG || errno == ENOMEM)
      return ResourceExhausted("at most " + std::to_string(LOSS_WATCH_PORTS) +
                               " ports watched by guards at once (loss_guard_watch is full)");
    return Status::FromErrno(errno, "write the guards watching port " + std::to_string(port));
  }
  return Status::Ok();
}

Result<bool> BpfMaps::ReadGuard(uint32_t slot, struct loss_guard* g) const {
  if (bpf_map_lookup_elem(guards_fd_, &slot, g)) {
    if (errno == ENOENT) return false;
    return Status::FromErrno(errno, "read the guard of slot " + std::to_string(slot));
  }
  return true;
}

Result<uint64_t> BpfMaps::ReadTracedLost(const loss_drop_key& key) const {
  loss_traced t{};
  if (bpf_map_lookup_elem(traced_fd_, &key, &t)) {
    if (errno == ENOENT) return uint64_t{0};
    return Status::FromErrno(errno, "read a traced flow's lost drops (loss_traced)");
  }
  return t.lost;
}

// In batches of kFlowBatch entries (bpf_map_lookup_batch; one element at a time where
// the kernel cannot batch: EINVAL before 5.6, its own ENOTSUPP, 524, for a map type
// without batch operations).
Result<std::vector<uint64_t>> BpfMaps::ReadFlowCounts(uint32_t slot, uint32_t generation) const {
  constexpr uint32_t kFlowBatch = 4096;
  std::vector<uint64_t> out;
  auto take = [&](const loss_flow_key& k, const loss_flow_state& v) {
    if (k.slot == slot && k.generation == generation) out.push_back(v.count);
  };
  std::vector<loss_flow_key> keys(kFlowBatch);
  std::vector<loss_flow_state> values(kFlowBatch);
  alignas(8) char in_token[64] = {}, out_token[64] = {};
  bool first = true;
  for (;;) {
    uint32_t n = kFlowBatch;
    int rc = bpf_map_lookup_batch(flow_state_fd_, first ? nullptr : in_token, out_token, keys.data(),
                                  values.data(), &n, nullptr);
    int err = rc ? errno : 0;
    if (rc && err != ENOENT) {
      if (!first || (err != EINVAL && err != ENOTSUP && err != EOPNOTSUPP && err != 524))
        return Status::FromErrno(err, "read the rules' flow state (loss_flow_state)");
      break;  // no batch operations here: one at a time below
    }
    for (uint32_t i = 0; i < n; i++) take(keys[i], values[i]);
    if (err == ENOENT) return out;
    std::memcpy(in_token, out_token, sizeof(in_token));
    first = false;
  }
  loss_flow_key key{}, next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(flow_state_fd_, prev, &next) == 0) {
    loss_flow_state v{};
    if (bpf_map_lookup_elem(flow_state_fd_, &next, &v) == 0) take(next, v);
    key = next;
    prev = &key;
  }
  if (errno != ENOENT) return Status::FromErrno(errno, "read the rules' flow state (loss_flow_state)");
  return out;
}

}  // namespace lossd
