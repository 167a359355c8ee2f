#include "lossctl.h"

#include <cstdio>

namespace lossctl {

const char kExitCodesHelp[] =
    "Exit codes:\n"
    "  0  ok\n"
    "  1  any other error\n"
    "  2  usage: bad flags or values (the message says what to fix)\n"
    "  3  lossd unreachable (not running, wrong --addr, TLS mismatch, --timeout)\n"
    "  4  not found (rule id, interface, cgroup)\n"
    "  5  lossd refused the request (INVALID_ARGUMENT, FAILED_PRECONDITION)\n"
    "  6  resource exhausted (rule limits)\n"
    "  7  permission denied (by lossd, or on its socket)\n";

int UsageError(const std::string& message) {
  fprintf(stderr, "lossctl: %s\n", message.c_str());
  return kExitUsage;
}

int Fail(int code, const std::string& message) {
  fprintf(stderr, "lossctl: %s\n", message.c_str());
  return code;
}

}  // namespace lossctl
