// The hook programs of bpf/loss.bpf.c: which ones a rule runs in, and their
// split load (docs/architecture.md#start-up): each loads on first use, from a
// bpf_object of its own whose maps are the injector's (bpf_map__reuse_fd,
// loader/split_load.h), so a daemon that only uses tc ingress never verifies
// the other four.
#pragma once

#include <array>
#include <atomic>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "injector/maps.h"
#include "loader/split_load.h"
#include "loss_abi.h"
#include "rules/rule.h"

namespace lossd {

const char* LossHookName(int hook);  // enum loss_hook -> "xdp", "tc_ingress", ...

// The hook a rule runs in (hook auto chosen: docs/architecture.md#hook-choice).
Hook ChooseHook(const RuleSpec& spec);
// Whether the rule can work on `hook` (a rule may name one that cannot).
Status CheckHook(const RuleSpec& spec, Hook hook);
// The programs (enum loss_hook) a rule on `hook` in direction `dir` runs in.
std::vector<int> HookKinds(Hook hook, Direction dir);

class HookPrograms {
 public:
  // `maps`: the loaded object whose maps the programs use (BpfMaps); none
  // (nullptr), and no program can load.
  explicit HookPrograms(const bpf_object* maps);
  HookPrograms(const HookPrograms&) = delete;
  HookPrograms& operator=(const HookPrograms&) = delete;

  // Loads the program of `hook` (enum loss_hook) unless it is loaded.
  // Thread-safe; one load (a verifier run) at a time.
  Status Load(int hook);
  Status LoadAll();
  // Its fd, loaded here if not yet; -1 if it cannot load (logged).
  int LoadedFd(int hook);
  // Its fd, or -1 while it is not loaded; without a lock.
  int Fd(int hook) const { return hook >= 0 && hook < LOSS_HOOK_MAX ? fds_[hook].load() : -1; }
  // The programs loaded so far, with what each cost to load.
  std::vector<ProgLoadStats> Loaded() const;

 private:
  const bpf_object* maps_;
  // One load at a time under load_mu_; the loaded objects under mu_ (held
  // briefly); their fds published last, read without a lock.
  std::mutex load_mu_;
  mutable std::mutex mu_;
  std::array<LossObject, LOSS_HOOK_MAX> objs_;
  std::array<ProgLoadStats, LOSS_HOOK_MAX> stats_;
  std::array<std::atomic<int>, LOSS_HOOK_MAX> fds_;  // -1: not loaded
};

}  // namespace lossd
