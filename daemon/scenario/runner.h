// Scenarios: timelines of rules the daemon runs (lossd.v1 Scenarios,
// docs/guards.md#scenarios). One thread per running scenario walks its steps:
// at a step's start it creates the step's rules through the injector (their
// TTL the step's duration, so the data plane ends them on its own clock and
// the lease covers a dead daemon), watches them for a guard's stop, ends
// them at the step's end, and keeps each rule's final state and effect as
// the step's report. The injector stays the one owner of the rules; this
// owns only the runs and their reports.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "effects/effects.h"
#include "injector/injector.h"
#include "rules/rule.h"

namespace lossd {

constexpr size_t kMaxScenarioSteps = 64;
constexpr size_t kMaxScenarioStepRules = 64;
constexpr size_t kMaxScenarioRules = 256;  // all steps' together (a report's size)
constexpr size_t kMaxScenarioNameBytes = 64;
constexpr uint64_t kMinScenarioStepNs = 1'000'000;                     // 1 ms
constexpr uint64_t kMaxScenarioNs = 7ull * 24 * 3600 * 1'000'000'000;  // 7 d, a step or all
constexpr size_t kMaxRunningScenarios = 16;  // running, or settling their reports
constexpr size_t kKeptScenarios = 32;  // ended runs kept for reading
constexpr std::chrono::seconds kScenarioSettle{3};

struct ScenarioStepPlan {
  std::string name;
  uint64_t duration_ns = 0;
  std::vector<RuleSpec> rules;  // checked, as the injector will be given them (ttl, guard, labels)
};

struct ScenarioPlan {
  std::string name;
  std::vector<ScenarioStepPlan> steps;
  Guard guard;  // given to each rule without its own (already applied in `steps`)
  bool continue_on_guard = false;
  uint64_t DurationNs() const;
};

enum class ScenarioState { kPlanned, kRunning, kDone, kAborted, kStopped, kFailed };

struct ScenarioStepRecord {
  uint64_t started_unix_ns = 0;
  uint64_t ended_unix_ns = 0;
  std::vector<RuleInfo> rules;  // as created; final once the step ended
  std::vector<RuleEffect> effects;
  std::string outcome;
};

struct ScenarioRecord {
  uint64_t id = 0;
  ScenarioPlan plan;
  ScenarioState state = ScenarioState::kRunning;
  std::string reason;
  std::string started_by;
  uint64_t started_unix_ns = 0;
  uint64_t ended_unix_ns = 0;
  uint32_t current_step = 0;  // 1-based while running
  // Its effects read again kScenarioSettle after its end (the recovery of
  // the last drops: TCP's resends and stall ends come after the rule's end).
  bool settled = false;
  std::vector<ScenarioStepRecord> steps;  // the started ones
};

// The name and bounds every plan must hold (what the injector does not
// check: the scenario's own shape). Errors name the step ("step 2 (heavy): ...").
Status CheckScenarioShape(const ScenarioPlan& plan, const RuleLimits& limits);

class ScenarioRunner {
 public:
  ScenarioRunner(Injector* injector, EffectTracker* effects);
  // Aborts every running scenario (their rules end) and waits for them.
  ~ScenarioRunner();
  ScenarioRunner(const ScenarioRunner&) = delete;
  ScenarioRunner& operator=(const ScenarioRunner&) = delete;

  // Starts it; returns its record as of its first step's start. The plan's
  // rules were checked by the caller; one the injector refuses at its step
  // (a target gone since) ends the run FAILED.
  Result<ScenarioRecord> Start(ScenarioPlan plan, const std::string& started_by);
  std::vector<ScenarioRecord> List() const;
  Result<ScenarioRecord> Get(uint64_t id) const;
  Result<ScenarioRecord> Abort(uint64_t id);

 private:
  struct Run {
    ScenarioRecord record;  // under mu_
    bool abort = false;     // under mu_
    bool done = false;      // under mu_: ended (its state final; the report may settle)
    bool exited = false;    // under mu_: its thread will not take mu_ again
    std::thread thread;
  };
  void Walk(Run* run);
  // One step: its rules created, watched, ended; false when the run ends there.
  bool RunStep(Run* run, size_t index);
  // Each rule's final state and effect, as of now (a forgotten rule keeps its last).
  void Refresh(ScenarioStepRecord* step, const std::vector<uint32_t>& ids) const;
  void RefreshAll(Run* run);  // every started step's
  void TrimLocked();

  Injector* const injector_;
  EffectTracker* const effects_;
  mutable std::mutex mu_;
  std::condition_variable cv_;  // an abort, or the runner ending
  bool closing_ = false;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::unique_ptr<Run>> runs_;
};

}  // namespace lossd
