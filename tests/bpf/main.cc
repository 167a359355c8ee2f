// BPF_PROG_TEST_RUN suite entry point. Before any test runs, the process
// moves into a fresh network namespace: every rule the tests add attaches to
// that namespace's "lo" (or a dummy interface created there), so nothing on
// the host is touched, and the namespace disappears with the process.
#include <gtest/gtest.h>
#include <sched.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "base/log.h"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; i++)
    if (std::string(argv[i]) == "--gtest_list_tests") listing = true;
  // Listing (gtest_discover_tests at build time) needs no privileges.
  if (!listing) {
    if (unshare(CLONE_NEWNET) != 0) {
      fprintf(stderr,
              "bpf_tests: unshare(CLONE_NEWNET): %s. These tests need root "
              "(CAP_SYS_ADMIN, CAP_BPF, CAP_NET_ADMIN).\n",
              strerror(errno));
      return 1;
    }
    lossd::SetLogLevel(lossd::LogLevel::kWarn);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
