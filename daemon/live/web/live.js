// lossd's live page: reads /api/v1/events (Server-Sent Events: lossd.v1 messages as
// protobuf JSON, see daemon/live/live.h) and draws it. No build step, no framework:
// Chart.js (Debian's libjs-chart.js) for the two charts, the DOM for the rest.
"use strict";

const TYPES = ["fast", "rto", "loss", "tlp", "syn", "synack", "probe0", "unknown"];
const TYPE_COLORS = {
  fast: "#2563eb", rto: "#dc2626", loss: "#f97316", tlp: "#8b5cf6",
  syn: "#0d9488", synack: "#65a30d", probe0: "#a16207", unknown: "#6b7280",
};
const KERNEL_KEYS = ["TCPFastRetrans", "TCPSlowStartRetrans", "TCPLossProbes", "TCPSynRetrans",
                     "TCPTimeouts", "TCPRetransFail"];
const NEEDLESS_KEYS = ["TCPDSACKRecvSegs", "TCPDSACKRecv", "TCPSpuriousRTOs", "TCPLossUndo", "TCPFullUndo",
                       "TCPPartialUndo", "TCPDSACKUndo"];
const CA_NAMES = ["open", "disorder", "cwr", "recovery", "loss"];
const GAP_TEXT = {
  GAP_SOURCE_KERNEL_RING: "kernel ring buffer full",
  GAP_SOURCE_DAEMON_HUB: "daemon fan-out",
  GAP_SOURCE_SUBSCRIBER: "this page too slow",
  reconnect: "windows sent while this page reconnected",
  ids: "SSE ids skipped",
};
const HISTORY = 120;        // windows in the retransmit chart
const FLOW_HISTORY = 300;   // seconds in the flow chart
const RTX_LIST = 200;       // retransmissions in the events table

const $ = (id) => document.getElementById(id);
const u64 = (s) => (s === undefined || s === null || s === "" ? 0 : Number(s));

// ---- formatting: units everywhere, no raw nanoseconds ------------------------------
function fmtInt(n) { return Number(n).toLocaleString("en-US"); }
function fmtBytes(b) {
  b = Number(b);
  if (b < 1024) return Math.round(b) + " B";
  const u = ["KiB", "MiB", "GiB", "TiB"];
  let i = -1;
  do { b /= 1024; i++; } while (b >= 1024 && i < u.length - 1);
  return (b < 10 ? b.toFixed(2) : b < 100 ? b.toFixed(1) : b.toFixed(0)) + " " + u[i];
}
function fmtRate(fraction) {
  const p = fraction * 100;
  if (p === 0) return "0 %";
  const digits = Math.max(0, Math.min(6, 2 - Math.floor(Math.log10(Math.abs(p)))));
  return p.toFixed(digits) + " %";
}
function fmtDuration(ns) {
  ns = Number(ns);
  if (ns <= 0) return "0 s";
  if (ns < 1e6) return (ns / 1e3).toFixed(0) + " µs";
  if (ns < 1e9) return (ns / 1e6).toFixed(ns < 1e7 ? 2 : 1) + " ms";
  let s = Math.round(ns / 1e9);
  if (s < 60) return (ns / 1e9).toFixed(1) + " s";
  const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60;
  s %= 60;
  return (h ? h + "h " : "") + (h || m ? m + "m " : "") + s + "s";
}
function fmtSrtt(us) { return fmtDuration(Number(us) * 1000); }
function fmtClock(ms) {
  const d = new Date(ms);
  return d.toTimeString().slice(0, 8);
}
function endpoint(addr, port) {
  return (addr.indexOf(":") >= 0 ? "[" + addr + "]" : addr) + ":" + port;
}
function tupleText(t) {
  return endpoint(t.local_addr, t.local_port) + " → " + endpoint(t.remote_addr, t.remote_port);
}
function byType(m) {
  const parts = [];
  for (const t of TYPES) if (u64(m && m[t])) parts.push(t + " " + fmtInt(u64(m[t])));
  return parts.length ? parts.join(", ") : "-";
}
function sumMap(m) {
  let s = 0;
  for (const k in m || {}) s += u64(m[k]);
  return s;
}
function setText(id, text) {
  const el = $(id);
  if (el && el.textContent !== String(text)) el.textContent = text;
}

// ---- state -----------------------------------------------------------------------------
const params = new URLSearchParams(location.search);
const state = {
  es: null,
  lastId: 0,
  clock: null,            // {mono_ns, unix_ms, at}: the daemon's clocks at hello
  lossd: Object.fromEntries(TYPES.map((t) => [t, 0])),
  lossdTotal: 0,
  windows: 0,
  lastAggSeq: 0,
  kernelBase: null,
  kernelNow: null,
  gaps: {},               // "stream|source" -> count
  gapTotal: 0,
  rules: [],
  rulesTotal: 0,
  effects: {},            // id -> RuleEffect
  prevDrops: {},          // id -> {t, dropped}
  dropRate: {},
  flows: new Map(),       // cookie -> {flow, rate, prevSent, prevT}
  sortKey: "retrans",
  selectedFlow: params.get("flow") || "",
  selectedRule: params.get("rule") || "",
  flowSeries: { t: [], cwnd: [], srtt: [], retrans: [], lastTotal: null },
  flowRules: new Set(),  // ids of the rules covering the followed flow (its retransmit events say)
  events: [],             // retransmission markers of the selected flow
  rtxList: [],            // the followed rule's / scope's retransmissions, newest last (RTX_LIST)
  health: null,
  caps: null,
};

// ---- charts ------------------------------------------------------------------------------
Chart.defaults.font.size = 12;
Chart.defaults.animation = false;
const rtxChart = new Chart($("rtx-chart"), {
  type: "bar",
  data: {
    labels: [],
    datasets: TYPES.map((t) => ({ label: t, data: [], backgroundColor: TYPE_COLORS[t], stack: "s",
                                  barPercentage: 1.0, categoryPercentage: 0.9 })),
  },
  options: {
    maintainAspectRatio: false,
    interaction: { mode: "index", intersect: false },
    scales: {
      x: { stacked: true, ticks: { maxTicksLimit: 12, autoSkip: true, maxRotation: 0 },
           title: { display: true, text: "window start (local time)" } },
      y: { stacked: true, beginAtZero: true, title: { display: true, text: "segments / s" },
           ticks: { precision: 0 } },
    },
    plugins: { legend: { position: "right", labels: { boxWidth: 12 } } },
  },
});

const flowChart = new Chart($("flow-chart"), {
  type: "line",
  data: {
    datasets: [
      { label: "cwnd (segments)", data: [], borderColor: "#2563eb", backgroundColor: "#2563eb",
        yAxisID: "y", pointRadius: 0, borderWidth: 2, stepped: true },
      { label: "srtt (ms)", data: [], borderColor: "#0d9488", backgroundColor: "#0d9488",
        yAxisID: "y2", pointRadius: 0, borderWidth: 2 },
      { label: "retransmitted segments / s", data: [], type: "bar", backgroundColor: "rgba(249,115,22,0.45)",
        yAxisID: "y3", barThickness: 4 },
      { label: "retransmission (a lost segment resent)", data: [], type: "scatter", yAxisID: "y",
        pointStyle: "triangle", pointRadius: 6, borderColor: "#c0262d", backgroundColor: "#c0262d" },
      // lossd's drops: per rule, not per flow (the API counts drops per rule), so
      // these are the drops of the rules whose match covers this flow, all their
      // flows together: exact for a rule that matches only this flow.
      { label: "dropped by its rules / s", data: [], type: "bar", yAxisID: "y3",
        backgroundColor: "rgba(124,58,237,0.55)", barThickness: 4 },
    ],
  },
  options: {
    maintainAspectRatio: false,
    parsing: false,
    interaction: { mode: "nearest", intersect: false },
    scales: {
      x: { type: "linear", title: { display: true, text: "time (local)" },
           ticks: { maxTicksLimit: 10, callback: (v) => fmtClock(v) } },
      y: { beginAtZero: true, position: "left", title: { display: true, text: "cwnd (segments)" } },
      y2: { beginAtZero: true, position: "right", grid: { drawOnChartArea: false },
            title: { display: true, text: "srtt (ms)" } },
      y3: { beginAtZero: true, position: "right", grid: { drawOnChartArea: false },
            title: { display: true, text: "retransmitted segments / s" }, ticks: { precision: 0 } },
    },
    plugins: {
      legend: { position: "top", labels: { boxWidth: 12 } },
      tooltip: { callbacks: { title: (items) => items.length ? fmtClock(items[0].parsed.x) : "" } },
    },
  },
});

// ---- the stream ------------------------------------------------------------------------
// ?unit= ?container= ?pod= ?netns=: the page shows that service's (namespace's) flows and
// every retransmission of them.
const SCOPES = ["unit", "container", "pod", "netns"];
function eventsUrl() {
  const q = new URLSearchParams();
  if (state.selectedFlow) q.set("flow", state.selectedFlow);
  if (state.selectedRule) q.set("rule", state.selectedRule);
  if (params.get("queue")) q.set("queue", params.get("queue"));
  for (const k of SCOPES) if (params.get(k)) q.set(k, params.get(k));
  const s = q.toString();
  return "/api/v1/events" + (s ? "?" + s : "");
}

function setConn(text, cls) {
  const el = $("conn");
  el.textContent = text;
  el.className = "pill " + cls;
}

function connect() {
  if (state.es) state.es.close();
  state.lastId = 0;
  const es = new EventSource(eventsUrl());
  state.es = es;
  setConn("connecting", "pill-wait");
  const on = (name, fn) => es.addEventListener(name, (ev) => {
    checkId(ev);
    try { fn(JSON.parse(ev.data)); } catch (e) { console.error(name, e); }
  });
  on("hello", onHello);
  on("aggregate", onAggregate);
  on("flows", onFlows);
  on("rules", onRules);
  on("effect", onEffect);
  on("health", onHealth);
  on("capabilities", onCapabilities);
  on("kernel", onKernel);
  on("retransmit", onRetransmit);
  on("trace", onTrace);
  on("gap", (g) => addGap(g.stream, g.source, u64(g.count)));
  es.onerror = () => setConn(es.readyState === EventSource.CLOSED ? "disconnected" : "reconnecting",
                             "pill-bad");
  es.onopen = () => setConn("live", "pill-ok");
}

// SSE ids number this connection's messages from 1 without holes (losses are gap events).
function checkId(ev) {
  const id = Number(ev.lastEventId);
  if (!id) return;
  if (id === 1) state.lastId = 0;  // a new connection
  if (state.lastId && id !== state.lastId + 1) addGap("sse", "ids", id - state.lastId - 1);
  state.lastId = id;
}

function addGap(stream, source, count) {
  if (!count) return;
  const k = stream + "|" + source;
  state.gaps[k] = (state.gaps[k] || 0) + count;
  state.gapTotal += count;
  renderGaps();
}

function onHello(h) {
  state.clock = { mono_ns: u64(h.mono_ns), unix_ms: u64(h.unix_ns) / 1e6 };
  const f = h.selected_flow;
  if (f) {
    setText("flow-title", tupleText(f.tuple) + "  (cookie " + f.cookie + ")");
  } else if (!state.selectedFlow) {
    setText("flow-title", "click a flow above");
  }
  const parts = [];
  if (state.selectedFlow) parts.push("flow " + (f ? tupleText(f.tuple) : state.selectedFlow));
  if (state.selectedRule) parts.push("rule " + state.selectedRule + "'s flows");
  for (const k of SCOPES) if (params.get(k)) parts.push(k + " " + params.get(k) + "'s flows");
  setText("watching", parts.length ? parts.join(" and ") + ": every retransmission"
                                   : "all flows (aggregates only)");
  $("flow-none").style.display = state.selectedFlow ? "none" : "flex";
}

function monoToMs(mono_ns) {
  if (!state.clock) return Date.now();
  return state.clock.unix_ms + (Number(mono_ns) - state.clock.mono_ns) / 1e6;
}

function onAggregate(a) {
  const by = a.retransmits_by_type || {};
  const label = fmtClock(u64(a.window_start_unix_ns) / 1e6);
  rtxChart.data.labels.push(label);
  TYPES.forEach((t, i) => {
    const n = u64(by[t]);
    rtxChart.data.datasets[i].data.push(n / (u64(a.window_ns) / 1e9 || 1));
    state.lossd[t] += n;
    state.lossdTotal += n;
  });
  if (rtxChart.data.labels.length > HISTORY) {
    rtxChart.data.labels.shift();
    rtxChart.data.datasets.forEach((d) => d.data.shift());
  }
  rtxChart.update("none");
  for (const g of a.gaps || []) addGap("aggregate", g.source, u64(g.count));
  // The shared window stream numbers its windows: one skipped (this page reconnected while
  // it was sent) is a gap too.
  const seq = u64(a.seq);
  if (state.lastAggSeq && seq > state.lastAggSeq + 1)
    addGap("aggregate", "reconnect", seq - state.lastAggSeq - 1);
  state.lastAggSeq = seq;
  state.windows++;
  // The selected flow's retransmits in this window.
  if (state.selectedFlow) {
    const n = u64((a.retransmits_by_flow || {})[state.selectedFlow]);
    pushFlowPoint(null, n, u64(a.window_start_unix_ns) / 1e6 + u64(a.window_ns) / 1e6);
  }
  renderTotals();
  setText("updated", fmtClock(Date.now()));
}

function renderTotals() {
  setText("total-lossd", fmtInt(state.lossdTotal));
  for (const t of TYPES) setText("type-" + t, fmtInt(state.lossd[t]));
  const k = state.kernelNow, b = state.kernelBase;
  if (!k || !b) return;
  const d = (key) => u64(k[key]) - u64(b[key]);
  const kt = d("Tcp.RetransSegs");
  setText("total-kernel", fmtInt(kt));
  for (const key of KERNEL_KEYS) setText("k-" + key, fmtInt(d("TcpExt." + key)));
  for (const key of NEEDLESS_KEYS) setText("n-" + key, fmtInt(d("TcpExt." + key)));
  const el = $("reconcile");
  const diff = state.lossdTotal - kt;
  if (diff === 0) {
    el.textContent = "equal";
    el.className = "ok";
  } else {
    el.textContent = (diff > 0 ? "lossd +" : "kernel +") + fmtInt(Math.abs(diff)) +
                     " (windows end every second, the counters are read at other moments)";
    el.className = "warn";
  }
}

function onKernel(k) {
  if (!state.kernelBase) state.kernelBase = k.counters;
  state.kernelNow = k.counters;
  renderTotals();
}

function onHealth(h) {
  state.health = h;
  setText("h-serving", h.serving ? "yes" : "NO");
  setText("h-rules", fmtInt(h.rules));
  setText("h-subscribers", fmtInt(h.subscribers));
  setText("h-lease", fmtDuration(Math.floor(u64(h.lease_remaining_ns) / 1e8) * 1e8));
  setText("h-lost", fmtInt(u64(h.events_lost_kernel)));
  const parts = (h.components || []).map((c) => {
    const s = (c.state || "").replace("COMPONENT_STATE_", "").toLowerCase();
    return c.name + " " + s;
  });
  setText("components", parts.join(" · "));
}

function onCapabilities(c) {
  state.caps = c;
  const missing = [];
  let total = 0;
  for (const h of (c.observer_hooks || []).concat(c.injector_hooks || [])) {
    total++;
    if (!h.available) missing.push(h.name + (h.reason ? ": " + h.reason : ""));
  }
  const el = $("hooks");
  const text = total === 0 ? "loading" :
               missing.length === 0 ? "all " + total + " attached" :
               "not attached: " + missing.join("; ");
  if (el.textContent !== text) {
    el.textContent = text;
    el.className = "small " + (missing.length ? "bad" : total ? "ok" : "");
  }
}

function renderGaps() {
  setText("gaps-total", fmtInt(state.gapTotal));
  const lines = Object.keys(state.gaps).sort().map((k) => {
    const [stream, source] = k.split("|");
    return fmtInt(state.gaps[k]) + " " + stream + " message(s) lost: " + (GAP_TEXT[source] || source);
  });
  const el = $("gap-list");
  const html = lines.map((l) => "<div class='warn gap'>" + l + "</div>").join("");
  if (el.innerHTML !== html) el.innerHTML = html;
}

// ---- rules -------------------------------------------------------------------------------
function onRules(r) {
  state.rules = r.rules || [];
  state.rulesTotal = u64(r.total);
  const t = u64(r.time_unix_ns) / 1e9;
  let flowDrops = null;  // drops/s of the rules covering the followed flow
  for (const rule of state.rules) {
    const dropped = u64((rule.counters || {}).dropped_segments);
    const p = state.prevDrops[rule.id];
    if (p && p.created === rule.created_unix_ns && dropped >= p.dropped && t > p.t) {
      state.dropRate[rule.id] = (dropped - p.dropped) / (t - p.t);
      if (state.selectedFlow && state.flowRules.has(String(rule.id)))
        flowDrops = (flowDrops || 0) + state.dropRate[rule.id];
    }
    state.prevDrops[rule.id] = { t, dropped, created: rule.created_unix_ns };
  }
  if (flowDrops !== null) {
    const ds = flowChart.data.datasets[4];
    ds.data.push({ x: t * 1000, y: flowDrops });
    trim(ds.data, t * 1000);
    flowChart.update("none");
  }
  renderRules();
}

function onEffect(e) {
  state.effects[e.id] = e;
  renderRules();
}

function lossText(l) {
  if (!l) return "-";
  if (l.bernoulli) return fmtRate(l.bernoulli.rate || 0);
  if (l.gilbert_elliott) return "Gilbert-Elliott";
  if (l.every_nth) return "every " + l.every_nth;
  if (l.first_k) return "first " + l.first_k;
  if (l.ramp) return "ramp " + (l.ramp.steps || []).map((st) => fmtRate(st.rate || 0)).join(" → ");
  if (l.markov) return "4-state Markov";
  if (l.police) return "police " + fmtBitRate(u64(l.police.rate_bps)) + ", burst " +
                       fmtBytes(u64(l.police.burst_bytes)) + (l.police.per_flow ? ", per flow" : "");
  return "-";
}
function fmtBitRate(bps) {
  return bps >= 1e9 ? (bps / 1e9).toPrecision(3) + " Gbit/s"
       : bps >= 1e6 ? (bps / 1e6).toPrecision(3) + " Mbit/s"
       : bps >= 1e3 ? (bps / 1e3).toPrecision(3) + " kbit/s" : bps + " bit/s";
}
// What a rule does to the packets its model picks, when not drop: its name
// and what it did ("corrupt: 1,021 corrupted").
const ACTIONS = {
  ACTION_CORRUPT: ["corrupt", "corrupted"], ACTION_CORRUPT_PAYLOAD: ["corrupt payload", "corrupted"],
  ACTION_DUPLICATE: ["duplicate", "duplicated"], ACTION_ECN: ["ECN mark", "marked"],
  ACTION_ECN_PASS: ["ECN mark (non-ECT passes)", "marked"],
};
// With what its flows answered (the rule's effect e, when known): the echoes of its marks
// and the CWRs that answered them; the copies their peers D-SACKed.
function actionText(s, c, e) {
  const a = ACTIONS[s.action];
  if (!a) return "";
  let t = a[0] + ": " + fmtInt(u64(c[a[1] + "_segments"])) + " segs " + a[1];
  if (e && a[1] === "marked")
    t += " → " + fmtInt(u64(e.ece_acks)) + " echoes, " + fmtInt(u64((e.ca_entries || {}).cwr)) + " CWR";
  if (e && s.action === "ACTION_DUPLICATE") t += " → " + fmtInt(u64(e.dsacked_copies)) + " D-SACKed";
  return t;
}
// A rule's schedule (spec.schedule), after its loss: "pulse 200.0 ms / 800.0 ms ×10".
function scheduleText(sc) {
  if (!sc) return "";
  const p = [];
  if (u64(sc.start_after_ns)) p.push("after " + fmtDuration(u64(sc.start_after_ns)));
  if (u64(sc.active_ns))
    p.push("pulse " + fmtDuration(u64(sc.active_ns)) + " / " + fmtDuration(u64(sc.dormant_ns)) +
           (sc.cycles ? " ×" + sc.cycles : ""));
  return p.join(", ");
}
// A rule's guard (spec.guard): "stop on stall > 500.0 ms or > 5 RTOs in 2.0 s".
function guardText(g) {
  if (!g) return "";
  const p = [];
  if (u64(g.stall_ns)) {
    const c = g.stall_cause;  // "STALL_CAUSE_RTO"; UNSPECIFIED: any
    const cause = typeof c === "string" && c.startsWith("STALL_CAUSE_") && c !== "STALL_CAUSE_UNSPECIFIED"
      ? " (" + c.slice(12).toLowerCase() + ")" : "";
    p.push("stall" + cause + " > " + fmtDuration(u64(g.stall_ns)));
  }
  if (u64(g.rtos_window_ns)) p.push("> " + (g.rtos || 0) + " RTOs in " + fmtDuration(u64(g.rtos_window_ns)));
  if (u64(g.resends_window_ns))
    p.push("> " + (g.resends || 0) + " resends in " + fmtDuration(u64(g.resends_window_ns)));
  if (u64(g.resets_window_ns))
    p.push("> " + (g.resets || 0) + " resets or aborts in " + fmtDuration(u64(g.resets_window_ns)));
  if (u64(g.retrans_window_ns))
    p.push("a flow resending > " + fmtRate(g.retrans || 0) + " in " + fmtDuration(u64(g.retrans_window_ns)));
  let d = p.join(" or ") + (p.length && g.watch_port ? " of port " + g.watch_port + "'s flows" : "");
  if (g.misbehaves) d += (d ? " or " : "") + "its loss above its rate's 99.9 % interval";
  return d ? "stop on " + d : "";
}
// Its state; a stopped rule names the condition that stopped it.
function ruleStateText(rule) {
  const st = (rule.state || "").replace("RULE_STATE_", "").toLowerCase();
  return rule.guard_stop && rule.guard_stop.condition ? st + " (" + rule.guard_stop.condition + ")" : st;
}
function matchText(m) {
  if (!m) return "any";
  const p = [];
  if (m.protocol) p.push(m.protocol);
  if (m.src) p.push("src " + m.src);
  if (m.dst) p.push("dst " + m.dst);
  const pr = (r) => (!r || (!r.lo && !r.hi) ? "" : (!r.hi || r.hi === r.lo ? "" + r.lo : r.lo + "-" + r.hi));
  if (pr(m.sport)) p.push("sport " + pr(m.sport));
  if (pr(m.dport)) p.push("dport " + pr(m.dport));
  if (m.tcp_flags) p.push("flags " + m.tcp_flags);
  if (m.payload && m.payload !== "PAYLOAD_ANY") p.push(m.payload.replace("PAYLOAD_", "payload ").toLowerCase());
  return p.length ? p.join(" ") : "any";
}
function timeLeft(rule) {
  if (rule.state === "RULE_STATE_EXPIRED") return "expired";
  if (rule.state === "RULE_STATE_DELETED") return "deleted";
  if (rule.state === "RULE_STATE_STOPPED") return "stopped";
  const exp = u64(rule.expires_unix_ns);
  if (!exp) return "no limit";
  return fmtDuration(Math.max(0, exp - Date.now() * 1e6));
}

function renderRules() {
  const tbody = document.querySelector("#rules tbody");
  setText("rules-count", state.rulesTotal > state.rules.length
          ? "(" + state.rules.length + " of " + state.rulesTotal + ", active first)"
          : "(" + state.rulesTotal + ")");
  $("rules-empty").style.display = state.rules.length ? "none" : "block";
  const rows = [];
  for (const rule of state.rules) {
    const e = state.effects[rule.id];
    const s = rule.spec || {};
    const c = (e && e.counters) || rule.counters || {};
    const matched = u64(c.matched_segments);
    let measured = "-", interval = "-", inCi = "";
    if (e && matched) {
      measured = fmtRate(e.measured_rate || 0);
      // First-k and every-n-th drop by count: the expected drops, not an interval.
      interval = !e.deterministic
          ? fmtRate(e.rate_ci_low || 0) + " – " + fmtRate(e.rate_ci_high || 0)
          : e.expectation ? "expected " + fmtInt(u64(e.expectation.expected_dropped_packets)) + " pkts"
                          : "expected ?";
      // a policer (configured_rate -1) has no rate to hold the measure to
      inCi = (e.configured_rate || 0) < 0 ? "" : e.configured_within_ci ? "ok" : "bad";
    }
    const dr = state.dropRate[rule.id];
    rows.push({
      id: rule.id,
      selected: String(rule.id) === state.selectedRule,
      cells: [
        ["num", rule.id], ["", ruleStateText(rule)],
        ["wrap", targetText(rule) + " " +
             (s.direction || "DIRECTION_INGRESS").replace("DIRECTION_", "").toLowerCase()],
        ["wrap match", matchText(s.match)],
        ["num wrap", [lossText(s.loss), scheduleText(s.schedule)].filter(Boolean).join(" ") +
                     (guardText(s.guard) ? ", " + guardText(s.guard) : "") +
                     (actionText(s, c, e) ? ", " + actionText(s, c, e) : "")],
        ["num measured", measured], ["num wrap interval " + inCi, interval],
        ["num wrap", fmtInt(matched) + " segs · " + fmtBytes(u64(c.matched_bytes))],
        ["num dropped", fmtInt(u64(c.dropped_segments))],
        ["num", dr === undefined ? "-" : dr.toFixed(dr < 10 ? 1 : 0)],
        ["num wrap caused", e ? causedText(e) : "-"],
        ["wrap", e ? byType(e.retransmitted_segments) : "-"],
        ["num", e ? fmtInt(u64(e.flows)) : "-"], ["num", timeLeft(rule)],
      ],
    });
  }
  fillTable(tbody, rows, "data-rule-id", (id) => {
    state.selectedRule = state.selectedRule === String(id) ? "" : String(id);
    state.rtxList = [];
    state.rtxDirty = true;
    updateUrl();
    connect();
  });
}

// Rows updated in place (same row elements, same cells): no flicker, no layout shift.
// A rule's retransmits caused, and of them the resends that were not of its drops and the
// needless ones (the receivers D-SACKed them) when there are any.
function causedText(e) {
  const total = sumMap(e.retransmitted_segments);
  const other = Math.max(0, total - sumMap(e.resent_dropped_segments));
  const needless = sumMap(e.dsacked_segments);
  const parts = [];
  if (other) parts.push(fmtInt(other) + " other");
  if (needless) parts.push(fmtInt(needless) + " needless");
  return fmtInt(total) + (parts.length ? " (" + parts.join(", ") + ")" : "");
}

function fillTable(tbody, rows, attr, onClick) {
  while (tbody.rows.length > rows.length) tbody.deleteRow(-1);
  rows.forEach((r, i) => {
    let tr = tbody.rows[i];
    if (!tr) {
      tr = tbody.insertRow(-1);
      tr.addEventListener("click", () => onClick(tr.getAttribute(attr)));
    }
    tr.setAttribute(attr, r.id);
    tr.className = (r.selected ? "selected " : "") + (r.cls || "");
    while (tr.cells.length > r.cells.length) tr.deleteCell(-1);
    r.cells.forEach(([cls, text], j) => {
      const td = tr.cells[j] || tr.insertCell(-1);
      if (td.className !== cls) td.className = cls;
      if (td.textContent === String(text)) return;
      const port = cls.includes("addr") ? String(text).lastIndexOf(":") : -1;
      if (port > 0) {
        // An endpoint may break before its port (nothing is added to what is copied).
        td.replaceChildren(String(text).slice(0, port + 1), document.createElement("wbr"),
                           String(text).slice(port + 1));
      } else {
        td.textContent = text;
      }
    });
  });
}

// ---- flows -------------------------------------------------------------------------------
function onFlows(m) {
  const now = u64(m.time_unix_ns) / 1e6;
  if (m.snapshot) state.flows.clear();
  for (const f of m.flows || []) {
    const key = String(f.cookie);
    const prev = state.flows.get(key);
    const rec = { flow: f, rate: prev ? prev.rate : null, t: now, closedAt: f.closed ? now : null };
    if (prev && !f.closed && now > prev.t && u64(f.bytes_sent) >= u64(prev.flow.bytes_sent))
      rec.rate = (u64(f.bytes_sent) - u64(prev.flow.bytes_sent)) / ((now - prev.t) / 1000);
    state.flows.set(key, rec);
    if (key === state.selectedFlow) {
      pushFlowPoint(f, null, now);
      renderFlowDiagnosis(f);
    }
  }
  // Closed flows stay 10 s, greyed, then go.
  for (const [k, r] of state.flows) if (r.closedAt && now - r.closedAt > 10000) state.flows.delete(k);
  renderFlows();
}

// A socket's or a rule's cgroup as a user names it (docs/targeting.md): the
// pod and container, the container, the systemd unit, else the cgroup path.
function ownerText(o) {
  if (!o || !o.path || o.path === "/") return "-";
  const short = (id) => (id || "").slice(0, 12);
  if (o.pod) return "pod " + o.pod.slice(0, 8) + (o.container ? " " + short(o.container) : "");
  if (o.container) return (o.runtime || "container") + " " + short(o.container);
  if (o.unit) return o.unit;
  return o.path;
}

// What a rule targets: its interface, the service it was given by (pid, unit,
// container, pod) with the cgroup that resolved to, or its cgroup.
function targetText(rule) {
  const s = rule.spec || {};
  const parts = [];
  if (s.interface) parts.push(s.interface);
  if (s.pid) parts.push("pid " + s.pid);
  if (s.unit) parts.push("unit " + s.unit);
  if (s.pod) parts.push("pod " + s.pod);
  if (s.container) parts.push("container " + s.container);
  const cg = rule.cgroup || s.cgroup;
  if (cg) {
    const who = ownerText(rule.owner);
    parts.push("cgroup " + cg + (who !== "-" && who !== cg && !s.unit && !s.container && !s.pod
                                 ? " (" + who + ")" : ""));
  }
  return parts.join(" ");
}

function flowKey(r, key) {
  const f = r.flow;
  switch (key) {
    case "local": return endpoint(f.tuple.local_addr, f.tuple.local_port);
    case "remote": return endpoint(f.tuple.remote_addr, f.tuple.remote_port);
    case "owner": return ownerText(f.owner);
    case "netns": return u64(f.netns_ino);
    case "ca": return f.ca_state || 0;
    case "cwnd": return f.cwnd || 0;
    case "srtt": return f.srtt_us || 0;
    case "sent": return u64(f.bytes_sent);
    case "acked": return u64(f.bytes_acked);
    case "rate": return r.rate || 0;
    case "retrans": return sumMap(f.retransmitted_segments);
    case "limit": return f.dominant_limit || "~";
    case "stalls": return sumMap(f.stall_ns) + u64(f.stalled_ns);
    case "age": return -u64(f.opened_mono_ns);
  }
  return 0;
}

// The dominant limit and its share of busy time ("rwnd 96 %"), "-" while nothing was busy.
function limitText(f) {
  if (!f.dominant_limit) return "-";
  return f.dominant_limit.replace("_limited", "") + " " + Math.round(100 * Number(f.dominant_share || 0)) + " %";
}
// Stalls that ended, count / total time, and "stalled 2.1 s" while one lasts.
function stallsText(f) {
  const n = Number(f.stalls || 0);
  let s = n ? n + " / " + fmtDuration(sumMap(f.stall_ns)) : "-";
  if (u64(f.stalled_ns)) s += " stalled " + fmtDuration(u64(f.stalled_ns));
  return s;
}

function renderFlows() {
  const list = Array.from(state.flows.values());
  const k = state.sortKey;
  list.sort((a, b) => {
    const x = flowKey(a, k), y = flowKey(b, k);
    if (x === y) return String(a.flow.cookie) < String(b.flow.cookie) ? -1 : 1;
    return typeof x === "string" ? (x < y ? -1 : 1) : (y - x);
  });
  setText("flows-count", "(" + list.length + ", by " + k + ")");
  $("flows-empty").style.display = list.length ? "none" : "block";
  document.querySelectorAll("#flows th[data-sort]").forEach((th) =>
    th.classList.toggle("sorted", th.dataset.sort === k));
  const nowMono = state.clock ? state.clock.mono_ns + (Date.now() - state.clock.unix_ms) * 1e6 : 0;
  const rows = list.map((r) => {
    const f = r.flow;
    const age = f.closed ? fmtDuration(u64(f.duration_ns))
                         : nowMono ? fmtDuration(Math.max(0, nowMono - u64(f.opened_mono_ns))) : "-";
    return {
      id: f.cookie,
      selected: String(f.cookie) === state.selectedFlow,
      cls: f.closed ? "closed" : "",
      cells: [
        ["mono addr", endpoint(f.tuple.local_addr, f.tuple.local_port)],
        ["mono addr", endpoint(f.tuple.remote_addr, f.tuple.remote_port)],
        ["owner", ownerText(f.owner)],
        ["num mono netns", u64(f.netns_ino) ? String(f.netns_ino) : "-"],
        ["", f.closed ? "closed" : (CA_NAMES[f.ca_state || 0] || f.ca_state)],
        ["num", fmtInt(f.cwnd || 0)], ["num", fmtSrtt(f.srtt_us || 0)],
        ["num", fmtBytes(u64(f.bytes_sent))], ["num acked", fmtBytes(u64(f.bytes_acked))],
        ["num", r.rate === null || f.closed ? "-" : fmtBytes(r.rate) + "/s"],
        ["num wrap retrans", fmtInt(sumMap(f.retransmitted_segments)) +
            (u64(f.dsacked_segments) ? " (" + fmtInt(u64(f.dsacked_segments)) + " needless)" : "")],
        ["wrap", byType(f.retransmitted_segments)], ["limit", limitText(f)], ["num wrap", stallsText(f)],
        ["num age", (f.preexisting ? "> " : "") + age],
      ],
    };
  });
  fillTable(document.querySelector("#flows tbody"), rows, "data-cookie", (cookie) => {
    state.selectedFlow = state.selectedFlow === String(cookie) ? "" : String(cookie);
    state.flowSeries = { t: [], cwnd: [], srtt: [], retrans: [], lastTotal: null };
    state.flowRules = new Set();
    flowChart.data.datasets.forEach((d) => (d.data = []));
    flowChart.update("none");
    resetTrace();
    updateUrl();
    connect();
  });
}

document.querySelectorAll("#flows th[data-sort]").forEach((th) =>
  th.addEventListener("click", () => {
    state.sortKey = th.dataset.sort;
    renderFlows();
  }));

function updateUrl() {
  const q = new URLSearchParams(location.search);
  for (const [k, v] of [["flow", state.selectedFlow], ["rule", state.selectedRule]]) {
    if (v) q.set(k, v); else q.delete(k);
  }
  const s = q.toString();
  history.replaceState(null, "", location.pathname + (s ? "?" + s : ""));
}

// ---- one flow over time ----------------------------------------------------------------------
function trim(data, now) {
  while (data.length && data[0].x < now - FLOW_HISTORY * 1000) data.shift();
}

function pushFlowPoint(f, windowRetrans, tMs) {
  const ds = flowChart.data.datasets;
  if (f) {
    ds[0].data.push({ x: tMs, y: f.cwnd || 0 });
    ds[1].data.push({ x: tMs, y: (f.srtt_us || 0) / 1000 });
  }
  if (windowRetrans !== null) ds[2].data.push({ x: tMs, y: windowRetrans });
  for (const d of ds) trim(d.data, tMs);
  setFlowTicks();
  flowChart.update("none");
}

// Whole-second ticks (1, 5, 10, 30 s apart), so that no two show the same time.
function setFlowTicks() {
  let lo = Infinity, hi = -Infinity;
  for (const d of flowChart.data.datasets)
    for (const p of d.data) { lo = Math.min(lo, p.x); hi = Math.max(hi, p.x); }
  const span = hi > lo ? (hi - lo) / 1000 : 1;
  const step = span > 240 ? 30 : span > 100 ? 10 : span > 20 ? 5 : 1;
  const x = flowChart.options.scales.x;
  x.ticks.stepSize = step * 1000;
  x.min = Math.floor(lo / (step * 1000)) * step * 1000;
}

function onRetransmit(m) {
  const e = m.event;
  if (!e) return;
  if (state.selectedFlow && String(e.cookie) !== state.selectedFlow) return;
  const t = monoToMs(u64(e.time_mono_ns));
  if (state.selectedFlow) {
    const ds = flowChart.data.datasets[3];
    ds.data.push({ x: t, y: (e.state && e.state.cwnd) || 0 });
    trim(ds.data, t);
    for (const id of e.rule_ids || []) state.flowRules.add(String(id));
  }
  state.events.push(t);
  if (state.selectedRule || scoped()) {
    state.rtxList.push({ t, e });
    if (state.rtxList.length > RTX_LIST) state.rtxList.shift();
    state.rtxDirty = true;
  }
}

function scoped() { return SCOPES.some((k) => params.get(k)); }

// The followed rule's (or scope's) retransmissions: shown only when one is followed.
function renderEvents() {
  const on = !!(state.selectedRule || scoped());
  $("card-events").style.display = on ? "" : "none";
  if (!on || !state.rtxDirty) return;
  state.rtxDirty = false;
  const parts = [];
  if (state.selectedRule) parts.push("rule " + state.selectedRule + "'s flows");
  for (const k of SCOPES) if (params.get(k)) parts.push(k + " " + params.get(k));
  setText("events-title", "of " + parts.join(" and ") + " (" + fmtInt(state.rtxList.length) + ")");
  $("events-empty").style.display = state.rtxList.length ? "none" : "block";
  const rows = state.rtxList.slice().reverse().map(({ t, e }, i) => ({
    id: i, selected: false, cls: "",
    cells: [["num", fmtClock(t) + "." + String(Math.floor(t % 1000)).padStart(3, "0")],
            ["mono", endpoint(e.tuple.local_addr, e.tuple.local_port)],
            ["mono", endpoint(e.tuple.remote_addr, e.tuple.remote_port)],
            ["", shortEnum(e.type, "RETRANSMIT_TYPE_")], ["num", fmtInt(e.segments || 0)],
            ["num mono", String(e.seq || 0)], ["num", fmtInt((e.state && e.state.cwnd) || 0)],
            ["", (e.rule_ids || []).join(", ") || "-"]],
  }));
  fillTable(document.querySelector("#events tbody"), rows, "data-event", () => {});
}

// ---- the followed flow's trace (TraceFlow) -----------------------------------------------------
const STALL_COLORS = {
  rto: "#dc2626", tlp: "#f97316", fast_recovery: "#ca8a04", zero_window: "#7c3aed",
  rwnd_limited: "#92400e", nagle_delayed_ack: "#db2777", cwnd_limited: "#0891b2",
  sndbuf_limited: "#6b7280", app_limited: "#9ca3af", unknown: "#111827",
};
const TRACE_MAX_POINTS = 20000;  // samples kept in the chart (the oldest go)
const MOD32 = 4294967296;
const shortEnum = (v, prefix) => String(v || "").replace(prefix, "").toLowerCase();

function newTrace() {
  return { t0: null, baseSet: false, lastRaw: 0, last: 0, samples: 0, retransmits: 0, rtxSegments: 0, drops: 0,
           lost: 0, stalls: [], flow: null, closed: null, dirty: false };
}
state.trace = newTrace();

// 32-bit sequence numbers as bytes past the first snd_una, across wraps.
function seqRel(raw, advance) {
  const tr = state.trace;
  if (!tr.baseSet) { tr.baseSet = true; tr.lastRaw = raw; tr.last = 0; }
  let d = (raw - tr.lastRaw) % MOD32;
  if (d < 0) d += MOD32;
  if (d >= MOD32 / 2) d -= MOD32;
  const v = tr.last + d;
  if (advance) { tr.lastRaw = raw; tr.last = v; }
  return v;
}
function traceX(monoNs) {
  const tr = state.trace;
  if (tr.t0 === null) tr.t0 = monoNs;
  return (monoNs - tr.t0) / 1e9;
}

// Stalls shaded behind the data, labelled with their cause.
const stallShade = {
  id: "stallShade",
  beforeDatasetsDraw(chart) {
    const { ctx, chartArea: a, scales: { x } } = chart;
    const label = chart.canvas.id === "trace-chart";
    let labelEnd = -Infinity;  // a label that would overlap the previous one is left out
    ctx.save();
    ctx.font = "11px system-ui, sans-serif";
    for (const st of state.trace.stalls) {
      const x0 = Math.max(a.left, x.getPixelForValue(st.x0));
      const x1 = Math.min(a.right, x.getPixelForValue(st.x1));
      if (x1 < a.left || x0 > a.right) continue;
      ctx.fillStyle = (STALL_COLORS[st.cause] || "#111827") + "2e";
      ctx.fillRect(x0, a.top, Math.max(1, x1 - x0), a.bottom - a.top);
      const text = st.cause.replace(/_/g, " ") + " " + fmtDuration(st.ns);
      if (label && x0 + 2 > labelEnd) {
        ctx.fillStyle = STALL_COLORS[st.cause] || "#111827";
        ctx.fillText(text, x0 + 2, a.top + 12);
        labelEnd = x0 + 2 + ctx.measureText(text).width + 6;
      }
    }
    ctx.restore();
  },
};

const traceChart = new Chart($("trace-chart"), {
  type: "line",
  data: {
    datasets: [
      { label: "snd_una (acknowledged)", data: [], borderColor: "#2563eb", backgroundColor: "#2563eb",
        pointRadius: 0, borderWidth: 1.5, stepped: true },
      { label: "snd_nxt (sent)", data: [], borderColor: "#16a34a", backgroundColor: "#16a34a",
        pointRadius: 0, borderWidth: 1, stepped: true },
      { label: "retransmission", data: [], type: "scatter", pointStyle: "crossRot", pointRadius: 5,
        borderWidth: 2, borderColor: "#dc2626", backgroundColor: "#dc2626" },
      { label: "dropped by a rule", data: [], type: "scatter", pointStyle: "triangle", pointRadius: 5,
        rotation: 180, borderColor: "#111827", backgroundColor: "#111827" },
    ],
  },
  options: {
    maintainAspectRatio: false,
    parsing: false,
    interaction: { mode: "nearest", intersect: false },
    scales: {
      x: { type: "linear", title: { display: true, text: "time (s from the first ACK traced)" } },
      y: { title: { display: true, text: "sequence (KiB from the first)" } },
    },
    plugins: { legend: { position: "top", labels: { boxWidth: 12 } } },
  },
  plugins: [stallShade],
});

const traceCwndChart = new Chart($("trace-cwnd-chart"), {
  type: "line",
  data: {
    datasets: [
      { label: "cwnd", data: [], borderColor: "#7c3aed", backgroundColor: "#7c3aed", pointRadius: 0,
        borderWidth: 1.5, stepped: true },
      { label: "in flight", data: [], borderColor: "#f97316", backgroundColor: "#f97316", pointRadius: 0,
        borderWidth: 1, stepped: true },
    ],
  },
  options: {
    maintainAspectRatio: false,
    parsing: false,
    scales: {
      x: { type: "linear", title: { display: false } },
      y: { beginAtZero: true, title: { display: true, text: "segments" } },
    },
    plugins: { legend: { position: "right", labels: { boxWidth: 12 } } },
  },
  plugins: [stallShade],
});

function resetTrace() {
  state.trace = newTrace();
  for (const c of [traceChart, traceCwndChart]) {
    c.data.datasets.forEach((d) => (d.data = []));
    c.update("none");
  }
  renderTrace();
}

function pushCapped(data, p) {
  data.push(p);
  if (data.length > TRACE_MAX_POINTS) data.shift();
}

function onTrace(m) {
  const tr = state.trace;
  const ds = traceChart.data.datasets, dc = traceCwndChart.data.datasets;
  if (m.flow) {
    // A trace begins (a new connection traces from now on).
    resetTrace();
    state.trace.flow = m.flow;
    setText("trace-title", tupleText(m.flow.tuple) + "  (cookie " + m.flow.cookie + ")");
    renderFlowDiagnosis(m.flow);
  } else if (m.sample) {
    const s = m.sample;
    const x = traceX(u64(s.time_mono_ns));
    pushCapped(ds[0].data, { x, y: seqRel(Number(s.snd_una), true) / 1024 });
    pushCapped(ds[1].data, { x, y: seqRel(Number(s.snd_nxt), false) / 1024 });
    pushCapped(dc[0].data, { x, y: Number(s.cwnd) });
    pushCapped(dc[1].data, { x, y: Number(s.in_flight) });
    tr.samples++;
  } else if (m.retransmit) {
    const e = m.retransmit;
    pushCapped(ds[2].data, { x: traceX(u64(e.time_mono_ns)), y: seqRel(Number(e.seq), false) / 1024 });
    tr.retransmits++;
    tr.rtxSegments += Number(e.segments || 0);
  } else if (m.drop) {
    const d = m.drop.drop || {};
    pushCapped(ds[3].data, { x: traceX(u64(d.time_mono_ns)), y: seqRel(Number(d.seq), false) / 1024 });
    tr.drops++;
  } else if (m.stall) {
    const st = m.stall;
    const x0 = traceX(u64(st.start_mono_ns));
    tr.stalls.push({ x0, x1: x0 + u64(st.duration_ns) / 1e9, ns: u64(st.duration_ns),
                     cause: shortEnum(st.cause, "STALL_CAUSE_"), ev: st });
    renderStalls();
  } else if (m.gap) {
    tr.lost += u64(m.gap.count);
    addGap("trace", m.gap.source, u64(m.gap.count));
  } else if (m.closed) {
    tr.closed = m.closed;
    renderFlowDiagnosis(m.closed);
  }
  tr.dirty = true;
}

// What decided a stall's cause (as lossctl stalls prints it).
function stallEvidence(e) {
  const parts = [];
  const n = (v) => Number(v || 0);
  const resends = () => {
    if (n(e.retransmits)) parts.push(n(e.retransmits) + " resend" + (n(e.retransmits) === 1 ? "" : "s"));
  };
  switch (shortEnum(e.cause, "STALL_CAUSE_")) {
    case "rto": parts.push("rto backoff " + n(e.backoff)); resends(); break;
    case "tlp": parts.push("tail loss probe"); resends(); break;
    case "fast_recovery": parts.push("fast retransmit after " + n(e.acks) + " dupacks"); resends(); break;
    case "zero_window": parts.push("zero window, " + n(e.acks) + " probe answers"); break;
    case "rwnd_limited": parts.push("peer window " + fmtBytes(n(e.min_window))); break;
    case "nagle_delayed_ack":
      parts.push("nagle: " + fmtBytes(n(e.unsent_bytes)) + " held, peer ACK after " + fmtDuration(u64(e.duration_ns)));
      break;
    case "cwnd_limited": parts.push("in flight >= cwnd " + n(e.state && e.state.cwnd)); break;
    case "sndbuf_limited": parts.push("send buffer full"); break;
    case "app_limited": parts.push("nothing more to send (not a network stall)"); break;
    default:
      parts.push("hole at seq " + n(e.snd_una), n(e.acks) + " acks delivering nothing",
                 "window " + fmtBytes(n(e.min_window)), fmtBytes(n(e.unsent_bytes)) + " unsent");
      resends();
  }
  if (e.caused_by && n(e.caused_by.rule_id))
    parts.push("caused by rule " + n(e.caused_by.rule_id) + "'s drop of seq " + n(e.caused_by.seq) + "+" +
               n(e.caused_by.length));
  if (e.closing) parts.push("after the application's close");
  if (e.at_close) parts.push("ended by the close");
  return parts.join(", ");
}

function renderStalls() {
  const list = state.trace.stalls.slice(-200).reverse();
  $("stalls-empty").style.display = list.length ? "none" : "block";
  const before = (state.trace.flowStalls || 0) - state.trace.stalls.length;
  setText("stalls-empty", "no stalls in the trace" +
          (before > 0 ? " (the flow's " + fmtInt(before) + " earlier stall" + (before === 1 ? "" : "s") +
                        " ended before it began)" : ""));
  const rows = list.map((st, i) => ({
    id: i, selected: false, cls: "",
    cells: [["num", st.x0.toFixed(3) + " s"], ["", st.cause.replace(/_/g, " ")],
            ["num", fmtDuration(st.ns)], ["", stallEvidence(st.ev)]],
  }));
  fillTable(document.querySelector("#stalls tbody"), rows, "data-stall", () => {});
}

// The flow's limits and stalls (Flow: limit_ns, dominant_limit/share, stalls, stall_ns, stalled_ns).
function renderFlowDiagnosis(f) {
  if (!f || String(f.cookie) !== state.selectedFlow) return;
  const lim = f.limit_ns || {};
  setText("flow-limit", f.dominant_limit
    ? f.dominant_limit.replace("_limited", "") + " " + Math.round(100 * Number(f.dominant_share || 0)) + " % of busy time"
    : "- (nothing busy yet)");
  const parts = ["busy " + fmtDuration(u64(lim.busy))];
  for (const k of ["rwnd_limited", "sndbuf_limited", "cwnd_limited", "nagle_limited", "app_limited"])
    if (u64(lim[k])) parts.push(k.replace("_limited", "") + " " + fmtDuration(u64(lim[k])));
  parts.push("idle " + fmtDuration(u64(lim.idle)));
  setText("flow-time", parts.join(" · "));
  const byCause = [];
  let total = 0;
  for (const k in f.stall_ns || {}) {
    total += u64(f.stall_ns[k]);
    if (u64(f.stall_ns[k])) byCause.push(k.replace(/_/g, " ") + " " + fmtDuration(u64(f.stall_ns[k])));
  }
  const n = Number(f.stalls || 0);
  state.trace.flowStalls = n;
  let text = fmtInt(n) + (n ? " (" + fmtDuration(total) + ": " + byCause.join(", ") + ")" : "");
  // The table below holds the trace's stalls: those that ended after it began.
  if (n !== state.trace.stalls.length) text += ", " + fmtInt(state.trace.stalls.length) + " in this trace";
  if (u64(f.stalled_ns)) text += ", stalled now for " + fmtDuration(u64(f.stalled_ns));
  setText("flow-stalls", text);
  renderStalls();
}

function renderTrace() {
  const tr = state.trace;
  $("trace-none").style.display = state.selectedFlow ? "none" : "flex";
  if (!state.selectedFlow) {
    setText("trace-title", "click a flow above");
    for (const id of ["flow-limit", "flow-time", "flow-stalls", "trace-counts"]) setText(id, "-");
  }
  setText("trace-counts", fmtInt(tr.samples) + " samples, " + fmtInt(tr.retransmits) + " retransmissions (" +
          fmtInt(tr.rtxSegments) + " segments), " +
          fmtInt(tr.drops) + " drops, " + fmtInt(tr.stalls.length) + " stalls" +
          (tr.lost ? ", " + fmtInt(tr.lost) + " lost" : ""));
  setText("trace-state", tr.closed ? "the flow closed: trace complete" : tr.flow ? "tracing" : "");
  if (tr.dirty) {
    tr.dirty = false;
    traceChart.update("none");
    traceCwndChart.update("none");
  }
}
setInterval(renderTrace, 500);

connect();
// Time left and ages move even when nothing else changes.
setInterval(() => { renderRules(); renderFlows(); renderEvents(); }, 1000);
renderEvents();
