// Levelled logging to stderr. libbpf's own messages are routed here too
// (RouteLibbpfLogs), at debug level for its chatter, warn for its warnings.
#pragma once

#include <cstdarg>

namespace lossd {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// "debug", "info", "warn", "error"; false if unknown.
bool ParseLogLevel(const char* text, LogLevel* level);
void Log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void RouteLibbpfLogs();

}  // namespace lossd

#define LOG_DEBUG(...) ::lossd::Log(::lossd::LogLevel::kDebug, __VA_ARGS__)
#define LOG_INFO(...) ::lossd::Log(::lossd::LogLevel::kInfo, __VA_ARGS__)
#define LOG_WARN(...) ::lossd::Log(::lossd::LogLevel::kWarn, __VA_ARGS__)
#define LOG_ERROR(...) ::lossd::Log(::lossd::LogLevel::kError, __VA_ARGS__)
