// top: a terminal view like top(1), refreshed once per window of lossd's
// WatchAggregates stream: retransmitted segments by type in the window, the
// rules with their effect (GetRuleEffect), the busiest flows (ListFlows).
// On a terminal it redraws one screen (q or Ctrl-C quits, s changes the
// flows' sort); otherwise it prints one plain frame per window.
#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <fcntl.h>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "base/fd.h"
#include "commands.h"
#include "connect.h"
#include "filter_flags.h"
#include "format.h"
#include "interrupt.h"
#include "rule_flags.h"
#include "rules/proto.h"
#include "rules/rule.h"
#include "top_view.h"

namespace lossctl {
namespace {

uint64_t ClockNs(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct TopFlags {
  std::string interval = "1s", sort = "retrans", count, rules = "10", flows;
  // The flows of these namespaces / services only (--netns, --unit, --container, --pod).
  FilterFlags scope;
};

// The terminal while top draws on it: the alternate screen, no cursor, keys
// read one by one without echo (Ctrl-C arrives as a key, so that the
// terminal is always restored); everything undone when destroyed.
class Screen {
 public:
  Screen(bool draw, bool keys) : draw_(draw) {
    if (keys && tcgetattr(STDIN_FILENO, &saved_) == 0) {
      struct termios raw = saved_;
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO | ISIG);
      raw.c_cc[VMIN] = 1;
      raw.c_cc[VTIME] = 0;
      keys_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    if (draw_) Write("\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J");
  }
  ~Screen() {
    if (draw_) Write("\x1b[?25h\x1b[?1049l");
    if (keys_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  bool keys() const { return keys_; }
  // Columns and rows, or false.
  bool Size(size_t* cols, size_t* rows) const {
    struct winsize ws {};
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || !ws.ws_col || !ws.ws_row) return false;
    *cols = ws.ws_col;
    *rows = ws.ws_row;
    return true;
  }
  // One screen: every line redrawn in place (no flicker), the rest cleared.
  bool Draw(const std::vector<TopLine>& lines) {
    std::string out = "\x1b[H";
    for (size_t i = 0; i < lines.size(); i++) {
      if (lines[i].heading)
        out += "\x1b[1m" + lines[i].text + "\x1b[0m";
      else
        out += lines[i].text;
      out += "\x1b[K";
      if (i + 1 < lines.size()) out += "\r\n";
    }
    out += "\x1b[J";
    return Write(out);
  }

 private:
  static bool Write(const std::string& s) {
    return fwrite(s.data(), 1, s.size(), stdout) == s.size() && fflush(stdout) == 0;
  }
  bool draw_;
  bool keys_ = false;
  struct termios saved_ {};
};

// The WatchAggregates stream, read on a thread of its own; each window wakes
// the main loop through a pipe. While the observer is still loading, lossd
// holds the stream until it is ready.
class WindowStream {
 public:
  WindowStream(Connection* conn, uint64_t window_ns, uint64_t netns, int wake_fd)
      : conn_(conn), wake_fd_(wake_fd) {
    req_.set_netns_ino(netns);
    req_.set_window_ns(window_ns);
    thread_ = std::thread([this] { Run(); });
  }
  ~WindowStream() {
    Stop();
    thread_.join();
  }
  void Stop() {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    if (ctx_) ctx_->TryCancel();
  }
  // The windows that arrived since the last call; true once the stream ended.
  bool Take(std::vector<v1::Aggregate>* out, std::string* note) {
    std::lock_guard<std::mutex> lock(mu_);
    out->assign(windows_.begin(), windows_.end());
    windows_.clear();
    *note = note_;
    return done_;
  }
  // After it ended: why (OK when stopped or interrupted).
  grpc::Status status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }
  bool interrupted() const { return interrupted_; }

 private:
  void Wake() {
    char c = 1;
    if (write(wake_fd_, &c, 1) < 0 && errno != EAGAIN) {
      // the main loop is gone; nothing to tell
    }
  }
  void Run() {
    grpc::Status st;
    {
      grpc::ClientContext ctx;  // no deadline: lossd waits for a loading observer itself
      CancelOnSignal guard(&ctx);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!stop_) ctx_ = &ctx;
      }
      if (ctx_) {
        auto reader = conn_->observer().WatchAggregates(&ctx, req_);
        v1::Aggregate a;
        while (reader->Read(&a)) {
          std::lock_guard<std::mutex> lock(mu_);
          note_.clear();
          windows_.push_back(a);
          if (windows_.size() > 64) windows_.pop_front();  // the main loop is far behind
          Wake();
        }
        st = reader->Finish();
      }
      interrupted_ = guard.interrupted();
      std::lock_guard<std::mutex> lock(mu_);
      ctx_ = nullptr;
      if (stop_ || interrupted_) st = grpc::Status::OK;
    }
    std::lock_guard<std::mutex> lock(mu_);
    status_ = st;
    done_ = true;
    Wake();
  }

  Connection* conn_;
  int wake_fd_;
  v1::WatchAggregatesRequest req_;
  mutable std::mutex mu_;
  grpc::ClientContext* ctx_ = nullptr;
  bool stop_ = false, done_ = false;
  std::atomic<bool> interrupted_{false};
  std::deque<v1::Aggregate> windows_;
  std::string note_;
  grpc::Status status_;
  std::thread thread_;
};

std::string ErrorText(const grpc::Status& st) {
  return std::string(lossd::GrpcCodeName(st.error_code())) + ": " + st.error_message();
}

// The unary calls of one frame (each within --timeout); a failure shows in
// its part of the frame.
void Gather(Connection* conn, size_t max_rules, const v1::ListFlowsRequest& flows_req,
            TopTracker* t) {
  {
    v1::Health h;
    v1::Capabilities caps;
    grpc::ClientContext c1, c2;
    conn->SetDeadline(&c1);
    grpc::Status st = conn->system().GetHealth(&c1, v1::GetHealthRequest(), &h);
    if (!st.ok()) {
      t->SetHealthError(ErrorText(st));
    } else {
      conn->SetDeadline(&c2);
      bool caps_ok = conn->system().GetCapabilities(&c2, v1::GetCapabilitiesRequest(), &caps).ok();
      t->SetHealth(h, caps_ok ? &caps : nullptr);
    }
  }
  {
    v1::ListRulesResponse resp;
    grpc::ClientContext ctx;
    conn->SetDeadline(&ctx);
    grpc::Status st = conn->injector().ListRules(&ctx, v1::ListRulesRequest(), &resp);
    if (!st.ok()) {
      t->SetRulesError(ErrorText(st));
    } else {
      std::vector<TopRule> rules;
      for (auto& r : ShownRules(resp, max_rules)) {
        TopRule tr;
        tr.rule = std::move(r);
        v1::GetRuleEffectRequest req;
        req.set_id(tr.rule.id());
        grpc::ClientContext ec;
        conn->SetDeadline(&ec);
        grpc::Status es = conn->injector().GetRuleEffect(&ec, req, &tr.effect);
        tr.has_effect = es.ok();
        if (!es.ok()) tr.effect_error = ErrorText(es);
        rules.push_back(std::move(tr));
      }
      t->SetRules(std::move(rules), static_cast<size_t>(resp.rules_size()),
                  ClockNs(CLOCK_MONOTONIC));
    }
  }
  {
    v1::ListFlowsResponse resp;
    grpc::ClientContext ctx;
    conn->SetDeadline(&ctx);
    grpc::Status st = conn->observer().ListFlows(&ctx, flows_req, &resp);
    if (!st.ok())
      t->SetFlowsError(ErrorText(st));
    else
      t->SetFlows(resp, ClockNs(CLOCK_MONOTONIC));
  }
}

int Top(const Globals& g, const TopFlags& f) {
  auto d = lossd::ParseDuration(f.interval);
  if (!d.ok()) return UsageError("--interval: " + d.status().message());
  if (d->count() < 100000000) return UsageError("--interval: '" + f.interval + "' is below 100ms");
  if (d->count() > 3600000000000ll)
    return UsageError("--interval: '" + f.interval + "' is above 1h");
  TopLayout layout;
  if (!ParseTopSort(f.sort, &layout.sort))
    return UsageError("--sort: '" + f.sort + "': expected one of " + TopSortNames());
  std::string error;
  uint64_t count = 0, max_rules = 0, max_flows = 0;
  if (!f.count.empty() && !ParseUint(f.count, 1, UINT64_MAX, "--count", &count, &error))
    return UsageError(error);
  v1::ListFlowsRequest flows_req;
  {
    std::vector<v1::EventFilter> allow, deny;
    if (!BuildFilters(f.scope, &allow, &deny, &error)) return UsageError(error);
    for (auto& a : allow) *flows_req.add_filter() = std::move(a);
  }
  // One namespace: the retransmits by type are its own too.
  // The retransmits by type follow one namespace (the aggregates have no owner filter).
  uint64_t agg_netns = f.scope.netns.size() == 1 && flows_req.filter_size() >= 1
                           ? flows_req.filter(0).netns_ino()
                           : 0;
  if (!ParseUint(f.rules, 0, 1000, "--rules", &max_rules, &error)) return UsageError(error);
  if (!f.flows.empty() && !ParseUint(f.flows, 0, 100000, "--flows", &max_flows, &error))
    return UsageError(error);
  if (g.json()) return UsageError("top: -o json is not supported (use stats, flows, rule effect)");

  std::unique_ptr<Connection> conn;
  if (int rc = Connection::Open(g, &conn)) return rc;
  if (!conn->WaitConnected())
    return conn->Report(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, ""), "top");
  if (flows_req.filter_size()) {
    // A scope that names no service (--unit nosuch) fails here, as rule add does.
    v1::ListFlowsResponse resp;
    grpc::ClientContext ctx;
    conn->SetDeadline(&ctx);
    grpc::Status st = conn->observer().ListFlows(&ctx, flows_req, &resp);
    if (st.error_code() == grpc::StatusCode::NOT_FOUND ||
        st.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
        st.error_code() == grpc::StatusCode::FAILED_PRECONDITION)
      return conn->Report(st, "top");
  }

  const bool draw = isatty(STDOUT_FILENO);
  const bool want_keys = draw && isatty(STDIN_FILENO);
  layout.max_rules = max_rules;
  layout.max_flows = f.flows.empty() ? (draw ? 100000 : 10) : max_flows;
  uint64_t interval = static_cast<uint64_t>(d->count());
  TopTracker tracker(conn->endpoint().unix_socket ? "unix:" + conn->endpoint().socket_path
                                                  : conn->endpoint().target,
                     interval);

  int p[2];
  if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
    return Fail(kExitError, std::string("top: pipe: ") + std::strerror(errno));
  lossd::UniqueFd wake_r(p[0]), wake_w(p[1]);

  grpc::Status end;
  bool interrupted = false;
  int rc = kExitOk;
  {
    Screen screen(draw, want_keys);
    layout.keys = screen.keys();
    WindowStream stream(conn.get(), interval, agg_netns, wake_w.get());
    uint64_t frames = 0;
    auto render = [&]() {
      if (draw) {
        size_t cols = 0, rows = 0;
        if (screen.Size(&cols, &rows)) {
          layout.width = cols;
          layout.height = rows;
        }
        return screen.Draw(RenderTop(tracker.Frame(ClockNs(CLOCK_REALTIME)), layout));
      }
      for (const auto& l : RenderTop(tracker.Frame(ClockNs(CLOCK_REALTIME)), layout))
        if (!PrintLine(l.text, false)) return false;
      return PrintLine("");  // frames apart; flushed
    };
    if (draw) {
      tracker.SetNote("connected; the first window comes within " + FormatDuration(interval));
      Gather(conn.get(), max_rules, flows_req, &tracker);
      render();
    }
    bool quit = false;
    while (!quit) {
      struct pollfd fds[2] = {{wake_r.get(), POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
      int n = poll(fds, screen.keys() ? 2 : 1, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        rc = Fail(kExitError, std::string("top: poll: ") + std::strerror(errno));
        break;
      }
      if (screen.keys() && (fds[1].revents & (POLLIN | POLLHUP))) {
        char keys[32];
        ssize_t got = read(STDIN_FILENO, keys, sizeof(keys));
        if (got <= 0) {
          quit = true;  // the terminal went away
        }
        bool redraw = false;
        for (ssize_t i = 0; i < got; i++) {
          if (keys[i] == 'q' || keys[i] == 'Q' || keys[i] == 3 /* Ctrl-C */ || keys[i] == 4) {
            quit = true;
          } else if (keys[i] == 's' || keys[i] == 'S') {
            layout.sort = NextTopSort(layout.sort);
            redraw = true;
          }
        }
        if (quit) break;
        if (redraw && !render()) break;
      }
      if (fds[0].revents & POLLIN) {
        char buf[64];
        while (read(wake_r.get(), buf, sizeof(buf)) > 0) {
        }
        std::vector<v1::Aggregate> windows;
        std::string note;
        bool done = stream.Take(&windows, &note);
        tracker.SetNote(note);
        for (const auto& w : windows) tracker.AddWindow(w);
        if (done) break;
        if (windows.empty()) {
          if (draw && !render()) break;
          continue;
        }
        Gather(conn.get(), max_rules, flows_req, &tracker);
        if (!render()) break;  // stdout closed: a clean end
        if (count && ++frames >= count) break;
      }
    }
    stream.Stop();
    // ~WindowStream joins the reader; then the screen is restored.
    interrupted = false;
    std::vector<v1::Aggregate> rest;
    std::string note;
    if (stream.Take(&rest, &note)) {
      end = stream.status();
      interrupted = stream.interrupted();
    }
  }
  if (rc != kExitOk) return rc;
  if (interrupted || end.ok()) return kExitOk;
  return conn->Report(end, "top");
}

}  // namespace

void AddTopCommand(CLI::App* app, const Globals* g, Run* run) {
  auto tf = std::make_shared<TopFlags>();
  CLI::App* top = app->add_subcommand(
      "top",
      "A live view like top: retransmits by type per interval, the rules with their effect, the "
      "busiest flows (q quits, s changes the sort; plain frames when stdout is not a terminal)");
  top->add_option("--interval", tf->interval, "Refresh interval (one window), 100ms .. 1h")
      ->capture_default_str();
  top->add_option("--sort", tf->sort, "Flows sorted by: " + TopSortNames())->capture_default_str();
  top->add_option("--rules", tf->rules, "Rules shown at most (active first)")
      ->capture_default_str();
  top->add_option("--flows", tf->flows,
                  "Flows shown at most (default: as many as fit the terminal; 10 in plain frames)");
  top->add_option("--count", tf->count, "Stop after this many frames");
  top->add_option("--netns", tf->scope.netns,
                  "Show the flows of this network namespace only: its inode, /proc/PID/ns/net or "
                  "/run/netns/NAME (repeatable; with one, the retransmits by type are that namespace's too)")
      ->allow_extra_args(false);
  top->add_option("--unit", tf->scope.units, "Show the flows of this systemd unit only (repeatable)")
      ->allow_extra_args(false);
  top->add_option("--container", tf->scope.containers,
                  "Show the flows of this container only: id or prefix (repeatable)")
      ->allow_extra_args(false);
  top->add_option("--pod", tf->scope.pods, "Show the flows of this pod only: UID or prefix (repeatable)")
      ->allow_extra_args(false);
  top->add_option("--pid", tf->scope.pids,
                  "Show the flows of this process's cgroup only, as rule add --pid (repeatable)")
      ->allow_extra_args(false);
  top->callback([g, tf, run] { *run = [g, tf] { return Top(*g, *tf); }; });
}

}  // namespace lossctl
