// libFuzzer target of the rule library's parsers (lib/rules: rule.h's
// Parse*, flags.h's BuildRuleSpec). Input: lines "FLAG=VALUE" (the RuleFlags
// fields, as tests/vectors/rule_parsers.json names them); every line's value
// also goes through each single parser. Besides crashes and sanitizer reports
// it checks what the parsers promise:
//   - a rule BuildRuleSpec accepts passes Validate();
//   - parsed values lie in their ranges (rates in [0, 1], ports lo <= hi,
//     durations >= 0 and within kMaxDurationSeconds, protocols 0..255);
//   - printing and parsing again gives the same value (CIDRs, TCP flags,
//     protocol names, a policer's rate and burst);
//   - an error message quotes at most Shown() of an input (64 bytes) and stays
//     short whatever the input's length.
// Run: tests/fuzz/run.sh FUZZER [SECONDS] (ctest fuzz_rule_parsers, label unit;
// longer from bench/run_all.sh or by hand).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "rules/flags.h"
#include "rules/rule.h"

namespace lossd {
namespace {

// A message quotes its input through Shown(), at most 64 bytes of it: an
// input longer than that never appears whole in a message, and no message
// grows past kMaxMessage however long the input.
constexpr size_t kShown = 64;
constexpr size_t kMaxMessage = 1024;

[[noreturn]] void Fail(const char* what, const std::string& input, const std::string& detail) {
  std::fprintf(stderr, "rule_parsers_fuzz: %s\n  input: '%s'\n  %s\n", what, input.c_str(),
               detail.c_str());
  std::abort();
}

void CheckMessage(const Status& st, const std::string& input) {
  if (st.ok()) return;
  if (st.code() != Code::kInvalidArgument)
    Fail("a parser failed with a code other than INVALID_ARGUMENT", input, st.ToString());
  if (st.message().empty()) Fail("an error without a message", input, "");
  if (st.message().size() > kMaxMessage)
    Fail("an error message echoes the input", input,
         std::to_string(st.message().size()) + " bytes");
}

void OneValue(const std::string& v) {
  if (auto c = ParseCidr(v); c.ok()) {
    auto again = ParseCidr(c->ToString());
    if (!again.ok() || again->ToString() != c->ToString() || again->family != c->family ||
        again->prefix != c->prefix || again->addr != c->addr)
      Fail("a CIDR does not survive printing", v, c->ToString());
  } else {
    CheckMessage(c.status(), v);
  }
  if (auto p = ParsePortRange(v); p.ok()) {
    if (p->lo > p->hi) Fail("a port range with lo > hi", v, "");
  } else {
    CheckMessage(p.status(), v);
  }
  if (auto r = ParseRate(v); r.ok()) {
    if (!(*r >= 0.0 && *r <= 1.0)) Fail("a rate outside [0, 1]", v, std::to_string(*r));
  } else {
    CheckMessage(r.status(), v);
  }
  if (auto p = ParseProtocol(v); p.ok()) {
    if (*p < 0 || *p > 255) Fail("a protocol outside 0..255", v, std::to_string(*p));
    auto again = ParseProtocol(ProtocolName(*p));
    if (!again.ok() || *again != *p)
      Fail("a protocol does not survive its name", v, ProtocolName(*p));
  } else {
    CheckMessage(p.status(), v);
  }
  uint8_t mask = 0, value = 0;
  Status st = ParseTcpFlags(v, &mask, &value);
  if (st.ok()) {
    if (value & ~mask) Fail("TCP flags set outside their mask", v, "");
    uint8_t m2 = 0, v2 = 0;
    if (!ParseTcpFlags(TcpFlagsText(mask, value), &m2, &v2).ok() || m2 != mask || v2 != value)
      Fail("TCP flags do not survive printing", v, TcpFlagsText(mask, value));
  } else {
    CheckMessage(st, v);
  }
  if (auto d = ParseDuration(v); d.ok()) {
    if (d->count() < 0 || d->count() / 1000000000LL > kMaxDurationSeconds)
      Fail("a duration outside 0..kMaxDurationSeconds", v, std::to_string(d->count()));
  } else {
    CheckMessage(d.status(), v);
  }
  if (auto g = ParseGilbertElliott(v); g.ok()) {
    for (double x : {g->p, g->r, g->bad_loss, g->good_loss})
      if (!(x >= 0.0 && x <= 1.0)) Fail("a Gilbert-Elliott probability outside [0, 1]", v, "");
  } else {
    CheckMessage(g.status(), v);
  }
  if (auto m = ParseMarkov(v); m.ok()) {
    if (!CheckMarkov(*m).ok()) Fail("ParseMarkov accepted a chain CheckMarkov refuses", v, "");
  } else {
    CheckMessage(m.status(), v);
  }
  if (auto p = ParsePolice(v); p.ok()) {
    if (!CheckPolice(*p).ok()) Fail("ParsePolice accepted a bucket CheckPolice refuses", v, "");
    std::string text = PoliceText(*p);
    auto again = ParsePolice(text);
    if (!again.ok() || again->rate_bps != p->rate_bps || again->burst_bytes != p->burst_bytes ||
        again->police_per_flow != p->police_per_flow)
      Fail("a policer does not survive printing", v, text);
  } else {
    CheckMessage(p.status(), v);
  }
  CheckMessage(ParseAction(v).status(), v);
  CheckMessage(ParseHook(v).status(), v);
  CheckMessage(ParseDirection(v).status(), v);
  CheckMessage(ParsePayload(v).status(), v);
  CheckMessage(ParseFamily(v).status(), v);
  if (auto n = ParseWholeNumber(v, 1, 1000000, "n"); n.ok()) {
    if (*n < 1 || *n > 1000000) Fail("a whole number outside its bounds", v, std::to_string(*n));
  } else {
    CheckMessage(n.status(), v);
  }
}

}  // namespace
}  // namespace lossd

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lossd;
  const std::string input(reinterpret_cast<const char*>(data), size);
  RuleFlags flags;
  size_t start = 0;
  while (start <= input.size()) {
    size_t end = input.find('\n', start);
    if (end == std::string::npos) end = input.size();
    std::string line = input.substr(start, end - start);
    start = end + 1;
    size_t eq = line.find('=');
    std::string value = eq == std::string::npos ? line : line.substr(eq + 1);
    OneValue(value);
    if (eq == std::string::npos) continue;
    if (line.compare(0, eq, "per_segment") == 0) {
      flags.per_segment = !value.empty();
    } else if (std::string* f = RuleFlagsField(&flags, line.substr(0, eq))) {
      *f = value;
    }
  }
  auto spec = BuildRuleSpec(flags, "--");
  if (spec.ok()) {
    Status v = Validate(*spec);
    if (!v.ok()) Fail("BuildRuleSpec accepted a rule Validate() refuses", input, v.message());
  } else {
    for (const std::string* f :
         {&flags.iface, &flags.cgroup, &flags.hook, &flags.dir, &flags.src, &flags.dst,
          &flags.sport, &flags.dport, &flags.proto, &flags.family, &flags.tcp_flags, &flags.payload,
          &flags.rate, &flags.ge, &flags.every, &flags.first, &flags.seed, &flags.priority,
          &flags.ttl, &flags.markov, &flags.police, &flags.action})
      if (f->size() > kShown && spec.status().message().find(*f) != std::string::npos)
        Fail("BuildRuleSpec's message quotes a whole flag value", *f, spec.status().message());
    if (spec.status().message().size() > kMaxMessage)
      Fail("BuildRuleSpec's message is too long", input,
           std::to_string(spec.status().message().size()) + " bytes");
  }
  return 0;
}
