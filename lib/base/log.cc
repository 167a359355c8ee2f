#include "base/log.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include "base/json.h"

namespace lossd {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> g_format{static_cast<int>(LogFormat::kText)};
std::mutex g_mu;

void Write(LogLevel level, const std::string& msg, const Json* fields) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  std::string line = FormatLogLine(static_cast<LogFormat>(g_format.load(std::memory_order_relaxed)),
                                   ts, level, msg, fields);
  line += '\n';
  std::lock_guard<std::mutex> lock(g_mu);
  fwrite(line.data(), 1, line.size(), stderr);
  fflush(stderr);
}

}  // namespace

void VLog(LogLevel level, const char* fmt, va_list ap) {
  if (!LogEnabled(level)) return;
  char msg[2048];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  size_t n = strlen(msg);
  while (n && msg[n - 1] == '\n') msg[--n] = 0;
  Write(level, std::string(msg, n), nullptr);
}

const char* LogLevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "?";
}

std::string FormatRfc3339(const struct timespec& ts) {
  struct tm tm;
  time_t secs = ts.tv_sec;
  gmtime_r(&secs, &tm);
  char buf[64];
  long usec = (ts.tv_nsec >= 0 && ts.tv_nsec < 1000000000L ? ts.tv_nsec : 0) / 1000;
  snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, usec);
  return buf;
}

std::string FormatLogLine(LogFormat format, const struct timespec& ts, LogLevel level,
                          const std::string& msg, const Json* fields) {
  if (format == LogFormat::kJson) {
    Json j = {{"time", FormatRfc3339(ts)}, {"level", LogLevelName(level)}, {"msg", msg}};
    if (fields != nullptr && fields->is_object()) {
      for (const auto& kv : fields->items()) {
        if (kv.key() == "time" || kv.key() == "level" || kv.key() == "msg") continue;
        j[kv.key()] = kv.value();
      }
    }
    return JsonLine(j);
  }
  char level_text[8];
  snprintf(level_text, sizeof(level_text), "%-5s", LogLevelName(level));
  return FormatRfc3339(ts) + " " + level_text + " " + msg;
}

void SetLogLevel(LogLevel level) {
  g_level = static_cast<int>(level);
}
LogLevel GetLogLevel() {
  return static_cast<LogLevel>(g_level.load());
}
bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed);
}

bool ParseLogLevel(const char* text, LogLevel* level) {
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    if (strcmp(text, LogLevelName(l)) == 0) {
      *level = l;
      return true;
    }
  }
  return false;
}

void SetLogFormat(LogFormat format) {
  g_format = static_cast<int>(format);
}
LogFormat GetLogFormat() {
  return static_cast<LogFormat>(g_format.load());
}
bool ParseLogFormat(const char* text, LogFormat* format) {
  if (strcmp(text, "text") == 0) {
    *format = LogFormat::kText;
  } else if (strcmp(text, "json") == 0) {
    *format = LogFormat::kJson;
  } else {
    return false;
  }
  return true;
}

void Log(LogLevel level, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  VLog(level, fmt, ap);
  va_end(ap);
}

void LogFields(LogLevel level, const std::string& msg, const Json& fields) {
  if (!LogEnabled(level)) return;
  std::string m = msg;
  while (!m.empty() && m.back() == '\n') m.pop_back();
  Write(level, m, &fields);
}

}  // namespace lossd
