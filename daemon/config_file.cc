#include "config_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace lossd {
namespace {

// CLI11's TOML reader, over at most kMaxConfigBytes of the file.
class BoundedConfig : public CLI::ConfigTOML {
 public:
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::string text(kMaxConfigBytes + 1, '\0');
    input.read(&text[0], static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(input.gcount()));
    if (text.size() > kMaxConfigBytes)
      throw CLI::ConfigError("the file is larger than " + std::to_string(kMaxConfigBytes >> 20) +
                             " MiB");
    std::istringstream in(text);
    return CLI::ConfigTOML::from_config(in);
  }
};

std::string ConfigPath(const CLI::App& app) {
  const CLI::Option* opt = app.get_config_ptr();
  if (opt == nullptr) return "";
  if (opt->count() > 0 && !opt->results().empty()) return opt->results().back();
  return opt->get_default_str();
}

}  // namespace

CLI::Option* AddConfigOption(CLI::App* app, const std::string& default_path) {
  app->config_formatter(std::make_shared<BoundedConfig>());
  app->allow_config_extras(CLI::config_extras_mode::error);
  for (CLI::App* group : app->get_subcommands([](CLI::App* s) { return s->get_name().empty(); }))
    group->allow_config_extras(CLI::config_extras_mode::error);
  return app->set_config("--config", default_path,
                         "Read flags from this TOML file (key = value, the flags' long names; a "
                         "flag on the command line wins). The default file is read only if it "
                         "exists; '' reads none",
                         false)
      ->type_name("FILE");
}

std::string ParseErrorMessage(const CLI::App& app, const CLI::ParseError& e) {
  std::string what = e.what();
  std::string path = ConfigPath(app);
  const std::string extras = "INI was not able to parse ";
  if (what.compare(0, extras.size(), extras) == 0)
    return "--config " + path + ": unknown key '" + what.substr(extras.size()) +
           "' (the keys are the flags' long names: see lossd --help)";
  if (dynamic_cast<const CLI::FileError*>(&e) != nullptr) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0)
      return "--config " + path + ": " + std::strerror(errno);
    if (!S_ISREG(st.st_mode)) return "--config " + path + ": not a regular file";
    if (access(path.c_str(), R_OK) != 0) return "--config " + path + ": " + std::strerror(errno);
    return "--config " + path + ": " + what;
  }
  if (dynamic_cast<const CLI::ConfigError*>(&e) != nullptr) return "--config " + path + ": " + what;
  return what;
}

std::string ConfigExample(CLI::App* app, const std::string& header) {
  // Every option's default as its value (the help of lossd shows only some);
  // one without a default is written as "" (a list as []).
  std::vector<CLI::Option*> opts = app->get_options();
  for (CLI::App* group : app->get_subcommands([](CLI::App* s) { return s->get_name().empty(); })) {
    auto more = group->get_options();
    opts.insert(opts.end(), more.begin(), more.end());
  }
  for (CLI::Option* o : opts) {
    if (!o->get_configurable() || o->get_expected_min() == 0) continue;
    o->capture_default_str();
    if (o->get_default_str().empty()) o->run_callback_for_default(true);
  }
  std::string body = app->config_to_str(true, true);
  std::ostringstream out;
  out << header;
  std::istringstream in(body);
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (first) {  // the program's description: the header says it
      first = false;
      continue;
    }
    const std::string empty_list = "=\"[]\"";  // a list's default: none
    if (line.size() > empty_list.size() &&
        line.compare(line.size() - empty_list.size(), empty_list.size(), empty_list) == 0)
      // CLI11 refuses an empty list (`key=[]`): shown as a comment, not a setting.
      line = "# " + line.substr(0, line.size() - empty_list.size()) +
             "=[\"...\", ...]  (a list; empty by default)";
    if (line.empty() || line[0] == '#')
      out << line << '\n';
    else
      out << "#" << line << '\n';
  }
  return out.str();
}

}  // namespace lossd
