// Status and Result<T>: errors with a code (mapped to a gRPC status at the
// edge) and a message a person can act on. No exceptions cross into libbpf.
#pragma once

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lossd {

enum class Code {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kFailedPrecondition,
  kResourceExhausted,
  kUnavailable,
  kInternal,
  kDeadlineExceeded,
};

const char* CodeName(Code code);

class Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  // "context: strerror(err)", with a code chosen from err (EPERM ->
  // kPermissionDenied, ENOENT/ENODEV -> kNotFound, ...).
  static Status FromErrno(int err, const std::string& context);

  // A reason a program can act on without reading the message (UPPER_SNAKE,
  // e.g. "PART_LOADING") and its facts (key, value); the gRPC edge sends them
  // as the call's ErrorInfo detail (proto/lossd/v1/lossd.proto, "Errors").
  using Metadata = std::vector<std::pair<std::string, std::string>>;
  Status&& WithReason(std::string reason, Metadata metadata = {}) && {
    reason_ = std::move(reason);
    metadata_ = std::move(metadata);
    return std::move(*this);
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::string& reason() const { return reason_; }  // "" if none
  const Metadata& metadata() const { return metadata_; }
  std::string ToString() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
  std::string reason_;
  Metadata metadata_;
};

// The longest prefix of s of at most n bytes that does not end inside a
// UTF-8 sequence (a cut sequence would make the message invalid UTF-8: a
// proto3 string no client can parse).
inline std::string Utf8Prefix(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  size_t cut = n;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) cut--;
  return s.substr(0, cut);
}

// A user's input as an error message may quote it: at most 64 bytes of it.
inline std::string Shown(const std::string& input) {
  return input.size() <= 64 ? input : Utf8Prefix(input, 61) + "...";
}

inline Status InvalidArgument(std::string m) {
  return Status(Code::kInvalidArgument, std::move(m));
}
inline Status NotFound(std::string m) {
  return Status(Code::kNotFound, std::move(m));
}
inline Status FailedPrecondition(std::string m) {
  return Status(Code::kFailedPrecondition, std::move(m));
}
inline Status ResourceExhausted(std::string m) {
  return Status(Code::kResourceExhausted, std::move(m));
}
inline Status Internal(std::string m) {
  return Status(Code::kInternal, std::move(m));
}

// A value or the Status saying why there is none.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace lossd

#define LOSSD_RETURN_IF_ERROR(expr) \
  do {                              \
    ::lossd::Status _st = (expr);   \
    if (!_st.ok()) return _st;      \
  } while (0)
