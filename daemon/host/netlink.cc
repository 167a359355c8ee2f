#include "host/netlink.h"

#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "base/fd.h"
#include "host/interface.h"

namespace lossd {
namespace {

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

}  // namespace

// Read over netlink: /sys/class/net shows another namespace's devices under nsenter.
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

namespace {

void ParseLink(const struct nlmsghdr* nh, std::vector<Link>* out) {
  auto* ifi = static_cast<const struct ifinfomsg*>(NLMSG_DATA(nh));
  int len = static_cast<int>(nh->nlmsg_len) - NLMSG_LENGTH(sizeof(*ifi));
  if (len < 0) return;
  Link l;
  l.ifindex = ifi->ifi_index;
  l.flags = ifi->ifi_flags;
  for (auto* rta = IFLA_RTA(ifi); RTA_OK(rta, len); rta = RTA_NEXT(rta, len)) {
    size_t n = RTA_PAYLOAD(rta);
    if (rta->rta_type == IFLA_IFNAME && n > 0)
      l.name.assign(static_cast<const char*>(RTA_DATA(rta)), strnlen(static_cast<const char*>(RTA_DATA(rta)), n));
    else if (rta->rta_type == IFLA_MASTER && n >= sizeof(uint32_t))
      std::memcpy(&l.master, RTA_DATA(rta), sizeof(uint32_t));
  }
  out->push_back(std::move(l));
}

}  // namespace

Result<std::vector<Link>> ListLinks(size_t max) {
  UniqueFd fd(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!fd.valid()) return Status::FromErrno(errno, "netlink socket");
  struct {
    struct nlmsghdr nh;
    struct ifinfomsg ifi;
  } req;
  std::memset(&req, 0, sizeof(req));
  req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
  req.nh.nlmsg_type = RTM_GETLINK;
  req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.nh.nlmsg_seq = 1;
  req.ifi.ifi_family = AF_UNSPEC;
  std::vector<Link> links;
  Status st = NetlinkDump(fd.get(), &req, req.nh.nlmsg_len, RTM_NEWLINK, "netlink link dump",
                          [&](const struct nlmsghdr& m) {
                            if (links.size() >= max)
                              return InvalidArgument("more than " + std::to_string(max) +
                                                     " devices in one network namespace");
                            ParseLink(&m, &links);
                            return Status::Ok();
                          });
  if (!st.ok()) return st;
  return links;
}

Status NetlinkDump(int fd, const void* req, size_t len, uint16_t type, const char* what,
                   const std::function<Status(const struct nlmsghdr& m)>& each) {
  if (send(fd, req, len, 0) < 0) return Status::FromErrno(errno, what);
  std::vector<char> buf(65536);
  for (;;) {
    ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, what);
    }
    if (n == 0) return Internal(std::string(what) + ": the kernel closed the dump");
    int left = static_cast<int>(n);
    for (auto* m = reinterpret_cast<struct nlmsghdr*>(buf.data()); NLMSG_OK(m, left);
         m = NLMSG_NEXT(m, left)) {
      if (m->nlmsg_type == NLMSG_DONE) {  // its payload: the dump's own result
        int rc = 0;
        if (m->nlmsg_len >= NLMSG_LENGTH(sizeof(rc))) std::memcpy(&rc, NLMSG_DATA(m), sizeof(rc));
        return rc < 0 ? Status::FromErrno(-rc, what) : Status::Ok();
      }
      if (m->nlmsg_type == NLMSG_ERROR) {
        auto* err = static_cast<const struct nlmsgerr*>(NLMSG_DATA(m));
        return Status::FromErrno(err->error ? -err->error : EPROTO, what);
      }
      if (m->nlmsg_type != type) continue;
      LOSSD_RETURN_IF_ERROR(each(*m));
    }
  }
}

Result<UniqueFd> OpenLinkEvents() {
  UniqueFd fd(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE));
  if (!fd.valid()) return Status::FromErrno(errno, "netlink socket for link events");
  struct sockaddr_nl sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.nl_family = AF_NETLINK;
  sa.nl_groups = RTMGRP_LINK;
  if (bind(fd.get(), reinterpret_cast<struct sockaddr*>(&sa), sizeof(sa)) < 0)
    return Status::FromErrno(errno, "subscribe to link events (RTNLGRP_LINK)");
  return fd;
}

int DrainLinkEvents(int fd) {
  int changes = 0;
  std::vector<char> buf(32768);
  for (;;) {
    ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOBUFS) {  // the kernel dropped some: treat as a change
        changes++;
        continue;
      }
      return changes;  // EAGAIN: nothing more waits
    }
    if (n == 0) return changes;
    int len = static_cast<int>(n);
    for (auto* nh = reinterpret_cast<struct nlmsghdr*>(buf.data()); NLMSG_OK(nh, len);
         nh = NLMSG_NEXT(nh, len))
      if (nh->nlmsg_type == RTM_NEWLINK || nh->nlmsg_type == RTM_DELLINK) changes++;
  }
}

}  // namespace lossd
