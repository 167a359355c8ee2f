// lossd's one-shot mode: apply one rule and/or run the TCP observer, report
// until a signal (or --duration), detach everything, report the final
// counters. Output: human lines, or JSON lines that carry the API's messages
// in the API's JSON (docs/observer.md#one-shot-json): "ready", "counters",
// "final" (and with the observer every event as a TraceMessage item,
// "observer_totals", "netns_totals", "subscriber", "flow").
#pragma once

#include <chrono>
#include <optional>
#include <vector>

#include "injector/injector.h"
#include "observer/observer.h"
#include "rules/rule.h"

namespace lossd {

struct OneShotOptions {
  InjectorOptions injector;
  std::optional<RuleSpec> rule;  // none: --observe alone
  bool json = false;
  bool observe = false;  // run the observer: totals and flows at exit
  bool events = false;   // ... and print every event as it comes
  std::vector<ObsFilterSpec> filters;
  NetnsWatch netns;  // --observe-netns (default: lossd's own namespace)
  std::chrono::nanoseconds interval{std::chrono::seconds(1)};  // > 0
  std::chrono::nanoseconds duration{0};                        // 0: until signalled
};

// The process's exit code: 0, or 1 when the injector, the observer or the
// rule cannot be set up (the reason on stderr). Blocks SIGINT and SIGTERM in
// the calling thread (they are taken synchronously).
int RunOneShot(const OneShotOptions& opts);

}  // namespace lossd
