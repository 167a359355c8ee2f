#include "scenario/runner.h"

#include <algorithm>
#include <chrono>
#include <system_error>

#include "base/clock.h"
#include "base/log.h"

namespace lossd {
namespace {

// How often the injector's count of guard stops is looked at; when it moved,
// the step's rules are read for theirs. The stop itself is the kernel's
// (immediate); this only ends the step's other rules.
constexpr std::chrono::milliseconds kGuardPoll{20};

std::string StepName(const ScenarioPlan& plan, size_t i) {
  std::string at = "step " + std::to_string(i + 1);
  return plan.steps[i].name.empty() ? at : at + " (" + Shown(plan.steps[i].name) + ")";
}

std::string Ms(uint64_t ns) {
  return DurationText(std::chrono::nanoseconds(int64_t(ns)));
}

}  // namespace

uint64_t ScenarioPlan::DurationNs() const {
  uint64_t total = 0;
  for (const auto& s : steps) total += s.duration_ns;
  return total;
}

Status CheckScenarioShape(const ScenarioPlan& plan, const RuleLimits& limits) {
  if (plan.name.empty() || plan.name.size() > kMaxScenarioNameBytes ||
      !std::all_of(plan.name.begin(), plan.name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '_' || c == '-';
      }))
    return InvalidArgument("name: '" + Shown(plan.name) + "': give 1 to " +
                           std::to_string(kMaxScenarioNameBytes) +
                           " letters, digits, '.', '_' or '-'");
  if (plan.steps.empty() || plan.steps.size() > kMaxScenarioSteps)
    return InvalidArgument("steps: " + std::to_string(plan.steps.size()) + " steps, give 1 to " +
                           std::to_string(kMaxScenarioSteps));
  uint64_t total = 0;
  size_t rules = 0;
  for (size_t i = 0; i < plan.steps.size(); i++) {
    const ScenarioStepPlan& s = plan.steps[i];
    std::string at = StepName(plan, i) + ": ";
    if (s.name.size() > kMaxScenarioNameBytes)
      return InvalidArgument("step " + std::to_string(i + 1) + ": name: longer than " +
                             std::to_string(kMaxScenarioNameBytes) + " bytes");
    LOSSD_RETURN_IF_ERROR(CheckNoControlChars("step " + std::to_string(i + 1) + ": name", s.name));
    if (s.duration_ns < kMinScenarioStepNs || s.duration_ns > kMaxScenarioNs)
      return InvalidArgument(at + "duration: " + Ms(s.duration_ns) + ", give 1ms to 7d");
    if (limits.max_ttl_ns && s.duration_ns > limits.max_ttl_ns)
      return InvalidArgument(at + "duration: " + Ms(s.duration_ns) +
                             " is longer than a rule may live here (lossd --max-ttl " +
                             Ms(limits.max_ttl_ns) + "): its rules' TTL is the step's duration");
    if (s.rules.size() > kMaxScenarioStepRules)
      return InvalidArgument(at + "more than " + std::to_string(kMaxScenarioStepRules) +
                             " rules (the limit)");
    total += s.duration_ns;
    rules += s.rules.size();
  }
  if (rules > kMaxScenarioRules)
    return InvalidArgument("steps: " + std::to_string(rules) + " rules in all, the limit is " +
                           std::to_string(kMaxScenarioRules));
  if (total > kMaxScenarioNs)
    return InvalidArgument("steps: " + Ms(total) + " in all, the limit is 7d");
  return Status::Ok();
}

ScenarioRunner::ScenarioRunner(Injector* injector, EffectTracker* effects)
    : injector_(injector), effects_(effects) {}

ScenarioRunner::~ScenarioRunner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  for (auto& [id, run] : runs_)
    if (run->thread.joinable()) run->thread.join();
}

Result<ScenarioRecord> ScenarioRunner::Start(ScenarioPlan plan, const std::string& started_by) {
  std::unique_lock<std::mutex> lock(mu_);
  if (closing_) return Status(Code::kUnavailable, "lossd is shutting down");
  // A thread each, until its report settled (kScenarioSettle after its end):
  // a client that starts and aborts in a loop holds no more threads than this.
  size_t running = 0;
  for (const auto& [id, run] : runs_) running += !run->exited;
  if (running >= kMaxRunningScenarios)
    return ResourceExhausted(std::to_string(running) +
                             " scenarios are running or settling their reports (3 s after their "
                             "end), the limit is " + std::to_string(kMaxRunningScenarios) +
                             ": wait for one to end, or abort one (lossctl scenario abort ID)");
  TrimLocked();
  auto run = std::make_unique<Run>();
  Run* r = run.get();
  r->record.id = next_id_++;
  r->record.plan = std::move(plan);
  r->record.started_by = started_by;
  r->record.started_unix_ns = UnixNs();
  runs_[r->record.id] = std::move(run);
  try {
    r->thread = std::thread(&ScenarioRunner::Walk, this, r);
  } catch (const std::system_error& e) {  // no exception leaves for gRPC
    runs_.erase(r->record.id);
    return ResourceExhausted(std::string("cannot start the scenario's thread: ") + e.what());
  }
  // The answer says whether its first step's rules were created.
  cv_.wait(lock, [r] { return !r->record.steps.empty() || r->done; });
  return r->record;
}

std::vector<ScenarioRecord> ScenarioRunner::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ScenarioRecord> out;
  for (const auto& [id, run] : runs_) out.push_back(run->record);
  return out;
}

Result<ScenarioRecord> ScenarioRunner::Get(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = runs_.find(id);
  if (it == runs_.end())
    return NotFound("no scenario with id " + std::to_string(id) +
                    " (ended ones are kept: the last " + std::to_string(kKeptScenarios) + ")");
  return it->second->record;
}

Result<ScenarioRecord> ScenarioRunner::Abort(uint64_t id) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = runs_.find(id);
  if (it == runs_.end()) return NotFound("no scenario with id " + std::to_string(id));
  Run* r = it->second.get();
  if (r->done) return r->record;
  r->abort = true;
  cv_.notify_all();
  // Its thread ends the step's rules and writes the report; then it is ABORTED.
  cv_.wait(lock, [r] { return r->done; });
  return r->record;
}

void ScenarioRunner::TrimLocked() {
  std::vector<uint64_t> ended;
  for (const auto& [id, run] : runs_)
    if (run->exited) ended.push_back(id);
  // The oldest first (ids grow); keep the newest kKeptScenarios - 1 with the new one.
  for (size_t i = 0; i + kKeptScenarios <= ended.size(); i++) {
    auto it = runs_.find(ended[i]);
    // Its thread has left mu_ for good.
    if (it->second->thread.joinable()) it->second->thread.join();
    runs_.erase(it);
  }
}

void ScenarioRunner::Walk(Run* run) {
  const ScenarioPlan& plan = run->record.plan;  // immutable while the run lives
  size_t i = 0;
  while (i < plan.steps.size() && RunStep(run, i)) i++;
  RefreshAll(run);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ScenarioRecord& rec = run->record;
    if (rec.state == ScenarioState::kRunning) rec.state = ScenarioState::kDone;
    rec.current_step = 0;
    rec.ended_unix_ns = UnixNs();
    run->done = true;
    Log(LogLevel::kInfo, "scenario %llu (%s) ended: %s", (unsigned long long)rec.id,
        plan.name.c_str(), rec.state == ScenarioState::kDone ? "done" : rec.reason.c_str());
  }
  cv_.notify_all();
  // The last steps' drops are resent, and their stalls end, after the rules
  // ended: the effects read once more when that has had time to happen.
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, kScenarioSettle, [this] { return closing_; });
  }
  RefreshAll(run);
  std::lock_guard<std::mutex> lock(mu_);
  run->record.settled = true;
  run->exited = true;
}

void ScenarioRunner::RefreshAll(Run* run) {
  std::vector<ScenarioStepRecord> steps;
  {
    std::lock_guard<std::mutex> lock(mu_);
    steps = run->record.steps;
  }
  for (auto& s : steps) {
    std::vector<uint32_t> ids;
    for (const auto& r : s.rules) ids.push_back(r.id);
    Refresh(&s, ids);
  }
  std::lock_guard<std::mutex> lock(mu_);
  run->record.steps = std::move(steps);
}

void ScenarioRunner::Refresh(ScenarioStepRecord* step, const std::vector<uint32_t>& ids) const {
  std::vector<RuleInfo> infos;
  std::vector<size_t> at;
  for (size_t k = 0; k < ids.size(); k++) {
    auto info = injector_->Get(ids[k]);
    if (!info.ok()) continue;  // forgotten (a client deleted it twice): its last stays
    infos.push_back(std::move(*info));
    at.push_back(k);
  }
  std::vector<RuleEffect> effects = effects_ ? effects_->Effects(infos) : std::vector<RuleEffect>();
  step->rules.resize(ids.size());
  step->effects.resize(ids.size());
  for (size_t j = 0; j < at.size(); j++) {
    step->rules[at[j]] = std::move(infos[j]);
    if (j < effects.size()) step->effects[at[j]] = std::move(effects[j]);
  }
}

bool ScenarioRunner::RunStep(Run* run, size_t index) {
  const ScenarioPlan& plan = run->record.plan;
  const ScenarioStepPlan& step = plan.steps[index];
  const std::string where = StepName(plan, index);
  const uint64_t id = run->record.id;  // set before the thread started
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (run->abort || closing_) {
      run->record.state = ScenarioState::kAborted;
      run->record.reason = closing_ ? "lossd shut down before " + where : "aborted before " + where;
      return false;
    }
  }
  ScenarioStepRecord rec;
  rec.started_unix_ns = UnixNs();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(step.duration_ns);
  std::vector<uint32_t> ids;
  Status failed;
  // Any guard's stop counts here (GuardStops): only then are the rules read.
  uint64_t stops_seen = injector_->GuardStops();
  for (size_t k = 0; k < step.rules.size(); k++) {
    RuleSpec spec = step.rules[k];
    spec.labels["scenario"] = plan.name;
    spec.labels["scenario-run"] = std::to_string(id);
    spec.labels["scenario-step"] = std::to_string(index + 1);
    auto added = injector_->Add(spec);
    if (!added.ok()) {
      failed = Status(added.status().code(),
                      where + ": rule " + std::to_string(k + 1) + ": " + added.status().message());
      break;
    }
    ids.push_back(*added);
  }
  if (!failed.ok()) {
    for (uint32_t rid : ids) injector_->Discard(rid);  // the step never ran
    rec.ended_unix_ns = UnixNs();
    rec.outcome = "failed: " + failed.message();
    std::lock_guard<std::mutex> lock(mu_);
    run->record.steps.push_back(std::move(rec));
    run->record.state = ScenarioState::kFailed;
    run->record.reason = failed.message();
    cv_.notify_all();
    return false;
  }
  Refresh(&rec, ids);
  {
    std::lock_guard<std::mutex> lock(mu_);
    run->record.steps.push_back(rec);
    run->record.current_step = uint32_t(index + 1);
  }
  cv_.notify_all();

  // Until its end, an abort, or a guard's stop.
  bool aborted = false;
  std::string stopped;  // the rules their guard stopped, in words
  std::vector<bool> seen(ids.size(), false);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (run->abort || closing_) {
      aborted = true;
      break;
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    cv_.wait_until(lock, std::min(deadline, now + kGuardPoll));
    if (run->abort || closing_) continue;
    uint64_t stops = injector_->GuardStops();
    if (stops == stops_seen) continue;
    stops_seen = stops;
    lock.unlock();
    bool stop = false;
    for (size_t k = 0; k < ids.size(); k++) {
      if (seen[k]) continue;
      auto info = injector_->Get(ids[k]);
      if (!info.ok() || info->guard_stop.condition.empty()) continue;
      seen[k] = true;
      stopped += (stopped.empty() ? "" : "; ") + std::string("rule ") + std::to_string(ids[k]) +
                 " " + info->note;
      stop |= !plan.continue_on_guard;
    }
    lock.lock();
    if (stop) break;
  }
  bool closing = closing_;
  lock.unlock();

  // Its rules end now (those the TTL or a guard ended stay as they are).
  for (uint32_t rid : ids) injector_->Finish(rid);
  Refresh(&rec, ids);
  rec.ended_unix_ns = UnixNs();
  bool guard_ends = !stopped.empty() && !plan.continue_on_guard;
  rec.outcome = aborted            ? (closing ? "aborted: lossd shut down" : "aborted")
                : guard_ends       ? "stopped: " + stopped
                : !stopped.empty() ? "done; " + stopped
                                   : "done";
  lock.lock();
  run->record.steps[index] = std::move(rec);
  if (aborted) {
    run->record.state = ScenarioState::kAborted;
    run->record.reason = (closing ? "lossd shut down during " : "aborted during ") + where;
    return false;
  }
  if (guard_ends) {
    run->record.state = ScenarioState::kStopped;
    run->record.reason = where + ": " + stopped;
    return false;
  }
  return true;
}

}  // namespace lossd
