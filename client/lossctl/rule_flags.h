// A rule as flags or as a JSON object with the flags' names, built by the
// rule library's builder (lib/rules/flags.h: the daemon's own parsers and
// spellings) and turned into a lossd.v1.RuleSpec, with lossctl's labels and
// force. Errors name the flag (or field) and say what to fix.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lossd/v1/lossd.pb.h"
#include "rules/flags.h"

namespace lossctl {

namespace v1 = ::lossd::v1;

// The rule's flags (every value as typed; empty = not given, the API's
// default) and what only the API carries.
struct RuleFlags : lossd::RuleFlags {
  bool force = false;
  std::vector<std::string> labels;  // "k=v"
};

// The rule's options (lossd::AddRuleOptions) with --label and --force.
void AddRuleFlags(CLI::App* app, RuleFlags* flags);

// `dash` is "--" for flags, "" for JSON fields: error messages name the
// value as the user wrote it ("--rate: ..." or "rate: ...").
bool BuildRuleSpec(const RuleFlags& f, const std::string& dash, v1::RuleSpec* out,
                   std::string* error);

// "k=v" (the value may be empty) into `labels`; a key given twice with two
// values is an error.
bool ParseLabels(const std::vector<std::string>& items, const std::string& flag,
                 std::map<std::string, std::string>* labels, std::string* error);

// A whole decimal number in [min, max]; the message names `flag`.
bool ParseUint(const std::string& text, uint64_t min, uint64_t max, const std::string& flag,
               uint64_t* out, std::string* error);

// Rules for CreateRules: a JSON array of objects, one object, or JSON lines
// (blank lines and lines starting with # skipped). Field names are the
// flags' (with - or _): {"iface": "eth0", "dport": 8080, "rate": "1%",
// "labels": {"test": "a"}}. Fields a rule omits come from `defaults` (the
// command line's flags). A rule may also be in the API's shape, as
// `lossctl -o json rule get` / `rule ls` print it (a Rule, of which its spec
// is taken, or a RuleSpec: proto field names and enum names, parsed strictly;
// the command line's flags do not apply to it), and the whole input may be
// `rule ls`'s {"rules": [...]}. `source` names the input in errors ("rules.json:3: ...").
// `where`, when given, gets each rule's place ("rules.json:3", "rules.json:
// rule 2"), for the daemon's per-spec errors.
bool ParseRulesJson(const std::string& text, const std::string& source, const RuleFlags& defaults,
                    std::vector<v1::RuleSpec>* out, std::string* error,
                    std::vector<std::string>* where = nullptr);

// The daemon names a spec of CreateRules "specs[i]: ..."; this puts the
// rule's place in the input there instead ("rules.json:3: ..."). Other
// messages come back unchanged.
std::string LocateSpecError(const std::string& message, const std::vector<std::string>& where);

}  // namespace lossctl
