// The Scenarios service: lossd.v1 <-> the scenario runner. A scenario's
// every step is checked before anything runs, each rule as CreateRule checks
// one (service/requests.h) and as the injector would take it (CheckOnly:
// limits, targets, host protection); a dry run stops there.
#include <algorithm>

#include "base/clock.h"
#include "rules/proto.h"
#include "service/channel.h"
#include "service/convert.h"
#include "service/requests.h"
#include "service/services.h"

namespace lossd {
namespace {

std::string StepWhere(const v1::ScenarioStep& s, int i) {
  std::string at = "step " + std::to_string(i + 1);
  return s.name().empty() ? at : at + " (" + Shown(s.name()) + ")";
}

// The plan: the scenario's shape, then every rule as the injector will be
// given it: its TTL the step's duration (or its own, if shorter), the
// scenario's guard if it has none. Errors name the step and the rule.
Status PlanOf(const Components* parts, Injector* inj, const v1::Scenario& in,
              Components::Deadline deadline, ScenarioPlan* out) {
  ScenarioPlan plan;
  plan.name = in.name();
  plan.continue_on_guard = in.continue_on_guard();
  if (in.has_guard()) {
    plan.guard = GuardFromProto(in.guard());
    Status st = CheckGuard(plan.guard);
    if (!st.ok()) return InvalidArgument("guard: " + st.message());
    if (plan.guard.InKernel()) LOSSD_RETURN_IF_ERROR(GuardNeedsObserver(parts, deadline));
  }
  // The shape first (bounded before any rule is read: a request may hold
  // millions of empty specs).
  for (const auto& s : in.steps()) {
    ScenarioStepPlan step;
    step.name = s.name();
    step.duration_ns = s.duration_ns();
    step.rules.resize(std::min<size_t>(size_t(s.rules_size()), kMaxScenarioStepRules + 1));
    plan.steps.push_back(std::move(step));
    if (plan.steps.size() > kMaxScenarioSteps) break;
  }
  LOSSD_RETURN_IF_ERROR(CheckScenarioShape(plan, parts->limits()));
  for (int i = 0; i < in.steps_size(); i++) {
    const v1::ScenarioStep& s = in.steps(i);
    ScenarioStepPlan& step = plan.steps[size_t(i)];
    for (int k = 0; k < s.rules_size(); k++) {
      std::string at = StepWhere(s, i) + ": rule " + std::to_string(k + 1) + ": ";
      RuleSpec& spec = step.rules[size_t(k)];
      Status st = RuleFromClient(parts, s.rules(k), "labels", &spec, deadline);
      if (st.ok()) {
        // The step's duration, not the daemon's default TTL; a rule's own
        // TTL only if shorter (0, "until deleted", is the step's end too).
        const auto step_ttl = std::chrono::nanoseconds(int64_t(step.duration_ns));
        const bool own = s.rules(k).has_ttl_ns() && s.rules(k).ttl_ns() != 0;
        if (!own || spec.ttl > step_ttl) spec.ttl = step_ttl;
        spec.ttl_given = true;
        if (!spec.guard.Any()) spec.guard = plan.guard;
        st = inj->CheckOnly(spec);
      }
      if (!st.ok()) return Status(st.code(), at + st.message());
    }
  }
  *out = std::move(plan);
  return Status::Ok();
}

v1::ScenarioState StateToProto(ScenarioState s) {
  switch (s) {
    case ScenarioState::kPlanned: return v1::SCENARIO_STATE_PLANNED;
    case ScenarioState::kRunning: return v1::SCENARIO_STATE_RUNNING;
    case ScenarioState::kDone: return v1::SCENARIO_STATE_DONE;
    case ScenarioState::kAborted: return v1::SCENARIO_STATE_ABORTED;
    case ScenarioState::kStopped: return v1::SCENARIO_STATE_STOPPED;
    case ScenarioState::kFailed: return v1::SCENARIO_STATE_FAILED;
  }
  return v1::SCENARIO_STATE_UNSPECIFIED;
}

// `brief` (ListScenarios): without the rules and their effects (GetScenario
// has them), so that a listing stays small.
void RecordToProto(const ScenarioRecord& r, v1::ScenarioRun* out, bool brief = false) {
  out->set_id(r.id);
  v1::Scenario* sc = out->mutable_scenario();
  sc->set_name(r.plan.name);
  GuardToProto(r.plan.guard, sc->mutable_guard());
  if (!r.plan.guard.Any()) sc->clear_guard();
  sc->set_continue_on_guard(r.plan.continue_on_guard);
  out->set_state(StateToProto(r.state));
  out->set_reason(r.reason);
  out->set_started_unix_ns(int64_t(r.started_unix_ns));
  out->set_ended_unix_ns(int64_t(r.ended_unix_ns));
  out->set_current_step(r.current_step);
  out->set_duration_ns(r.plan.DurationNs());
  out->set_started_by(r.started_by);
  out->set_settled(r.settled);
  uint64_t offset = 0;
  for (size_t i = 0; i < r.plan.steps.size(); i++) {
    const ScenarioStepPlan& p = r.plan.steps[i];
    v1::ScenarioStep* ps = sc->add_steps();
    ps->set_name(p.name);
    ps->set_duration_ns(p.duration_ns);
    if (!brief)
      for (const auto& spec : p.rules) SpecToProto(spec, ps->add_rules());

    v1::ScenarioStepReport* s = out->add_steps();
    s->set_index(uint32_t(i + 1));
    s->set_name(p.name);
    s->set_offset_ns(offset);
    s->set_duration_ns(p.duration_ns);
    offset += p.duration_ns;
    if (i < r.steps.size()) {
      const ScenarioStepRecord& rec = r.steps[i];
      s->set_started_unix_ns(int64_t(rec.started_unix_ns));
      s->set_ended_unix_ns(int64_t(rec.ended_unix_ns));
      s->set_outcome(rec.outcome);
      for (size_t k = 0; k < rec.rules.size() && !brief; k++) {
        RuleToProto(rec.rules[k], s->add_rules());
        if (k < rec.effects.size())
          RuleEffectToProto(rec.rules[k], rec.effects[k], s->add_effects());
      }
    } else if (!brief) {
      for (const auto& spec : p.rules) SpecToProto(spec, s->add_rules()->mutable_spec());
    }
  }
}

grpc::ServerUnaryReactor* ReplyRecord(grpc::CallbackServerContext* ctx,
                                      const Result<ScenarioRecord>& r, v1::ScenarioRun* out) {
  if (r.ok()) RecordToProto(*r, out);
  return Reply(ctx, r.status());
}

Result<ScenarioRunner*> NeedRunner(const Components* parts, Components::Deadline deadline) {
  auto inj = parts->NeedInjector(deadline);
  if (!inj.ok()) return inj.status();
  return parts->scenarios();  // published with the injector
}

}  // namespace

grpc::ServerUnaryReactor* ScenarioService::RunScenario(grpc::CallbackServerContext* ctx,
                                                       const v1::RunScenarioRequest* req,
                                                       v1::ScenarioRun* resp) {
  auto inj = parts_->NeedInjector(ctx->deadline());
  if (!inj.ok()) return Reply(ctx, inj.status());
  ScenarioPlan plan;
  Status st = PlanOf(parts_, *inj, req->scenario(), ctx->deadline(), &plan);
  if (!st.ok()) return Reply(ctx, st);
  if (req->dry_run()) {
    ScenarioRecord planned;
    planned.plan = std::move(plan);
    planned.state = ScenarioState::kPlanned;
    RecordToProto(planned, resp);
    return Reply(ctx, Status::Ok());
  }
  std::string name = plan.name;
  auto run = parts_->scenarios()->Start(std::move(plan), DescribePeer(*ctx));
  if (run.ok())
    LogChange(*ctx, "RunScenario", Status::Ok(),
              "scenario " + std::to_string(run->id) + " (" + name + ")");
  return ReplyRecord(ctx, run, resp);
}

grpc::ServerUnaryReactor* ScenarioService::ListScenarios(grpc::CallbackServerContext* ctx,
                                                         const v1::ListScenariosRequest*,
                                                         v1::ListScenariosResponse* resp) {
  auto runner = NeedRunner(parts_, ctx->deadline());
  if (!runner.ok()) return Reply(ctx, runner.status());
  for (const auto& r : (*runner)->List()) RecordToProto(r, resp->add_runs(), /*brief=*/true);
  return Reply(ctx, Status::Ok());
}

grpc::ServerUnaryReactor* ScenarioService::GetScenario(grpc::CallbackServerContext* ctx,
                                                       const v1::GetScenarioRequest* req,
                                                       v1::ScenarioRun* resp) {
  auto runner = NeedRunner(parts_, ctx->deadline());
  if (!runner.ok()) return Reply(ctx, runner.status());
  return ReplyRecord(ctx, (*runner)->Get(req->id()), resp);
}

grpc::ServerUnaryReactor* ScenarioService::AbortScenario(grpc::CallbackServerContext* ctx,
                                                         const v1::AbortScenarioRequest* req,
                                                         v1::ScenarioRun* resp) {
  auto runner = NeedRunner(parts_, ctx->deadline());
  if (!runner.ok()) return Reply(ctx, runner.status());
  auto r = (*runner)->Abort(req->id());
  LogChange(*ctx, "AbortScenario", r.status(), "scenario " + std::to_string(req->id()));
  return ReplyRecord(ctx, r, resp);
}

}  // namespace lossd
