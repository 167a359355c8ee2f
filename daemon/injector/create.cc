// The injector's construction: the kernel's parts (the BPF maps, the
// programs, the attacher) or a caller's (tests), what a dead previous owner
// left behind cleaned up first, then the config, a first tick and the
// threads; and its destruction in the reverse order. The rule lifecycle is
// in injector.cc.
#include <sys/stat.h>

#include "base/log.h"
#include "injector/injector.h"

namespace lossd {

Injector::Injector(const InjectorOptions& opts, std::unique_ptr<LossMaps> maps,
                   std::unique_ptr<HookPrograms> programs, std::unique_ptr<Attacher> attacher)
    : opts_(opts),
      guard_(opts.limits.protected_ports),
      maps_(std::move(maps)),
      programs_(std::move(programs)),
      attacher_(std::move(attacher)),
      attach_(attacher_.get(), opts.state_dir.empty() ? "" : opts.state_dir + "/offloads") {}

Status Injector::CheckOptions(const InjectorOptions& opts) {
  // One slot stays free for Replace, which publishes before it withdraws.
  if (opts.limits.max_rules == 0 || opts.limits.max_rules >= LOSS_MAX_RULES)
    return InvalidArgument("max rules must lie between 1 and " +
                           std::to_string(LOSS_MAX_RULES - 1));
  return Status::Ok();
}

Result<std::unique_ptr<Injector>> Injector::Create(const InjectorOptions& opts) {
  LOSSD_RETURN_IF_ERROR(CheckOptions(opts));
  auto maps = BpfMaps::Create();
  if (!maps.ok()) return maps.status();
  auto programs = std::make_unique<HookPrograms>((*maps)->object());
  const std::string filter_records = opts.state_dir.empty() ? "" : opts.state_dir + "/netns-filters";
  auto attacher = std::make_unique<KernelAttacher>(programs.get(), (*maps)->CgroupSelfFd(),
                                                   opts.xdp_mode, filter_records);
  // What a dead previous owner left behind, before this one's lease starts.
  if (!opts.state_dir.empty()) mkdir(opts.state_dir.c_str(), 0700);
  int stale = RemoveStaleClsactFilters(filter_records);
  if (stale) LOG_INFO("removed %d stale clsact filter(s) of a previous lossd", stale);
  if (!opts.state_dir.empty()) RestoreOffloads(opts.state_dir + "/offloads");
  return Start(opts, std::move(*maps), std::move(programs), std::move(attacher));
}

Result<std::unique_ptr<Injector>> Injector::Create(const InjectorOptions& opts,
                                                   std::unique_ptr<LossMaps> maps,
                                                   std::unique_ptr<Attacher> attacher) {
  LOSSD_RETURN_IF_ERROR(CheckOptions(opts));
  return Start(opts, std::move(maps), std::make_unique<HookPrograms>(nullptr), std::move(attacher));
}

Result<std::unique_ptr<Injector>> Injector::Start(const InjectorOptions& opts,
                                                  std::unique_ptr<LossMaps> maps,
                                                  std::unique_ptr<HookPrograms> programs,
                                                  std::unique_ptr<Attacher> attacher) {
  auto ring = DropRing::Start(maps.get());
  if (!ring.ok()) return ring.status();
  std::unique_ptr<Injector> inj(
      new Injector(opts, std::move(maps), std::move(programs), std::move(attacher)));
  inj->drop_ring_ = std::move(*ring);
  inj->maps_.SetNetnsCookie(inj->attacher_->NetnsCookie());
  LOSSD_RETURN_IF_ERROR(inj->maps_.WriteConfig());
  if (opts.guard_all.Any()) LOSSD_RETURN_IF_ERROR(inj->maps_.ArmGuardAll(opts.guard_all));
  inj->Tick();
  if (opts.background) {
    Injector* p = inj.get();
    auto threads = WatchThreads::Start(
        WatchThreads::Period(opts.lease),
        {[p] { p->RenewLease(); }, [p] { p->Reap(); }, [p] { p->CheckAttachments(); }});
    if (!threads.ok()) return threads.status();
    inj->threads_ = std::move(*threads);
  }
  return inj;
}

Injector::~Injector() {
  threads_.reset();  // stopped and joined first: they call into the rules
  Clear();
  // Attachments and offload guards are gone with the rules; the qdiscs lossd
  // created go with attach_, then the programs, the maps last.
}

}  // namespace lossd
