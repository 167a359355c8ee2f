// The TCP observer: owns the observer's BPF skeleton, attaches each
// tracepoint program on its own (reporting what attached and what did not),
// pushes filters into the kernel, reads the ring buffer on a thread that
// never blocks on consumers, and reads totals and flows from the maps.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "host/netns.h"
#include "host/targets.h"
#include "loader/bpf_objects.h"
#include "loader/split_load.h"
#include "observe_abi.h"
#include "observer/hub.h"
#include "rules/rule.h"

struct observe_bpf;

namespace lossd {

struct ObsFilterSpec {
  std::optional<Cidr> addr;  // local or remote address
  PortRange ports;           // local or remote port
  uint64_t cgroup_id = 0;
  int family = 0;  // 0 any, 4, 6
};

// Which network namespaces the observer watches (lossd --observe-netns):
// lossd's own, every one, or a set named by path (/proc/PID/ns/net,
// /run/netns/NAME; "own" in the list: lossd's).
struct NetnsWatch {
  enum class Mode { kOwn, kAll, kSet };
  Mode mode = Mode::kOwn;
  std::vector<std::string> paths;  // kSet
};
// "own", "all" or PATH[,PATH...] (at most OBS_MAX_WATCHED_NETNS; "own" may
// be one of them). INVALID_ARGUMENT on anything else; paths are opened later.
Result<NetnsWatch> ParseNetnsWatch(const std::string& text);
std::string NetnsWatchText(const NetnsWatch& w);  // as parsed: "own", "all", "a,b"

struct ObserverOptions {
  // Only sockets of this network namespace (inode of /proc/<pid>/ns/net);
  // 0: as `netns` says (by default lossd's own namespace).
  uint64_t netns_ino = 0;
  NetnsWatch netns;
  std::vector<ObsFilterSpec> filters;
  bool pick_up_existing = true;  // run iter/tcp at start
  // A stall is no delivery for longer than max(stall_min_ns, stall_rtts x
  // the flow's minimum RTT) while data waits (docs/observer.md#stalls).
  uint64_t stall_min_ns = OBS_STALL_MIN_NS_DEFAULT;
  uint32_t stall_rtts = OBS_STALL_RTTS_DEFAULT;
  // The injector's drop log and guards (Injector::SharedDropsFd/GuardsFd):
  // the observer's program links resends to drops through them and stops a
  // guarded rule in the kernel. -1: no injector (its own, empty).
  int shared_drops_fd = -1;
  int shared_guards_fd = -1;
  int shared_watch_fd = -1;  // the guards watching ports (Injector::SharedWatchFd)
};

struct ObsHookStatus {
  std::string name;  // e.g. "sockops/retransmit", "tp_btf/tcp_probe"
  bool attached = false;
  std::string error;
};

// Retransmission totals, [type][outcome].
using RtxTotals = std::array<std::array<obs_total, OBS_OUTCOME_MAX>, OBS_RTX_MAX>;
// Exactly TcpRetransSegs of what they cover: segments the kernel counted
// (sent + failed after counting) plus one per SYN-ACK retransmission.
uint64_t RetransSegsOf(const RtxTotals& t);

// The totals of one network namespace (they reconcile with its own
// /proc/net/snmp and /proc/net/netstat).
struct NetnsTotals {
  uint64_t ino = 0;   // 0: the "other namespaces" bucket
  std::string path;   // one path to it (/proc/PID/ns/net, /run/netns/NAME), "" if none known
  bool own = false;   // lossd's own namespace
  RtxTotals by_type{};
};

struct ObsTotals {
  // lossd's own network namespace's totals (docs/observer.md#namespaces).
  RtxTotals by_type{};
  std::array<uint64_t, OBS_CNT_MAX> counters{};
  uint64_t ring_consumed = 0;  // events read from the ring
  uint64_t hub_published = 0;
  // Runs of the tracing programs the kernel skipped (recursion_misses: the
  // same program already ran on that CPU, a nested call), by program, and
  // their sum. Not events lost: they cost flow samples and limit accounting;
  // retransmissions are counted by sock_ops, which is never skipped.
  std::map<std::string, uint64_t> skipped_runs;
  uint64_t recursion_misses = 0;

  // Exactly TcpRetransSegs of lossd's own namespace (RetransSegsOf).
  uint64_t RetransSegs() const { return RetransSegsOf(by_type); }
};

struct ObsFlow {
  uint64_t cookie = 0;
  obs_flow flow{};
};

const char* RtxTypeName(int type);     // "fast", "rto", ...
const char* CaStateName(int state);    // "open", "disorder", "cwr", "recovery", "loss"
const char* OutcomeName(int outcome);  // "sent", "failed", ...

class Observer;

// While it lives, the ACKs of one flow go to the hub as OBS_EV_SAMPLE events.
class FlowTrace {
 public:
  ~FlowTrace();
  FlowTrace(const FlowTrace&) = delete;
  FlowTrace& operator=(const FlowTrace&) = delete;
  uint64_t cookie() const { return cookie_; }

 private:
  friend class Observer;
  FlowTrace(Observer* obs, uint64_t cookie) : obs_(obs), cookie_(cookie) {}
  Observer* obs_;
  uint64_t cookie_;
};

// While it lives, the kernel sends an OBS_EV_FLOW_OPEN event to the hub for
// each flow record it creates (none while nobody waits for one).
class OpenWatch {
 public:
  ~OpenWatch();
  OpenWatch(const OpenWatch&) = delete;
  OpenWatch& operator=(const OpenWatch&) = delete;

 private:
  friend class Observer;
  explicit OpenWatch(Observer* obs) : obs_(obs) {}
  Observer* obs_;
};

class Observer {
 public:
  // Creates the maps, loads each program on its own (between programs, a
  // set *cancel ends the load: Code::kUnavailable "cancelled"), attaches
  // them in order and starts the ring reader.
  static Result<std::unique_ptr<Observer>> Create(const ObserverOptions& opts,
                                                  const std::atomic<bool>* cancel = nullptr);
  ~Observer();
  Observer(const Observer&) = delete;
  Observer& operator=(const Observer&) = delete;

  const std::vector<ObsHookStatus>& hooks() const { return hooks_; }
  Status SetFilters(const std::vector<ObsFilterSpec>& filters);
  // Traces flow `cookie` (several traces of one flow share its samples);
  // RESOURCE_EXHAUSTED past OBS_MAX_TRACED flows at once.
  Result<std::unique_ptr<FlowTrace>> Trace(uint64_t cookie);
  uint64_t stall_min_ns() const { return cfg_.stall_min_ns; }
  uint32_t stall_rtts() const { return cfg_.stall_rtts; }
  ObsTotals Totals() const;
  // The totals of every namespace that has its own (those watched that
  // retransmitted, and lossd's own and the named ones from the start), by
  // inode; `other` those of the namespaces that found the table full.
  // ino != 0: that namespace only (none if it has no entry).
  std::vector<NetnsTotals> TotalsByNetns(uint64_t ino = 0, NetnsTotals* other = nullptr) const;
  uint64_t own_netns() const { return own_ino_; }
  const NetnsWatch& netns_watch() const { return watch_; }
  // Whether sockets of namespace `ino` are watched.
  bool Watches(uint64_t ino) const;
  std::vector<ObsFlow> Flows() const;
  // The open flow with this cookie, if there is one.
  std::optional<ObsFlow> FlowOf(uint64_t cookie) const;
  // Flow-open events while the handle lives (TraceFlow's wait for its flow).
  Result<std::unique_ptr<OpenWatch>> WatchOpens();
  Hub& hub() { return hub_; }
  // Who the sockets' cgroups are (the owners of flows and events), looked up
  // once per cgroup id and kept: the one cache of the process.
  OwnerCache& owners() const { return owners_; }
  // Stops the ring reader thread, then reads what is left in the ring (at a
  // one-shot's exit: every event reaches the hub). No event is read after it.
  void StopAndDrain();

 private:
  Observer() = default;
  friend class FlowTrace;
  friend class OpenWatch;
  void Untrace(uint64_t cookie);
  void UnwatchOpens();
  Status WriteConfigLocked();  // cfg_ into obs_cfg (cfg_mu_ held)
  Status Load(const ObserverOptions& opts, const std::atomic<bool>* cancel);
  // Load's steps, in order.
  Status LoadPrograms(const std::atomic<bool>* cancel,
                      std::map<std::string, std::string>* load_errors);
  Status AttachSockops();
  Status SetUpNetns(const ObserverOptions& opts);  // cfg_'s namespaces, obs_netns_set, held_
  Status AddNetnsTotals(uint64_t ino);              // an entry of zeros in obs_ns_totals
  void PickUpExisting(bool enabled, const std::string& load_error);
  // Runs the iterator in the calling thread's namespace (after EnterNetns).
  Status WalkExisting(bpf_link* link);
  // Forgets the totals of namespaces that are gone once the table is half
  // full, and refreshes the paths (the reader thread, every 10 s).
  void PruneNetns();
  void AttachTracepoints(std::map<std::string, std::string>& load_errors);
  // Loads program `name` from its own object (maps: skel_'s).
  Result<bpf_program*> LoadProgram(const char* name);
  bpf_program* Program(const char* name) const;  // loaded, or null
  void Run();
  void StopReader();  // sets stop_, joins the reader (idempotent)
  static int OnEvent(void* ctx, void* data, size_t size);
  void Flush();  // publishes batch_ (the reader's, or after StopReader)

  struct SkelDeleter {
    void operator()(observe_bpf* s) const;
  };
  // Destroyed in reverse: the reader thread stops (destructor), then the
  // ring, the links (detached) and the skeleton.
  std::unique_ptr<observe_bpf, SkelDeleter> skel_;                    // the maps (no program)
  std::vector<std::unique_ptr<observe_bpf, SkelDeleter>> prog_objs_;  // one per loaded program
  std::vector<std::pair<std::string, bpf_program*>> progs_;           // name -> its program
  std::mutex load_mu_;  // the two above, while programs load on two threads
  std::vector<BpfLink> links_;
  std::vector<ObsHookStatus> hooks_;
  RingBuffer ring_;    // read by the reader thread only, until StopReader()
  std::mutex cfg_mu_;  // cfg_ (open_waiters among it) and traced_
  struct obs_config cfg_ {};
  std::map<uint64_t, int> traced_;  // cookie -> traces of it
  Hub hub_;
  mutable OwnerCache owners_;
  std::atomic<uint64_t> consumed_{0};
  std::vector<ObsEvent> batch_;  // read from the ring, not yet published (reader's)
  std::atomic<bool> stop_{false};
  std::thread thread_;
  int ncpus_ = 1;
  NetnsWatch watch_;
  uint64_t own_ino_ = 0;
  std::vector<Netns> held_;  // the named namespaces (kSet), held open: their inodes stay theirs
  mutable std::mutex paths_mu_;
  std::map<uint64_t, std::string> paths_;  // netns inode -> a path to it
};

}  // namespace lossd
