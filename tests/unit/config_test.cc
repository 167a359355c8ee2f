// lossd's configuration file (daemon/config_file.h) on a small CLI11 app of
// the same kind as lossd's (an option group, a list, a flag), and the rules
// file (daemon/startup_rules.h): no privileges.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "config_file.h"
#include "startup_rules.h"

namespace lossd {
namespace {

std::string Write(const std::string& text) {
  char path[] = "/tmp/lossd-config-test-XXXXXX";
  int fd = mkstemp(path);
  if (fd >= 0) {
    (void)!write(fd, text.data(), text.size());
    close(fd);
  }
  return path;
}

struct Toy {
  std::string lease = "3s", http = "127.0.0.1:7071";
  std::vector<std::string> ports;
  bool observe = false;
  CLI::App app{"toy"};
  explicit Toy(const std::string& default_path = "") {
    app.add_option("--lease", lease);
    app.add_option("--watch-port", ports);
    app.add_flag("--observe", observe);
    auto* g = app.add_option_group("daemon", "Serving");
    g->add_option("--http", http)->capture_default_str();
    AddConfigOption(&app, default_path);
  }
  // "" when it parsed, else lossd's message.
  std::string Parse(std::vector<std::string> args) {
    std::vector<const char*> argv = {"lossd"};
    for (auto& a : args) argv.push_back(a.c_str());
    try {
      app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError& e) {
      return ParseErrorMessage(app, e);
    }
    return "";
  }
};

TEST(ConfigFile, TheCommandLineWinsOverTheFile) {
  std::string f = Write(
      "# comment\nlease = \"10s\"\nhttp = \"127.0.0.1:0\"\nwatch-port = [80, \"443\"]\n"
      "observe = true\n");
  Toy t;
  EXPECT_EQ(t.Parse({"--config", f, "--lease", "5s"}), "");
  EXPECT_EQ(t.lease, "5s") << "command line";
  EXPECT_EQ(t.http, "127.0.0.1:0") << "the file, an option of a group";
  EXPECT_EQ(t.ports, (std::vector<std::string>{"80", "443"}));
  EXPECT_TRUE(t.observe);
  std::remove(f.c_str());
}

TEST(ConfigFile, AnUnknownKeyIsAnErrorNamingIt) {
  std::string f = Write("lease = \"10s\"\nhtp = \"x\"\n");
  Toy t;
  std::string err = t.Parse({"--config", f});
  EXPECT_NE(err.find("unknown key 'htp'"), std::string::npos) << err;
  EXPECT_NE(err.find(f), std::string::npos) << err;
  std::remove(f.c_str());
}

TEST(ConfigFile, ANamedFileMustExistTheDefaultNeedNot) {
  Toy t;
  std::string err = t.Parse({"--config", "/nonexistent/lossd.conf"});
  EXPECT_EQ(err, "--config /nonexistent/lossd.conf: No such file or directory");
  Toy d("/nonexistent/default.conf");
  EXPECT_EQ(d.Parse({}), "") << "a default that is missing is not read";
  std::string f = Write("lease = \"7s\"\n");
  Toy present(f);
  EXPECT_EQ(present.Parse({}), "");
  EXPECT_EQ(present.lease, "7s") << "the default, when it exists";
  Toy none(f);
  EXPECT_EQ(none.Parse({"--config", ""}), "");
  EXPECT_EQ(none.lease, "3s") << "--config '' reads none";
  std::remove(f.c_str());
}

TEST(ConfigFile, BoundedSize) {
  std::string f = Write(std::string(kMaxConfigBytes + 1, '#'));
  Toy t;
  std::string err = t.Parse({"--config", f});
  EXPECT_NE(err.find("larger than 1 MiB"), std::string::npos) << err;
  std::remove(f.c_str());
  f = Write("# " + std::string(kMaxConfigBytes - 3, 'x') + "\n");
  Toy ok;
  EXPECT_EQ(ok.Parse({"--config", f}), "") << "exactly the bound is read";
  std::remove(f.c_str());
}

TEST(ConfigFile, TheExampleReadsBackAsTheDefaults) {
  Toy t;
  std::string example = ConfigExample(&t.app, "# header\n");
  EXPECT_EQ(example.compare(0, 9, "# header\n"), 0);
  EXPECT_NE(example.find("#lease=\"3s\""), std::string::npos) << example;
  EXPECT_NE(example.find("#http=\"127.0.0.1:7071\""), std::string::npos) << example;
  EXPECT_NE(example.find("# watch-port=[\"...\", ...]  (a list; empty by default)"),
            std::string::npos)
      << example;
  EXPECT_EQ(example.find("\nconfig"), std::string::npos) << "--config is not a key";
  // Uncommented, every line parses (no key unknown) and gives the defaults.
  std::string uncommented;
  for (size_t i = 0; i < example.size();) {
    size_t e = example.find('\n', i);
    std::string line = example.substr(i, e - i);
    if (line.size() > 1 && line[0] == '#' && line[1] != ' ') line = line.substr(1);
    uncommented += line + "\n";
    i = e + 1;
  }
  std::string f = Write(uncommented);
  Toy back;
  EXPECT_EQ(back.Parse({"--config", f}), "") << uncommented;
  EXPECT_EQ(back.lease, "3s");
  EXPECT_EQ(back.http, "127.0.0.1:7071");
  EXPECT_TRUE(back.ports.empty());
  std::remove(f.c_str());
}

TEST(RulesFile, RulesCheckedAndPlaced) {
  std::string f = Write(
      "[{\"iface\": \"lo\", \"dport\": 9, \"rate\": \"1%\", \"labels\": {\"from\": \"file\"}},"
      " {\"iface\": \"lo\", \"every\": 10, \"dir\": \"egress\"}]");
  auto r = ReadRulesFile(f);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].index, 1);
  EXPECT_EQ((*r)[0].spec.labels.at("from"), "file");
  EXPECT_EQ((*r)[1].index, 2);
  EXPECT_EQ((*r)[1].where, "") << "an array's rule is placed by its index";
  std::remove(f.c_str());
}

TEST(RulesFile, ErrorsNameTheFileTheIndexAndTheReason) {
  std::string f = Write("{\"iface\": \"lo\", \"rate\": \"1%\"}\n{\"iface\": \"lo\", \"rate\": \"200%\"}\n");
  auto r = ReadRulesFile(f);
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("--rules " + f), std::string::npos) << m;
  EXPECT_NE(m.find("rule 2"), std::string::npos) << m;
  EXPECT_NE(m.find("rate"), std::string::npos) << m;
  std::remove(f.c_str());
  f = Write("[{\"iface\": \"lo\", \"rat\": \"1%\"}]");
  r = ReadRulesFile(f);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown field 'rat'"), std::string::npos)
      << r.status().message();
  std::remove(f.c_str());
  r = ReadRulesFile("/nonexistent/rules.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("No such file"), std::string::npos) << r.status().message();
  f = Write(std::string(kMaxRulesFileBytes + 1, ' '));
  r = ReadRulesFile(f);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("larger than"), std::string::npos) << r.status().message();
  std::remove(f.c_str());
}

}  // namespace
}  // namespace lossd
