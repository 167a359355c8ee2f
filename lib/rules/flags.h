// A rule as typed on a command line (lossd's one-shot mode, lossctl rule
// add) or in a rules file (lossctl's JSON fields carry the flags' names):
// every value a string, turned into a checked RuleSpec by one builder with
// one set of spellings (the parsers of rules/rule.h). AddRuleOptions writes
// the option list and its help once for both programs.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "rules/rule.h"

namespace CLI {
class App;
}

namespace lossd {

// Every value as typed; empty = not given (the default).
struct RuleFlags {
  std::string iface, cgroup, pid, unit, container, pod, hook, dir, src, dst, sport, dport, proto,
      family, tcp_flags, payload, rate, ge, every, first, seed, priority, ttl, start_after, pulse,
      pulse_cycles, guard, ramp, action, markov, police;
  bool per_segment = false;
  bool reattach = false;
};

// `dash` is "--" for flags, "" for JSON fields: messages name the value as
// the user wrote it ("--rate: invalid rate '200%': ..." or "rate: ...").
// Ports: a range ending at port 0 is refused (lossd.v1 reads port 0 as any
// port), 0-65535 is any port. The result passed Validate().
Result<RuleSpec> BuildRuleSpec(const RuleFlags& flags, const std::string& dash = "--");

// A whole decimal number in [min, max] (spaces around it allowed); the
// message names `name`: "NAME: invalid value 'x': expected a whole number from MIN to MAX".
Result<uint64_t> ParseWholeNumber(const std::string& text, uint64_t min, uint64_t max,
                                  const std::string& name);

// --iface/-i, --cgroup, --pid, --unit, --container, --pod, --hook, --dir, --src, --dst, --sport,
// --dport, --proto, --family, --tcp-flags, --payload, --rate, --ge, --every, --first, --ramp,
// --markov, --police, --action, --seed, --priority, --ttl, --start-after, --pulse,
// --pulse-cycles, --guard, --per-segment, --reattach into `flags` (which must outlive `app`'s
// parse).
void AddRuleOptions(CLI::App* app, RuleFlags* flags);

// The text field of `flags` named as in the parser vectors and JSON
// ("iface", "tcp_flags", "ttl", ...: the flag without "--", '-' as '_');
// null for another name. The vectors' runner and the fuzzer fill flags by it.
std::string* RuleFlagsField(RuleFlags* flags, const std::string& name);

}  // namespace lossd
