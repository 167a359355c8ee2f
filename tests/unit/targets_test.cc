// The cgroup layouts of systemd, the container runtimes and the kubelet, read
// from paths alone (host/targets.h): which container, pod and unit a cgroup
// is. The resolution itself (walking the tree) is tested end to end in
// tests/e2e/targets/service_targets_test.py.
#include "host/targets.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lossd {
namespace {

const std::string kId = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string kUid = "0a1b2c3d-1111-2222-3333-444455556666";

TEST(ContainerIdOf, EachRuntimeAndDriver) {
  struct Case {
    std::string name, parent, runtime;
  } cases[] = {
      {"docker-" + kId + ".scope", "system.slice", "docker"},
      {kId, "docker", "docker"},
      {"cri-containerd-" + kId + ".scope", "kubepods-pod.slice", "containerd"},
      {kId, "pod" + kUid, "containerd"},
      {"crio-" + kId + ".scope", "x.slice", "cri-o"},
      {"crio-" + kId, "pod" + kUid, "cri-o"},
      {"libpod-" + kId + ".scope", "machine.slice", "podman"},
      {"libpod-" + kId, "libpod_parent", "podman"},
  };
  for (const auto& c : cases) {
    std::string id, runtime;
    ASSERT_TRUE(ContainerIdOf(c.name, c.parent, &id, &runtime)) << c.name;
    EXPECT_EQ(id, kId) << c.name;
    EXPECT_EQ(runtime, c.runtime) << c.name;
  }
}

TEST(ContainerIdOf, NotContainers) {
  std::string id, runtime;
  for (const std::string& name : std::vector<std::string>{
           "crio-conmon-" + kId + ".scope", "libpod-conmon-" + kId + ".scope", "docker.service",
           "docker-" + kId.substr(1) + ".scope", "docker-" + kId + ".service",
           "docker-" + kId,  // docker's cgroupfs layout is docker/ID
           std::string("0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef")})
    EXPECT_FALSE(ContainerIdOf(name, "system.slice", &id, &runtime)) << name;
}

TEST(PodUidOf, BothDriversEveryQos) {
  std::string underscored = kUid;
  for (auto& c : underscored)
    if (c == '-') c = '_';
  for (const std::string& name :
       {"kubepods-pod" + underscored + ".slice", "kubepods-burstable-pod" + underscored + ".slice",
        "kubepods-besteffort-pod" + underscored + ".slice"}) {
    std::string uid;
    ASSERT_TRUE(PodUidOf(name, false, &uid)) << name;
    EXPECT_EQ(uid, kUid);
  }
  std::string uid;
  EXPECT_TRUE(PodUidOf("pod" + kUid, true, &uid));
  EXPECT_EQ(uid, kUid);
  EXPECT_FALSE(PodUidOf("pod" + kUid, false, &uid)) << "pod<uid> outside kubepods is not a pod";
  EXPECT_FALSE(PodUidOf("kubepods-burstable.slice", false, &uid));
  EXPECT_FALSE(PodUidOf("pod" + kUid.substr(1), true, &uid));
}

TEST(CgroupOwnerOf, NamesWhatTheUserWould) {
  CgroupOwner o = CgroupOwnerOf("/system.slice/nginx.service");
  EXPECT_EQ(o.path, "/system.slice/nginx.service");
  EXPECT_EQ(o.unit, "nginx.service");
  EXPECT_EQ(o.container, "");
  EXPECT_EQ(o.pod, "");

  o = CgroupOwnerOf("/system.slice/nginx.service/worker");
  EXPECT_EQ(o.unit, "nginx.service") << "a sub-cgroup of a unit is the unit's";

  std::string underscored = kUid;
  for (auto& c : underscored)
    if (c == '-') c = '_';
  o = CgroupOwnerOf("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
                    underscored + ".slice/cri-containerd-" + kId + ".scope");
  EXPECT_EQ(o.pod, kUid);
  EXPECT_EQ(o.container, kId);
  EXPECT_EQ(o.runtime, "containerd");
  EXPECT_EQ(o.unit, "cri-containerd-" + kId + ".scope");

  o = CgroupOwnerOf("/kubepods/besteffort/pod" + kUid + "/" + kId);
  EXPECT_EQ(o.pod, kUid);
  EXPECT_EQ(o.container, kId);
  EXPECT_EQ(o.unit, "");

  o = CgroupOwnerOf("/docker/" + kId);
  EXPECT_EQ(o.container, kId);
  EXPECT_EQ(o.runtime, "docker");

  o = CgroupOwnerOf("");
  EXPECT_EQ(o.path, "/");
  EXPECT_EQ(o.unit, "");
}

// OwnerCache with a fake lookup: what it caches, and what it does not.
TEST(OwnerCache, LooksUpEachIdOnceAndNamesItsOwner) {
  std::map<uint64_t, std::string> paths = {{7, "/system.slice/nginx.service"}, {8, ""}};
  int lookups = 0;
  OwnerCache cache([&](uint64_t id) -> std::optional<std::string> {
    lookups++;
    return paths.count(id) ? paths[id] : "";
  });
  CgroupOwner o = cache.Of(7);
  EXPECT_EQ(o.path, "/system.slice/nginx.service");
  EXPECT_EQ(o.unit, "nginx.service");
  EXPECT_EQ(cache.Of(7).unit, "nginx.service");
  EXPECT_EQ(lookups, 1) << "an id's owner never changes: looked up once";
  EXPECT_EQ(cache.Of(8).path, "") << "no such cgroup now";
  EXPECT_EQ(cache.Of(8).path, "");
  EXPECT_EQ(lookups, 2) << "a cgroup that is gone is cached too (ids are never reused)";
  EXPECT_EQ(cache.Of(0).path, "");
  EXPECT_EQ(lookups, 2) << "id 0 is no cgroup: never looked up";
  EXPECT_EQ(cache.size(), 2u);
}

TEST(OwnerCache, AFailedLookupIsAskedAgain) {
  bool root_open = false;
  int lookups = 0;
  OwnerCache cache([&](uint64_t) -> std::optional<std::string> {
    lookups++;
    if (!root_open) return std::nullopt;
    return std::string("/docker/") + kId;
  });
  EXPECT_EQ(cache.Of(5).path, "");
  EXPECT_EQ(cache.size(), 0u);
  root_open = true;
  EXPECT_EQ(cache.Of(5).container, kId);
  EXPECT_EQ(lookups, 2);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(OwnerCache, StartsOverWhenFull) {
  int lookups = 0;
  OwnerCache cache(
      [&](uint64_t id) -> std::optional<std::string> {
        lookups++;
        return "/u" + std::to_string(id) + ".service";
      },
      /*capacity=*/3);
  for (uint64_t id = 1; id <= 3; id++) cache.Of(id);
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.Of(4).unit, "u4.service");
  EXPECT_EQ(cache.size(), 1u) << "bounded: full, it starts over";
  EXPECT_EQ(cache.Of(1).unit, "u1.service");
  EXPECT_EQ(lookups, 5) << "1 was forgotten with the others";
}

TEST(OwnerCache, IdZeroIsNobodyAndNeverLookedUp) {
  int asked = 0;
  OwnerCache cache([&](uint64_t) -> std::optional<std::string> {
    asked++;
    return std::string("/x");
  });
  EXPECT_EQ(cache.Of(0).path, "");
  EXPECT_EQ(asked, 0);
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace lossd
