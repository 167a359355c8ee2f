// --rules FILE: rules the daemon creates at start, once its injector is
// ready and before it serves. The file is what `lossctl rule add --file`
// takes (a JSON array, one object, or JSON lines), read by the same parser
// (lossctl::ParseRulesJson, client/lossctl/rule_flags.h) so that the two
// accept the same rules; each is then checked as a CreateRule's spec is
// (SpecFromProto, Validate). Bounded: kMaxRulesFileBytes.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "base/status.h"
#include "rules/rule.h"

namespace lossd {

constexpr size_t kMaxRulesFileBytes = 1 << 20;

struct StartupRule {
  RuleSpec spec;
  int index = 0;      // 1-based, in the file's order
  std::string where;  // a JSON line's place ("FILE:3"); "" in an array (the index says it)
};

// The file's rules, checked. An error (INVALID_ARGUMENT) names the file, the
// rule's index and the reason: "--rules r.jsonl: rule 2 (r.jsonl:3): rate: ...".
Result<std::vector<StartupRule>> ReadRulesFile(const std::string& path);

// The whole file, up to `max_bytes` (else an error naming it and the bound).
Status ReadBoundedFile(const std::string& path, size_t max_bytes, std::string* out);

}  // namespace lossd
