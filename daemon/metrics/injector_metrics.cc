// The injector's families: its totals (rules, lease, hooks, programs,
// attachments) and the per-rule series, capped (--metrics-max-rules).
#include <algorithm>
#include <set>

#include "host/targets.h"
#include "metrics/families.h"
#include "rules/model.h"

namespace lossd {
namespace {

using prometheus::MetricType;

// The per-rule families, filled one rule at a time. Members in the order the
// families are declared: like locals, they are appended to the scrape in
// reverse (cstall_s first, info last).
class RuleFamilies {
 public:
  explicit RuleFamilies(Families* out);
  // One rule's series; `e`: its effect (null without an effect tracker).
  void Add(const RuleInfo& r, const RuleEffect* e);

 private:
  void AddEffect(const std::string& id, const RuleEffect& e);

  Fam info_;
  Fam live_;
  Fam mp_;
  Fam ms_;
  Fam mb_;
  Fam dp_;
  Fam ds_;
  Fam db_;
  Fam conf_;
  Fam meas_;
  Fam lo_;
  Fam hi_;
  Fam rtx_;
  Fam logged_;
  Fam acted_;
  Fam acted_s_;
  Fam unacted_;
  Fam linked_;
  Fam recovery_;
  Fam limit_;
  Fam fstalls_;
  Fam fstall_s_;
  Fam cstalls_;
  Fam cstall_s_;
};

RuleFamilies::RuleFamilies(Families* out)
    : info_(out, "lossd_rule_info", "A rule's target and model (value 1)", MetricType::Gauge),
      live_(out, "lossd_rule_live", "1 while the rule drops, 0 once expired, failed or deleted",
            MetricType::Gauge),
      mp_(out, "lossd_rule_matched_packets_total", "Packets (skbs) the rule matched",
          MetricType::Counter),
      ms_(out, "lossd_rule_matched_segments_total", "Wire segments (gso_segs) the rule matched",
          MetricType::Counter),
      mb_(out, "lossd_rule_matched_bytes_total", "Bytes the rule matched", MetricType::Counter),
      dp_(out, "lossd_rule_dropped_packets_total", "Packets (skbs) the rule dropped",
          MetricType::Counter),
      ds_(out, "lossd_rule_dropped_segments_total", "Wire segments the rule dropped",
          MetricType::Counter),
      db_(out, "lossd_rule_dropped_bytes_total", "Bytes the rule dropped", MetricType::Counter),
      conf_(out, "lossd_rule_configured_loss_ratio",
            "The rule's configured long-run loss rate (absent for first-k)", MetricType::Gauge),
      meas_(out, "lossd_rule_measured_loss_ratio",
            "Dropped over matched packets (skbs, the trials) since the rule was created",
            MetricType::Gauge),
      lo_(out, "lossd_rule_measured_loss_low_ratio",
          "Low end of the 99.9 % interval of the rule's drop rate (per packet)", MetricType::Gauge),
      hi_(out, "lossd_rule_measured_loss_high_ratio",
          "High end of the 99.9 % interval of the rule's drop rate (per packet)",
          MetricType::Gauge),
      rtx_(out, "lossd_rule_retransmitted_segments_total",
           "Retransmitted segments, by type, of the flows the rule matched", MetricType::Counter),
      logged_(out, "lossd_rule_drops_recorded_total",
              "Dropped TCP packets with payload whose sequence range the drop log recorded",
              MetricType::Counter),
      acted_(out, "lossd_rule_acted_packets_total",
             "Packets (skbs) the rule's action changed or copied, by action (corrupt, "
             "corrupt-payload, duplicate, ecn, ecn-pass); a drop rule has none",
             MetricType::Counter),
      acted_s_(out, "lossd_rule_acted_segments_total",
               "Wire segments the rule's action changed or copied, by action", MetricType::Counter),
      unacted_(out, "lossd_rule_unacted_packets_total",
               "Packets the rule's model picked that its action could not apply to (passed "
               "unchanged)",
               MetricType::Counter),
      linked_(out, "lossd_rule_linked_retransmits_total",
              "Resends, by type, linked to one of the rule's drops (the range they resent)",
              MetricType::Counter),
      recovery_(out, "lossd_rule_recovery_seconds_total",
                "Drop-to-resend time, by resend type, summed over the linked resends",
                MetricType::Counter),
      limit_(out, "lossd_rule_flow_limit_seconds_total",
             "Seconds by limit (busy, its parts, idle) of the flows the rule matched while it was "
             "live: closed ones and the open ones as of this scrape",
             MetricType::Counter),
      fstalls_(out, "lossd_rule_flow_stalls_total",
               "Stalls, by cause, on the flows the rule matched", MetricType::Counter),
      fstall_s_(out, "lossd_rule_flow_stall_seconds_total",
                "Stall time, by cause, on the flows the rule matched", MetricType::Counter),
      cstalls_(out, "lossd_rule_caused_stalls_total",
               "Stalls, by cause, whose hole one of the rule's drops covers", MetricType::Counter),
      cstall_s_(out, "lossd_rule_caused_stall_seconds_total",
                "Stall time, by cause, of the stalls the rule's drops caused",
                MetricType::Counter) {}

void RuleFamilies::Add(const RuleInfo& r, const RuleEffect* e) {
  const std::string id = std::to_string(r.id);
  const RuleSpec& s = r.spec;
  // The target's owner as a user names it (docs/targeting.md): only on
  // these per-rule series, never per flow.
  CgroupOwner owner = r.cgroup.empty() ? CgroupOwner{} : CgroupOwnerOf(r.CgroupRelative());
  MetricLabels il{{"rule", id},
                  {"interface", s.iface},
                  {"cgroup", r.cgroup.empty() ? s.cgroup : r.CgroupRelative()},
                  {"direction", DirectionName(s.dir)},
                  {"hook", HookName(s.hook)},
                  {"model", ModelName(s.model)},
                  {"labels", LabelsText(s.labels)}};
  // Only for a target that is one (Prometheus: an empty label is no label).
  if (!owner.unit.empty()) il.push_back({"unit", owner.unit});
  if (!owner.container.empty()) il.push_back({"container", owner.container});
  if (!owner.pod.empty()) il.push_back({"pod", owner.pod});
  info_.Add(il, 1);
  MetricLabels l{{"rule", id}};
  live_.Add(l, r.expired || r.deleted || !r.failed.empty() ? 0 : 1);
  const RuleCounters& c = r.counters;
  mp_.Add(l, c.matched_pkts);
  ms_.Add(l, c.matched_segs);
  mb_.Add(l, c.matched_bytes);
  dp_.Add(l, c.dropped_pkts);
  ds_.Add(l, c.dropped_segs);
  db_.Add(l, c.dropped_bytes);
  double configured = ModelMeanLoss(s.model);
  if (configured >= 0) conf_.Add(l, configured);
  logged_.Add(l, c.logged_pkts);
  if (s.action != Action::kDrop) {
    MetricLabels al{{"rule", id}, {"action", ActionName(s.action)}};
    acted_.Add(al, c.acted_pkts);
    acted_s_.Add(al, c.acted_segs);
    unacted_.Add(l, c.unacted_pkts);
  }
  if (e) AddEffect(id, *e);
}

void RuleFamilies::AddEffect(const std::string& id, const RuleEffect& e) {
  MetricLabels l{{"rule", id}};
  meas_.Add(l, e.measured);
  lo_.Add(l, e.ci_low);
  hi_.Add(l, e.ci_high);
  for (int t = 0; t < OBS_RTX_MAX; t++)
    rtx_.Add({{"rule", id}, {"type", RtxTypeName(t)}}, e.caused.segs[t]);
  // Fixed label sets; a cause or type appears once it has happened.
  for (int t = 0; t < OBS_RTX_MAX; t++) {
    const DurationHist& h = e.caused.recovery[t];
    if (!h.count) continue;
    linked_.Add({{"rule", id}, {"type", RtxTypeName(t)}}, h.count);
    recovery_.Add({{"rule", id}, {"type", RtxTypeName(t)}}, h.sum_ns / 1e9);
  }
  const LimitTotals& lt = e.caused.limits;
  limit_.Add({{"rule", id}, {"limit", "busy"}}, lt.busy_ns / 1e9);
  for (size_t k = 0; k < lt.within_busy_ns.size(); k++)
    limit_.Add({{"rule", id}, {"limit", LimitName(static_cast<Limit>(k))}},
               lt.within_busy_ns[k] / 1e9);
  limit_.Add({{"rule", id}, {"limit", "idle"}}, lt.idle_ns / 1e9);
  for (int cause = 0; cause < OBS_STALL_MAX; cause++) {
    MetricLabels cl{{"rule", id}, {"cause", StallCauseName(cause)}};
    const StallTotal& on = e.caused.stalls_on_flows[cause];
    if (on.count) {
      fstalls_.Add(cl, on.count);
      fstall_s_.Add(cl, on.time_ns / 1e9);
    }
    const StallTotal& by = e.caused.stalls_caused[cause];
    if (by.count) {
      cstalls_.Add(cl, by.count);
      cstall_s_.Add(cl, by.time_ns / 1e9);
    }
  }
}

// Each hook's packet counters (Injector::HookTotals).
void HookMetrics(const Injector& inj, Families* out) {
  Fam seen(out, "lossd_hook_seen_packets_total", "Packets the injector's hook program ran on",
           MetricType::Counter);
  Fam passed(out, "lossd_hook_passed_packets_total",
             "Packets the hook passed (no rule matched, not dropped, or not IP)",
             MetricType::Counter);
  Fam dropped(out, "lossd_hook_dropped_packets_total", "Packets the hook dropped",
              MetricType::Counter);
  Fam unparsable(out, "lossd_hook_unparsable_packets_total",
                 "Packets the hook could not parse (truncated, malformed): passed",
                 MetricType::Counter);
  Fam always(out, "lossd_hook_always_pass_packets_total",
             "ARP and IPv6 neighbour discovery packets, always passed", MetricType::Counter);
  Fam lease(out, "lossd_hook_lease_expired_packets_total",
            "Packets a dropping rule matched after the lease ran out: passed", MetricType::Counter);
  for (int h = 0; h < LOSS_HOOK_MAX; h++) {
    HookCounters c = inj.HookTotals(h);
    MetricLabels l{{"hook", LossHookName(h)}};
    seen.Add(l, c.seen);
    passed.Add(l, c.passed);
    dropped.Add(l, c.dropped);
    unparsable.Add(l, c.unparsable);
    always.Add(l, c.always_pass);
    lease.Add(l, c.lease_expired);
  }
}

}  // namespace

const char* ModelName(const LossModel& m) {
  switch (m.kind) {
    case LossModel::Kind::kBernoulli: return "bernoulli";
    case LossModel::Kind::kGilbertElliott: return "gilbert_elliott";
    case LossModel::Kind::kEveryNth: return "every_nth";
    case LossModel::Kind::kFirstK: return "first_k";
    case LossModel::Kind::kRamp: return "ramp";
    case LossModel::Kind::kMarkov4: return "markov";
    case LossModel::Kind::kPolice: return m.police_per_flow ? "police_flow" : "police";
  }
  return "unknown";
}

std::string LabelsText(const std::map<std::string, std::string>& labels) {
  std::string s;
  for (const auto& [k, v] : labels) s += (s.empty() ? "" : ",") + k + "=" + v;
  return s;
}

void InjectorMetrics(const Injector& inj, const Components& parts, EffectTracker* effects,
                     const MetricsOptions& opts, Families* out) {
  std::vector<RuleInfo> rules = inj.Rules();
  {
    Fam f(out, "lossd_rules",
          "Rules lossd holds: live, or expired, stopped by their guard or deleted (kept listed)",
          MetricType::Gauge);
    size_t expired = 0, stopped = 0, deleted = 0;
    for (const RuleInfo& r : rules) {
      if (r.deleted)
        deleted++;
      else if (!r.guard_stop.condition.empty())
        stopped++;
      else if (r.expired)
        expired++;
    }
    f.Add({{"state", "live"}}, double(rules.size() - expired - stopped - deleted));
    f.Add({{"state", "expired"}}, double(expired));
    f.Add({{"state", "stopped"}}, double(stopped));
    f.Add({{"state", "deleted"}}, double(deleted));
  }
  Fam(out, "lossd_guard_stops_total",
      "Rules their guard stopped in the kernel (a stall too long, too many RTOs), ever",
      MetricType::Counter)
      .Add({}, double(inj.GuardStops()));
  Fam(out, "lossd_rules_max", "Most live rules at once (--max-rules)", MetricType::Gauge)
      .Add({}, parts.limits().max_rules);
  Fam(out, "lossd_lease_remaining_seconds",
      "Time before the data plane stops dropping unless lossd renews its lease", MetricType::Gauge)
      .Add({}, double(inj.LeaseRemainingNs()) / 1e9);
  {
    Capabilities caps = parts.caps();
    Fam f(out, "lossd_injector_hook_available",
          "1 if this kernel lets lossd attach the injector at this hook (probed at start)",
          MetricType::Gauge);
    f.Add({{"hook", "xdp"}}, caps.xdp);
    f.Add({{"hook", "tcx"}}, caps.tcx);
    f.Add({{"hook", "clsact"}}, caps.clsact);
    f.Add({{"hook", "cgroup_skb"}}, caps.cgroup_skb && !caps.cgroup2.empty());
  }
  {
    std::vector<ProgLoadStats> loaded = inj.LoadedPrograms();
    Fam f(out, "lossd_injector_program_loaded",
          "1 if the injector's program is loaded (each loads with the first rule that needs it)",
          MetricType::Gauge);
    Fam verified(out, "lossd_injector_program_verified_instructions",
                 "Instructions the verifier processed to load the program", MetricType::Gauge);
    for (const auto& p : loaded) {
      f.Add({{"program", p.name}}, 1);
      verified.Add({{"program", p.name}}, p.verified_insns);
    }
  }
  HookMetrics(inj, out);
  {  // what the live rules hold attached (shared per interface/cgroup and hook)
    std::set<std::string> attached;
    for (const RuleInfo& r : rules)
      if (!r.expired) attached.insert(r.hooks.begin(), r.hooks.end());
    Fam f(out, "lossd_injector_attached",
          "1 for each attachment the live rules hold (e.g. \"tcx ingress to eth0\")",
          MetricType::Gauge);
    for (const std::string& a : attached) f.Add({{"attachment", a}}, 1);
  }
  RuleMetrics(std::move(rules), effects, opts.max_rules, out);
}

void RuleMetrics(std::vector<RuleInfo> rules, EffectTracker* effects, uint32_t max_rules,
                 Families* out) {
  // Per rule, capped: live rules first, then expired ones, each by id.
  std::stable_sort(rules.begin(), rules.end(), [](const RuleInfo& a, const RuleInfo& b) {
    return a.expired != b.expired ? !a.expired : a.id < b.id;
  });
  size_t shown = std::min<size_t>(rules.size(), max_rules);
  Fam(out, "lossd_metrics_rules_omitted",
      "Rules without per-rule series here (over --metrics-max-rules)", MetricType::Gauge)
      .Add({}, double(rules.size() - shown));
  RuleFamilies families(out);
  std::vector<RuleEffect> fx;
  if (effects) fx = effects->Effects(std::vector<RuleInfo>(rules.begin(), rules.begin() + shown));
  for (size_t i = 0; i < shown; i++) families.Add(rules[i], effects ? &fx[i] : nullptr);
}

}  // namespace lossd
