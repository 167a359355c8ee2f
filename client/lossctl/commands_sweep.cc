// lossctl sweep, lossctl flow trace and lossctl scenario: run the Python
// package's modules (client/python/lossd_client/sweep.py, trace.py,
// scenario.py: one implementation each, beside the Python client's API,
// their plots drawn by matplotlib) against the daemon lossctl was pointed
// at. Every argument after the command is the module's own (--help shows
// them); lossctl replaces itself with the Python process, so Ctrl-C and exit
// codes are the module's.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "commands.h"

#ifndef LOSSCTL_PYTHON_DIR
#define LOSSCTL_PYTHON_DIR ""
#endif
#ifndef LOSSCTL_STUBS_DIR
#define LOSSCTL_STUBS_DIR ""
#endif

namespace lossctl {
namespace {

// Debian's: it has python3-grpcio. LOSSCTL_PYTHON names another (a
// virtualenv's, where the lossd_client wheel is installed).
constexpr char kPython[] = "/usr/bin/python3";

// The sweep's connection arguments for lossctl's --addr and TLS options.
std::vector<std::string> ConnectionArgs(const Globals& g) {
  std::string a = g.addr;
  if (a.rfind("unix://", 0) == 0) return {"--socket", a.substr(7)};
  if (a.rfind("unix:", 0) == 0) return {"--socket", a.substr(5)};
  std::vector<std::string> out = {"--target", a};
  if (!g.tls_ca.empty() || !g.tls_cert.empty()) out.push_back("--tls");
  if (!g.tls_ca.empty()) out.insert(out.end(), {"--ca", g.tls_ca});
  if (!g.tls_cert.empty()) out.insert(out.end(), {"--cert", g.tls_cert});
  if (!g.tls_key.empty()) out.insert(out.end(), {"--key", g.tls_key});
  if (!g.tls_server_name.empty()) out.insert(out.end(), {"--server-name", g.tls_server_name});
  return out;
}

// `what`: the command's name in messages; `module`: lossd_client.<module>;
// `options`: the module's own, from lossctl's (after the connection's).
int RunPython(const Globals& g, const std::string& what, const std::string& module,
              const std::vector<std::string>& rest, const std::vector<std::string>& options = {}) {
  // The package from the source tree this lossctl was built from (or
  // LOSSCTL_PYTHON_DIR); once that is gone (an installed lossctl), the one
  // the interpreter has installed (the wheel: its stubs are bundled).
  const char* dir = getenv("LOSSCTL_PYTHON_DIR");
  std::string pydir = dir && *dir ? dir : LOSSCTL_PYTHON_DIR;
  bool here = !pydir.empty() && access((pydir + "/lossd_client/" + module + ".py").c_str(), R_OK) == 0;
  if (!here && dir && *dir)
    return Fail(kExitError, what + ": the Python package lossd_client is not at '" + pydir +
                                "' (LOSSCTL_PYTHON_DIR): name the directory holding it "
                                "(client/python), or unset it to use the installed package");
  if (here) {
    std::string pypath = pydir;
    if (const char* old = getenv("PYTHONPATH"); old && *old) pypath += std::string(":") + old;
    setenv("PYTHONPATH", pypath.c_str(), 1);
    if (!getenv("LOSSD_PYTHON_STUBS") && *LOSSCTL_STUBS_DIR)
      setenv("LOSSD_PYTHON_STUBS", LOSSCTL_STUBS_DIR, 1);
  }
  const char* py_env = getenv("LOSSCTL_PYTHON");
  std::string python = py_env && *py_env ? py_env : kPython;

  setenv("LOSSCTL_COMMAND", what.c_str(), 1);  // the module's usage names the command
  std::vector<std::string> args = {python, "-m", "lossd_client." + module};
  bool help = false;
  for (const auto& r : rest) help |= r == "-h" || r == "--help";
  if (!help) {
    for (auto& c : ConnectionArgs(g)) args.push_back(c);
    args.insert(args.end(), options.begin(), options.end());
  }
  args.insert(args.end(), rest.begin(), rest.end());
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  execv(python.c_str(), argv.data());
  return Fail(kExitError, what + ": cannot run " + python + ": " + strerror(errno) +
                              (py_env && *py_env ? " (LOSSCTL_PYTHON)" : ""));
}

// A subcommand of `parent` whose every argument is lossd_client.<module>'s;
// `output`: the module takes lossctl's -o json as its own --output json.
void AddPythonCommand(CLI::App* parent, const std::string& name, const std::string& help,
                      const Globals* g, Run* run, const std::string& what,
                      const std::string& module, bool output = false) {
  CLI::App* cmd = parent->add_subcommand(name, help);
  cmd->prefix_command();    // everything after the command is the module's
  cmd->set_help_flag();     // ... --help included
  cmd->fallthrough(false);  // lossctl options go before the command
  cmd->callback([=] {
    std::vector<std::string> rest = cmd->remaining();
    std::vector<std::string> options;
    if (output && g->json()) options = {"--output", "json"};
    *run = [=] { return RunPython(*g, what, module, rest, options); };
  });
}

}  // namespace

void AddSweepCommands(CLI::App* app, const Globals* g, Run* run) {
  AddPythonCommand(app, "sweep",
                   "Step one service through loss rates; table, CSV/JSON and plots (sweep --help)",
                   g, run, "sweep", "sweep");
  AddPythonCommand(app, "scenario",
                   "Timelines of rules the daemon runs: scenario run FILE [--dry-run], ls, get ID, "
                   "abort ID; reports as a table, JSON and plots (scenario --help)",
                   g, run, "scenario", "scenario", /*output=*/true);
  CLI::App* flow = app->add_subcommand("flow", "One flow: flow trace");
  flow->require_subcommand(1);
  AddPythonCommand(flow, "trace",
                   "Trace one flow (per-ACK samples, drops, retransmits, stalls) into JSON/CSV and "
                   "draw its time-sequence plot, PNG/SVG (flow trace --help)",
                   g, run, "flow trace", "trace");
}

}  // namespace lossctl
