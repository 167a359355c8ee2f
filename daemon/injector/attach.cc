#include "injector/attach.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "base/log.h"
#include "host/netns.h"
#include "host/records.h"
#include "host/state_dir.h"
#include "loss_abi.h"

namespace lossd {

// Not in Debian 12's UAPI headers (Linux 6.1); values from the running
// kernel's enum bpf_attach_type.
constexpr int kBpfTcxIngress = 46;

namespace {

// Not in Debian 12's UAPI headers: the tcx link type (Linux 6.6), whose
// bpf_link_info reports the ifindex where the XDP link's does (the first
// field of the same union), 0 once the device is gone.
constexpr uint32_t kBpfLinkTypeTcx = 11;

class LinkAttachment : public Attachment {
 public:
  LinkAttachment(UniqueFd fd, std::string what) : fd_(std::move(fd)), what_(std::move(what)) {}
  std::string Describe() const override { return what_; }
  bool Attached() const override {
    struct bpf_link_info info;
    std::memset(&info, 0, sizeof(info));
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd_.get(), &info, &len) != 0) return false;
    switch (info.type) {
      case BPF_LINK_TYPE_XDP:
      case kBpfLinkTypeTcx: return info.xdp.ifindex != 0;
      case BPF_LINK_TYPE_CGROUP: return info.cgroup.cgroup_id != 0;
      default: return true;
    }
  }

 private:
  UniqueFd fd_;  // closing the last link fd detaches
  std::string what_;
};

Result<std::unique_ptr<Attachment>> Link(int prog_fd, int target, int type, uint32_t flags,
                                         const std::string& what) {
  LIBBPF_OPTS(bpf_link_create_opts, opts, .flags = flags);
  int fd = bpf_link_create(prog_fd, target, static_cast<enum bpf_attach_type>(type), &opts);
  if (fd < 0) return Status::FromErrno(errno, "attach " + what);
  return std::unique_ptr<Attachment>(new LinkAttachment(UniqueFd(fd), what));
}

std::string ProgName(uint32_t prog_id) {
  int fd = bpf_prog_get_fd_by_id(prog_id);
  if (fd < 0) return "";
  struct bpf_prog_info info;
  std::memset(&info, 0, sizeof(info));
  uint32_t len = sizeof(info);
  std::string name;
  if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) name = info.name;
  close(fd);
  return name;
}

// The clsact filters attached in other namespaces than lossd's, one record
// each ("NETNS IFINDEX IFNAME") in the state dir: the next start removes a
// crashed owner's there (RemoveStaleClsactFilters) and only there.
std::string FilterRecordOf(const NetnsRef& ns, int ifindex, const std::string& ifname) {
  FilterRecord r;
  r.netns = ns.ino;
  r.ifindex = static_cast<uint32_t>(ifindex);
  r.ifname = ifname;
  return FilterRecordLine(r);
}

Status AddFilterRecord(const std::string& file, const std::string& record) {
  auto lines = ReadStateLines(file, "namespace filter records");
  if (!lines.ok()) return lines.status();
  if (std::find(lines->begin(), lines->end(), record) != lines->end()) return Status::Ok();
  lines->push_back(record);
  return WriteStateLines(file, *lines, "namespace filter records");
}

void DropFilterRecord(const std::string& file, const std::string& record) {
  auto lines = ReadStateLines(file, "namespace filter records");
  if (!lines.ok()) {
    LOG_WARN("%s", lines.status().message().c_str());
    return;
  }
  lines->erase(std::remove(lines->begin(), lines->end(), record), lines->end());
  Status st = WriteStateLines(file, *lines, "namespace filter records");
  if (!st.ok()) LOG_WARN("%s", st.message().c_str());
}

class ClsactAttachment : public Attachment {
 public:
  ClsactAttachment(int ifindex, std::string ifname, uint32_t prog_id, NetnsRef ns,
                   std::string record_file)
      : ifindex_(ifindex),
        ifname_(std::move(ifname)),
        prog_id_(prog_id),
        ns_(std::move(ns)),
        record_file_(std::move(record_file)) {}
  ~ClsactAttachment() override {
    Detach();
    if (ns_.ino && !record_file_.empty())
      DropFilterRecord(record_file_, FilterRecordOf(ns_, ifindex_, ifname_));
  }
  void Detach() {
    // A namespace that is gone took the filter with its device.
    Status st = InNetns(ns_.ino, ns_.path, [&] {
      LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex_, .attach_point = BPF_TC_EGRESS);
      LIBBPF_OPTS(bpf_tc_opts, opts, .handle = kTcHandle, .priority = kTcPriority);
      int err = bpf_tc_detach(&hook, &opts);
      if (err && err != -ENOENT && err != -ENODEV)
        LOG_WARN("detach clsact egress filter from %s%s: %s", ifname_.c_str(),
                 ns_.Suffix().c_str(), strerror(-err));
      return Status::Ok();
    });
    if (!st.ok() && st.code() != Code::kNotFound)
      LOG_WARN("detach clsact egress filter from %s: %s", ifname_.c_str(), st.message().c_str());
  }
  std::string Describe() const override { return "clsact egress on " + ifname_ + ns_.Suffix(); }
  bool Attached() const override {
    bool attached = false;
    InNetns(ns_.ino, ns_.path, [&] {
      LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex_, .attach_point = BPF_TC_EGRESS);
      LIBBPF_OPTS(bpf_tc_opts, q, .handle = kTcHandle, .priority = kTcPriority);
      attached = bpf_tc_query(&hook, &q) == 0 && q.prog_id == prog_id_;
      return Status::Ok();
    });
    return attached;
  }

 private:
  int ifindex_;
  std::string ifname_;
  uint32_t prog_id_;  // ours: the filter's program while it is attached
  NetnsRef ns_;
  std::string record_file_;  // where a filter in another namespace is recorded ("": nowhere)
};

// A lossd clsact program whose owner still renews its lease (its loss_cfg
// map says so). No lease at all (lossd refuses --lease 0; only an injector
// built in-process for a test or benchmark runs without one) is not alive.
bool OwnerAlive(uint32_t prog_id) {
  int fd = bpf_prog_get_fd_by_id(prog_id);
  if (fd < 0) return false;
  uint32_t map_ids[16] = {};
  struct bpf_prog_info info;
  std::memset(&info, 0, sizeof(info));
  info.nr_map_ids = 16;
  info.map_ids = reinterpret_cast<uint64_t>(map_ids);
  uint32_t len = sizeof(info);
  bool alive = false;
  if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) {
    for (uint32_t i = 0; i < info.nr_map_ids && i < 16; i++) {
      int mfd = bpf_map_get_fd_by_id(map_ids[i]);
      if (mfd < 0) continue;
      struct bpf_map_info minfo;
      std::memset(&minfo, 0, sizeof(minfo));
      uint32_t mlen = sizeof(minfo);
      if (bpf_obj_get_info_by_fd(mfd, &minfo, &mlen) == 0 &&
          std::string(minfo.name) == "loss_cfg") {
        struct loss_config cfg;
        uint32_t zero = 0;
        if (bpf_map_lookup_elem(mfd, &zero, &cfg) == 0) {
          struct timespec ts;
          clock_gettime(CLOCK_MONOTONIC, &ts);
          uint64_t now = uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
          alive = cfg.lease_until_ns > now;
        }
      }
      close(mfd);
    }
  }
  close(fd);
  return alive;
}

}  // namespace

Result<std::unique_ptr<Attachment>> AttachXdp(int prog_fd, int ifindex, const std::string& ifname,
                                              XdpMode mode) {
  if (mode == XdpMode::kAuto) {
    auto native = Link(prog_fd, ifindex, BPF_XDP, XDP_FLAGS_DRV_MODE, "XDP (native) to " + ifname);
    if (native.ok()) return native;
    LOG_INFO("%s; falling back to generic XDP", native.status().message().c_str());
    mode = XdpMode::kGeneric;
  }
  bool native = mode == XdpMode::kNative;
  return Link(prog_fd, ifindex, BPF_XDP, native ? XDP_FLAGS_DRV_MODE : XDP_FLAGS_SKB_MODE,
              std::string("XDP (") + (native ? "native" : "generic") + ") to " + ifname);
}

Result<std::unique_ptr<Attachment>> AttachTcxIngress(int prog_fd, int ifindex,
                                                     const std::string& ifname) {
  return Link(prog_fd, ifindex, kBpfTcxIngress, 0, "tcx ingress to " + ifname);
}

namespace {

// AttachClsactEgress inside the device's namespace.
Result<std::unique_ptr<Attachment>> AttachClsactHere(int prog_fd, int ifindex,
                                                     const std::string& ifname,
                                                     ClsactQdiscs* created, const NetnsRef& ns,
                                                     const std::string& record_file) {
  const std::string where = ifname + ns.Suffix();
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_EGRESS);
  {
    // Never take the slot from a live owner (another lossd, another tool).
    LIBBPF_OPTS(bpf_tc_opts, q, .handle = kTcHandle, .priority = kTcPriority);
    if (bpf_tc_query(&hook, &q) == 0) {
      std::string name = ProgName(q.prog_id);
      if (name != kTcEgressProgName)
        return Status(Code::kAlreadyExists, "clsact egress on " + where + ": handle " +
                                                std::to_string(kTcHandle) + " prio " +
                                                std::to_string(kTcPriority) +
                                                " is taken by program '" + name + "'");
      if (OwnerAlive(q.prog_id))
        return Status(Code::kAlreadyExists,
                      "clsact egress on " + where +
                          " is held by another running lossd: one lossd per network namespace "
                          "owns its egress devices");
    }
  }
  // Recorded before it exists, so that a crash in between is found again.
  const std::string record = FilterRecordOf(ns, ifindex, ifname);
  if (ns.ino && !record_file.empty())
    LOSSD_RETURN_IF_ERROR(AddFilterRecord(record_file, record));
  auto fail = [&](Status st) {
    if (ns.ino && !record_file.empty()) DropFilterRecord(record_file, record);
    return st;
  };
  int err = bpf_tc_hook_create(&hook);
  if (err && err != -EEXIST)
    return fail(Status::FromErrno(-err, "create clsact qdisc on " + where));
  if (err == 0) created->Add(ns, ifindex, ifname);
  LIBBPF_OPTS(bpf_tc_opts, opts, .prog_fd = prog_fd, .flags = BPF_TC_F_REPLACE, .handle = kTcHandle,
              .priority = kTcPriority);
  err = bpf_tc_attach(&hook, &opts);
  if (err) return fail(Status::FromErrno(-err, "attach clsact egress filter to " + where));
  return std::unique_ptr<Attachment>(
      new ClsactAttachment(ifindex, ifname, opts.prog_id, ns, record_file));
}

}  // namespace

Result<std::unique_ptr<Attachment>> AttachClsactEgress(int prog_fd, int ifindex,
                                                       const std::string& ifname,
                                                       ClsactQdiscs* created, const NetnsRef& ns,
                                                       const std::string& record_file) {
  Result<std::unique_ptr<Attachment>> out = Internal("clsact egress on " + ifname + ": not run");
  Status st = InNetns(ns.ino, ns.path, [&] {
    out = AttachClsactHere(prog_fd, ifindex, ifname, created, ns, record_file);
    return Status::Ok();
  });
  if (!st.ok()) return Status(st.code(), "clsact egress on " + ifname + ": " + st.message());
  return out;
}

ClsactQdiscs::~ClsactQdiscs() {
  for (const auto& [key, what] : created_) {
    const auto& [name, ns] = what;
    const int ifindex = key.second;
    InNetns(ns.ino, ns.path, [&, &name = name] {
      // Only if nothing (another tool, another lossd) uses it now.
      LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_EGRESS);
      LIBBPF_OPTS(bpf_tc_opts, any);
      bool egress_used = bpf_tc_query(&hook, &any) == 0;
      hook.attach_point = BPF_TC_INGRESS;
      bool ingress_used = bpf_tc_query(&hook, &any) == 0;
      if (egress_used || ingress_used) return Status::Ok();
      hook.attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS);
      int err = bpf_tc_hook_destroy(&hook);
      if (err && err != -ENOENT && err != -EINVAL && err != -ENODEV)
        LOG_WARN("remove the clsact qdisc lossd created on %s: %s", name.c_str(), strerror(-err));
      return Status::Ok();
    });
  }
}

Result<std::unique_ptr<Attachment>> AttachCgroup(int prog_fd, const std::string& cgroup_path,
                                                 bool egress, int self_map_fd,
                                                 uint64_t* attached_id) {
  UniqueFd cg(open(cgroup_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!cg.valid()) return Status::FromErrno(errno, "open cgroup " + cgroup_path);
  struct stat st;
  if (fstat(cg.get(), &st) != 0) return Status::FromErrno(errno, "stat cgroup " + cgroup_path);
  uint64_t id = st.st_ino;  // kernfs node id == cgroup id on 64-bit
  std::string what =
      std::string("cgroup_skb ") + (egress ? "egress" : "ingress") + " to " + cgroup_path;
  auto link =
      Link(prog_fd, cg.get(), egress ? BPF_CGROUP_INET_EGRESS : BPF_CGROUP_INET_INGRESS, 0, what);
  if (!link.ok()) return link;
  // The storage exists from the attach on; until this write the program
  // decides no rule (passes), and no rule on this cgroup is published yet.
  if (bpf_map_update_elem(self_map_fd, &id, &id, BPF_ANY) != 0)
    return Status::FromErrno(errno, "write the cgroup id into the storage of " + what);
  if (attached_id) *attached_id = id;
  return link;
}

namespace {

// Removes a dead lossd's egress filter from ifindex of this thread's
// namespace (or, with probes, a lossd probe); true if it did.
bool RemoveStaleFilter(int ifindex, const std::string& ifname, const std::string& where,
                       bool probes) {
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_EGRESS);
  LIBBPF_OPTS(bpf_tc_opts, opts, .handle = kTcHandle, .priority = kTcPriority);
  if (bpf_tc_query(&hook, &opts) != 0) return false;
  std::string name = ProgName(opts.prog_id);
  if (name != kTcEgressProgName && !(probes && name == kProbeProgName)) return false;
  if (name == kTcEgressProgName && OwnerAlive(opts.prog_id)) return false;  // another lossd, alive
  LIBBPF_OPTS(bpf_tc_opts, del, .handle = kTcHandle, .priority = kTcPriority);
  if (bpf_tc_detach(&hook, &del) != 0) return false;
  LOG_INFO("removed a stale lossd clsact egress filter from %s%s", ifname.c_str(), where.c_str());
  return true;
}

}  // namespace

int RemoveStaleClsactFilters(const std::string& record_file) {
  int removed = 0;
  if (struct if_nameindex* ifs = if_nameindex()) {
    for (auto* i = ifs; i->if_index; i++)
      removed += RemoveStaleFilter(static_cast<int>(i->if_index), i->if_name, "", true);
    if_freenameindex(ifs);
  }
  // Other namespaces: where this state dir's owner attached (its records).
  auto lines = ReadStateLines(record_file, "namespace filter records");
  if (!lines.ok()) {
    LOG_WARN("%s: stale filters in other namespaces are left", lines.status().message().c_str());
    return removed;
  }
  for (const std::string& line : *lines) {
    FilterRecord r;
    if (!ParseFilterRecord(line, &r)) {
      LOG_WARN("namespace filter record '%s' in %s is not valid: dropped",
               Shown(line.substr(0, 80)).c_str(), record_file.c_str());
      continue;
    }
    InNetns(r.netns, "", [&] {  // a namespace that is gone took the filter with it
      removed += RemoveStaleFilter(static_cast<int>(r.ifindex), r.ifname,
                                   " in netns " + std::to_string(r.netns), false);
      return Status::Ok();
    });
  }
  Status st = WriteStateLines(record_file, {}, "namespace filter records");
  if (!st.ok()) LOG_WARN("%s", st.message().c_str());
  return removed;
}

}  // namespace lossd
