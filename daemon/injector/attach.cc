#include "injector/attach.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/ethtool.h>
#include <linux/if_link.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/log.h"

namespace lossd {

// Not in Debian 12's UAPI headers (Linux 6.1); values from the running
// kernel's enum bpf_attach_type.
constexpr int kBpfTcxIngress = 46;

void UniqueFd::Reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

namespace {

class LinkAttachment : public Attachment {
 public:
  LinkAttachment(UniqueFd fd, std::string what) : fd_(std::move(fd)), what_(std::move(what)) {}
  std::string Describe() const override { return what_; }

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

class ClsactAttachment : public Attachment {
 public:
  ClsactAttachment(int ifindex, std::string ifname, bool created_qdisc)
      : ifindex_(ifindex), ifname_(std::move(ifname)), created_qdisc_(created_qdisc) {}
  ~ClsactAttachment() override {
    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex_, .attach_point = BPF_TC_EGRESS);
    LIBBPF_OPTS(bpf_tc_opts, opts, .handle = kTcHandle, .priority = kTcPriority);
    int err = bpf_tc_detach(&hook, &opts);
    if (err && err != -ENOENT && err != -ENODEV)
      LOG_WARN("detach clsact egress filter from %s: %s", ifname_.c_str(), strerror(-err));
    if (created_qdisc_) {
      // Only a qdisc we created, and only if nothing else uses it.
      LIBBPF_OPTS(bpf_tc_opts, any);
      hook.attach_point = BPF_TC_EGRESS;
      bool egress_used = bpf_tc_query(&hook, &any) == 0;
      hook.attach_point = BPF_TC_INGRESS;
      bool ingress_used = bpf_tc_query(&hook, &any) == 0;
      if (!egress_used && !ingress_used) {
        hook.attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS);
        bpf_tc_hook_destroy(&hook);
      }
    }
  }
  std::string Describe() const override { return "clsact egress on " + ifname_; }

 private:
  int ifindex_;
  std::string ifname_;
  bool created_qdisc_;
};

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

Result<std::unique_ptr<Attachment>> AttachClsactEgress(int prog_fd, int ifindex,
                                                       const std::string& ifname) {
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_EGRESS);
  int err = bpf_tc_hook_create(&hook);
  bool created = err == 0;
  if (err && err != -EEXIST) return Status::FromErrno(-err, "create clsact qdisc on " + ifname);
  LIBBPF_OPTS(bpf_tc_opts, opts, .prog_fd = prog_fd, .flags = BPF_TC_F_REPLACE,
              .handle = kTcHandle, .priority = kTcPriority);
  err = bpf_tc_attach(&hook, &opts);
  if (err) {
    if (created) {
      hook.attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS);
      bpf_tc_hook_destroy(&hook);
    }
    return Status::FromErrno(-err, "attach clsact egress filter to " + ifname);
  }
  return std::unique_ptr<Attachment>(new ClsactAttachment(ifindex, ifname, created));
}

Result<std::unique_ptr<Attachment>> AttachCgroup(int prog_fd, const std::string& cgroup_path,
                                                 bool egress) {
  UniqueFd cg(open(cgroup_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!cg.valid()) return Status::FromErrno(errno, "open cgroup " + cgroup_path);
  return Link(prog_fd, cg.get(), egress ? BPF_CGROUP_INET_EGRESS : BPF_CGROUP_INET_INGRESS, 0,
              std::string("cgroup_skb ") + (egress ? "egress" : "ingress") + " to " + cgroup_path);
}

int RemoveStaleClsactFilters() {
  struct if_nameindex* ifs = if_nameindex();
  if (!ifs) return 0;
  int removed = 0;
  for (auto* i = ifs; i->if_index; i++) {
    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = static_cast<int>(i->if_index),
                .attach_point = BPF_TC_EGRESS);
    LIBBPF_OPTS(bpf_tc_opts, opts, .handle = kTcHandle, .priority = kTcPriority);
    if (bpf_tc_query(&hook, &opts) != 0) continue;
    if (ProgName(opts.prog_id) != kTcEgressProgName) continue;
    LIBBPF_OPTS(bpf_tc_opts, del, .handle = kTcHandle, .priority = kTcPriority);
    if (bpf_tc_detach(&hook, &del) == 0) {
      LOG_INFO("removed a stale lossd clsact egress filter from %s", i->if_name);
      removed++;
    }
  }
  if_freenameindex(ifs);
  return removed;
}

Result<int> IfIndex(const std::string& ifname) {
  if (ifname.empty() || ifname.size() >= IFNAMSIZ)
    return InvalidArgument("invalid interface name '" + ifname + "'");
  unsigned idx = if_nametoindex(ifname.c_str());
  if (!idx) return NotFound("interface '" + ifname + "' not found in this network namespace");
  return static_cast<int>(idx);
}

bool IsVirtualInterface(const std::string& ifname) {
  struct stat st;
  return stat(("/sys/class/net/" + ifname + "/device").c_str(), &st) != 0;
}

std::string Cgroup2Mount() {
  std::ifstream in("/proc/self/mounts");
  std::string dev, dir, type, rest;
  while (in >> dev >> dir >> type && std::getline(in, rest))
    if (type == "cgroup2") return dir;
  return "";
}

Result<CgroupInfo> ResolveCgroup(const std::string& path) {
  std::string root = Cgroup2Mount();
  if (root.empty()) return FailedPrecondition("no cgroup v2 hierarchy is mounted");
  std::string full = path;
  if (full.compare(0, root.size(), root) != 0) {
    if (!full.empty() && full[0] == '/' && full.rfind("/sys/fs/cgroup", 0) == 0)
      return InvalidArgument("cgroup '" + path + "' is not under the cgroup v2 mount " + root);
    full = root + (full.empty() || full[0] == '/' ? "" : "/") + full;
  }
  while (full.size() > 1 && full.back() == '/') full.pop_back();
  struct stat st;
  if (stat(full.c_str(), &st) != 0) return Status::FromErrno(errno, "cgroup " + full);
  if (!S_ISDIR(st.st_mode)) return InvalidArgument("cgroup " + full + " is not a directory");
  CgroupInfo info;
  info.path = full;
  info.id = st.st_ino;  // kernfs node id == cgroup id on 64-bit
  int level = 0;
  for (size_t i = root.size(); i < full.size(); i++)
    if (full[i] == '/' && i + 1 < full.size()) level++;
  if (level > 255) return InvalidArgument("cgroup " + full + " is nested too deep");
  info.level = static_cast<uint8_t>(level);
  return info;
}

namespace {

Status Ethtool(const std::string& ifname, uint32_t cmd, uint32_t* value) {
  UniqueFd sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return Status::FromErrno(errno, "socket for ethtool");
  struct ethtool_value ev = {};
  ev.cmd = cmd;
  ev.data = value ? *value : 0;
  struct ifreq ifr = {};
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  ifr.ifr_data = reinterpret_cast<char*>(&ev);
  if (ioctl(sock.get(), SIOCETHTOOL, &ifr) != 0)
    return Status::FromErrno(errno, "ethtool on " + ifname);
  if (value) *value = ev.data;
  return Status::Ok();
}

struct Offloads {
  uint32_t gro = 0, gso = 0, tso = 0;
};

Status GetOffloads(const std::string& ifname, Offloads* o) {
  LOSSD_RETURN_IF_ERROR(Ethtool(ifname, ETHTOOL_GGRO, &o->gro));
  LOSSD_RETURN_IF_ERROR(Ethtool(ifname, ETHTOOL_GGSO, &o->gso));
  return Ethtool(ifname, ETHTOOL_GTSO, &o->tso);
}

Status SetOffloads(const std::string& ifname, Offloads o) {
  // A device without TSO rejects setting it even to 0: only change what differs.
  Offloads cur;
  LOSSD_RETURN_IF_ERROR(GetOffloads(ifname, &cur));
  if (cur.tso != o.tso) LOSSD_RETURN_IF_ERROR(Ethtool(ifname, ETHTOOL_STSO, &o.tso));
  if (cur.gso != o.gso) LOSSD_RETURN_IF_ERROR(Ethtool(ifname, ETHTOOL_SGSO, &o.gso));
  if (cur.gro != o.gro) LOSSD_RETURN_IF_ERROR(Ethtool(ifname, ETHTOOL_SGRO, &o.gro));
  return Status::Ok();
}

std::vector<std::string> ReadLines(const std::string& file) {
  std::vector<std::string> lines;
  std::ifstream in(file);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) lines.push_back(l);
  return lines;
}

void WriteLines(const std::string& file, const std::vector<std::string>& lines) {
  if (lines.empty()) {
    unlink(file.c_str());
    return;
  }
  std::string tmp = file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto& l : lines) out << l << "\n";
  }
  rename(tmp.c_str(), file.c_str());
}

}  // namespace

Result<std::unique_ptr<OffloadGuard>> OffloadGuard::Disable(const std::string& ifname,
                                                            const std::string& state_file) {
  Offloads saved;
  LOSSD_RETURN_IF_ERROR(GetOffloads(ifname, &saved));
  std::unique_ptr<OffloadGuard> g(new OffloadGuard());
  g->ifname_ = ifname;
  g->state_file_ = state_file;
  g->gro_ = saved.gro;
  g->gso_ = saved.gso;
  g->tso_ = saved.tso;
  // Record before changing, so a crash in between is recoverable.
  auto lines = ReadLines(state_file);
  lines.push_back(ifname + " " + std::to_string(saved.gro) + " " + std::to_string(saved.gso) +
                  " " + std::to_string(saved.tso));
  WriteLines(state_file, lines);
  Status st = SetOffloads(ifname, Offloads{});
  if (!st.ok()) return st;  // the destructor restores what was changed
  return g;
}

OffloadGuard::~OffloadGuard() {
  Status st = SetOffloads(ifname_, Offloads{gro_, gso_, tso_});
  if (!st.ok()) LOG_WARN("restore offloads: %s", st.message().c_str());
  auto lines = ReadLines(state_file_);
  for (auto it = lines.begin(); it != lines.end(); ++it) {
    if (it->rfind(ifname_ + " ", 0) == 0) {
      lines.erase(it);
      break;
    }
  }
  WriteLines(state_file_, lines);
}

int RestoreOffloads(const std::string& state_file) {
  int restored = 0;
  for (const auto& line : ReadLines(state_file)) {
    std::istringstream in(line);
    std::string ifname;
    Offloads o;
    if (!(in >> ifname >> o.gro >> o.gso >> o.tso)) continue;
    Status st = SetOffloads(ifname, o);
    if (st.ok()) {
      LOG_INFO("restored offloads of %s left by a previous run", ifname.c_str());
      restored++;
    } else {
      LOG_WARN("restore offloads of %s: %s", ifname.c_str(), st.message().c_str());
    }
  }
  WriteLines(state_file, {});
  return restored;
}

}  // namespace lossd
