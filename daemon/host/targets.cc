#include "host/targets.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "base/fd.h"
#include "host/cgroup.h"

extern char** environ;

namespace lossd {
namespace {

bool IsHex(const std::string& s, size_t from, size_t n) {
  if (from + n > s.size()) return false;
  for (size_t i = from; i < from + n; i++)
    if (!std::isxdigit(static_cast<unsigned char>(s[i])) || std::isupper(s[i])) return false;
  return true;
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool IsUnitName(const std::string& s) {
  return EndsWith(s, ".service") || EndsWith(s, ".scope") || EndsWith(s, ".slice");
}

// 8-4-4-4-12 lower-case hex digits.
bool IsUid(const std::string& s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < 36; i++) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !IsHex(s, i, 1)) return false;
  }
  return true;
}

std::vector<std::string> Components(const std::string& rel) {
  std::vector<std::string> out;
  std::stringstream ss(rel);
  std::string part;
  while (std::getline(ss, part, '/'))
    if (!part.empty()) out.push_back(part);
  return out;
}

// The cgroup directories below `root` (absolute paths; `root` itself
// included), depth first, bounded: a host has a few thousand.
constexpr size_t kMaxWalk = 200000;
constexpr int kMaxDepth = 32;

void Walk(const std::string& dir, int depth, size_t* seen,
          const std::function<void(const std::string&)>& visit) {
  if (*seen >= kMaxWalk) return;
  (*seen)++;
  visit(dir);
  if (depth >= kMaxDepth) return;
  DIR* d = opendir(dir.c_str());
  if (!d) return;  // removed meanwhile, or not a directory
  std::vector<std::string> subs;
  while (struct dirent* e = readdir(d)) {
    if (e->d_type != DT_DIR || !std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, ".."))
      continue;
    subs.push_back(dir + "/" + e->d_name);
  }
  closedir(d);
  std::sort(subs.begin(), subs.end());
  for (const auto& s : subs) Walk(s, depth + 1, seen, visit);
}

std::string Rel(const std::string& mount, const std::string& abs) {
  std::string r = abs.substr(std::min(abs.size(), mount.size()));
  return r.empty() ? "/" : r;
}

// One match, or NOT_FOUND / INVALID_ARGUMENT (the candidates, at most 10).
Result<std::string> One(const std::vector<std::string>& found, const std::string& mount,
                        const std::string& what, const std::string& looked) {
  if (found.empty())
    return NotFound(what + ": no cgroup found under the cgroup v2 mount " + mount + " (" + looked +
                    ")");
  if (found.size() > 1) {
    std::string list;
    for (size_t i = 0; i < found.size() && i < 10; i++)
      list += (i ? ", " : "") + Rel(mount, found[i]);
    if (found.size() > 10) list += ", ... (" + std::to_string(found.size()) + " in all)";
    return InvalidArgument(what + " matches " + std::to_string(found.size()) + " cgroups: " + list +
                           "; name one (a longer id, or --cgroup PATH)");
  }
  return found[0];
}

// Runs argv[0] (found on PATH) with a deadline; its stdout (bounded) and
// exit status. For the tools a service's owner answers through (kubectl,
// systemctl): never a shell.
struct ToolRun {
  int status = -1;  // wait status; -1 if it did not run to completion
  std::string out;  // stdout, and with_stderr its stderr too
};
Result<ToolRun> RunTool(const std::vector<std::string>& args, int timeout_ms,
                        bool with_stderr = false) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe for " + args[0]);
  UniqueFd rd(pipefd[0]), wr(pipefd[1]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, wr.get(), 1);
  if (with_stderr)
    posix_spawn_file_actions_adddup2(&fa, wr.get(), 2);
  else
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  int err = posix_spawnp(&pid, args[0].c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (err) return Status::FromErrno(err, "run " + args[0]);
  wr.Reset();
  ToolRun r;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  char buf[4096];
  for (;;) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long left =
        timeout_ms - ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000);
    if (left <= 0) break;
    struct pollfd p = {rd.get(), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    ssize_t n = read(rd.get(), buf, sizeof(buf));
    if (n <= 0) break;
    if (r.out.size() < 65536) r.out.append(buf, static_cast<size_t>(n));
  }
  // Its stdout ended (or the time is up): its exit, within what is left of
  // the time (a tool may close stdout before it exits).
  int status = 0;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) return Status::FromErrno(errno, "wait for " + args[0]);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long left =
        timeout_ms - ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000);
    if (left <= 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return Status(Code::kUnavailable,
                    args[0] + " did not answer within " + std::to_string(timeout_ms) + " ms");
    }
    struct timespec nap = {0, 5 * 1000 * 1000};  // 5 ms
    nanosleep(&nap, nullptr);
  }
  r.status = status;
  return r;
}

bool OnPath(const std::string& tool) {
  const char* path = getenv("PATH");
  std::stringstream ss(path ? path : "");
  std::string dir;
  while (std::getline(ss, dir, ':'))
    if (!dir.empty() && access((dir + "/" + tool).c_str(), X_OK) == 0) return true;
  return false;
}

// ---- the kinds ---------------------------------------------------------------

Result<std::string> PidCgroup(uint32_t pid, const std::string& mount) {
  std::string what = "pid " + std::to_string(pid);
  // Held across the lookup: the answer is the cgroup of this process, not of
  // one that reused its pid.
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0)));
  if (!pidfd.valid()) {
    if (errno == ESRCH || errno == EINVAL) return NotFound(what + ": no such process");
    return Status::FromErrno(errno, what + ": pidfd_open");
  }
  std::string file = "/proc/" + std::to_string(pid) + "/cgroup";
  std::ifstream in(file);
  std::string line, path;
  bool found = false;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) {
      path = line.substr(3);
      found = true;
    }
  }
  if (syscall(SYS_pidfd_send_signal, pidfd.get(), 0, nullptr, 0) != 0 && errno == ESRCH)
    return NotFound(what + ": the process exited while its cgroup was looked up (" + file + ")");
  if (!found) {
    if (!in.is_open() && !std::ifstream(file).is_open())
      return NotFound(what + ": the process exited while its cgroup was looked up (" + file + ")");
    return FailedPrecondition(what + ": " + file + " has no cgroup v2 entry (0::)");
  }
  if (path == "/" || path.empty())
    return InvalidArgument(what + " is in the root cgroup (" + file +
                           "): a rule there would take every process of the host; put the "
                           "service in a cgroup of its own, or name it by --cgroup");
  // A process in another cgroup namespace shows "/../x": ResolveCgroup then
  // finds it outside the mount and says so.
  return mount + path;
}

Result<std::string> UnitCgroup(const std::string& asked, const std::string& mount) {
  std::string unit = asked;
  for (char c : unit)
    if (!std::isalnum(static_cast<unsigned char>(c)) && !std::strchr(":_.\\@-", c))
      return InvalidArgument("unit '" + Shown(asked) +
                             "': not a systemd unit name (letters, digits and :_.\\@- only)");
  if (unit.empty() || unit[0] == '.')
    return InvalidArgument("unit '" + Shown(asked) + "': not a systemd unit name");
  if (!IsUnitName(unit)) {
    size_t dot = unit.rfind('.');
    if (dot != std::string::npos &&
        std::string(".socket.timer.mount.target.path.device.swap.automount")
                .find(unit.substr(dot)) != std::string::npos)
      return InvalidArgument("unit '" + Shown(asked) +
                             "': only services, scopes and slices have cgroups of their own");
    unit += ".service";
  }
  std::string what = "unit " + unit;
  // systemd's own answer when it runs (sd_booted(): /run/systemd/system).
  struct stat st;
  bool systemd = stat("/run/systemd/system", &st) == 0 && S_ISDIR(st.st_mode);
  if (systemd && OnPath("systemctl")) {
    auto r = RunTool({"systemctl", "show", "--property=ControlGroup", "--value", "--", unit}, 5000);
    if (r.ok() && WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0) {
      std::string cg = r->out.substr(0, r->out.find('\n'));
      if (cg.empty())
        return NotFound(what + ": systemd has no cgroup for it (the unit is not running)");
      return mount + cg;
    }
    // systemctl could not answer (no bus): the layout below still can.
  }
  std::vector<std::string> found;
  size_t seen = 0;
  Walk(mount, 0, &seen, [&](const std::string& dir) {
    if (dir.size() > mount.size() && dir.substr(dir.rfind('/') + 1) == unit) found.push_back(dir);
  });
  return One(found, mount, what,
             std::string(systemd ? "systemctl did not answer; "
                                 : "systemd is not running here "
                                   "(no /run/systemd/system); ") +
                 "looked for a directory named " + unit + " as systemd lays units out");
}

// Pod directories matching `uid` (a prefix of a UID, dashes).
std::vector<std::string> PodDirs(const std::string& uid, const std::string& mount) {
  std::vector<std::string> found;
  size_t seen = 0;
  Walk(mount, 0, &seen, [&](const std::string& dir) {
    if (dir.size() <= mount.size()) return;
    std::string rel = dir.substr(mount.size());
    std::string name = rel.substr(rel.rfind('/') + 1);
    bool under = rel.find("/kubepods") != std::string::npos &&
                 rel.find("/kubepods") < rel.size() - name.size() - 1;
    std::string got;
    if (PodUidOf(name, under, &got) && got.rfind(uid, 0) == 0) found.push_back(dir);
  });
  return found;
}

Result<std::string> PodUid(const std::string& asked) {
  size_t slash = asked.find('/');
  if (slash == std::string::npos) {
    std::string uid = asked;
    std::transform(uid.begin(), uid.end(), uid.begin(), [](unsigned char c) {
      return c == '_' ? '-' : static_cast<char>(std::tolower(c));
    });
    for (char c : uid)
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != '-')
        return InvalidArgument("pod '" + Shown(asked) +
                               "': not a pod UID (hex digits and dashes) nor NAMESPACE/NAME");
    if (uid.empty()) return InvalidArgument("pod: empty UID");
    return uid;
  }
  std::string ns = asked.substr(0, slash), name = asked.substr(slash + 1);
  // Kubernetes' names (RFC 1123): a namespace is a label (at most 63 of a-z
  // 0-9 -, starting and ending alphanumeric), a pod name a subdomain (such
  // labels joined by dots, at most 253): neither can start with '-', so
  // neither reads as a kubectl flag.
  auto label = [](const std::string& s) {
    auto alnum = [](char c) {
      return std::islower(static_cast<unsigned char>(c)) ||
             std::isdigit(static_cast<unsigned char>(c));
    };
    if (s.empty() || s.size() > 63 || !alnum(s.front()) || !alnum(s.back())) return false;
    for (char c : s)
      if (!alnum(c) && c != '-') return false;
    return true;
  };
  auto subdomain = [&](const std::string& s) {
    if (s.empty() || s.size() > 253) return false;
    for (size_t at = 0;;) {
      size_t dot = s.find('.', at);
      if (!label(s.substr(at, dot == std::string::npos ? std::string::npos : dot - at)))
        return false;
      if (dot == std::string::npos) return true;
      at = dot + 1;
    }
  };
  if (!label(ns) || !subdomain(name))
    return InvalidArgument("pod '" + Shown(asked) +
                           "': NAMESPACE/NAME must be Kubernetes names (a-z 0-9 and '-', "
                           "starting and ending with a letter or digit; the name may have dots)");
  if (!OnPath("kubectl"))
    return FailedPrecondition("pod " + asked +
                              ": a pod named by NAMESPACE/NAME is found through kubectl, which is "
                              "not on lossd's PATH; give the pod's UID instead (kubectl get pod "
                              "-n " +
                              ns + " " + name + " -o jsonpath='{.metadata.uid}')");
  auto r = RunTool(
      {"kubectl", "get", "pod", "--namespace=" + ns, "-o", "jsonpath={.metadata.uid}", "--", name},
      10000, true);
  if (!r.ok()) return FailedPrecondition("pod " + asked + ": " + r.status().message());
  bool ok = WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0;
  // The UID is the output's first line (jsonpath, no newline); what kubectl
  // said otherwise is its last line (bounded).
  std::string first = r->out.substr(0, r->out.find_first_of("\r\n"));
  if (ok && IsUid(first)) return first;
  std::string said = r->out;
  while (!said.empty() && (said.back() == '\n' || said.back() == '\r')) said.pop_back();
  size_t nl = said.find_last_of('\n');
  if (nl != std::string::npos) said = said.substr(nl + 1);
  if (said.size() > 200) said = said.substr(0, 197) + "...";
  std::string what =
      "pod " + asked + ": kubectl get pod --namespace=" + ns + " -- " + name + " (exit status " +
      std::to_string(WIFEXITED(r->status) ? WEXITSTATUS(r->status) : -1) + "): " + said;
  if (said.find("NotFound") != std::string::npos || said.find("not found") != std::string::npos)
    return NotFound(what);
  return FailedPrecondition(what + "; give the pod's UID instead");
}

Result<std::string> ContainerCgroup(const std::string& asked, const std::string& pod,
                                    const std::string& mount) {
  std::string id = asked;
  std::transform(id.begin(), id.end(), id.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (id.empty() || id.size() > 64 || !IsHex(id, 0, id.size()))
    return InvalidArgument("container '" + Shown(asked) +
                           "': not a container id or prefix (1-64 hex digits)");
  std::vector<std::string> roots = {mount};
  std::string what = "container " + id;
  if (!pod.empty()) {
    auto uid = PodUid(pod);
    if (!uid.ok()) return uid.status();
    auto p = One(PodDirs(*uid, mount), mount, "pod " + *uid,
                 "looked for the kubelet's pod cgroups, both drivers and every QoS class");
    if (!p.ok()) return p.status();
    roots = {*p};
    what += " in pod " + *uid;
  }
  std::vector<std::string> found;
  size_t seen = 0;
  for (const auto& root : roots)
    Walk(root, 0, &seen, [&](const std::string& dir) {
      if (dir.size() <= mount.size()) return;
      size_t s = dir.rfind('/');
      std::string name = dir.substr(s + 1);
      std::string parent = dir.substr(0, s);
      parent = parent.substr(parent.rfind('/') + 1);
      std::string got, runtime;
      if (ContainerIdOf(name, parent, &got, &runtime) && got.rfind(id, 0) == 0)
        found.push_back(dir);
    });
  return One(found, mount, what,
             "looked for docker-, cri-containerd-, crio- and libpod-ID scopes (systemd driver), "
             "docker/ID, crio-ID, libpod-ID and bare IDs in pods (cgroupfs driver)");
}

}  // namespace

bool ContainerIdOf(const std::string& name, const std::string& parent, std::string* id,
                   std::string* runtime) {
  static const struct {
    const char* prefix;
    const char* runtime;
  } kScopes[] = {{"docker-", "docker"},
                 {"cri-containerd-", "containerd"},
                 {"crio-", "cri-o"},
                 {"libpod-", "podman"}};
  for (const auto& k : kScopes) {
    size_t n = std::strlen(k.prefix);
    if (name.compare(0, n, k.prefix) != 0 || !IsHex(name, n, 64)) continue;
    std::string rest = name.substr(n + 64);
    if (rest != ".scope" && !(rest.empty() && (std::string(k.runtime) == "cri-o" ||
                                               std::string(k.runtime) == "podman")))
      continue;
    *id = name.substr(n, 64);
    *runtime = k.runtime;
    return true;
  }
  if (name.size() == 64 && IsHex(name, 0, 64)) {
    *id = name;
    *runtime = parent == "docker" ? "docker" : "containerd";
    return true;
  }
  return false;
}

bool PodUidOf(const std::string& name, bool under_kubepods, std::string* uid) {
  // systemd driver: kubepods-pod<uid>.slice, kubepods-burstable-pod<uid>.slice,
  // kubepods-besteffort-pod<uid>.slice, the UID's dashes written as '_'.
  for (const char* p : {"kubepods-pod", "kubepods-burstable-pod", "kubepods-besteffort-pod"}) {
    size_t n = std::strlen(p);
    if (name.compare(0, n, p) != 0 || !EndsWith(name, ".slice")) continue;
    std::string u = name.substr(n, name.size() - n - 6);
    std::replace(u.begin(), u.end(), '_', '-');
    if (!IsUid(u)) continue;
    *uid = u;
    return true;
  }
  // cgroupfs driver: kubepods/pod<uid>, kubepods/burstable/pod<uid>, kubepods/besteffort/pod<uid>.
  if (under_kubepods && name.compare(0, 3, "pod") == 0 && IsUid(name.substr(3))) {
    *uid = name.substr(3);
    return true;
  }
  return false;
}

CgroupOwner CgroupOwnerOf(const std::string& rel) {
  CgroupOwner o;
  auto parts = Components(rel);
  o.path = "/";
  for (size_t i = 0; i < parts.size(); i++) o.path += (i ? "/" : "") + parts[i];
  bool kubepods = false;
  for (size_t i = 0; i < parts.size(); i++) {
    const std::string& name = parts[i];
    if (IsUnitName(name)) o.unit = name;
    std::string id, runtime, uid;
    if (ContainerIdOf(name, i ? parts[i - 1] : "", &id, &runtime)) {
      o.container = id;
      o.runtime = runtime;
    }
    if (PodUidOf(name, kubepods, &uid)) o.pod = uid;
    if (name.rfind("kubepods", 0) == 0) kubepods = true;
  }
  return o;
}

namespace {

// The cgroup with `id` as a path relative to the v2 root, "" if none.
std::string CgroupPathOfId(int root_fd, uint64_t id) {
  // A kernfs file handle is the 64-bit node id (FILEID_KERNFS, 0xfe).
  union {
    struct file_handle fh;
    char buf[sizeof(struct file_handle) + sizeof(uint64_t)];
  } h;
  h.fh.handle_bytes = sizeof(uint64_t);
  h.fh.handle_type = 0xfe;
  std::memcpy(h.fh.f_handle, &id, sizeof(id));
  UniqueFd fd(open_by_handle_at(root_fd, &h.fh, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return "";
  char link[4096];
  ssize_t n = readlink(("/proc/self/fd/" + std::to_string(fd.get())).c_str(), link, sizeof(link));
  if (n <= 0 || static_cast<size_t>(n) >= sizeof(link)) return "";
  std::string path(link, static_cast<size_t>(n));
  // Under the v2 mount of this mount namespace; or, where lossd mounted the
  // hierarchy privately (OpenCgroup2Root), already relative to it.
  std::string mount = Cgroup2Mount();
  if (!mount.empty() && (path == mount || path.rfind(mount + "/", 0) == 0))
    path = path.substr(mount.size());
  return path.empty() ? "/" : path;
}

}  // namespace

OwnerCache::OwnerCache(size_t capacity) : capacity_(capacity) {}

OwnerCache::OwnerCache(PathOfId path_of, size_t capacity)
    : path_of_(std::move(path_of)), capacity_(capacity) {}

std::optional<std::string> OwnerCache::PathOf(uint64_t id) {
  if (path_of_) return path_of_(id);
  if (!root_.valid()) {
    auto r = OpenCgroup2Root();
    if (!r.ok()) return std::nullopt;
    root_ = std::move(*r);
  }
  return CgroupPathOfId(root_.get(), id);
}

CgroupOwner OwnerCache::Of(uint64_t id) {
  if (id == 0) return {};
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(id);
  if (it != cache_.end()) return it->second;
  std::optional<std::string> path = PathOf(id);
  if (!path) return {};  // the root could not be opened: not cached, asked again next time
  CgroupOwner o = path->empty() ? CgroupOwner{} : CgroupOwnerOf(*path);
  if (cache_.size() >= capacity_) cache_.clear();
  cache_[id] = o;
  return o;
}

size_t OwnerCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.size();
}


Result<std::string> ResolveServiceCgroup(const ServiceTarget& t, const std::string& mount) {
  if (t.pid) return PidCgroup(t.pid, mount);
  if (!t.unit.empty()) return UnitCgroup(t.unit, mount);
  if (!t.container.empty()) return ContainerCgroup(t.container, t.pod, mount);
  if (!t.pod.empty()) {
    auto uid = PodUid(t.pod);
    if (!uid.ok()) return uid.status();
    return One(PodDirs(*uid, mount), mount, "pod " + *uid,
               "looked for the kubelet's pod cgroups: kubepods[-QOS]-podUID.slice (systemd "
               "driver) and kubepods[/QOS]/podUID (cgroupfs), QoS guaranteed, burstable, "
               "besteffort");
  }
  return InvalidArgument("no service named");
}

}  // namespace lossd
