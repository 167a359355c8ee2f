// A lossd client built against the installed package: creates a rule, lists
// the rules, deletes its own, printing one line per step for the test to read.
//   cxx_client unix:///run/lossd/lossd.sock IFACE DPORT
#include <grpcpp/grpcpp.h>
#include <lossd/v1/lossd.grpc.pb.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

namespace v1 = lossd::v1;

static bool Ok(const grpc::Status& s, const char* what) {
  if (s.ok()) return true;
  std::fprintf(stderr, "%s: %d %s\n", what, static_cast<int>(s.error_code()), s.error_message().c_str());
  return false;
}

static std::unique_ptr<grpc::ClientContext> Ctx() {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  c->set_wait_for_ready(true);
  return c;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s ADDR IFACE DPORT\n", argv[0]);
    return 2;
  }
  auto ch = grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials());
  auto inj = v1::Injector::NewStub(ch);
  auto sys = v1::System::NewStub(ch);

  v1::Version version;
  if (!Ok(sys->GetVersion(Ctx().get(), v1::GetVersionRequest(), &version), "GetVersion")) return 1;
  std::printf("version %s %s\n", version.version().c_str(), version.api().c_str());

  v1::CreateRuleRequest req;
  auto* spec = req.mutable_spec();
  spec->set_interface(argv[2]);
  spec->set_direction(v1::DIRECTION_EGRESS);
  spec->mutable_match()->set_protocol("tcp");
  unsigned port = static_cast<unsigned>(std::atoi(argv[3]));
  spec->mutable_match()->mutable_dport()->set_lo(port);
  spec->mutable_match()->mutable_dport()->set_hi(port);
  spec->mutable_loss()->mutable_bernoulli()->set_rate(0.01);
  spec->set_ttl_ns(60ull * 1000000000ull);
  (*spec->mutable_labels())["client"] = "cxx_client";
  v1::Rule rule;
  grpc::Status s;
  // The injector may still be loading right after the daemon started: UNAVAILABLE, retried.
  for (int i = 0; i < 100; i++) {
    rule.Clear();
    s = inj->CreateRule(Ctx().get(), req, &rule);
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!Ok(s, "CreateRule")) return 1;
  std::printf("created %u %s\n", rule.id(), v1::RuleState_Name(rule.state()).c_str());

  v1::ListRulesResponse list;
  if (!Ok(inj->ListRules(Ctx().get(), v1::ListRulesRequest(), &list), "ListRules")) return 1;
  for (const auto& r : list.rules())
    std::printf("listed %u %s %s dport %u\n", r.id(), r.spec().interface().c_str(),
                v1::RuleState_Name(r.state()).c_str(), r.spec().match().dport().lo());

  v1::DeleteRuleRequest del;
  del.set_id(rule.id());
  v1::DeleteRuleResponse gone;
  if (!Ok(inj->DeleteRule(Ctx().get(), del, &gone), "DeleteRule")) return 1;
  std::printf("deleted %u\n", gone.rule().id());
  return 0;
}
