#include "loader/libbpf_log.h"

#include <bpf/libbpf.h>

#include <cstring>

#include "base/log.h"

namespace lossd {
namespace {

int LibbpfPrint(enum libbpf_print_level level, const char* fmt, va_list ap) {
  LogLevel l = level == LIBBPF_WARN ? LogLevel::kWarn : LogLevel::kDebug;
  // libbpf echoes every netlink refusal, including the expected ones of a
  // query ("Parent Qdisc doesn't exists"); the failures that matter come back
  // as errors we report with context, so its echo is debug detail.
  if (strstr(fmt, "Kernel error message") != nullptr) l = LogLevel::kDebug;
  VLog(l, fmt, ap);
  return 0;
}

}  // namespace

void RouteLibbpfLogs() {
  libbpf_set_print(LibbpfPrint);
}

}  // namespace lossd
