// The observer API's typed filters (observer/filters.h): allow/deny, address
// masks, port ranges, type sets, rule ids and owners by name, and the
// compiled FilterSet against Matches() filter by filter.
#include "observer/filters.h"
#include "observer/observer.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <map>
#include <random>

#include "service/convert.h"

namespace lossd {
namespace {

obs_tuple Tuple(const char* local, uint16_t lport, const char* remote, uint16_t rport) {
  obs_tuple t{};
  bool v6 = std::string(local).find(':') != std::string::npos;
  t.family = v6 ? AF_INET6 : AF_INET;
  EXPECT_EQ(inet_pton(t.family, local, t.saddr), 1) << local;
  EXPECT_EQ(inet_pton(t.family, remote, t.daddr), 1) << remote;
  t.sport = lport;
  t.dport = rport;
  return t;
}

StreamFilter Addr(const char* cidr) {
  StreamFilter f;
  f.addr = *ParseCidr(cidr);
  return f;
}

StreamFilter Ports(uint16_t lo, uint16_t hi) {
  StreamFilter f;
  f.port.lo = lo;
  f.port.hi = hi;
  return f;
}

StreamFilter Types(std::set<int> types) {
  StreamFilter f;
  f.types = std::move(types);
  return f;
}

StreamFilter Rule(uint32_t id) {
  StreamFilter f;
  f.rule_id = id;
  return f;
}

obs_event Event(const obs_tuple& t, int type, uint64_t cgroup_id = 0, uint64_t cookie = 1) {
  obs_event e{};
  e.kind = OBS_EV_RETRANSMIT;
  e.cookie = cookie;
  e.cgroup_id = cgroup_id;
  e.tuple = t;
  e.type = static_cast<uint32_t>(type);
  return e;
}

// No cgroup fs: owners come from this table.
FilterLookups FakeOwners(std::map<uint64_t, CgroupOwner> owners) {
  FilterLookups l;
  l.owner = [owners](uint64_t id) {
    auto it = owners.find(id);
    return it == owners.end() ? CgroupOwner{} : it->second;
  };
  return l;
}

const obs_tuple kWeb = Tuple("10.1.2.3", 80, "192.168.7.9", 40000);

TEST(StreamFilters, NoneWantEverything) {
  StreamFilters f({}, {}, FilterLookups{});
  EXPECT_TRUE(f.empty());
  EXPECT_TRUE(f.WantsEvent(Event(kWeb, OBS_RTX_FAST), true));
  obs_flow flow{};
  flow.tuple = kWeb;
  EXPECT_TRUE(f.WantsFlow(1, flow));
}

TEST(StreamFilters, AllowIsAnyOfDenyIsNoneOf) {
  // Allow port 80 or host 172.16.0.1; deny remote 192.168.7.0/24 on port 40000.
  StreamFilter deny = Addr("192.168.7.0/24");
  deny.port = Ports(40000, 40000).port;
  StreamFilters f({Ports(80, 80), Addr("172.16.0.1/32")}, {deny}, FilterLookups{});
  EXPECT_FALSE(f.empty());
  auto wants = [&](const obs_tuple& t) { return f.WantsEvent(Event(t, OBS_RTX_FAST), true); };
  EXPECT_FALSE(wants(kWeb));  // allowed, then denied (both fields of the deny filter)
  EXPECT_TRUE(wants(Tuple("10.1.2.3", 80, "192.168.7.9", 40001)));
  EXPECT_TRUE(wants(Tuple("10.1.2.3", 80, "192.168.8.9", 40000)));
  EXPECT_TRUE(wants(Tuple("172.16.0.1", 5000, "10.9.9.9", 6000)));  // the other allow filter
  EXPECT_FALSE(wants(Tuple("172.16.0.2", 5000, "10.9.9.9", 6000)));
  // Deny alone: everything but what it names.
  StreamFilters deny_only({}, {Ports(22, 22)}, FilterLookups{});
  EXPECT_TRUE(deny_only.WantsEvent(Event(kWeb, OBS_RTX_RTO), true));
  EXPECT_FALSE(deny_only.WantsEvent(Event(Tuple("10.0.0.1", 22, "10.0.0.2", 999), 0), true));
}

TEST(StreamFilters, AndInsideAFilter) {
  StreamFilter f = Addr("10.0.0.0/8");
  f.port = Ports(80, 80).port;
  f.types = {OBS_RTX_RTO};
  StreamFilters s({f}, {}, FilterLookups{});
  EXPECT_TRUE(s.WantsEvent(Event(kWeb, OBS_RTX_RTO), true));
  EXPECT_FALSE(s.WantsEvent(Event(kWeb, OBS_RTX_FAST), true));
  EXPECT_FALSE(s.WantsEvent(Event(Tuple("10.1.2.3", 81, "192.168.7.9", 40000), OBS_RTX_RTO), true));
  EXPECT_FALSE(s.WantsEvent(Event(Tuple("11.1.2.3", 80, "192.168.7.9", 40000), OBS_RTX_RTO), true));
}

TEST(StreamFilters, AddressMasksV4LocalOrRemote) {
  auto wants = [](const char* cidr, const obs_tuple& t) {
    return StreamFilters({Addr(cidr)}, {}, FilterLookups{}).WantsEvent(Event(t, 0), true);
  };
  EXPECT_TRUE(wants("10.0.0.0/8", kWeb));      // local
  EXPECT_TRUE(wants("192.168.0.0/16", kWeb));  // remote
  EXPECT_TRUE(wants("192.168.7.9/32", kWeb));  // a host: the hash lookup
  EXPECT_TRUE(wants("10.1.2.3/32", kWeb));
  EXPECT_FALSE(wants("10.1.2.4/32", kWeb));
  EXPECT_FALSE(wants("10.1.2.0/31", kWeb));  // .0 and .1
  EXPECT_TRUE(wants("10.1.2.2/31", kWeb));   // .2 and .3
  EXPECT_FALSE(wants("10.1.2.4/30", kWeb));
  EXPECT_FALSE(wants("11.0.0.0/8", kWeb));
  EXPECT_TRUE(wants("0.0.0.0/0", kWeb));
  // A v4 mask never matches a v6 flow, nor the other way round.
  obs_tuple v6 = Tuple("2001:db8::1", 80, "2001:db8:1::2", 40000);
  EXPECT_FALSE(wants("0.0.0.0/0", v6));
  EXPECT_FALSE(wants("::/0", kWeb));
}

TEST(StreamFilters, AddressMasksV6) {
  obs_tuple t = Tuple("2001:db8::1", 443, "fd00:1:2::77", 50000);
  auto wants = [&](const char* cidr) {
    return StreamFilters({Addr(cidr)}, {}, FilterLookups{}).WantsEvent(Event(t, 0), true);
  };
  EXPECT_TRUE(wants("2001:db8::/32"));
  EXPECT_TRUE(wants("fd00:1::/32"));
  EXPECT_TRUE(wants("2001:db8::1/128"));  // the hash lookup
  EXPECT_TRUE(wants("fd00:1:2::77/128"));
  EXPECT_FALSE(wants("2001:db8::2/128"));
  EXPECT_FALSE(wants("2001:db9::/32"));
  EXPECT_TRUE(wants("fd00:1:2::/120"));
  EXPECT_FALSE(wants("fd00:1:2::100/120"));
  EXPECT_TRUE(wants("::/0"));
}

TEST(StreamFilters, PortRangesLocalOrRemote) {
  auto wants = [](uint16_t lo, uint16_t hi, const obs_tuple& t) {
    return StreamFilters({Ports(lo, hi)}, {}, FilterLookups{}).WantsEvent(Event(t, 0), true);
  };
  EXPECT_TRUE(wants(80, 80, kWeb));        // local
  EXPECT_TRUE(wants(40000, 40000, kWeb));  // remote
  EXPECT_TRUE(wants(30000, 40000, kWeb));  // upper bound inclusive
  EXPECT_TRUE(wants(40000, 50000, kWeb));  // lower bound inclusive
  EXPECT_FALSE(wants(81, 39999, kWeb));
  EXPECT_FALSE(wants(40001, 65535, kWeb));
  EXPECT_TRUE(wants(1, 80, kWeb));
  // With a second field the range is checked one by one: same answers.
  StreamFilter f = Ports(30000, 40000);
  f.addr = *ParseCidr("10.0.0.0/8");
  EXPECT_TRUE(StreamFilters({f}, {}, FilterLookups{}).WantsEvent(Event(kWeb, 0), true));
  f.port = Ports(40001, 50000).port;
  EXPECT_FALSE(StreamFilters({f}, {}, FilterLookups{}).WantsEvent(Event(kWeb, 0), true));
}

TEST(StreamFilters, TypeSetsOnRetransmissionsOnly) {
  StreamFilters s({Types({OBS_RTX_RTO, OBS_RTX_TLP})}, {}, FilterLookups{});
  EXPECT_TRUE(s.WantsEvent(Event(kWeb, OBS_RTX_RTO), true));
  EXPECT_TRUE(s.WantsEvent(Event(kWeb, OBS_RTX_TLP), true));
  EXPECT_FALSE(s.WantsEvent(Event(kWeb, OBS_RTX_FAST), true));
  EXPECT_FALSE(s.WantsEvent(Event(kWeb, OBS_RTX_SYN), true));
  // Stalls and flows have no type: a type filter does not hold them back.
  EXPECT_TRUE(s.WantsEvent(Event(kWeb, OBS_RTX_FAST), false));
  obs_flow flow{};
  flow.tuple = kWeb;
  EXPECT_TRUE(s.WantsFlow(1, flow));
  // The same inside a filter of several fields.
  StreamFilter f = Types({OBS_RTX_LOSS});
  f.port = Ports(80, 80).port;
  StreamFilters several({f}, {}, FilterLookups{});
  EXPECT_TRUE(several.WantsEvent(Event(kWeb, OBS_RTX_LOSS), true));
  EXPECT_FALSE(several.WantsEvent(Event(kWeb, OBS_RTX_RTO), true));
  EXPECT_TRUE(several.WantsEvent(Event(kWeb, OBS_RTX_RTO), false));
  // Denied types.
  StreamFilters no_syn({}, {Types({OBS_RTX_SYN, OBS_RTX_SYNACK})}, FilterLookups{});
  EXPECT_TRUE(no_syn.WantsEvent(Event(kWeb, OBS_RTX_FAST), true));
  EXPECT_FALSE(no_syn.WantsEvent(Event(kWeb, OBS_RTX_SYNACK), true));
}

TEST(StreamFilters, RuleIdsLookedUpOnceAndOnlyWhenNamed) {
  int lookups = 0;
  FilterLookups l;
  l.rules = [&](uint64_t cookie, const obs_tuple&) {
    lookups++;
    return cookie == 1 ? std::vector<uint32_t>{7, 9} : std::vector<uint32_t>{};
  };
  StreamFilters by_rule({Rule(9)}, {Rule(8)}, l);  // allow and deny both look: one lookup
  EXPECT_TRUE(by_rule.WantsEvent(Event(kWeb, 0, 0, 1), true));
  EXPECT_EQ(lookups, 1);
  EXPECT_FALSE(by_rule.WantsEvent(Event(kWeb, 0, 0, 2), true));
  EXPECT_EQ(lookups, 2);
  StreamFilters deny7({}, {Rule(7)}, l);
  EXPECT_FALSE(deny7.WantsEvent(Event(kWeb, 0, 0, 1), true));
  // A rule id beside another field (checked one by one).
  StreamFilter f = Rule(7);
  f.port = Ports(80, 80).port;
  StreamFilters both({f}, {}, l);
  EXPECT_TRUE(both.WantsEvent(Event(kWeb, 0, 0, 1), true));
  EXPECT_FALSE(both.WantsEvent(Event(Tuple("10.1.2.3", 81, "1.2.3.4", 5), 0, 0, 1), true));
  lookups = 0;
  StreamFilters by_port({Ports(80, 80)}, {Addr("1.1.1.1/32")}, l);
  EXPECT_TRUE(by_port.WantsEvent(Event(kWeb, 0, 0, 1), true));
  EXPECT_EQ(lookups, 0);  // no filter named a rule
  // Without a rule source no flow is covered by any rule.
  EXPECT_FALSE(StreamFilters({Rule(7)}, {}, FilterLookups{}).WantsEvent(Event(kWeb, 0), true));
}

TEST(StreamFilters, CgroupIds) {
  StreamFilter f;
  f.cgroup_id = 42;
  StreamFilters s({f}, {}, FilterLookups{});
  EXPECT_TRUE(s.WantsEvent(Event(kWeb, 0, 42), true));
  EXPECT_FALSE(s.WantsEvent(Event(kWeb, 0, 43), true));
  EXPECT_FALSE(s.WantsEvent(Event(kWeb, 0, 0), true));
}

TEST(Under, PathAndBelow) {
  EXPECT_TRUE(Under("/system.slice/nginx.service", "/system.slice"));
  EXPECT_TRUE(Under("/system.slice", "/system.slice"));
  EXPECT_FALSE(Under("/system.slicex/a", "/system.slice"));
  EXPECT_FALSE(Under("/system", "/system.slice"));
  EXPECT_TRUE(Under("/anything", "/"));
  EXPECT_TRUE(Under("/", "/"));
}

TEST(StreamFilter, NormalizeOwner) {
  StreamFilter f;
  f.cgroup = "system.slice/";
  f.unit = "nginx";
  f.container = "ABC_def";
  f.pod = "1234_ABCD";
  f.NormalizeOwner();
  EXPECT_EQ(f.cgroup, "/system.slice");
  EXPECT_EQ(f.unit, "nginx.service");
  EXPECT_EQ(f.container, "abc-def");
  EXPECT_EQ(f.pod, "1234-abcd");
  StreamFilter g;
  g.cgroup = "///";
  g.unit = "user.slice";
  g.NormalizeOwner();
  EXPECT_EQ(g.cgroup, "/");
  EXPECT_EQ(g.unit, "user.slice");  // has a suffix: kept
}

TEST(StreamFilters, OwnersByCgroupUnitContainerPod) {
  const std::string kId = "4f2a9c1b0d3e4f5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c";
  const std::string kPod = "0b8d3f1e-2c4a-4e6f-8a9b-1c2d3e4f5a6b";
  std::map<uint64_t, CgroupOwner> owners;
  owners[10] = CgroupOwner{"/system.slice/nginx.service", "nginx.service", "", "", ""};
  owners[11] = CgroupOwner{"/system.slice/nginx.service/worker", "nginx.service", "", "", ""};
  owners[12] = CgroupOwner{"/system.slice/docker-" + kId + ".scope", "docker-" + kId + ".scope",
                           kId, "docker", ""};
  owners[13] =
      CgroupOwner{"/kubepods.slice/kubepods-pod" + kPod + ".slice/cri-containerd-" + kId + ".scope",
                  "", kId, "containerd", kPod};
  owners[14] = CgroupOwner{"/user.slice/nginx.service.d", "", "", "", ""};
  FilterLookups l = FakeOwners(owners);
  auto wants = [&](StreamFilter f, uint64_t cgroup_id) {
    f.NormalizeOwner();
    return StreamFilters({f}, {}, l).WantsEvent(Event(kWeb, 0, cgroup_id), true);
  };
  StreamFilter cg;
  cg.cgroup = "system.slice";
  EXPECT_TRUE(wants(cg, 10));
  EXPECT_TRUE(wants(cg, 11));
  EXPECT_TRUE(wants(cg, 12));
  EXPECT_FALSE(wants(cg, 13));
  EXPECT_FALSE(wants(cg, 99));  // no such cgroup (now): never matches
  cg.cgroup = "/";
  EXPECT_TRUE(wants(cg, 13));
  EXPECT_FALSE(wants(cg, 99));
  StreamFilter unit;
  unit.unit = "nginx";           // .service added
  EXPECT_TRUE(wants(unit, 10));  // the path ends with it
  EXPECT_TRUE(wants(unit, 11));  // a cgroup below it
  EXPECT_FALSE(wants(unit, 12));
  EXPECT_FALSE(wants(unit, 14));  // a name that only starts with it
  StreamFilter container;
  container.container = kId.substr(0, 12);  // a prefix
  EXPECT_TRUE(wants(container, 12));
  EXPECT_TRUE(wants(container, 13));
  EXPECT_FALSE(wants(container, 10));
  container.container = "4F2A9C";  // upper case as users may type it
  EXPECT_TRUE(wants(container, 12));
  StreamFilter pod;
  pod.pod = "0b8d3f1e_2c4a";  // underscores as the systemd driver writes it
  EXPECT_TRUE(wants(pod, 13));
  EXPECT_FALSE(wants(pod, 12));
  // Owner beside another field; and denied by owner.
  StreamFilter both = unit;
  both.port = Ports(80, 80).port;
  EXPECT_TRUE(wants(both, 10));
  both.port = Ports(81, 81).port;
  EXPECT_FALSE(wants(both, 10));
  unit.NormalizeOwner();
  StreamFilters deny({}, {unit}, l);
  EXPECT_FALSE(deny.WantsEvent(Event(kWeb, 0, 10), true));
  EXPECT_TRUE(deny.WantsEvent(Event(kWeb, 0, 12), true));
}

TEST(StreamFilters, OwnerLookedUpOnlyForOwnerFilters) {
  int lookups = 0;
  FilterLookups l;
  l.owner = [&](uint64_t) {
    lookups++;
    return CgroupOwner{"/a/b", "", "", "", ""};
  };
  StreamFilter a, b;
  a.cgroup = "/x";
  b.cgroup = "/y";
  StreamFilters s({a, b, Ports(9, 9)}, {}, l);
  EXPECT_FALSE(s.WantsEvent(Event(kWeb, 0, 5), true));
  EXPECT_EQ(lookups, 1);  // once per event, however many filters name an owner
  lookups = 0;
  EXPECT_TRUE(StreamFilters({Ports(80, 80)}, {}, l).WantsEvent(Event(kWeb, 0, 5), true));
  EXPECT_EQ(lookups, 0);
}

// The compiled set answers as Matches() over the list, for random lists of
// one- and several-field filters.
TEST(FilterSet, SameAnswersAsMatchesOneByOne) {
  std::mt19937 rng(23);
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  const char* hosts[] = {"10.0.0.1", "10.0.0.2", "10.0.1.1", "2001:db8::1", "2001:db8::2"};
  const char* masks[] = {"10.0.0.1/32",     "10.0.0.0/24",   "10.0.0.0/8",
                         "2001:db8::1/128", "2001:db8::/64", "0.0.0.0/0"};
  FilterLookups l;
  l.rules = [](uint64_t cookie, const obs_tuple&) {
    return std::vector<uint32_t>{static_cast<uint32_t>(cookie % 4), 5};
  };
  l.owner = [](uint64_t id) {
    return CgroupOwner{id % 2 ? "/system.slice/a.service" : "/user.slice", "", "", "", ""};
  };
  for (int round = 0; round < 200; round++) {
    std::vector<StreamFilter> list;
    int n = pick(6);
    for (int i = 0; i < n; i++) {
      StreamFilter f;
      int fields = 1 + pick(3);
      for (int k = 0; k < fields; k++) switch (pick(7)) {
          case 0: f.addr = *ParseCidr(masks[pick(6)]); break;
          case 1: {
            uint16_t lo = static_cast<uint16_t>(1 + pick(100));
            f.port.lo = lo;
            f.port.hi = static_cast<uint16_t>(lo + pick(20));
            break;
          }
          case 2: f.cgroup_id = 1 + pick(4); break;
          case 3: f.types.insert(pick(OBS_RTX_MAX)); break;
          case 4: f.rule_id = static_cast<uint32_t>(1 + pick(6)); break;
          case 5: f.cgroup = pick(2) ? "/system.slice" : "/user.slice"; break;
          case 6: f.netns = 4026531840u + pick(3); break;
        }
      list.push_back(f);
    }
    FilterSet set(list);
    for (int e = 0; e < 50; e++) {
      int v6 = pick(2);
      const char* a = hosts[v6 ? 3 + pick(2) : pick(3)];
      const char* b = hosts[v6 ? 3 + pick(2) : pick(3)];
      obs_tuple t =
          Tuple(a, static_cast<uint16_t>(1 + pick(130)), b, static_cast<uint16_t>(1 + pick(130)));
      uint64_t cgroup_id = pick(5);
      int type = pick(3) ? pick(OBS_RTX_MAX) : -1;
      FilterSubject s(l, 1 + pick(8), t, cgroup_id, type, 4026531840u + pick(4));
      bool want = false;
      for (const StreamFilter& f : list) want = want || Matches(f, s);
      EXPECT_EQ(set.Any(s), want) << "round " << round << " event " << e;
    }
  }
}

// A filter by network namespace: the socket's, alone (a lookup) or with other
// fields; events and flows carry it (obs_event.netns, obs_flow.netns).
TEST(Filters, NetnsAloneAndWithOtherFields) {
  obs_tuple t = Tuple("10.0.0.1", 40000, "10.0.0.2", 80);
  StreamFilter ns;
  ns.netns = 4026532000u;
  StreamFilter ns_port = ns;
  ns_port.port.lo = ns_port.port.hi = 80;
  StreamFilter other = ns;
  other.netns = 4026532001u;
  for (const auto& list : {std::vector<StreamFilter>{ns}, std::vector<StreamFilter>{ns_port}}) {
    StreamFilters f(list, {}, FilterLookups{});
    obs_event e = Event(t, OBS_RTX_FAST);
    e.netns = 4026532000u;
    EXPECT_TRUE(f.WantsEvent(e, true));
    e.netns = 4026532001u;
    EXPECT_FALSE(f.WantsEvent(e, true));
    obs_flow fl{};
    fl.tuple = t;
    fl.netns = 4026532000u;
    EXPECT_TRUE(f.WantsFlow(1, fl));
    fl.netns = 0;
    EXPECT_FALSE(f.WantsFlow(1, fl));
  }
  // Denied: everything but that namespace.
  StreamFilters deny({}, {other}, FilterLookups{});
  obs_event e = Event(t, OBS_RTX_RTO);
  e.netns = 4026532000u;
  EXPECT_TRUE(deny.WantsEvent(e, true));
  e.netns = 4026532001u;
  EXPECT_FALSE(deny.WantsEvent(e, true));
}

// lossd --observe-netns: own, all, or a list of paths (own among them).
TEST(NetnsWatchFlag, Parses) {
  EXPECT_EQ(ParseNetnsWatch("own")->mode, NetnsWatch::Mode::kOwn);
  EXPECT_EQ(ParseNetnsWatch("all")->mode, NetnsWatch::Mode::kAll);
  auto w = ParseNetnsWatch("/run/netns/a,own,/proc/1/ns/net");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->mode, NetnsWatch::Mode::kSet);
  EXPECT_EQ(w->paths, (std::vector<std::string>{"/run/netns/a", "own", "/proc/1/ns/net"}));
  EXPECT_EQ(NetnsWatchText(*w), "/run/netns/a,own,/proc/1/ns/net");
  for (const char* bad : {"none", "a,b", "/x,,/y", "/x,", "all,/x", "relative/path"})
    EXPECT_EQ(ParseNetnsWatch(bad).status().code(), Code::kInvalidArgument) << bad;
  std::string many;
  for (int i = 0; i <= OBS_MAX_WATCHED_NETNS; i++) many += (i ? ",/proc/" : "/proc/") + std::to_string(i);
  EXPECT_EQ(ParseNetnsWatch(many).status().code(), Code::kInvalidArgument);
}

// A stream filter's names are refused with a control character in them, as a
// rule's are (issue 25 item 9): a NUL would hide what the filter selects.
TEST(FiltersFromProto, NamesWithControlCharactersAreRefused) {
  google::protobuf::RepeatedPtrField<v1::EventFilter> in;
  in.Add()->set_unit(std::string("web\0.service", 12));
  std::vector<StreamFilter> out;
  Status st = FiltersFromProto(in, "allow", &out);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_EQ(st.message(), "allow[0].unit holds a control character at byte 3: 'web\\x00.service'");
  in.Mutable(0)->set_unit("web");
  in.Add()->set_pod("abc\n");
  st = FiltersFromProto(in, "deny", &out);
  EXPECT_NE(st.message().find("deny[1].pod holds a control character"), std::string::npos)
      << st.message();
  in.Mutable(1)->set_pod("abc");
  out.clear();
  EXPECT_TRUE(FiltersFromProto(in, "allow", &out).ok());
  EXPECT_EQ(out.size(), 2u);
}

}  // namespace
}  // namespace lossd
