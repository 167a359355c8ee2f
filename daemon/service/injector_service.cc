#include <arpa/inet.h>
#include <time.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "service/convert.h"
#include "service/services.h"
#include "service/stream.h"

namespace lossd {
namespace {

uint64_t UnixNs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const Status& st) {
  auto* r = ctx->DefaultReactor();
  r->Finish(ToGrpc(st));
  return r;
}

// TCP sockets of this network namespace from /proc/net/tcp{,6}: state,
// local and remote endpoint.
struct TcpSock {
  obs_tuple t{};
  int state = 0;  // 1 established, 10 listen
};

std::vector<TcpSock> TcpSockets() {
  std::vector<TcpSock> out;
  for (int v6 = 0; v6 < 2; v6++) {
    std::ifstream in(v6 ? "/proc/net/tcp6" : "/proc/net/tcp");
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string slot, local, remote, st;
      if (!(ls >> slot >> local >> remote >> st)) continue;
      TcpSock s;
      s.t.family = v6 ? AF_INET6 : AF_INET;
      s.state = static_cast<int>(std::strtol(st.c_str(), nullptr, 16));
      auto parse = [&](const std::string& ep, uint32_t* addr, uint16_t* port) {
        auto colon = ep.find(':');
        if (colon == std::string::npos) return;
        std::string a = ep.substr(0, colon);
        *port = static_cast<uint16_t>(std::strtoul(ep.substr(colon + 1).c_str(), nullptr, 16));
        // /proc prints each 32-bit word in host order.
        for (size_t w = 0; w * 8 < a.size() && w < 4; w++)
          addr[w] = static_cast<uint32_t>(std::strtoul(a.substr(w * 8, 8).c_str(), nullptr, 16));
      };
      parse(local, s.t.saddr, &s.t.sport);
      parse(remote, s.t.daddr, &s.t.dport);
      out.push_back(s);
    }
  }
  return out;
}

}  // namespace

InjectorService::InjectorService(Injector* inj, EffectTracker* effects, ServiceLimits limits)
    : inj_(inj), effects_(effects), limits_(std::move(limits)) {}

size_t InjectorService::rule_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return meta_.size();
}

Status InjectorService::Check(const v1::RuleSpec& in, RuleSpec* spec, bool new_rule) {
  LOSSD_RETURN_IF_ERROR(SpecFromProto(in, spec));
  if (limits_.max_ttl_ns) {
    uint64_t ttl = static_cast<uint64_t>(spec->ttl.count());
    if (ttl == 0 || ttl > limits_.max_ttl_ns)
      return InvalidArgument("ttl_ns: this daemon allows rules of at most " +
                             std::to_string(limits_.max_ttl_ns / 1000000000ull) +
                             " s (--max-ttl); give a ttl within it");
  }
  if (new_rule && rule_count() >= limits_.max_rules)
    return ResourceExhausted("rule limit reached (" + std::to_string(limits_.max_rules) +
                             " rules, --max-rules): delete rules first");
  if (in.force() || ModelMeanLoss(spec->model) == 0) return Status::Ok();
  if (spec->l4proto != 0 && spec->l4proto != IPPROTO_TCP) return Status::Ok();

  // Would the rule cut SSH or lossd's own TCP control connections? Live
  // connections it covers, or a listener on a protected port whose traffic
  // it covers without narrowing by address.
  for (const TcpSock& s : TcpSockets()) {
    for (uint16_t port : limits_.protected_ports) {
      if (s.t.sport != port && s.t.dport != port) continue;
      if (s.state == 1 && RuleCoversFlow(*spec, s.t))
        return FailedPrecondition(
            "this rule would drop packets of a live connection on protected port " +
            std::to_string(port) + " (SSH or lossd's control): narrow it (ports, addresses) "
            "or set force");
      if (s.state == 10 && s.t.sport == port && !spec->src && !spec->dst &&
          spec->cgroup.empty() && spec->sport.lo <= port && port <= spec->sport.hi &&
          spec->dport.lo <= port && port <= spec->dport.hi)
        return FailedPrecondition("this rule would drop traffic of the listener on protected port " +
                                  std::to_string(port) +
                                  " (SSH or lossd's control): narrow it (ports, addresses) or set force");
    }
  }
  return Status::Ok();
}

Status InjectorService::Fill(uint32_t id, v1::Rule* out) const {
  auto info = inj_->Get(id);
  if (!info.ok()) return info.status();
  out->set_id(id);
  SpecToProto(info->spec, out->mutable_spec());
  out->set_state(info->expired ? v1::RULE_STATE_EXPIRED : v1::RULE_STATE_ACTIVE);
  for (const auto& h : info->hooks) out->add_attachments(h);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = meta_.find(id);
    if (it != meta_.end()) {
      for (const auto& [k, v] : it->second.labels) (*out->mutable_spec()->mutable_labels())[k] = v;
      out->mutable_spec()->set_force(it->second.force);
      out->set_created_unix_ns(it->second.created_unix_ns);
      out->set_expires_unix_ns(it->second.expires_unix_ns);
    }
  }
  auto c = inj_->Counters(id);
  if (c.ok()) CountersToProto(*c, out->mutable_counters());
  return Status::Ok();
}

void InjectorService::SyncEffects() {
  if (!effects_) return;
  std::map<uint32_t, RuleSpec> rules;
  for (const auto& r : inj_->Rules())
    if (!r.expired) rules[r.id] = r.spec;
  effects_->SetRules(rules);
}

Status InjectorService::Create(const v1::RuleSpec& in, v1::Rule* out) {
  RuleSpec spec;
  std::unique_lock<std::mutex> create(create_mu_);
  LOSSD_RETURN_IF_ERROR(Check(in, &spec, true));
  auto id = inj_->Add(spec);
  if (!id.ok()) return id.status();
  Meta m;
  m.force = in.force();
  for (const auto& [k, v] : in.labels()) m.labels[k] = v;
  m.created_unix_ns = UnixNs();
  if (spec.ttl.count() > 0) m.expires_unix_ns = m.created_unix_ns + uint64_t(spec.ttl.count());
  {
    std::lock_guard<std::mutex> lock(mu_);
    meta_[*id] = m;
  }
  create.unlock();
  SyncEffects();
  return Fill(*id, out);
}

grpc::ServerUnaryReactor* InjectorService::CreateRule(grpc::CallbackServerContext* ctx,
                                                      const v1::CreateRuleRequest* req, v1::Rule* resp) {
  return Done(ctx, Create(req->spec(), resp));
}

grpc::ServerUnaryReactor* InjectorService::CreateRules(grpc::CallbackServerContext* ctx,
                                                       const v1::CreateRulesRequest* req,
                                                       v1::CreateRulesResponse* resp) {
  Status first_error;
  std::vector<uint32_t> created;
  for (int i = 0; i < req->specs_size(); i++) {
    v1::Rule rule;
    Status st = Create(req->specs(i), &rule);
    if (st.ok()) {
      created.push_back(rule.id());
      *resp->add_rules() = rule;
      resp->add_errors("");
      continue;
    }
    Status indexed(st.code(), "specs[" + std::to_string(i) + "]: " + st.message());
    if (req->atomic()) {
      for (uint32_t id : created) {
        inj_->Remove(id);
        std::lock_guard<std::mutex> lock(mu_);
        meta_.erase(id);
      }
      SyncEffects();
      resp->Clear();
      return Done(ctx, indexed);
    }
    if (first_error.ok()) first_error = indexed;
    resp->add_errors(indexed.message());
  }
  return Done(ctx, Status::Ok());
}

grpc::ServerUnaryReactor* InjectorService::UpdateRule(grpc::CallbackServerContext* ctx,
                                                      const v1::UpdateRuleRequest* req, v1::Rule* resp) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!meta_.count(req->id())) return Done(ctx, NotFound("no rule with id " + std::to_string(req->id())));
  }
  RuleSpec spec;
  Status st = Check(req->spec(), &spec, false);
  if (!st.ok()) return Done(ctx, st);
  st = inj_->Replace(req->id(), spec);
  if (!st.ok()) return Done(ctx, st);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Meta& m = meta_[req->id()];
    m.labels.clear();
    m.force = req->spec().force();
    for (const auto& [k, v] : req->spec().labels()) m.labels[k] = v;
    m.expires_unix_ns = spec.ttl.count() > 0 ? UnixNs() + uint64_t(spec.ttl.count()) : 0;
  }
  SyncEffects();
  return Done(ctx, Fill(req->id(), resp));
}

grpc::ServerUnaryReactor* InjectorService::DeleteRule(grpc::CallbackServerContext* ctx,
                                                      const v1::DeleteRuleRequest* req,
                                                      v1::DeleteRuleResponse* resp) {
  v1::Rule* r = resp->mutable_rule();
  Status st = Fill(req->id(), r);
  if (!st.ok()) return Done(ctx, st);
  auto final_counters = inj_->Remove(req->id());
  if (!final_counters.ok()) return Done(ctx, final_counters.status());
  CountersToProto(*final_counters, r->mutable_counters());
  {
    std::lock_guard<std::mutex> lock(mu_);
    meta_.erase(req->id());
  }
  SyncEffects();
  return Done(ctx, Status::Ok());
}

grpc::ServerUnaryReactor* InjectorService::GetRule(grpc::CallbackServerContext* ctx,
                                                   const v1::GetRuleRequest* req, v1::Rule* resp) {
  return Done(ctx, Fill(req->id(), resp));
}

grpc::ServerUnaryReactor* InjectorService::ListRules(grpc::CallbackServerContext* ctx,
                                                     const v1::ListRulesRequest* req,
                                                     v1::ListRulesResponse* resp) {
  for (const auto& info : inj_->Rules()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!meta_.count(info.id)) continue;  // still being created
    }
    v1::Rule r;
    if (!Fill(info.id, &r).ok()) continue;
    bool ok = true;
    for (const auto& [k, v] : req->labels()) {
      auto it = r.spec().labels().find(k);
      if (it == r.spec().labels().end() || it->second != v) ok = false;
    }
    if (ok) *resp->add_rules() = r;
  }
  return Done(ctx, Status::Ok());
}

grpc::ServerUnaryReactor* InjectorService::ClearRules(grpc::CallbackServerContext* ctx,
                                                      const v1::ClearRulesRequest*,
                                                      v1::ClearRulesResponse* resp) {
  uint32_t n = 0;
  for (const auto& info : inj_->Rules())
    if (inj_->Remove(info.id).ok()) n++;
  {
    std::lock_guard<std::mutex> lock(mu_);
    meta_.clear();
  }
  SyncEffects();
  resp->set_deleted(n);
  return Done(ctx, Status::Ok());
}

grpc::ServerWriteReactor<v1::RuleCountersUpdate>* InjectorService::WatchRuleCounters(
    grpc::CallbackServerContext*, const v1::WatchRuleCountersRequest* req) {
  std::vector<uint32_t> ids(req->ids().begin(), req->ids().end());
  uint64_t interval = req->interval_ns() ? std::max<uint64_t>(req->interval_ns(), 100000000ull)
                                         : 1000000000ull;
  return new PumpReactor<v1::RuleCountersUpdate>(
      [this, ids, interval](PumpReactor<v1::RuleCountersUpdate>::Sink& sink) {
        for (uint64_t seq = 1;; seq++) {
          v1::RuleCountersUpdate u;
          u.set_seq(seq);
          u.set_time_unix_ns(UnixNs());
          if (ids.empty()) {
            for (const auto& info : inj_->Rules()) Fill(info.id, u.add_rules());
          } else {
            for (uint32_t id : ids) {
              v1::Rule r;
              if (!Fill(id, &r).ok())
                return grpc::Status(grpc::StatusCode::NOT_FOUND, "rule " + std::to_string(id) + " is gone");
              *u.add_rules() = r;
            }
          }
          if (!sink.Write(u) || !sink.Sleep(std::chrono::nanoseconds(interval)))
            return grpc::Status::OK;  // client gone (reported as cancelled) or shutdown
        }
      });
}

grpc::ServerUnaryReactor* InjectorService::GetRuleEffect(grpc::CallbackServerContext* ctx,
                                                         const v1::GetRuleEffectRequest* req,
                                                         v1::RuleEffect* resp) {
  auto info = inj_->Get(req->id());
  if (!info.ok()) return Done(ctx, info.status());
  auto c = inj_->Counters(req->id());
  if (!c.ok()) return Done(ctx, c.status());
  resp->set_id(req->id());
  double mean = ModelMeanLoss(info->spec.model);
  resp->set_configured_rate(mean);
  double measured = c->matched_segs ? double(c->dropped_segs) / double(c->matched_segs) : 0;
  resp->set_measured_rate(measured);
  // The interval comes from skbs: each skb is dropped with the configured
  // probability, whole, so its segments are not independent trials.
  double lo, hi;
  WilsonInterval(c->dropped_pkts, c->matched_pkts, &lo, &hi);
  resp->set_rate_ci_low(lo);
  resp->set_rate_ci_high(hi);
  resp->set_configured_within_ci(mean >= 0 && lo <= mean && mean <= hi);
  CountersToProto(*c, resp->mutable_counters());
  if (effects_) {
    RuleEffectTotals t = effects_->Totals(req->id());
    for (int ty = 0; ty < OBS_RTX_MAX; ty++)
      (*resp->mutable_retransmitted_segments())[RtxTypeName(ty)] = t.segs[ty];
    resp->set_flows(t.flows.size());
  }
  return Done(ctx, Status::Ok());
}

}  // namespace lossd
