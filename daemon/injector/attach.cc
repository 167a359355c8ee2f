#include "injector/attach.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/ethtool.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/cgroup.h"
#include "common/log.h"
#include "loss_abi.h"

namespace lossd {

// Not in Debian 12's UAPI headers (Linux 6.1); values from the running
// kernel's enum bpf_attach_type.
constexpr int kBpfTcxIngress = 46;

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

// clsact qdiscs this process created. Adding or deleting a qdisc
// deactivates the device for a moment (qdisc_graft: dev_deactivate), which
// drops egress packets no rule matches; so a qdisc lossd created stays until
// ReleaseCreatedQdiscs (the injector's end), not until its last rule goes.
std::mutex g_qdiscs_mu;
std::map<int, std::string> g_created_qdiscs;  // ifindex -> name

class ClsactAttachment : public Attachment {
 public:
  ClsactAttachment(int ifindex, std::string ifname) : ifindex_(ifindex), ifname_(std::move(ifname)) {}
  ~ClsactAttachment() override {
    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex_, .attach_point = BPF_TC_EGRESS);
    LIBBPF_OPTS(bpf_tc_opts, opts, .handle = kTcHandle, .priority = kTcPriority);
    int err = bpf_tc_detach(&hook, &opts);
    if (err && err != -ENOENT && err != -ENODEV)
      LOG_WARN("detach clsact egress filter from %s: %s", ifname_.c_str(), strerror(-err));
  }
  std::string Describe() const override { return "clsact egress on " + ifname_; }

 private:
  int ifindex_;
  std::string ifname_;
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

// A lossd clsact program whose owner still renews its lease (its loss_cfg
// map says so). Lease 0 (--lease 0) cannot be told apart: taken as live.
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
      if (bpf_obj_get_info_by_fd(mfd, &minfo, &mlen) == 0 && std::string(minfo.name) == "loss_cfg") {
        struct loss_config cfg;
        uint32_t zero = 0;
        if (bpf_map_lookup_elem(mfd, &zero, &cfg) == 0) {
          struct timespec ts;
          clock_gettime(CLOCK_MONOTONIC, &ts);
          uint64_t now = uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
          alive = cfg.lease_until_ns == 0 || cfg.lease_until_ns > now;
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

Result<std::unique_ptr<Attachment>> AttachClsactEgress(int prog_fd, int ifindex,
                                                       const std::string& ifname) {
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_EGRESS);
  {
    // Never take the slot from a live owner (another lossd, another tool).
    LIBBPF_OPTS(bpf_tc_opts, q, .handle = kTcHandle, .priority = kTcPriority);
    if (bpf_tc_query(&hook, &q) == 0) {
      std::string name = ProgName(q.prog_id);
      if (name != kTcEgressProgName)
        return Status(Code::kAlreadyExists, "clsact egress on " + ifname + ": handle " +
                                                std::to_string(kTcHandle) + " prio " +
                                                std::to_string(kTcPriority) + " is taken by program '" +
                                                name + "'");
      if (OwnerAlive(q.prog_id))
        return Status(Code::kAlreadyExists,
                      "clsact egress on " + ifname + " is held by another running lossd in this "
                      "network namespace: one lossd per namespace owns egress rules");
    }
  }
  int err = bpf_tc_hook_create(&hook);
  bool created = err == 0;
  if (err && err != -EEXIST) return Status::FromErrno(-err, "create clsact qdisc on " + ifname);
  if (created) {
    std::lock_guard<std::mutex> lock(g_qdiscs_mu);
    g_created_qdiscs[ifindex] = ifname;
  }
  LIBBPF_OPTS(bpf_tc_opts, opts, .prog_fd = prog_fd, .flags = BPF_TC_F_REPLACE,
              .handle = kTcHandle, .priority = kTcPriority);
  err = bpf_tc_attach(&hook, &opts);
  if (err) {
    return Status::FromErrno(-err, "attach clsact egress filter to " + ifname);
  }
  return std::unique_ptr<Attachment>(new ClsactAttachment(ifindex, ifname));
}

void ReleaseCreatedQdiscs() {
  std::lock_guard<std::mutex> lock(g_qdiscs_mu);
  for (const auto& [ifindex, name] : g_created_qdiscs) {
    // Only if nothing (another tool, another lossd) uses it now.
    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_EGRESS);
    LIBBPF_OPTS(bpf_tc_opts, any);
    bool egress_used = bpf_tc_query(&hook, &any) == 0;
    hook.attach_point = BPF_TC_INGRESS;
    bool ingress_used = bpf_tc_query(&hook, &any) == 0;
    if (egress_used || ingress_used) continue;
    hook.attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS);
    int err = bpf_tc_hook_destroy(&hook);
    if (err && err != -ENOENT && err != -EINVAL && err != -ENODEV)
      LOG_WARN("remove the clsact qdisc lossd created on %s: %s", name.c_str(), strerror(-err));
  }
  g_created_qdiscs.clear();
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
    if (OwnerAlive(opts.prog_id)) continue;  // another lossd, alive: not stale
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
  // A device on a bus (PCI, ...) reports where; veth, bridges, tun do not.
  // ethtool, not /sys/class/net: sysfs may belong to another namespace.
  UniqueFd sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return true;
  struct ethtool_drvinfo info = {};
  info.cmd = ETHTOOL_GDRVINFO;
  struct ifreq ifr = {};
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  ifr.ifr_data = reinterpret_cast<char*>(&info);
  if (ioctl(sock.get(), SIOCETHTOOL, &ifr) != 0) return true;
  return info.bus_info[0] == 0 || std::strcmp(info.bus_info, "N/A") == 0;
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

Status EthtoolValue(const std::string& ifname, uint32_t cmd, uint32_t* value) {
  UniqueFd sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return Status::FromErrno(errno, "socket for ethtool");
  struct ethtool_value ev = {};
  ev.cmd = cmd;
  ev.data = *value;
  struct ifreq ifr = {};
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  ifr.ifr_data = reinterpret_cast<char*>(&ev);
  if (ioctl(sock.get(), SIOCETHTOOL, &ifr) != 0)
    return Status::FromErrno(errno, "ethtool on " + ifname);
  *value = ev.data;
  return Status::Ok();
}

// One rtnetlink request on ifname; for RTM_GETLINK, *reply gets the answer.
Status LinkRequest(const std::string& ifname, uint16_t type, const struct rtattr* attr,
                   std::vector<char>* reply) {
  auto idx = IfIndex(ifname);
  if (!idx.ok()) return idx.status();
  UniqueFd fd(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!fd.valid()) return Status::FromErrno(errno, "netlink socket");
  struct {
    struct nlmsghdr nh;
    struct ifinfomsg ifi;
    char attrs[64];
  } req;
  std::memset(&req, 0, sizeof(req));
  req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
  req.nh.nlmsg_type = type;
  req.nh.nlmsg_flags = NLM_F_REQUEST | (type == RTM_GETLINK ? 0 : NLM_F_ACK);
  req.nh.nlmsg_seq = 1;
  req.ifi.ifi_family = AF_UNSPEC;
  req.ifi.ifi_index = *idx;
  if (attr) {
    std::memcpy(reinterpret_cast<char*>(&req) + NLMSG_ALIGN(req.nh.nlmsg_len), attr, attr->rta_len);
    req.nh.nlmsg_len = NLMSG_ALIGN(req.nh.nlmsg_len) + RTA_ALIGN(attr->rta_len);
  }
  if (send(fd.get(), &req, req.nh.nlmsg_len, 0) < 0)
    return Status::FromErrno(errno, "netlink request on " + ifname);
  std::vector<char> buf(32768);
  ssize_t n = recv(fd.get(), buf.data(), buf.size(), 0);
  if (n < 0) return Status::FromErrno(errno, "netlink reply on " + ifname);
  auto* nh = reinterpret_cast<struct nlmsghdr*>(buf.data());
  if (!NLMSG_OK(nh, static_cast<unsigned>(n))) return Internal("short netlink reply on " + ifname);
  if (nh->nlmsg_type == NLMSG_ERROR) {
    auto* err = static_cast<struct nlmsgerr*>(NLMSG_DATA(nh));
    if (err->error) return Status::FromErrno(-err->error, "netlink request on " + ifname);
  }
  if (reply) {
    buf.resize(static_cast<size_t>(n));
    *reply = std::move(buf);
  }
  return Status::Ok();
}

// The device's gso_max_segs: how many segments the stack may put in one skb
// for it (TCP sizes its skbs by it, before any hook sees them). Read over
// netlink: /sys/class/net shows another namespace's devices under nsenter.
Status GetGsoMaxSegs(const std::string& ifname, uint32_t* segs) {
  std::vector<char> reply;
  LOSSD_RETURN_IF_ERROR(LinkRequest(ifname, RTM_GETLINK, nullptr, &reply));
  auto* nh = reinterpret_cast<struct nlmsghdr*>(reply.data());
  if (nh->nlmsg_type != RTM_NEWLINK) return Internal("unexpected netlink reply for " + ifname);
  auto* ifi = static_cast<struct ifinfomsg*>(NLMSG_DATA(nh));
  int len = static_cast<int>(nh->nlmsg_len) - NLMSG_LENGTH(sizeof(*ifi));
  for (auto* rta = IFLA_RTA(ifi); RTA_OK(rta, len); rta = RTA_NEXT(rta, len)) {
    if (rta->rta_type == IFLA_GSO_MAX_SEGS) {
      std::memcpy(segs, RTA_DATA(rta), sizeof(*segs));
      return Status::Ok();
    }
  }
  return FailedPrecondition("the kernel reports no gso_max_segs for " + ifname);
}

Status SetGsoMaxSegs(const std::string& ifname, uint32_t segs) {
  char buf[RTA_SPACE(sizeof(uint32_t))] = {};
  auto* rta = reinterpret_cast<struct rtattr*>(buf);
  rta->rta_type = IFLA_GSO_MAX_SEGS;
  rta->rta_len = RTA_LENGTH(sizeof(uint32_t));
  std::memcpy(RTA_DATA(rta), &segs, sizeof(segs));
  return LinkRequest(ifname, RTM_NEWLINK, rta, nullptr);
}

struct Offloads {
  uint32_t gro = 0;
  uint32_t gso_max_segs = 0;
};

Status GetOffloads(const std::string& ifname, Offloads* o) {
  LOSSD_RETURN_IF_ERROR(EthtoolValue(ifname, ETHTOOL_GGRO, &o->gro));
  return GetGsoMaxSegs(ifname, &o->gso_max_segs);
}

Status SetOffloads(const std::string& ifname, Offloads o) {
  Offloads cur;
  LOSSD_RETURN_IF_ERROR(GetOffloads(ifname, &cur));
  if (cur.gso_max_segs != o.gso_max_segs) LOSSD_RETURN_IF_ERROR(SetGsoMaxSegs(ifname, o.gso_max_segs));
  if (cur.gro != o.gro) LOSSD_RETURN_IF_ERROR(EthtoolValue(ifname, ETHTOOL_SGRO, &o.gro));
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

std::string DriverName(const std::string& ifname) {
  UniqueFd sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return "";
  struct ethtool_drvinfo info = {};
  info.cmd = ETHTOOL_GDRVINFO;
  struct ifreq ifr = {};
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  ifr.ifr_data = reinterpret_cast<char*>(&info);
  if (ioctl(sock.get(), SIOCETHTOOL, &ifr) != 0) return "";
  return info.driver;
}

Result<std::unique_ptr<OffloadGuard>> OffloadGuard::Disable(const std::string& ifname,
                                                            const std::string& state_file) {
  Offloads saved;
  LOSSD_RETURN_IF_ERROR(GetOffloads(ifname, &saved));
  std::unique_ptr<OffloadGuard> g(new OffloadGuard());
  g->ifname_ = ifname;
  g->state_file_ = state_file;
  g->gro_ = saved.gro;
  g->gso_max_segs_ = saved.gso_max_segs;
  // Record before changing, so a crash in between is recoverable.
  auto lines = ReadLines(state_file);
  lines.push_back(ifname + " " + std::to_string(saved.gro) + " " + std::to_string(saved.gso_max_segs));
  WriteLines(state_file, lines);
  Offloads one;
  one.gro = 0;
  one.gso_max_segs = 1;
  Status st = SetOffloads(ifname, one);
  if (!st.ok()) return st;  // the destructor restores what was changed
  return g;
}

OffloadGuard::~OffloadGuard() {
  Offloads o;
  o.gro = gro_;
  o.gso_max_segs = gso_max_segs_;
  Status st = SetOffloads(ifname_, o);
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
    if (!(in >> ifname >> o.gro >> o.gso_max_segs)) continue;
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
