#include "startup_rules.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/fd.h"
#include "rule_flags.h"  // lossctl's rules-file parser (client/lossctl)
#include "rules/proto.h"

namespace lossd {

Status ReadBoundedFile(const std::string& path, size_t max_bytes, std::string* out) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return InvalidArgument("cannot read " + Shown(path) + ": " + std::strerror(errno));
  struct stat st;
  if (fstat(fd.get(), &st) != 0)
    return InvalidArgument("cannot read " + Shown(path) + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return InvalidArgument(Shown(path) + " is not a regular file");
  out->clear();
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return InvalidArgument("cannot read " + Shown(path) + ": " + std::strerror(errno));
    }
    if (n == 0) break;
    if (out->size() + static_cast<size_t>(n) > max_bytes)
      return InvalidArgument(Shown(path) + " is larger than " + std::to_string(max_bytes) +
                             " bytes");
    out->append(buf, static_cast<size_t>(n));
  }
  return Status::Ok();
}

Result<std::vector<StartupRule>> ReadRulesFile(const std::string& path) {
  std::string text;
  Status read = ReadBoundedFile(path, kMaxRulesFileBytes, &text);
  if (!read.ok()) return InvalidArgument("--rules: " + read.message());
  std::vector<v1::RuleSpec> specs;
  std::vector<std::string> where;
  std::string error;
  const std::string file = Shown(path);
  if (!lossctl::ParseRulesJson(text, path, lossctl::RuleFlags{}, &specs, &error, &where)) {
    // The parser stops at the first bad rule: the ones before it parsed.
    return InvalidArgument("--rules " + file + ": rule " + std::to_string(where.size() + 1) +
                           ": " + error);
  }
  std::vector<StartupRule> out;
  for (size_t i = 0; i < specs.size(); i++) {
    StartupRule r;
    r.index = static_cast<int>(i + 1);
    r.where = i < where.size() ? where[i] : path;
    if (r.where == path + ": rule " + std::to_string(r.index)) r.where.clear();  // said already
    Status st = SpecFromProto(specs[i], &r.spec);
    if (st.ok()) st = Validate(r.spec);
    if (!st.ok())
      return InvalidArgument("--rules " + file + ": rule " + std::to_string(r.index) +
                             (r.where.empty() ? "" : " (" + r.where + ")") + ": " + st.message());
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace lossd
