// The commands: each Add* registers its subcommands on the CLI and, when
// one is chosen, sets *run to the function that carries it out (after the
// whole command line parsed; no exception leaves a command).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

#include "lossctl.h"

namespace lossctl {

using Run = std::function<int()>;

// rule add | ls | get | rm | clear | effect
void AddRuleCommands(CLI::App* app, const Globals* globals, Run* run);
// watch | flows | stats
void AddObserveCommands(CLI::App* app, const Globals* globals, Run* run);
// status
void AddSystemCommands(CLI::App* app, const Globals* globals, Run* run);
// top (a live terminal view: retransmits, rules' effect, busiest flows)
void AddTopCommand(CLI::App* app, const Globals* globals, Run* run);
// sweep, flow trace (run client/python's lossd_client.sweep, .trace)
void AddSweepCommands(CLI::App* app, const Globals* globals, Run* run);

}  // namespace lossctl
