// cgroup_skb programs decide only the rules of the cgroup their attachment is
// on (docs/architecture.md#nested-cgroups): the attachment's cgroup storage
// holds that cgroup's id. BPF_PROG_TEST_RUN runs a program outside any
// attachment (the kernel gives each run fresh, zeroed cgroup storage), so it
// cannot show an attachment deciding; what it shows is the other half: a run
// that does not know its attachment decides no cgroup rule, even one whose
// cgroup holds the socket. Before the fix every run decided every rule on the
// socket's cgroup ancestry (this run dropped), which is how a parent's rule
// was decided twice. The real attachments: tests/e2e/targets/nested_cgroup_test.py.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "harness.h"
#include "host/cgroup.h"

namespace lossd::bpftest {
namespace {

// This process in a cgroup of its own while it lives (BPF_PROG_TEST_RUN's
// socket is created in the caller's cgroup); back at the root after.
class OwnCgroup {
 public:
  OwnCgroup() {
    mount_ = Cgroup2Mount();
    if (mount_.empty()) return;
    path_ = mount_ + "/lossd-bpftest-" + std::to_string(getpid());
    if (mkdir(path_.c_str(), 0755) != 0) {
      path_.clear();
      return;
    }
    std::ofstream(path_ + "/cgroup.procs") << getpid() << std::endl;
  }
  ~OwnCgroup() {
    if (path_.empty()) return;
    std::ofstream(mount_ + "/cgroup.procs") << getpid() << std::endl;
    rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string mount_, path_;
};

TEST_F(BpfTest, CgroupRunOutsideItsAttachmentDecidesNoRule) {
  OwnCgroup cg;
  if (cg.path().empty()) GTEST_SKIP() << "no cgroup v2 mount to make a cgroup in";
  PacketSpec pkt = Udp4("10.0.0.1", "10.0.0.2", 1234, 9999);

  // Control: at tc egress a cgroup match is decided from the socket's cgroup
  // ancestry, and this test run's socket is in cg: the rule drops. (This is
  // the check every cgroup_skb run made before.)
  RuleSpec tc = Rule(Prog::kTcOut, 1.0);
  tc.cgroup = cg.path();
  uint32_t id = Add(tc);
  ASSERT_NE(id, 0u);
  EXPECT_VERDICT(Prog::kTcOut, Run(Prog::kTcOut, pkt), DropVerdict(Prog::kTcOut));
  EXPECT_EQ(Counters(id).matched_pkts, 1u);
  Remove(id);

  // cgroup_skb ingress, the same cgroup, 100 %: attached to cg by the
  // injector, but this run is no attachment's: nothing is decided, the packet
  // passes.
  RuleSpec s;
  s.cgroup = cg.path();
  s.hook = Hook::kCgroup;
  s.dir = Direction::kIngress;
  s.model.p = 1.0;
  id = Add(s);
  ASSERT_NE(id, 0u);
  int fd = inj_->ProgFd(LOSS_HOOK_CGROUP_INGRESS);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(TestRun(fd, Prog::kTcIn, Build(pkt).bytes), 1) << "1: pass (cgroup_skb)";
  EXPECT_EQ(Counters(id).matched_pkts, 0u);
  Remove(id);
}

}  // namespace
}  // namespace lossd::bpftest
