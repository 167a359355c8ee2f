// What every lossctl command shares: the exit codes scripts rely on, the
// global options, and how a command reports a usage error.
#pragma once

#include <string>

namespace lossctl {

// Exit codes (documented in README.md and `lossctl --help`).
enum Exit : int {
  kExitOk = 0,
  kExitError = 1,        // anything else
  kExitUsage = 2,        // bad flags or values, caught before the daemon is asked
  kExitUnavailable = 3,  // the daemon is unreachable
  kExitNotFound = 4,     // NOT_FOUND: rule id, interface, cgroup
  kExitInvalid = 5,      // INVALID_ARGUMENT / FAILED_PRECONDITION from the daemon
  kExitExhausted = 6,    // RESOURCE_EXHAUSTED: rule limits
  kExitDenied = 7,       // PERMISSION_DENIED / UNAUTHENTICATED, or no access to the socket
};

extern const char kExitCodesHelp[];

enum class Output { kTable, kJson };

struct Globals {
  std::string addr = "unix:///run/lossd/lossd.sock";
  std::string tls_ca, tls_cert, tls_key, tls_server_name;
  std::string timeout = "10s";
  std::string output = "table";
  bool json() const { return output == "json"; }
};

// Prints "lossctl: <message>" to stderr and returns kExitUsage.
int UsageError(const std::string& message);
// Prints "lossctl: <message>" to stderr and returns `code`.
int Fail(int code, const std::string& message);

}  // namespace lossctl
