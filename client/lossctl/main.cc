// lossctl: the command-line client of lossd.
//
//   lossctl rule add --iface eth0 --dport 8080 --rate 1% --dir ingress --ttl 60s
//   lossctl rule ls | rule get ID | rule rm ID... | rule clear | rule effect ID
//   lossctl watch --port 8080          TCP retransmissions, live
//   lossctl flows | stats | status
//   lossctl top                        a live view like top(1)
//
// Global options go before or after the command; -o json prints JSON (one
// object per line for streams). Exit codes: lossctl.cc (kExitCodesHelp).
#include <grpc/support/log.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "interrupt.h"
#include "lossctl.h"

namespace lossctl {
namespace {

int Main(int argc, char** argv) {
  Globals g;
  Run run;
  CLI::App app{
      "lossctl: control lossd, the eBPF packet-loss injector, and watch what TCP does "
      "about the loss"};
  app.name("lossctl");
  app.fallthrough();  // global options also after the command
  app.footer(std::string("Values: rates as 1%, 0.005% or 0.01; durations as 500ms, 30s, 5m, 1h; "
                         "ports as 80 or 8000-8100.\nJSON: -o json, as the lossd.v1 API's messages "
                         "(field names as in the .proto, 64-bit integers as strings).\n\n") +
             kExitCodesHelp);
  app.add_option("--addr,--server", g.addr,
                 "lossd's address: unix:PATH or host:port (for watch/flows, whose --addr is a "
                 "filter, write --server or put it before the command)")
      ->envname("LOSSD_ADDR")
      ->capture_default_str();
  app.add_option("--tls-ca", g.tls_ca,
                 "TLS to a TCP endpoint: CA certificate (PEM) to verify lossd");
  app.add_option("--tls-cert", g.tls_cert, "mTLS: this client's certificate (PEM)");
  app.add_option("--tls-key", g.tls_key, "mTLS: this client's private key (PEM)");
  app.add_option("--tls-server-name", g.tls_server_name,
                 "TLS: the name lossd's certificate carries");
  app.add_option("--timeout", g.timeout, "Deadline of each request; for streams, of connecting")
      ->capture_default_str();
#ifdef LOSSCTL_VERSION
  app.set_version_flag("--version", LOSSCTL_VERSION);
#endif
  app.add_option("-o,--output", g.output, "table | json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();

  AddRuleCommands(&app, &g, &run);
  AddObserveCommands(&app, &g, &run);
  AddSystemCommands(&app, &g, &run);
  AddTopCommand(&app, &g, &run);
  AddSweepCommands(&app, &g, &run);

  if (argc < 2) {
    fprintf(stderr, "%s", app.help().c_str());
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    fprintf(stderr, "lossctl: %s\n", e.what());
    fprintf(stderr, "Run 'lossctl --help' or 'lossctl COMMAND --help' for the options.\n");
    return kExitUsage;
  }
  if (!run)
    return UsageError("give a command: rule, watch, flows, stats, top or status (lossctl --help)");
  return run();
}

}  // namespace
}  // namespace lossctl

namespace {
void DropGrpcLog(gpr_log_func_args*) {}
}  // namespace

int main(int argc, char** argv) {
  // lossctl reports failures itself; GRPC_VERBOSITY=debug shows gRPC's log.
  if (!getenv("GRPC_VERBOSITY")) gpr_set_log_function(DropGrpcLog);
  signal(SIGPIPE, SIG_IGN);        // a closed stdout ends a stream cleanly (EPIPE)
  lossctl::SignalWatcher signals;  // first: its signal mask reaches every thread
  return lossctl::Main(argc, argv);
}
