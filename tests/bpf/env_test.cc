// The assumptions every other test builds on: we run in a fresh network
// namespace whose loopback is ifindex 1, BPF_PROG_TEST_RUN hands the programs
// that loopback's ifindex, and a rule on "lo" therefore sees test packets.
#include <bpf/bpf.h>
#include <linux/bpf.h>
#include <net/if.h>

#include <cstring>
#include <string>

#include "harness.h"

namespace lossd::bpftest {
namespace {

TEST(Environment, FreshNetnsWithLoopbackAtIfindex1) {
  EXPECT_EQ(if_nametoindex("lo"), 1u);
  // Only lo, and the interfaces these tests create (lossd-*): anything else
  // means main() did not move us out of the host's namespace.
  struct if_nameindex* ifs = if_nameindex();
  ASSERT_NE(ifs, nullptr);
  for (auto* i = ifs; i->if_index; i++) {
    std::string name = i->if_name;
    EXPECT_TRUE(name == "lo" || name.rfind("lossd-", 0) == 0) << "host interface " << name;
  }
  if_freenameindex(ifs);
}

class EnvironmentBpf : public BpfTest {};

TEST_F(EnvironmentBpf, TcTestRunSkbIfindexIsLoopback) {
  // ctx_out reports the skb's ifindex as the program saw it.
  Packet pkt = Build(Udp4("10.0.0.1", "10.0.0.2", 1, 2));
  for (Prog p : {Prog::kTcIn, Prog::kTcOut}) {
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = pkt.bytes.data(),
                .data_size_in = static_cast<__u32>(pkt.bytes.size()), .repeat = 1);
    struct __sk_buff in, out;
    std::memset(&in, 0, sizeof(in));
    std::memset(&out, 0, sizeof(out));
    opts.ctx_in = &in;
    opts.ctx_size_in = sizeof(in);
    opts.ctx_out = &out;
    opts.ctx_size_out = sizeof(out);
    ASSERT_EQ(bpf_prog_test_run_opts(inj_->ProgFd(LossHook(p)), &opts), 0) << strerror(errno);
    EXPECT_EQ(out.ifindex, 1u) << ProgName(p);
  }
}

TEST_F(EnvironmentBpf, RuleOnLoMatchesTestRunPackets) {
  // A rule on lo carries ifindex 1: if test packets arrived with another
  // ifindex (or none), nothing below could match and every test would pass
  // for the wrong reason.
  PacketSpec spec = Udp4("10.0.0.1", "10.0.0.2", 1000, 2000);
  for (Prog p : {Prog::kXdp, Prog::kTcIn, Prog::kTcOut}) {
    SCOPED_TRACE(ProgName(p));
    EXPECT_VERDICT(p, Run(p, spec), PassVerdict(p));  // no rule yet
    uint32_t id = Add(Rule(p, 1.0));
    ASSERT_NE(id, 0u);
    EXPECT_VERDICT(p, Run(p, spec), DropVerdict(p));
    EXPECT_EQ(Counters(id).dropped_pkts, 1u);
    // Naming ifindex 1 explicitly in the context changes nothing.
    RunOpts o;
    o.ifindex = 1;
    EXPECT_VERDICT(p, Run(p, spec, o), DropVerdict(p));
    Remove(id);
    EXPECT_VERDICT(p, Run(p, spec), PassVerdict(p));  // removed
  }
}

}  // namespace
}  // namespace lossd::bpftest
