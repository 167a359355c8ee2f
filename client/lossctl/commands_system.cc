// status: the System service (version, capabilities, health) in one view.
#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <memory>

#include "commands.h"
#include "connect.h"
#include "format.h"

namespace lossctl {
namespace {

void Hooks(const char* title,
           const google::protobuf::RepeatedPtrField<v1::HookAvailability>& hooks) {
  printf("%s\n", title);
  if (hooks.empty()) printf("  (none reported)\n");
  size_t width = 0;
  for (const auto& h : hooks) width = std::max(width, h.name().size());
  for (const auto& h : hooks) {
    printf("  %-*s  %s%s%s\n", static_cast<int>(width), h.name().c_str(),
           h.available() ? "yes" : "no", h.reason().empty() ? "" : ": ", h.reason().c_str());
  }
}

int Status(const Globals& g) {
  std::unique_ptr<Connection> conn;
  if (int rc = Connection::Open(g, &conn)) return rc;
  v1::Version version;
  v1::Capabilities caps;
  v1::Health health;
  v1::System::Stub& sys = conn->system();
  if (int rc = Unary(conn.get(), "status", [&](grpc::ClientContext* ctx) {
        return sys.GetVersion(ctx, v1::GetVersionRequest(), &version);
      }))
    return rc;
  if (int rc = Unary(conn.get(), "status: capabilities", [&](grpc::ClientContext* ctx) {
        return sys.GetCapabilities(ctx, v1::GetCapabilitiesRequest(), &caps);
      }))
    return rc;
  if (int rc = Unary(conn.get(), "status: health", [&](grpc::ClientContext* ctx) {
        return sys.GetHealth(ctx, v1::GetHealthRequest(), &health);
      }))
    return rc;
  int rc = health.serving() ? kExitOk : kExitError;
  if (g.json()) {
    PrintLine(JsonLine({{"version", JsonOf(version)},
                        {"capabilities", JsonOf(caps)},
                        {"health", JsonOf(health)}}));
    return rc;
  }
  const Endpoint& ep = conn->endpoint();
  printf("lossd %s (%s) at %s\n", version.version().c_str(), version.api().c_str(),
         ep.unix_socket ? ("unix:" + ep.socket_path).c_str() : ep.target.c_str());
  printf("health      %s, %u rule%s, %u subscriber%s, %" PRIu64 " events lost in the kernel\n",
         health.serving() ? "serving" : "NOT SERVING", health.rules(),
         health.rules() == 1 ? "" : "s", health.subscribers(), health.subscribers() == 1 ? "" : "s",
         health.events_lost_kernel());
  printf("lease       %s left\n", FormatDuration(health.lease_remaining_ns()).c_str());
  for (const auto& c : health.components()) {  // the daemon serves while its parts load
    std::string state = v1::ComponentState_Name(c.state());
    if (state.rfind("COMPONENT_STATE_", 0) == 0) state = state.substr(16);
    for (auto& ch : state) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    bool why = c.state() != v1::COMPONENT_STATE_READY && !c.message().empty();
    printf("%-11s %s%s%s\n", c.name().c_str(), state.c_str(), why ? ": " : "",
           why ? c.message().c_str() : "");
  }
  printf("kernel      %s, BTF %s\n", caps.kernel().c_str(), caps.btf() ? "yes" : "no");
  printf("cgroup2     %s\n",
         caps.cgroup2_mount().empty() ? "not mounted" : caps.cgroup2_mount().c_str());
  printf("limits      %u rules, TTL at most %s, %s without one\n", caps.max_rules(),
         caps.max_ttl_ns() ? FormatDuration(caps.max_ttl_ns()).c_str() : "unbounded",
         caps.default_ttl_ns() ? FormatDuration(caps.default_ttl_ns()).c_str()
                               : "until deleted");
  Hooks("injector hooks", caps.injector_hooks());
  Hooks("observer hooks", caps.observer_hooks());
  return rc;
}

}  // namespace

void AddSystemCommands(CLI::App* app, const Globals* g, Run* run) {
  CLI::App* status = app->add_subcommand(
      "status", "lossd's version, health and what this kernel supports (exit 1 if not serving)");
  status->callback([g, run] { *run = [g] { return Status(*g); }; });
}

}  // namespace lossctl
