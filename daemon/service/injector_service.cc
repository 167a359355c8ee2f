// The Injector service: lossd.v1 <-> the injector, which owns every rule.
#include <algorithm>

#include "base/clock.h"
#include "base/json.h"
#include "base/log.h"
#include "service/channel.h"
#include "service/convert.h"
#include "service/refusals.h"
#include "service/requests.h"
#include "service/services.h"
#include "service/stream.h"

namespace lossd {
namespace {

grpc::ServerUnaryReactor* ReplyRule(grpc::CallbackServerContext* ctx, const Result<RuleInfo>& r,
                                    v1::Rule* out) {
  if (r.ok()) RuleToProto(*r, out);
  return Reply(ctx, r.status());
}

}  // namespace

Status InjectorService::Create(Injector* inj, const v1::RuleSpec& in, v1::Rule* out,
                               Components::Deadline deadline) {
  RuleSpec spec;
  LOSSD_RETURN_IF_ERROR(RuleFromClient(parts_, in, "labels", &spec, deadline));
  auto id = inj->Add(spec);
  if (!id.ok()) return id.status();
  auto info = inj->Get(*id);
  if (!info.ok()) return info.status();
  RuleToProto(*info, out);
  return Status::Ok();
}

grpc::ServerUnaryReactor* InjectorService::CreateRule(grpc::CallbackServerContext* ctx,
                                                      const v1::CreateRuleRequest* req,
                                                      v1::Rule* resp) {
  auto inj = parts_->NeedInjector(ctx->deadline());
  if (!inj.ok()) return Reply(ctx, inj.status());
  Status st = Create(*inj, req->spec(), resp, ctx->deadline());
  LogChange(*ctx, "CreateRule", st, "rule " + std::to_string(resp->id()));
  return Reply(ctx, st);
}

grpc::ServerUnaryReactor* InjectorService::CreateRules(grpc::CallbackServerContext* ctx,
                                                       const v1::CreateRulesRequest* req,
                                                       v1::CreateRulesResponse* resp) {
  auto inj = parts_->NeedInjector(ctx->deadline());
  if (!inj.ok()) return Reply(ctx, inj.status());
  if (uint32_t(req->specs_size()) > parts_->api().max_batch)
    return Reply(ctx,
                 InvalidArgument(std::to_string(req->specs_size()) +
                                 " specs in one CreateRules, the limit is " +
                                 std::to_string(parts_->api().max_batch) + " (lossd --max-batch)"));
  std::vector<uint32_t> created;
  for (int i = 0; i < req->specs_size(); i++) {
    v1::Rule rule;
    Status st = Create(*inj, req->specs(i), &rule, ctx->deadline());
    if (st.ok()) {
      created.push_back(rule.id());
      *resp->add_rules() = rule;
      resp->add_errors("");
      continue;
    }
    Status indexed(st.code(), "specs[" + std::to_string(i) + "]: " + st.message());
    if (req->atomic()) {
      for (uint32_t id : created) (*inj)->Discard(id);
      resp->Clear();
      LogChange(*ctx, "CreateRules", indexed, "none of " + std::to_string(req->specs_size()));
      return Reply(ctx, indexed);
    }
    resp->add_errors(indexed.message());
    // Inside an OK reply: the interceptor does not see it.
    LogRefusal("/lossd.v1.Injector/CreateRules", ToGrpc(indexed).error_code(), indexed.message(),
               PeerOf(*ctx));
  }
  std::string ids;
  for (uint32_t id : created) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  LogChange(*ctx, "CreateRules", Status::Ok(),
            std::to_string(created.size()) + " of " + std::to_string(req->specs_size()) +
                (ids.empty() ? "" : ": rules " + ids));
  return Reply(ctx, Status::Ok());
}

grpc::ServerUnaryReactor* InjectorService::UpdateRule(grpc::CallbackServerContext* ctx,
                                                      const v1::UpdateRuleRequest* req,
                                                      v1::Rule* resp) {
  auto inj = parts_->NeedInjector(ctx->deadline());
  if (!inj.ok()) return Reply(ctx, inj.status());
  RuleSpec spec;
  Status st = RuleFromClient(parts_, req->spec(), "spec.labels", &spec, ctx->deadline());
  if (st.ok()) st = (*inj)->Replace(req->id(), spec);
  LogChange(*ctx, "UpdateRule", st, "rule " + std::to_string(req->id()));
  if (!st.ok()) return Reply(ctx, st);
  return ReplyRule(ctx, (*inj)->Get(req->id()), resp);
}

grpc::ServerUnaryReactor* InjectorService::DeleteRule(grpc::CallbackServerContext* ctx,
                                                      const v1::DeleteRuleRequest* req,
                                                      v1::DeleteRuleResponse* resp) {
  auto inj = parts_->NeedInjector(ctx->deadline());
  if (!inj.ok()) return Reply(ctx, inj.status());
  auto removed = (*inj)->Remove(req->id());
  LogChange(*ctx, "DeleteRule", removed.status(), "rule " + std::to_string(req->id()));
  return ReplyRule(ctx, removed, resp->mutable_rule());
}

grpc::ServerUnaryReactor* InjectorService::GetRule(grpc::CallbackServerContext* ctx,
                                                   const v1::GetRuleRequest* req, v1::Rule* resp) {
  auto inj = parts_->NeedInjector(ctx->deadline());
  if (!inj.ok()) return Reply(ctx, inj.status());
  return ReplyRule(ctx, (*inj)->Get(req->id()), resp);
}

grpc::ServerUnaryReactor* InjectorService::ListRules(grpc::CallbackServerContext* ctx,
                                                     const v1::ListRulesRequest* req,
                                                     v1::ListRulesResponse* resp) {
  auto inj = parts_->NeedInjector(ctx->deadline());
  if (!inj.ok()) return Reply(ctx, inj.status());
  Status st = CheckLabels(req->labels(), parts_->api(), "labels");
  if (!st.ok()) return Reply(ctx, st);
  for (const RuleInfo& info : (*inj)->Rules()) {
    if (info.deleted && !req->include_deleted()) continue;
    bool match = std::all_of(req->labels().begin(), req->labels().end(), [&](const auto& kv) {
      auto it = info.spec.labels.find(kv.first);
      return it != info.spec.labels.end() && it->second == kv.second;
    });
    if (match) RuleToProto(info, resp->add_rules());
  }
  return Reply(ctx, Status::Ok());
}

grpc::ServerUnaryReactor* InjectorService::ClearRules(grpc::CallbackServerContext* ctx,
                                                      const v1::ClearRulesRequest*,
                                                      v1::ClearRulesResponse* resp) {
  auto inj = parts_->NeedInjector(ctx->deadline());
  if (!inj.ok()) return Reply(ctx, inj.status());
  resp->set_deleted((*inj)->Clear());
  LogChange(*ctx, "ClearRules", Status::Ok(), "deleted " + std::to_string(resp->deleted()));
  return Reply(ctx, Status::Ok());
}

grpc::ServerWriteReactor<v1::RuleCountersUpdate>* InjectorService::WatchRuleCounters(
    grpc::CallbackServerContext* ctx, const v1::WatchRuleCountersRequest* req) {
  std::vector<uint32_t> ids(req->ids().begin(), req->ids().end());
  auto period = StreamPeriod(req->interval_ns(), "interval_ns");
  Status st = period.status();
  if (st.ok() && ids.size() > parts_->api().max_batch)
    st = InvalidArgument(std::to_string(ids.size()) + " ids, the limit is " +
                         std::to_string(parts_->api().max_batch) + " (lossd --max-batch)");
  using Reactor = PumpReactor<v1::RuleCountersUpdate>;
  auto inj = parts_->NeedInjector(ctx->deadline());
  if (!st.ok()) return new Reactor(ToGrpc(st));
  if (!inj.ok()) return new Reactor(ToGrpc(inj.status()));
  // Its budget before its thread; held until the stream ends.
  auto ticket = parts_->streams().Open("WatchRuleCounters", 0, StreamPeerOf(*ctx));
  if (!ticket.ok()) return new Reactor(ToGrpc(ticket.status()));
  auto held = std::make_shared<StreamBudget::Ticket>(std::move(*ticket));
  return new Reactor(
      [inj, ids, period, held](Reactor::Sink& sink) {
        for (uint64_t seq = 1;; seq++) {
          v1::RuleCountersUpdate u;
          u.set_seq(seq);
          u.set_time_unix_ns(UnixNs());
          std::string deleted;  // a watched rule deleted: this update is its last
          if (ids.empty()) {
            for (const RuleInfo& info : (*inj)->Rules())  // as ListRules lists them
              if (!info.deleted) RuleToProto(info, u.add_rules());
          } else {
            for (uint32_t id : ids) {
              auto info = (*inj)->Get(id);
              if (!info.ok())
                return grpc::Status(grpc::StatusCode::NOT_FOUND,
                                    "rule " + std::to_string(id) + " is gone");
              RuleToProto(*info, u.add_rules());
              if (info->deleted && deleted.empty()) deleted = "rule " + std::to_string(id);
            }
          }
          if (!sink.Write(u)) return grpc::Status::OK;  // client gone (reported as cancelled)
          if (!deleted.empty())  // after an update with its final counters, state DELETED
            return grpc::Status(grpc::StatusCode::NOT_FOUND, deleted + " was deleted");
          if (!sink.Sleep(*period)) return grpc::Status::OK;  // shutdown
        }
      }, parts_->stream_stop());
}

grpc::ServerUnaryReactor* InjectorService::GetRuleEffect(grpc::CallbackServerContext* ctx,
                                                         const v1::GetRuleEffectRequest* req,
                                                         v1::RuleEffect* resp) {
  auto inj = parts_->NeedInjector(ctx->deadline());
  if (!inj.ok()) return Reply(ctx, inj.status());
  auto info = (*inj)->Get(req->id());
  if (!info.ok()) return Reply(ctx, info.status());
  RuleEffectToProto(*info, parts_->effects()->Effect(*info), resp);
  return Reply(ctx, Status::Ok());
}

}  // namespace lossd
