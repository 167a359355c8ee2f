// rtnetlink requests on a link of this network namespace.
#pragma once

#include <linux/netlink.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/fd.h"
#include "base/status.h"

namespace lossd {

// A netlink dump: sends the request (`req`, its nlmsghdr first, NLM_F_DUMP
// set) on `fd` and hands `each` every reply message of `type`, until the
// kernel's NLMSG_DONE, whose payload is the dump's own result (an error there
// or in an NLMSG_ERROR is the errno's Status, named `what`). A dump the
// kernel closed before DONE is INTERNAL; `each` stops it with its own error.
Status NetlinkDump(int fd, const void* req, size_t len, uint16_t type, const char* what,
                   const std::function<Status(const struct nlmsghdr& m)>& each);

// The device's gso_max_segs: how many segments the stack may put in one skb
// for it (TCP sizes its skbs by it, before any hook sees them).
Status GetGsoMaxSegs(const std::string& ifname, uint32_t* segs);
Status SetGsoMaxSegs(const std::string& ifname, uint32_t segs);

// A device of this (the calling thread's) network namespace, as a link dump
// reports it.
struct Link {
  int ifindex = 0;
  std::string name;
  int master = 0;  // the bridge, bond or VRF it is enslaved to; 0: none
  unsigned flags = 0;  // IFF_*
};
// Every device of the calling thread's network namespace (RTM_GETLINK dump),
// at most `max` (INVALID_ARGUMENT past it: a namespace with more devices is
// not one lossd walks).
Result<std::vector<Link>> ListLinks(size_t max = 4096);

// A netlink socket subscribed to this namespace's link changes (RTNLGRP_LINK:
// RTM_NEWLINK, RTM_DELLINK), non-blocking. Its owner polls it for POLLIN and
// calls DrainLinkEvents.
Result<UniqueFd> OpenLinkEvents();
// Reads every waiting message; returns how many were link changes. The
// socket's overflow (ENOBUFS: changes were lost) counts as one, so the
// caller re-checks everything either way.
int DrainLinkEvents(int fd);

}  // namespace lossd
