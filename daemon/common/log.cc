#include "common/log.h"

#include <bpf/libbpf.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

namespace lossd {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mu;

const char* Name(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "?";
}

void VLog(LogLevel level, const char* fmt, va_list ap) {
  if (static_cast<int>(level) < g_level.load(std::memory_order_relaxed)) return;
  char msg[2048];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  size_t n = strlen(msg);
  while (n && msg[n - 1] == '\n') msg[--n] = 0;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  std::lock_guard<std::mutex> lock(g_mu);
  fprintf(stderr, "%02d:%02d:%02d.%03ld %-5s %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
          ts.tv_nsec / 1000000, Name(level), msg);
}

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

void SetLogLevel(LogLevel level) {
  g_level = static_cast<int>(level);
}
LogLevel GetLogLevel() {
  return static_cast<LogLevel>(g_level.load());
}

bool ParseLogLevel(const char* text, LogLevel* level) {
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    if (strcmp(text, Name(l)) == 0) {
      *level = l;
      return true;
    }
  }
  return false;
}

void Log(LogLevel level, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  VLog(level, fmt, ap);
  va_end(ap);
}

void RouteLibbpfLogs() {
  libbpf_set_print(LibbpfPrint);
}

}  // namespace lossd
