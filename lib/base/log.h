// Levelled logging to stderr, one line per message, each stamped with its
// full RFC 3339 time (UTC, microseconds: 2026-12-02T03:52:52.123456Z; under
// journald too, which adds its own: the line keeps lossd's). Two formats
// (--log-format): text ("TIME LEVEL MESSAGE") and json (one object per line:
// time, level, msg, then the call site's structured fields, if any; written
// by nlohmann-json, every string escaped). libbpf's own messages come here
// too (daemon/loader/libbpf_log.h). docs/architecture.md#logs.
#pragma once

#include <time.h>

#include <cstdarg>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace lossd {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };
enum class LogFormat { kText = 0, kJson = 1 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// "debug", "info", "warn", "error"; false if unknown.
bool ParseLogLevel(const char* text, LogLevel* level);
void SetLogFormat(LogFormat format);
LogFormat GetLogFormat();
// "text", "json"; false if unknown.
bool ParseLogFormat(const char* text, LogFormat* format);
bool LogEnabled(LogLevel level);

void Log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void VLog(LogLevel level, const char* fmt, va_list ap);
// A line with structured fields: `msg` is the whole human message (the text
// format prints only it); the json format writes `fields` (an object) beside
// time, level and msg (a field named like one of those three is left out).
void LogFields(LogLevel level, const std::string& msg, const nlohmann::ordered_json& fields);

// The pure parts (unit-tested): RFC 3339 in UTC with microseconds, and one
// whole line without its newline. `fields` may be null.
std::string FormatRfc3339(const struct timespec& ts);
std::string FormatLogLine(LogFormat format, const struct timespec& ts, LogLevel level,
                          const std::string& msg, const nlohmann::ordered_json* fields);
const char* LogLevelName(LogLevel level);

}  // namespace lossd

#define LOG_DEBUG(...) ::lossd::Log(::lossd::LogLevel::kDebug, __VA_ARGS__)
#define LOG_INFO(...) ::lossd::Log(::lossd::LogLevel::kInfo, __VA_ARGS__)
#define LOG_WARN(...) ::lossd::Log(::lossd::LogLevel::kWarn, __VA_ARGS__)
#define LOG_ERROR(...) ::lossd::Log(::lossd::LogLevel::kError, __VA_ARGS__)
