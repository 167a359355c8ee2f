// lossd's configuration file (--config FILE): CLI11 reads it (TOML: one
// `key = value` per flag, the flag's long name without "--"; a flag given on
// the command line wins over the file). The default, /etc/lossd/lossd.conf,
// is read only if it exists; a file named with --config must exist, and
// `--config ''` reads none. A key that names no flag is an error naming it,
// and the file is read up to kMaxConfigBytes. docs/architecture.md#configuration.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <string>

namespace lossd {

constexpr const char* kDefaultConfigPath = "/etc/lossd/lossd.conf";
constexpr size_t kMaxConfigBytes = 1 << 20;

// --config on `app`, with the bounded reader and unknown keys refused.
// Call after every option is added (option groups inherit the setting).
CLI::Option* AddConfigOption(CLI::App* app, const std::string& default_path);

// A parse error as lossd says it: those of the configuration file name the
// file and the key ("--config /etc/lossd/lossd.conf: unknown key 'htp'").
std::string ParseErrorMessage(const CLI::App& app, const CLI::ParseError& e);

// The example file (dist/lossd.conf, generated at build time by
// `lossd --print-config-example`): CLI11's config_to_str of `app` with every
// option's default and help, each setting commented out.
std::string ConfigExample(CLI::App* app, const std::string& header);

}  // namespace lossd
