// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * lossd TCP observer: what TCP does about loss.
 *
 *  sockops (root cgroup)         every counted retransmission (RETRANS_CB),
 *                                classified; exact totals. Arms the callback
 *                                on connect, listen and establishment.
 *  tp_btf/tcp_retransmit_synack  SYN-ACK retransmissions
 *  tp_btf/tcp_probe              per-ACK: folded into the flow's aggregate only:
 *                                where its time went (limits), the stall detector
 *                                (an event per stall, none per ACK), and the ACK
 *                                samples of the flows being traced, and D-SACKs
 *                                (needless resends: counted, an event each)
 *  tp_btf/tcp_sendmsg_locked     a write after idle starts the stall clock
 *  tp_btf/tcp_cong_state_set     time per congestion state, per flow
 *  tp_btf/inet_sock_set_state    flow open and close (closing summary event)
 *  iter/tcp                      flows that existed before the observer started;
 *                                arms their retransmission callback
 *
 * Why sock_ops and not tcp:tcp_retransmit_skb: __tcp_retransmit_skb calls the
 * RETRANS_CB right after it adds the segments to TcpRetransSegs, on exactly
 * the path that counts them, with (seq, segs, err). The tracepoint, a few
 * lines later, did not reach BPF for about 1 retransmission in 100-300 on
 * this kernel (docs/observer.md), and tracing programs are skipped when they
 * would nest on a CPU; sock_ops programs are neither.
 *
 * Totals cover every socket of the watched network namespaces, kept per
 * namespace (each reconciles with its own /proc/net/snmp and
 * /proc/net/netstat); filters decide which sockets get events and flow records.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "observe_abi.h"
#include "lib/obs_ring.h"
#include "lib/shared_maps.h"
#include "lib/ring_wakeup.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define TCP_CA_Loss 4
#define ICSK_TIME_LOSS_PROBE 5
#define TCP_SYN_SENT 2
#define TCP_SYN_RECV 3
#define TCP_ESTABLISHED 1
#define TCP_CLOSE 7
#define TCP_FIN_WAIT1 4
#define TCP_FIN_WAIT2 5
#define TCP_CLOSING 11
#define TCP_CLOSE_WAIT 8
#define TCP_LAST_ACK 9
#define SOL_TCP 6
#define TCP_NAGLE_OFF 1
#define TCP_NAGLE_CORK 2
#define TCPHDR_SYN 0x02
#define TCPHDR_ACK 0x10
#define TCPHDR_ECE 0x40
#define TCP_CHRONO_BUSY 1
#define TCP_CHRONO_SNDBUF_LIMITED 3
#define CLOCK_MONOTONIC 1

/* tcp_sock.chrono_stat is kept in jiffies (docs/observer.md#limits). */
extern int CONFIG_HZ __kconfig __weak;

/* Flows being traced: their ACKs go to the ring as samples. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, OBS_MAX_TRACED);
	__type(key, __u64); /* socket cookie */
	__type(value, __u32);
} obs_traced SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct obs_config);
} obs_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, OBS_TOTALS);
	__type(key, __u32);
	__type(value, struct obs_total);
} obs_totals SEC(".maps");

/* The totals of each network namespace (docs/observer.md#namespaces).
 * Allocated per entry (256 bytes per CPU each), not the whole table up front. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, OBS_MAX_NETNS);
	__type(key, __u64); /* netns inode */
	__type(value, struct obs_ns_total);
} obs_ns_totals SEC(".maps");

/* ... and of the namespaces that found obs_ns_totals full. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct obs_ns_total);
} obs_ns_other SEC(".maps");

/* Never written: the zeros a new obs_ns_totals entry starts from. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct obs_ns_total);
} obs_ns_zero SEC(".maps");

/* OBS_NETNS_SET: the watched namespaces (netns inode -> 1). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, OBS_MAX_WATCHED_NETNS);
	__type(key, __u64);
	__type(value, __u32);
} obs_netns_set SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64); /* socket cookie */
	__type(value, struct obs_flow);
} obs_flows SEC(".maps");

/* A new flow record is built here (it is too large for the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct obs_flow);
} obs_flow_scratch SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&obs_counters, &idx);
	if (c)
		__sync_fetch_and_add(c, 1); /* atomic: a softirq may nest on this CPU */
}

static __always_inline struct obs_config *get_config(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&obs_cfg, &zero);
}

static __always_inline __u32 sock_netns(const struct sock *sk)
{
	return BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
}

/* Whether the socket's network namespace is watched (obs_config.netns_mode). */
static __always_inline int in_netns(const struct obs_config *cfg, const struct sock *sk)
{
	if (cfg->netns_mode == OBS_NETNS_ALL)
		return 1;
	if (cfg->netns_mode == OBS_NETNS_SET) {
		__u64 ino = sock_netns(sk);
		return bpf_map_lookup_elem(&obs_netns_set, &ino) != NULL;
	}
	if (!cfg->netns_ino)
		return 1;
	return sock_netns(sk) == cfg->netns_ino;
}

static __always_inline void read_tuple(const struct sock *sk, struct obs_tuple *t)
{
	t->family = BPF_CORE_READ(sk, __sk_common.skc_family);
	t->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	t->dport = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (t->family == AF_INET6) {
		BPF_CORE_READ_INTO(&t->saddr, sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32);
		BPF_CORE_READ_INTO(&t->daddr, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr32);
	} else {
		t->saddr[0] = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
		t->daddr[0] = BPF_CORE_READ(sk, __sk_common.skc_daddr);
	}
}

static __always_inline int filter_one(const struct obs_filter *f, const struct obs_tuple *t,
				      __u64 cgroup_id)
{
	if (f->family && f->family != t->family)
		return 0;
	if (f->cgroup_id && f->cgroup_id != cgroup_id)
		return 0;
	if (f->port_lo || f->port_hi != 0xffff) {
		if (!((t->sport >= f->port_lo && t->sport <= f->port_hi) ||
		      (t->dport >= f->port_lo && t->dport <= f->port_hi)))
			return 0;
	}
	int s = 1, d = 1;
	for (int i = 0; i < 4; i++) {
		s &= (t->saddr[i] & f->mask[i]) == f->addr[i];
		d &= (t->daddr[i] & f->mask[i]) == f->addr[i];
	}
	return s | d;
}

struct filter_scan {
	const struct obs_config *cfg;
	const struct obs_tuple *t;
	__u64 cgroup_id;
	int wanted;
};

static long filter_step(__u32 i, struct filter_scan *c)
{
	if (i >= OBS_MAX_FILTERS)
		return 1;
	if (filter_one(&c->cfg->filters[i], c->t, c->cgroup_id)) {
		c->wanted = 1;
		return 1; /* stop */
	}
	return 0;
}

/*
 * Any filter matches (or there are none). The filters are scanned with
 * bpf_loop: its callback is verified once, for any index, where a bounded
 * loop over 16 filters made the verifier walk ~620,000 instructions in
 * every program that calls this (docs/benchmarks.md, start-up). A global
 * function: checked once per program, not per caller.
 */
__noinline int obs_wanted(const struct obs_tuple *t, __u64 cgroup_id)
{
	__u32 zero = 0;
	struct obs_config *cfg = bpf_map_lookup_elem(&obs_cfg, &zero);
	if (!cfg || !t)
		return 0;
	__u32 n = cfg->n_filters;
	if (!n)
		return 1;
	if (n > OBS_MAX_FILTERS)
		n = OBS_MAX_FILTERS;
	struct filter_scan scan = {.cfg = cfg, .t = t, .cgroup_id = cgroup_id, .wanted = 0};
	bpf_loop(n, filter_step, &scan, 0);
	return scan.wanted;
}

static __always_inline __u64 sock_cgroup(const struct sock *sk)
{
	return BPF_CORE_READ(sk, sk_cgrp_data.cgroup, kn, id);
}

static __always_inline void read_state(struct tcp_sock *tp, struct obs_sock_state *st)
{
	st->snd_cwnd = tp->snd_cwnd;
	st->snd_ssthresh = tp->snd_ssthresh;
	st->srtt_us = tp->srtt_us >> 3;
	st->rttvar_us = tp->mdev_us >> 2;
	st->mss = tp->mss_cache;
	st->packets_out = tp->packets_out;
	st->retrans_out = tp->retrans_out;
	st->lost_out = tp->lost_out;
	st->sacked_out = tp->sacked_out;
	st->in_flight = tp->packets_out - tp->sacked_out - tp->lost_out + tp->retrans_out;
	st->snd_wnd = tp->snd_wnd;
	st->rcv_wnd = tp->rcv_wnd;
	st->total_retrans = tp->total_retrans;
	st->ca_state = BPF_CORE_READ_BITFIELD_PROBED(&tp->inet_conn, icsk_ca_state);
	st->backoff = tp->inet_conn.icsk_backoff;
	st->retransmits = tp->inet_conn.icsk_retransmits;
	st->tcp_state = tp->inet_conn.icsk_inet.sk.__sk_common.skc_state;
	st->bytes_acked = tp->bytes_acked;
	st->bytes_sent = tp->bytes_sent;
}

/* This CPU's totals of namespace `ino`: its own entry, created on first
 * use, or the "other namespaces" bucket once the table is full. */
static __always_inline struct obs_ns_total *ns_totals(__u64 ino)
{
	struct obs_ns_total *nt = bpf_map_lookup_elem(&obs_ns_totals, &ino);
	if (nt)
		return nt;
	__u32 zero = 0;
	struct obs_ns_total *z = bpf_map_lookup_elem(&obs_ns_zero, &zero);
	if (z) {
		/* a new per-CPU hash entry is zero on every other CPU; EEXIST: a
		 * nested run created it first */
		bpf_map_update_elem(&obs_ns_totals, &ino, z, BPF_NOEXIST);
		nt = bpf_map_lookup_elem(&obs_ns_totals, &ino);
		if (nt)
			return nt;
	}
	return bpf_map_lookup_elem(&obs_ns_other, &zero);
}

static __always_inline void add_total(__u32 netns, __u32 type, __u32 outcome, __u32 segs)
{
	__u32 idx = type * OBS_OUTCOME_MAX + outcome;
	if (idx >= OBS_TOTALS)
		return;
	struct obs_total *t = bpf_map_lookup_elem(&obs_totals, &idx);
	if (t) {
		/* atomic: a retransmit in softirq can interrupt one in process
		 * context on the same CPU, mid-update */
		__sync_fetch_and_add(&t->events, 1);
		__sync_fetch_and_add(&t->segs, segs);
	}
	struct obs_ns_total *nt = ns_totals(netns);
	if (nt) {
		__sync_fetch_and_add(&nt->t[idx].events, 1);
		__sync_fetch_and_add(&nt->t[idx].segs, segs);
	}
}

static __always_inline void flow_init(struct obs_flow *f, const struct obs_tuple *t,
				      __u64 cgroup_id, __u32 netns, __u64 now)
{
	__builtin_memset(f, 0, sizeof(*f));
	f->tuple = *t;
	f->cgroup_id = cgroup_id;
	f->netns = netns;
	f->opened_ns = now;
	f->updated_ns = now;
	f->ca_since_ns = now;
	f->cwnd_min = 0xffffffff;
	f->srtt_min_us = 0xffffffff;
	f->idle = 1; /* the first write starts the stall clock */
	f->delivered_ns = now;
	f->st_rtx_type = OBS_RTX_MAX;
	f->st_min_wnd = 0xffffffff;
}

/* A new period without delivery begins (an ACK delivered, or a write after idle). */
static __always_inline void stall_reset(struct obs_flow *f, __u64 now, __u32 wnd)
{
	f->delivered_ns = now;
	f->st_rtx_type = OBS_RTX_MAX;
	f->st_rtx_seq = 0;
	f->st_rtx_count = 0;
	f->st_rtx_mask = 0;
	f->st_backoff = 0;
	f->st_acks = 0;
	f->st_min_wnd = wnd;
}

__u64 obs_last_wakeup_ns;

static __always_inline __u64 wakeup_flag(__u64 now)
{
	return ring_wakeup_flag(&obs_ring, &obs_last_wakeup_ns, now);
}

/* The flow's counts an event carries (obs_event.flow_rtx_segs, flow_stalls). */
static __always_inline void flow_counts(struct obs_event *e, const struct obs_flow *f)
{
	__u64 rtx = 0;
	for (int i = 0; i < OBS_RTX_MAX; i++)
		rtx += f->rtx_segs[i];
	e->flow_rtx_segs = (__u32)rtx;
	e->flow_stalls = f->stalls;
}

/* The common head of a record about a flow (retransmit, stall, sample, close,
 * open); the rest zeroed (a ring reservation is not). */
static __always_inline void event_head(struct obs_event *e, __u32 kind, __u64 now, __u64 cookie,
				       const struct obs_flow *f)
{
	__builtin_memset(e, 0, sizeof(*e));
	e->kind = kind;
	e->cpu = bpf_get_smp_processor_id();
	e->time_ns = now;
	e->cookie = cookie;
	e->cgroup_id = f->cgroup_id;
	e->tuple = f->tuple;
	e->netns = f->netns;
	flow_counts(e, f);
}

/* A flow record was created: told to user space only while someone waits
 * for a flow to open (TraceFlow's wait), so an idle waiter costs nothing. */
static __always_inline void flow_opened(__u64 cookie, const struct obs_flow *f, __u64 now)
{
	struct obs_config *cfg = get_config();
	if (!cfg || !cfg->open_waiters)
		return;
	struct obs_event *e = bpf_ringbuf_reserve(&obs_ring, sizeof(*e), 0);
	if (!e) {
		count(OBS_CNT_RING_LOST);
		return;
	}
	event_head(e, OBS_EV_FLOW_OPEN, now, cookie, f);
	bpf_ringbuf_submit(e, wakeup_flag(now));
}

/* The flow record of a wanted socket, created on first sight. */
static __always_inline struct obs_flow *flow_get(const struct sock *sk, __u64 cookie, __u64 now,
						 int create)
{
	struct obs_flow *f = bpf_map_lookup_elem(&obs_flows, &cookie);
	if (f || !create)
		return f;
	struct obs_tuple t = {};
	read_tuple(sk, &t);
	__u64 cg = sock_cgroup(sk);
	if (!obs_wanted(&t, cg))
		return NULL;
	__u32 zero = 0;
	struct obs_flow *init = bpf_map_lookup_elem(&obs_flow_scratch, &zero);
	if (!init)
		return NULL;
	flow_init(init, &t, cg, sock_netns(sk), now);
	if (bpf_map_update_elem(&obs_flows, &cookie, init, BPF_NOEXIST) == 0) {
		count(OBS_CNT_FLOWS_OPENED);
		flow_opened(cookie, init, now);
	}
	return bpf_map_lookup_elem(&obs_flows, &cookie);
}

/*
 * Type of a counted retransmission, from the socket's own state at the
 * RETRANS_CB (docs/observer.md). The kernel picks its MIB the same way:
 * tcp_xmit_retransmit_queue counts TCPSlowStartRetrans in Loss state and
 * TCPFastRetrans otherwise; the timer runs with icsk_pending cleared; a tail
 * loss probe runs with icsk_pending == ICSK_TIME_LOSS_PROBE, in Open state.
 */
static __always_inline __u32 classify(struct tcp_sock *tp)
{
	__u8 pending = tp->inet_conn.icsk_pending;
	__u8 ca = BPF_CORE_READ_BITFIELD_PROBED(&tp->inet_conn, icsk_ca_state);
	__u8 state = tp->inet_conn.icsk_inet.sk.__sk_common.skc_state;

	if (state == TCP_SYN_SENT)
		return OBS_RTX_SYN;
	if (pending == 0) /* inside tcp_retransmit_timer */
		return (tp->snd_wnd == 0 && state != TCP_SYN_RECV) ? OBS_RTX_PROBE0 : OBS_RTX_RTO;
	if (ca == TCP_CA_Loss)
		return OBS_RTX_LOSS;
	if (ca != TCP_CA_Open)
		return OBS_RTX_FAST;
	if (pending == ICSK_TIME_LOSS_PROBE)
		return OBS_RTX_TLP;
	return OBS_RTX_UNKNOWN;
}

/* A stall's cause as the resends in it so far give it (stall_cause's first
 * answers; a guard judges a stall by it before it ends); OBS_STALL_MAX: none. */
static __always_inline __u32 resend_cause(const struct obs_flow *f)
{
	__u32 mask = f->st_rtx_mask;
	if (mask & ((1u << OBS_RTX_RTO) | (1u << OBS_RTX_LOSS)))
		return OBS_STALL_RTO;
	if (mask & (1u << OBS_RTX_PROBE0))
		return OBS_STALL_ZERO_WINDOW;
	/* A tail probe sent as the peer's window closed (a busy machine's, the
	 * data had arrived) did not hold the flow: the closed window did. */
	if (mask == (1u << OBS_RTX_TLP) && f->st_min_wnd == 0)
		return OBS_STALL_ZERO_WINDOW;
	if (mask & (1u << OBS_RTX_TLP))
		return OBS_STALL_TLP;
	if (mask & (1u << OBS_RTX_FAST))
		return OBS_STALL_FAST_RECOVERY;
	if (mask)
		return OBS_STALL_UNKNOWN;
	return OBS_STALL_MAX;
}

/* ---- guards (loss_abi.h "Guards", docs/guards.md) ---------------------- */

/* A stall of a flow that resent a segment a guarded rule dropped: the timer
 * that ends it at the guard's limit, unless an ACK delivers first. */
struct guard_timer {
	struct bpf_timer t;
	__u64 stall_start_ns; /* obs_flow.delivered_ns when armed */
	__u32 rule_id;	      /* the rule whose drop the flow resent */
	__u32 _pad;
	struct loss_drop_key flow;
};

/* A flow a guard with a retransmit share condition judges: its counts at its
 * resends (a ring, the newest at (n - 1) % GUARD_RATE_SAMPLES). */
#define GUARD_RATE_SAMPLES 16
struct guard_share {
	__u32 n; /* samples taken */
	__u32 _pad;
	__u64 t[GUARD_RATE_SAMPLES];	/* when */
	__u32 segs[GUARD_RATE_SAMPLES]; /* tcp_sock.data_segs_out then */
	__u32 rtx[GUARD_RATE_SAMPLES];	/* tcp_sock.total_retrans then */
};

/* One timer per flow and guard: the rule's, and the daemon's (LOSS_GUARD_ALL). */
struct guard_timer_key {
	__u64 cookie;
	__u32 slot;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct guard_timer_key);
	__type(value, struct guard_timer);
} obs_guard_timers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct guard_timer_key);
	__type(value, struct guard_share);
} obs_guard_shares SEC(".maps");

/* A zeroed guard_share, the first value of a flow's entry (too large for the stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct guard_share);
} obs_guard_share_zero SEC(".maps");

/* The guard stops its rule (the injector's programs see stopped_ns on their
 * next packet); the first to get here writes why. */
static __always_inline void guard_stop(struct loss_guard *g, __u32 reason, __u64 crossed,
				       __u64 start, __u32 n, __u32 segs, __u64 cookie,
				       const struct loss_drop_key *flow, __u32 rule_id)
{
	__u64 now = bpf_ktime_get_ns();
	if (__sync_val_compare_and_swap(&g->stopped_ns, 0, now) != 0)
		return;
	g->evidence_rule = rule_id;
	g->crossed_ns = crossed;
	g->count = n;
	g->segs = segs;
	g->evidence_start_ns = start;
	g->evidence_cookie = cookie;
	g->flow = *flow;
	g->reason = reason; /* last: user space reads the evidence once it is set */
}

/* Whether a stall of f is one the guard counts (its causes; 0: any). */
static __always_inline int guard_cause(const struct loss_guard *g, const struct obs_flow *f)
{
	return !g->stall_causes || ((g->stall_causes >> resend_cause(f)) & 1);
}

/* The stall's limit passed: if no ACK delivered since it was armed, the
 * stall is longer than the guard allows (and of a cause it counts). */
static int guard_timer_fired(void *map, struct guard_timer_key *key, struct guard_timer *v)
{
	struct obs_flow *f = bpf_map_lookup_elem(&obs_flows, &key->cookie);
	if (!f || f->delivered_ns != v->stall_start_ns)
		return 0;
	__u32 slot = key->slot;
	struct loss_guard *g = bpf_map_lookup_elem(&loss_guards, &slot);
	/* the rule's guard names its rule; the daemon's (rule_id 0) any */
	if (!g || (g->rule_id && g->rule_id != v->rule_id) || !g->stall_ns || g->stopped_ns ||
	    !guard_cause(g, f))
		return 0;
	guard_stop(g, LOSS_GUARD_STALL, v->stall_start_ns + g->stall_ns, v->stall_start_ns, 0, 0,
		   key->cookie, &v->flow, v->rule_id);
	return 0;
}

static __always_inline void guard_arm(struct loss_guard *g, __u64 cookie, __u64 start, __u64 now,
				      __u32 slot, __u32 rule_id, const struct loss_drop_key *k)
{
	struct guard_timer_key tk = {.cookie = cookie, .slot = slot};
	struct guard_timer *t = bpf_map_lookup_elem(&obs_guard_timers, &tk);
	if (!t) {
		struct guard_timer init = {};
		bpf_map_update_elem(&obs_guard_timers, &tk, &init, BPF_NOEXIST);
		t = bpf_map_lookup_elem(&obs_guard_timers, &tk);
		if (!t)
			return;
		bpf_timer_init(&t->t, &obs_guard_timers, CLOCK_MONOTONIC);
		bpf_timer_set_callback(&t->t, guard_timer_fired);
	}
	if (t->stall_start_ns == start && t->rule_id == rule_id)
		return; /* armed for this stall */
	t->stall_start_ns = start;
	t->rule_id = rule_id;
	t->flow = *k;
	bpf_timer_start(&t->t, start + g->stall_ns - now, 0);
}

/*
 * The retransmit share at a resend: of the data segments the flow sent since
 * its newest sample at least the window old (or, none that old yet, since it
 * opened: a longer span, never a shorter one), how many were resends; judged
 * over LOSS_GUARD_RETRANS_MIN_SEGS at least. Samples are the kernel's counts
 * (tcp_sock's data_segs_out and total_retrans, this resend counted in both
 * before the callback) at its resends, one per window / GUARD_RATE_SAMPLES at
 * most: the ring reaches a window back, so the share is over the window (up
 * to 1/16 more).
 */
static __always_inline void guard_share(struct loss_guard *g, const struct obs_flow *f,
					struct tcp_sock *tp, __u64 cookie, __u64 now, __u32 slot,
					__u32 rule_id, const struct loss_drop_key *k)
{
	struct guard_timer_key key = {.cookie = cookie, .slot = slot};
	struct guard_share *s = bpf_map_lookup_elem(&obs_guard_shares, &key);
	if (!s) {
		__u32 zero = 0;
		struct guard_share *init = bpf_map_lookup_elem(&obs_guard_share_zero, &zero);
		if (!init)
			return;
		bpf_map_update_elem(&obs_guard_shares, &key, init, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&obs_guard_shares, &key);
		if (!s)
			return;
	}
	__u32 segs = tp->data_segs_out, rtx = tp->total_retrans;
	__u32 n = s->n;
	__u64 bt = f->opened_ns; /* the socket's counts start at 0 */
	__u32 bsegs = 0, brtx = 0;
	for (int i = 0; i < GUARD_RATE_SAMPLES; i++) {
		if ((__u32)i >= n)
			break;
		__u32 j = (n - 1 - i) & (GUARD_RATE_SAMPLES - 1); /* newest first */
		if (now - s->t[j] >= g->rate_window_ns) {
			bt = s->t[j];
			bsegs = s->segs[j];
			brtx = s->rtx[j];
			break;
		}
	}
	__u64 newest = n ? s->t[(n - 1) & (GUARD_RATE_SAMPLES - 1)] : 0;
	if (!n || now - newest >= g->rate_window_ns / GUARD_RATE_SAMPLES) {
		__u32 j = n & (GUARD_RATE_SAMPLES - 1);
		s->t[j] = now;
		s->segs[j] = segs;
		s->rtx[j] = rtx;
		s->n = n + 1;
	}
	__u32 ds = segs - bsegs, dr = rtx - brtx;
	if (ds < LOSS_GUARD_RETRANS_MIN_SEGS || dr > ds)
		return;
	if ((__u64)dr * 1000000 > (__u64)g->rate_ppm * ds)
		guard_stop(g, LOSS_GUARD_RETRANS, now, bt, dr, ds, cookie, k, rule_id);
}

/* What the guard's count condition counts (loss_guard.rtos's flags). */
static __always_inline __u32 guard_count_reason(const struct loss_guard *g)
{
	if (g->rtos & LOSS_GUARD_COUNT_RESETS)
		return LOSS_GUARD_RESETS;
	if (g->rtos & LOSS_GUARD_COUNT_RESENDS)
		return LOSS_GUARD_RESENDS;
	return LOSS_GUARD_RTOS;
}

/* One more event of the guard's count (an RTO, a resend, a reset): the
 * guard stops when it makes more than N within the window. 1: stopped. */
static __always_inline int guard_count(struct loss_guard *g, __u32 reason, __u64 now,
				       __u64 cookie, const struct loss_drop_key *k, __u32 rule_id)
{
	__u64 i = __sync_fetch_and_add(&g->rtos_seen, 1);
	g->rto_ns[i & (LOSS_GUARD_RING - 1)] = now;
	__u32 lim = g->rtos & (LOSS_GUARD_RING - 1);
	if (i < lim) /* this is event i + 1; event i + 1 - lim came lim before it */
		return 0;
	__u64 first = g->rto_ns[(i - lim) & (LOSS_GUARD_RING - 1)];
	if (!first || now - first > g->rtos_window_ns)
		return 0;
	guard_stop(g, reason, now, first, lim + 1, 0, cookie, k, rule_id);
	return 1;
}

/* One guard's conditions at a resend of a segment rule_id dropped, or of a
 * flow it watches (key: the guard's key in loss_guards: the rule's slot, or
 * LOSS_GUARD_ALL). */
static __always_inline void guard_eval(struct loss_guard *g, const struct obs_flow *f,
				       struct tcp_sock *tp, __u64 cookie, __u32 type, __u64 now,
				       __u32 key, __u32 rule_id, const struct loss_drop_key *k)
{
	if (g->stopped_ns)
		return;
	__u32 reason = guard_count_reason(g);
	if (g->rtos_window_ns &&
	    (reason == LOSS_GUARD_RESENDS || (reason == LOSS_GUARD_RTOS && type == OBS_RTX_RTO)) &&
	    guard_count(g, reason, now, cookie, k, rule_id))
		return;
	if (g->rate_window_ns) {
		guard_share(g, f, tp, cookie, now, key, rule_id, k);
		if (g->stopped_ns)
			return;
	}
	if (g->stall_ns) {
		__u64 start = f->delivered_ns;
		if (now - start >= g->stall_ns) {
			if (guard_cause(g, f))
				guard_stop(g, LOSS_GUARD_STALL, start + g->stall_ns, start, 0, 0,
					   cookie, k, rule_id);
		} else
			guard_arm(g, cookie, start, now, key, rule_id, k);
	}
}

/* A flow that ended in an error, for a guard that counts those. */
static __always_inline void guard_reset(struct loss_guard *g, __u64 cookie, __u64 now,
					__u32 rule_id, const struct loss_drop_key *k)
{
	if (!g->stopped_ns && g->rtos_window_ns && (g->rtos & LOSS_GUARD_COUNT_RESETS))
		guard_count(g, LOSS_GUARD_RESETS, now, cookie, k, rule_id);
}

/* The guards watching a port of this flow (either end's; loss_guard_watch)
 * judge it: at a resend (reset 0) or at its end in an error (reset 1). */
static __always_inline void guard_watched(const struct obs_flow *f, struct tcp_sock *tp,
					  __u64 cookie, __u32 type, __u64 now, int reset,
					  const struct loss_drop_key *k)
{
	for (int end = 0; end < 2; end++) {
		__u32 port = end ? k->dport : k->sport;
		if (end && port == k->sport)
			break; /* the same port at both ends: judged once */
		struct loss_guard_watch *w = bpf_map_lookup_elem(&loss_guard_watch, &port);
		if (!w)
			continue;
		for (int i = 0; i < LOSS_WATCH_GUARDS; i++) {
			if ((__u32)i >= w->n)
				break;
			__u32 slot = w->slots[i];
			struct loss_guard *g = bpf_map_lookup_elem(&loss_guards, &slot);
			if (!g || !(g->rtos & LOSS_GUARD_WATCHING))
				continue;
			if (reset)
				guard_reset(g, cookie, now, g->rule_id, k);
			else
				guard_eval(g, f, tp, cookie, type, now, slot, g->rule_id, k);
		}
	}
}

/* The flow's key in the drop log: its tuple, local -> remote. */
static __always_inline void drop_key_of(const struct obs_flow *f, struct loss_drop_key *k)
{
	__builtin_memcpy(k, &f->tuple, sizeof(*k)); /* the same layout */
	k->_pad = 0;
}

/*
 * A retransmission of seq: if a rule dropped it (the drop log's newest range
 * holding it), that rule's guard and the daemon's count it and may stop; so
 * do the guards watching the flow's ports.
 */
static __always_inline void guard_check(const struct obs_flow *f, struct tcp_sock *tp,
					__u64 cookie, __u32 seq, __u32 type, __u64 now)
{
	struct loss_drop_key k;
	drop_key_of(f, &k);
	guard_watched(f, tp, cookie, type, now, 0, &k);
	struct loss_drop_log *log = bpf_map_lookup_elem(&loss_drops, &k);
	if (!log)
		return;
	__u64 n = log->drops;
	__u32 slot = 0, rule_id = 0;
	int found = 0;
	for (int i = 0; i < LOSS_DROP_RANGES; i++) {
		if ((__u64)i >= n)
			break;
		struct loss_drop_range *r = &log->ranges[(n - 1 - i) & (LOSS_DROP_RANGES - 1)];
		if (seq - r->seq < r->len) {
			slot = r->slot;
			rule_id = r->rule_id;
			found = 1;
			break;
		}
	}
	if (!found)
		return;
	struct loss_guard *g = bpf_map_lookup_elem(&loss_guards, &slot);
	if (g && g->rule_id == rule_id && !(g->rtos & LOSS_GUARD_WATCHING))
		guard_eval(g, f, tp, cookie, type, now, slot, rule_id, &k);
	__u32 all = LOSS_GUARD_ALL;
	g = bpf_map_lookup_elem(&loss_guards, &all);
	if (g)
		guard_eval(g, f, tp, cookie, type, now, all, rule_id, &k);
}

/*
 * A flow that ended in an error (a reset received, a timeout: sk_err set at
 * its close): counted by the guards counting resets that judge it: those of
 * the rule that dropped from it last and the daemon's, and those watching
 * its ports.
 */
static __always_inline void guard_check_reset(const struct obs_flow *f, __u64 cookie, __u64 now)
{
	struct loss_drop_key k;
	drop_key_of(f, &k);
	guard_watched(f, NULL, cookie, 0, now, 1, &k);
	struct loss_drop_log *log = bpf_map_lookup_elem(&loss_drops, &k);
	if (!log || !log->drops)
		return;
	struct loss_drop_range *r = &log->ranges[(log->drops - 1) & (LOSS_DROP_RANGES - 1)];
	__u32 slot = r->slot, rule_id = r->rule_id;
	struct loss_guard *g = bpf_map_lookup_elem(&loss_guards, &slot);
	if (g && g->rule_id == rule_id && !(g->rtos & LOSS_GUARD_WATCHING))
		guard_reset(g, cookie, now, rule_id, &k);
	__u32 all = LOSS_GUARD_ALL;
	g = bpf_map_lookup_elem(&loss_guards, &all);
	if (g)
		guard_reset(g, cookie, now, rule_id, &k);
}

/* Called where the kernel has just counted segs in TcpRetransSegs. */
static __always_inline void on_retransmit(struct bpf_sock_ops *skops, struct tcp_sock *tp)
{
	struct sock *sk = &tp->inet_conn.icsk_inet.sk;
	__u32 seq = skops->args[0];
	__u32 segs = skops->args[1];
	int err = (int)skops->args[2];
	__u32 type = classify(tp);
	__u32 outcome = err ? OBS_FAILED : OBS_SENT;
	add_total(sock_netns(sk), type, outcome, segs);

	__u64 now = bpf_ktime_get_ns();
	__u64 cookie = bpf_get_socket_cookie(skops);
	struct obs_flow *f = flow_get(sk, cookie, now, 1);
	if (!f) {
		count(OBS_CNT_FILTERED);
		return;
	}
	if (outcome == OBS_SENT && type < OBS_RTX_MAX)
		__sync_fetch_and_add(&f->rtx_segs[type], segs);
	__u8 backoff = tp->inet_conn.icsk_backoff;
	if (backoff > f->max_backoff)
		f->max_backoff = backoff;
	/* evidence for the stall detector (serialized by the socket's lock) */
	if (outcome == OBS_SENT && type < OBS_RTX_MAX) {
		if (f->st_rtx_type >= OBS_RTX_MAX) {
			f->st_rtx_type = type;
			f->st_rtx_seq = seq;
		}
		f->st_rtx_mask |= 1u << type;
		f->st_rtx_count++;
	}
	if (backoff > f->st_backoff)
		f->st_backoff = backoff;
	f->updated_ns = now;
	if (outcome == OBS_SENT)
		guard_check(f, tp, cookie, seq, type, now);

	struct obs_event *e = bpf_ringbuf_reserve(&obs_ring, sizeof(*e), 0);
	if (!e) {
		count(OBS_CNT_RING_LOST);
		return;
	}
	event_head(e, OBS_EV_RETRANSMIT, now, cookie, f);
	e->type = type;
	e->outcome = outcome;
	e->err = err;
	e->segs = segs;
	e->seq = seq;
	read_state(tp, &e->st);
	bpf_ringbuf_submit(e, wakeup_flag(now));
}

/* Sockets whose retransmissions are counted: those of the namespace. */
static __always_inline struct tcp_sock *observed_tcp_sock(struct bpf_sock_ops *skops)
{
	struct bpf_sock *bsk = skops->sk;
	if (!bsk)
		return NULL;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(bsk);
	struct obs_config *cfg = get_config();
	if (!tp || !cfg || !in_netns(cfg, &tp->inet_conn.icsk_inet.sk))
		return NULL;
	return tp;
}

SEC("tp_btf/tcp_retransmit_synack")
int BPF_PROG(obs_retransmit_synack, const struct sock *sk, const struct request_sock *req)
{
	struct obs_config *cfg = get_config();
	if (!cfg || !sk || !req || !in_netns(cfg, sk))
		return 0;
	__u32 netns = sock_netns(sk);
	add_total(netns, OBS_RTX_SYNACK, OBS_SENT, 1);

	struct obs_tuple t = {};
	t.family = BPF_CORE_READ(req, __req_common.skc_family);
	t.sport = BPF_CORE_READ(req, __req_common.skc_num);
	t.dport = __builtin_bswap16(BPF_CORE_READ(req, __req_common.skc_dport));
	if (t.family == AF_INET6) {
		BPF_CORE_READ_INTO(&t.saddr, req, __req_common.skc_v6_rcv_saddr.in6_u.u6_addr32);
		BPF_CORE_READ_INTO(&t.daddr, req, __req_common.skc_v6_daddr.in6_u.u6_addr32);
	} else {
		t.saddr[0] = BPF_CORE_READ(req, __req_common.skc_rcv_saddr);
		t.daddr[0] = BPF_CORE_READ(req, __req_common.skc_daddr);
	}
	__u64 cg = sock_cgroup(sk);
	if (!obs_wanted(&t, cg)) {
		count(OBS_CNT_FILTERED);
		return 0;
	}
	struct obs_event *e = bpf_ringbuf_reserve(&obs_ring, sizeof(*e), 0);
	if (!e) {
		count(OBS_CNT_RING_LOST);
		return 0;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->kind = OBS_EV_RETRANSMIT;
	e->cpu = bpf_get_smp_processor_id();
	e->time_ns = bpf_ktime_get_ns();
	e->cookie = bpf_get_socket_cookie((void *)sk); /* the listener's */
	e->cgroup_id = cg;
	e->tuple = t;
	e->netns = netns;
	e->type = OBS_RTX_SYNACK;
	e->outcome = OBS_SENT;
	e->segs = 1;
	e->st.tcp_state = TCP_SYN_RECV;
	bpf_ringbuf_submit(e, wakeup_flag(e->time_ns));
	return 0;
}

/*
 * Where the time went: the kernel's chrono stats (busy, rwnd and sndbuf
 * limited: tcp_get_info_chrono_stats, in jiffies), and the cwnd-limited part
 * of busy, sampled at each ACK: the interval since the previous ACK counts in
 * the state that ACK left the socket in.
 */
static __always_inline void account_limits(struct tcp_sock *tp, struct obs_flow *f, __u64 now)
{
	__u8 type = tp->chrono_type;
	if (CONFIG_HZ > 0) {
		__u32 jnow = (__u32)bpf_jiffies64();
		__u64 st[3];
		for (int i = 0; i < 3; i++) {
			st[i] = tp->chrono_stat[i];
			if (type == i + 1)
				st[i] += (__u32)(jnow - tp->chrono_start);
		}
		__u64 ns_per_jiffy = 1000000000ULL / (__u64)CONFIG_HZ;
		f->limit_ns[OBS_LIM_BUSY] = (st[0] + st[1] + st[2]) * ns_per_jiffy;
		f->limit_ns[OBS_LIM_RWND] = st[1] * ns_per_jiffy;
		f->limit_ns[OBS_LIM_SNDBUF] = st[2] * ns_per_jiffy;
	}
	if (f->sample_ns && now > f->sample_ns &&
	    (f->sample_flags & (OBS_SAMPLE_BUSY | OBS_SAMPLE_CWND)) ==
		    (OBS_SAMPLE_BUSY | OBS_SAMPLE_CWND))
		f->limit_ns[OBS_LIM_CWND] += now - f->sample_ns;
	f->sample_ns = now;
	__u32 flags = 0;
	if (type == TCP_CHRONO_BUSY)
		flags |= OBS_SAMPLE_BUSY;
	if (tp->is_cwnd_limited)
		flags |= OBS_SAMPLE_CWND;
	f->sample_flags = flags;
}

static __always_inline __u64 stall_threshold(const struct obs_config *cfg, __u32 min_rtt_us)
{
	__u64 floor = cfg->stall_min_ns ? cfg->stall_min_ns : OBS_STALL_MIN_NS_DEFAULT;
	__u64 rtts = cfg->stall_rtts ? cfg->stall_rtts : OBS_STALL_RTTS_DEFAULT;
	__u64 t = rtts * min_rtt_us * 1000;
	return t > floor ? t : floor;
}

/*
 * Why a stall happened, at its end (before the ACK that ends it is
 * processed), from what happened in it and the socket's state: resends
 * first (an RTO outweighs the probes before it), then the windows, Nagle,
 * cwnd and the send buffer (docs/observer.md#stalls).
 */
static __always_inline __u32 stall_cause(struct tcp_sock *tp, const struct obs_flow *f,
					 __u32 unsent, __u32 nonagle)
{
	__u32 c = resend_cause(f);
	if (c != OBS_STALL_MAX)
		return c;
	if (f->st_min_wnd == 0 || tp->snd_wnd == 0)
		return OBS_STALL_ZERO_WINDOW;
	__u32 mss = tp->mss_cache;
	if (unsent) {
		__u32 next = unsent < mss ? unsent : mss;
		if (tp->snd_nxt - tp->snd_una + next > tp->snd_wnd)
			return OBS_STALL_RWND_LIMITED;
		if (unsent < mss && tp->packets_out && !(nonagle & (TCP_NAGLE_OFF | TCP_NAGLE_CORK)))
			return OBS_STALL_NAGLE_DELAYED_ACK;
		__u32 in_flight = tp->packets_out - tp->sacked_out - tp->lost_out + tp->retrans_out;
		if (in_flight >= tp->snd_cwnd)
			return OBS_STALL_CWND_LIMITED;
	}
	if (tp->chrono_type == TCP_CHRONO_SNDBUF_LIMITED)
		return OBS_STALL_SNDBUF_LIMITED;
	if (!unsent && tp->packets_out)
		return OBS_STALL_APP_LIMITED;
	return OBS_STALL_UNKNOWN;
}

/* A stall ended at `now` (by an ACK, ack_seq, or by the close): count it in
 * the flow, and tell user space. */
static __always_inline void stall_end(struct tcp_sock *tp, struct obs_flow *f, __u64 cookie,
				      __u64 now, __u32 ack_seq, __u32 flags)
{
	__u64 dur = now - f->delivered_ns;
	__u32 unsent = tp->write_seq - tp->snd_nxt;
	__u32 nonagle = tp->nonagle;
	__u32 cause = stall_cause(tp, f, unsent, nonagle);
	__u8 backoff = tp->inet_conn.icsk_backoff;
	if (backoff > f->st_backoff)
		f->st_backoff = backoff;
	if (cause < OBS_STALL_MAX)
		f->stall_ns[cause] += dur;
	f->stalls++;
	count(OBS_CNT_STALLS);

	struct obs_stall_event *e = bpf_ringbuf_reserve(&obs_ring, sizeof(*e), 0);
	if (!e) {
		count(OBS_CNT_RING_LOST);
		return;
	}
	event_head(&e->ev, OBS_EV_STALL, now, cookie, f);
	e->ev.seq = tp->snd_una;
	e->ev.type = OBS_RTX_MAX;
	read_state(tp, &e->ev.st);
	e->stall.start_ns = f->delivered_ns;
	e->stall.duration_ns = dur;
	e->stall.threshold_ns = f->threshold_ns;
	e->stall.cause = cause;
	e->stall.flags = flags;
	e->stall.snd_una = tp->snd_una;
	e->stall.ack_seq = ack_seq;
	e->stall.unsent = unsent;
	e->stall.rtx_type = f->st_rtx_type;
	e->stall.rtx_seq = f->st_rtx_seq;
	e->stall.rtx_count = f->st_rtx_count;
	e->stall.backoff = f->st_backoff;
	e->stall.acks = f->st_acks;
	e->stall.min_wnd = f->st_min_wnd;
	e->stall.min_rtt_us = f->min_rtt_us;
	e->stall.nonagle = nonagle;
	e->stall._pad = 0;
	bpf_ringbuf_submit(e, wakeup_flag(now));
}

static __always_inline void trace_sample(struct tcp_sock *tp, const struct obs_flow *f,
					 __u64 cookie, __u64 now, __u32 ack_seq, __be16 raw_wnd)
{
	/* the window this ACK advertises, from its header, scaled. tcp_sock's
	 * bitfields are read as C fields (vmlinux.h's preserve_access_index):
	 * libbpf's BPF_CORE_READ_BITFIELD_PROBED read other bytes than
	 * rx_opt.snd_wscale here, and BPF_CORE_READ_BITFIELD an offset past the
	 * struct (libbpf 1.1, clang 14). */
	__u32 wscale = tp->rx_opt.snd_wscale;
	__u32 ack_wnd = (__u32)__builtin_bswap16(raw_wnd) << (wscale & 15);
	count(OBS_CNT_SAMPLES);
	struct obs_sample_event *e = bpf_ringbuf_reserve(&obs_ring, sizeof(*e), 0);
	if (!e) {
		count(OBS_CNT_RING_LOST);
		return;
	}
	event_head(&e->ev, OBS_EV_SAMPLE, now, cookie, f);
	e->ev.type = OBS_RTX_MAX;
	struct obs_sample *s = &e->sample;
	s->ack_seq = ack_seq;
	s->snd_una = tp->snd_una;
	s->snd_nxt = tp->snd_nxt;
	s->write_seq = tp->write_seq;
	s->cwnd = tp->snd_cwnd;
	s->ssthresh = tp->snd_ssthresh;
	s->srtt_us = tp->srtt_us >> 3;
	s->in_flight = tp->packets_out - tp->sacked_out - tp->lost_out + tp->retrans_out;
	s->snd_wnd = tp->snd_wnd;
	s->ack_wnd = ack_wnd;
	s->sacked_out = tp->sacked_out;
	s->lost_out = tp->lost_out;
	s->ca_state = BPF_CORE_READ_BITFIELD_PROBED(&tp->inet_conn, icsk_ca_state);
	s->delivered = tp->delivered;
	bpf_ringbuf_submit(e, wakeup_flag(now));
}

#define OBS_OPT_MAX 40 /* TCP option bytes at most */

static __always_inline __u32 be32_at(const __u8 *b, __u32 i)
{
	return ((__u32)b[i & 63] << 24) | ((__u32)b[(i + 1) & 63] << 16) |
	       ((__u32)b[(i + 2) & 63] << 8) | (__u32)b[(i + 3) & 63];
}

/*
 * The D-SACK in a received segment's header `th` (a kernel address), as the
 * kernel will take it while processing the ACK `ack` (this runs before):
 * tcp_parse_options' SACK (negotiated, whole blocks), tcp_check_dsack's
 * test (the first block below the ACK, or inside the second) and
 * tcp_dsack_seen's count and its dubious cases (an empty or wider than
 * max_window block, more duplicates than resends). Returns its duplicate
 * segments (0: none) and the block in *start, *end. Anything in doubt: 0.
 */
/* Walks a segment's TCP options to its SACK option (bpf_loop: verified once,
 * whatever the option count). */
struct opt_walk {
	__u8 opt[64]; /* the option bytes (OBS_OPT_MAX of them read) */
	__u32 i;      /* the option being looked at */
	__u32 optlen;
	__u32 sack_len; /* found: the SACK option's length (at opt[i]) */
};

static long opt_step(__u64 n, void *ctx)
{
	struct opt_walk *w = ctx;
	__u32 i = w->i;
	if (i >= w->optlen)
		return 1;
	__u8 kind = w->opt[i & 63];
	if (kind == 0) /* end of the options */
		return 1;
	if (kind == 1) { /* no-op */
		w->i = i + 1;
		return 0;
	}
	__u32 len = w->opt[(i + 1) & 63];
	if (len < 2 || i + len > w->optlen)
		return 1;
	if (kind == 5) { /* SACK */
		w->sack_len = len;
		return 1;
	}
	w->i = i + len;
	return 0;
}

static __always_inline __u32 dsack_of(struct tcp_sock *tp, const void *th, __u32 ack,
				      __u32 *start, __u32 *end)
{
	if (!tp->rx_opt.sack_ok || (__s32)(ack - tp->snd_nxt) > 0)
		return 0; /* no SACK, or an ACK of unsent data (tcp_ack drops it) */
	struct tcphdr h;
	if (bpf_probe_read_kernel(&h, sizeof(h), th))
		return 0;
	__u32 optlen = (__u32)h.doff * 4;
	if (optlen <= sizeof(h))
		return 0;
	optlen -= sizeof(h);
	if (optlen > OBS_OPT_MAX)
		return 0;
	struct opt_walk w = {};
	w.optlen = optlen;
	if (bpf_probe_read_kernel(w.opt, OBS_OPT_MAX, th + sizeof(h)))
		return 0;
	bpf_loop(OBS_OPT_MAX, opt_step, &w, 0);
	__u32 len = w.sack_len, i = w.i;
	if (len < 10 || (len - 2) % 8)
		return 0; /* none, or not whole blocks (tcp_parse_options ignores it) */
	__u32 blocks = (len - 2) / 8;
	__u8 *opt = w.opt;
	__u32 s0 = be32_at(opt, i + 2), e0 = be32_at(opt, i + 6);
	if ((__s32)(s0 - ack) >= 0) {
		if (blocks < 2)
			return 0;
		__u32 s1 = be32_at(opt, i + 10), e1 = be32_at(opt, i + 14);
		if ((__s32)(e0 - e1) > 0 || (__s32)(s0 - s1) < 0)
			return 0; /* not inside the second block: an ordinary SACK */
	}
	if ((__s32)(s0 - e0) >= 0)
		return 0;
	__u32 bytes = e0 - s0, mss = tp->mss_cache, dup = 1;
	if (bytes > tp->max_window || !mss)
		return 0;
	if (bytes > mss)
		dup = (bytes + mss - 1) / mss;
	if (tp->dsack_dups + dup > tp->total_retrans)
		return 0;
	*start = s0;
	*end = e0;
	return dup;
}

/*
 * The segments the peer D-SACKed that the flow never resent (copies the path
 * made): tcp_dsack_seen adds every D-SACK's segments to dsack_dups, those it
 * skipped for more duplicates than resends too; the accepted ones are the
 * flow's dsack_segs. Read where the flow's record is (each ACK, before it is
 * processed, and the close).
 */
static __always_inline void read_copies(struct tcp_sock *tp, struct obs_flow *f)
{
	__u32 dups = tp->dsack_dups;
	f->dsack_copy_segs = dups > f->dsack_segs ? dups - f->dsack_segs : 0;
}

/* A D-SACK of the flow's data: counted in its record, told as an event. */
static __always_inline void on_dsack(struct tcp_sock *tp, struct obs_flow *f, __u64 cookie,
				     __u64 now, const void *th, __u32 ack)
{
	__u32 start = 0, end = 0;
	__u32 dup = dsack_of(tp, th, ack, &start, &end);
	if (!dup)
		return;
	f->dsack_segs += dup;
	count(OBS_CNT_DSACKS);
	struct obs_dsack_event *e = bpf_ringbuf_reserve(&obs_ring, sizeof(*e), 0);
	if (!e) {
		count(OBS_CNT_RING_LOST);
		return;
	}
	event_head(&e->ev, OBS_EV_DSACK, now, cookie, f);
	e->ev.type = OBS_RTX_MAX;
	e->ev.seq = start;
	e->ev.segs = dup;
	read_state(tp, &e->ev.st);
	e->end_seq = end;
	e->_pad = 0;
	bpf_ringbuf_submit(e, wakeup_flag(now));
}

/*
 * One received segment of a flow, before its ACK is processed (the socket's
 * state is the one the stall, if any, left it in): its flags, ACK number and
 * raw window come from its header. From tcp_probe (ESTABLISHED) and, once
 * our FIN is out with data unacknowledged, from the sock_ops header callback
 * (on_segment_closing).
 */
static __always_inline void on_segment(struct obs_config *cfg, struct tcp_sock *tp, __u64 cookie,
				       const void *th, __u16 tcp_flags, __u32 ack, __be16 raw_wnd,
				       __u32 stall_flags)
{
	struct sock *sk = &tp->inet_conn.icsk_inet.sk;
	__u64 now = bpf_ktime_get_ns();
	struct obs_flow *f = flow_get(sk, cookie, now, 1);
	if (!f)
		return;
	__u32 cwnd = tp->snd_cwnd, srtt = tp->srtt_us >> 3;
	f->cwnd = cwnd;
	if (cwnd < f->cwnd_min)
		f->cwnd_min = cwnd;
	if (cwnd > f->cwnd_max)
		f->cwnd_max = cwnd;
	if (srtt) {
		f->srtt_us = srtt;
		if (srtt < f->srtt_min_us)
			f->srtt_min_us = srtt;
		if (srtt > f->srtt_max_us)
			f->srtt_max_us = srtt;
	}
	f->bytes_acked = tp->bytes_acked;
	f->bytes_sent = tp->bytes_sent;
	f->updated_ns = now;
	account_limits(tp, f, now);

	if (!(tcp_flags & TCPHDR_ACK))
		return;
	if ((tcp_flags & (TCPHDR_ECE | TCPHDR_SYN)) == TCPHDR_ECE)
		f->ece_acks++;
	read_copies(tp, f); /* the ACKs before this one's */
	on_dsack(tp, f, cookie, now, th, ack);
	/* The window before this ACK: the one it advertises is snd_wnd at the
	 * next ACK (a zero window is seen there, or at the stall's end). */
	__u32 wnd = tp->snd_wnd;

	__u32 min_rtt = tp->rtt_min.s[0].v;
	if (min_rtt == 0xffffffff)
		min_rtt = 0;
	f->min_rtt_us = min_rtt;
	f->threshold_ns = stall_threshold(cfg, min_rtt);
	if ((__s32)(ack - tp->snd_una) > 0) {
		/* it delivers: a period without delivery ends here */
		if (!f->idle && now - f->delivered_ns > f->threshold_ns)
			stall_end(tp, f, cookie, now, ack, stall_flags);
		stall_reset(f, now, wnd);
		/* nothing sent-and-unacked or queued after it (our FIN included:
		 * it has a sequence number of its own in write_seq) */
		f->idle = tp->write_seq == ack;
	} else {
		/* a duplicate, a window update, the answer to a window probe */
		f->st_acks++;
		if (wnd < f->st_min_wnd)
			f->st_min_wnd = wnd;
		__u8 backoff = tp->inet_conn.icsk_backoff; /* reset once the window opens */
		if (backoff > f->st_backoff)
			f->st_backoff = backoff;
	}
	if (cfg->n_traced && bpf_map_lookup_elem(&obs_traced, &cookie))
		trace_sample(tp, f, cookie, now, ack, raw_wnd);
}

/* tcp_probe runs at the start of tcp_rcv_established: every segment of an
 * established flow (skb->data is its TCP header, skb->cb filled by
 * tcp_v4/v6_rcv). */
SEC("tp_btf/tcp_probe")
int BPF_PROG(obs_probe, struct sock *sk, const struct sk_buff *skb)
{
	struct obs_config *cfg = get_config();
	if (!cfg || !sk || !skb || !in_netns(cfg, sk))
		return 0;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	const struct tcp_skb_cb *cb = (const void *)skb->cb; /* read in place (a BTF pointer) */
	__be16 raw_wnd = 0;
	bpf_probe_read_kernel(&raw_wnd, sizeof(raw_wnd),
			      skb->data + __builtin_offsetof(struct tcphdr, window));
	on_segment(cfg, tp, bpf_get_socket_cookie(sk), skb->data, cb->tcp_flags, cb->ack_seq, raw_wnd,
		   0);
	return 0;
}

/*
 * After our FIN (the application closed, or shut its write side, often with
 * data still unacknowledged: write-then-close) segments no longer reach
 * tcp_rcv_established (tcp_probe) but tcp_rcv_state_process, whose
 * tcp_validate_incoming runs this callback (BPF_SOCK_OPS_PARSE_HDR_OPT_CB)
 * before the ACK is processed: the flow's last ACKs, its stalls and its
 * trace come from here until everything, FIN included, is acknowledged.
 * The same holds once the peer's FIN is in (CLOSE_WAIT) while we still send:
 * a server answering a client that shut its write side after the request.
 * Armed by on_state for CLOSE_WAIT / FIN_WAIT1 / LAST_ACK only (fentry, which
 * would see tcp_rcv_state_process directly, does not load on these kernels).
 */
static __always_inline void on_segment_closing(struct bpf_sock_ops *skops)
{
	struct tcp_sock *tp = observed_tcp_sock(skops);
	if (!tp)
		return;
	__u8 state = tp->inet_conn.icsk_inet.sk.__sk_common.skc_state;
	if (state != TCP_CLOSE_WAIT && state != TCP_FIN_WAIT1 && state != TCP_CLOSING &&
	    state != TCP_LAST_ACK)
		return;
	__u64 cookie = bpf_get_socket_cookie(skops);
	if (!bpf_map_lookup_elem(&obs_flows, &cookie))
		return; /* only flows the observer knows */
	struct tcphdr *th = (void *)(long)skops->skb_data;
	if ((void *)(th + 1) > (void *)(long)skops->skb_data_end)
		return;
	struct obs_config *cfg = get_config();
	if (!cfg)
		return;
	/* CLOSE_WAIT: the peer closed, not our application */
	on_segment(cfg, tp, cookie, th, (__u16)skops->skb_tcp_flags, __builtin_bswap32(th->ack_seq),
		   th->window, state == TCP_CLOSE_WAIT ? 0 : OBS_STALL_F_CLOSING);
}

/* A state change: leaving ESTABLISHED (the peer's FIN or ours) arms the header
 * callback (the detector and traces go on); once our FIN is acknowledged
 * (FIN_WAIT2) it is disarmed. */
static __always_inline void on_state(struct bpf_sock_ops *skops)
{
	__u32 newstate = skops->args[1];
	__u32 flags = skops->bpf_sock_ops_cb_flags;
	if (newstate == TCP_CLOSE_WAIT || newstate == TCP_FIN_WAIT1 || newstate == TCP_LAST_ACK) {
		if (!(flags & BPF_SOCK_OPS_PARSE_ALL_HDR_OPT_CB_FLAG) && observed_tcp_sock(skops) &&
		    bpf_sock_ops_cb_flags_set(skops, flags | BPF_SOCK_OPS_PARSE_ALL_HDR_OPT_CB_FLAG))
			count(OBS_CNT_ARM_FAILED);
	} else if (newstate == TCP_FIN_WAIT2 && (flags & BPF_SOCK_OPS_PARSE_ALL_HDR_OPT_CB_FLAG)) {
		bpf_sock_ops_cb_flags_set(skops, flags & ~BPF_SOCK_OPS_PARSE_ALL_HDR_OPT_CB_FLAG);
	}
}

SEC("sockops")
int obs_sockops(struct bpf_sock_ops *skops)
{
	__u32 op = skops->op;
	if (op == BPF_SOCK_OPS_RETRANS_CB) {
		struct tcp_sock *tp = observed_tcp_sock(skops);
		if (tp)
			on_retransmit(skops, tp);
		return 1;
	}
	if (op == BPF_SOCK_OPS_PARSE_HDR_OPT_CB) {
		on_segment_closing(skops);
		return 1;
	}
	if (op == BPF_SOCK_OPS_STATE_CB) {
		on_state(skops);
		return 1;
	}
	/* Arm the callbacks before the first SYN (connect), on listeners (their
	 * children inherit them) and on establishment (both sides). */
	if (op == BPF_SOCK_OPS_TCP_CONNECT_CB || op == BPF_SOCK_OPS_TCP_LISTEN_CB ||
	    op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB || op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB) {
		if (!observed_tcp_sock(skops))
			return 1;
		__u32 flags = skops->bpf_sock_ops_cb_flags;
		__u32 want = BPF_SOCK_OPS_RETRANS_CB_FLAG | BPF_SOCK_OPS_STATE_CB_FLAG;
		if ((flags & want) != want && bpf_sock_ops_cb_flags_set(skops, flags | want))
			count(OBS_CNT_ARM_FAILED);
	}
	return 1;
}

/* A write after idle: the flow has data to deliver from now on. */
SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(obs_sendmsg, const struct sock *sk, const struct msghdr *msg,
	     const struct sk_buff *skb, int size_goal)
{
	if (!sk)
		return 0;
	/* Runs for every sendmsg chunk of every socket of the host: a flow is
	 * idle only with nothing written and unacknowledged, so a busy socket
	 * returns before the cookie and the lookup (bench/diagnosis_cost.py). */
	struct tcp_sock *tp = bpf_skc_to_tcp_sock((void *)sk);
	if (!tp || tp->write_seq != tp->snd_una)
		return 0;
	__u64 cookie = bpf_get_socket_cookie((void *)sk);
	struct obs_flow *f = bpf_map_lookup_elem(&obs_flows, &cookie);
	if (!f || !f->idle)
		return 0;
	f->idle = 0;
	stall_reset(f, bpf_ktime_get_ns(), f->st_min_wnd);
	return 0;
}

SEC("tp_btf/tcp_cong_state_set")
int BPF_PROG(obs_cong_state, struct sock *sk, const u8 ca_state)
{
	struct obs_config *cfg = get_config();
	if (!cfg || !sk || !in_netns(cfg, sk))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	struct obs_flow *f = flow_get(sk, bpf_get_socket_cookie(sk), now, 1);
	if (!f)
		return 0;
	__u32 old = f->ca_state;
	if (old < OBS_CA_STATES && now > f->ca_since_ns)
		f->ca_time_ns[old] += now - f->ca_since_ns;
	f->ca_since_ns = now;
	__u32 st = ca_state < OBS_CA_STATES ? ca_state : 0;
	f->ca_state = st;
	if (st != old) {
		/* the compiler knows st < 5 and would drop a bound the verifier needs */
		asm volatile("" : "+r"(st));
		f->ca_entries[st & 7]++;
	}
	f->updated_ns = now;
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(obs_set_state, const struct sock *sk, const int oldstate, const int newstate)
{
	if (!sk || sk->sk_protocol != IPPROTO_TCP)
		return 0;
	if (newstate != TCP_ESTABLISHED && newstate != TCP_CLOSE && newstate != TCP_CLOSE_WAIT &&
	    newstate != TCP_FIN_WAIT1 && newstate != TCP_LAST_ACK)
		return 0;
	struct obs_config *cfg = get_config();
	if (!cfg || !in_netns(cfg, sk))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 cookie = bpf_get_socket_cookie((void *)sk);

	if (newstate == TCP_CLOSE_WAIT || newstate == TCP_FIN_WAIT1 || newstate == TCP_LAST_ACK) {
		/* Out of ESTABLISHED (a FIN in or out): ACKs no longer reach tcp_probe
		 * (it runs in ESTABLISHED) but the sock_ops header callback, armed just before
		 * this (BPF_SOCK_OPS_STATE_CB runs first); a socket it could not
		 * arm stops the stall detector here. */
		struct obs_flow *f = bpf_map_lookup_elem(&obs_flows, &cookie);
		struct tcp_sock *tp = bpf_skc_to_tcp_sock((void *)sk);
		if (f && (!tp || !(tp->bpf_sock_ops_cb_flags & BPF_SOCK_OPS_PARSE_ALL_HDR_OPT_CB_FLAG)))
			f->idle = 1;
		return 0;
	}

	if (newstate == TCP_ESTABLISHED) {
		/* The 4-tuple is complete from here on (not at SYN_SENT). */
		struct obs_flow *f = flow_get(sk, cookie, now, 1);
		if (f) {
			read_tuple(sk, &f->tuple);
			f->opened_ns = now;
		}
		return 0;
	}

	struct obs_flow *f = bpf_map_lookup_elem(&obs_flows, &cookie);
	if (!f)
		return 0;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock((void *)sk);
	/* ended in an error (tcp_reset and tcp_write_err set sk_err before tcp_done) */
	if (oldstate != TCP_SYN_SENT && oldstate != TCP_SYN_RECV && sk->sk_err)
		guard_check_reset(f, cookie, now);
	/* Reset or timed out in a stall: the close ends it (before the summary,
	 * which counts it), also after our FIN while data was outstanding (the
	 * ACK of everything, FIN included, made the flow idle before a normal
	 * close). */
	int closing = oldstate == TCP_FIN_WAIT1 || oldstate == TCP_CLOSING || oldstate == TCP_LAST_ACK;
	if (tp && !f->idle &&
	    (oldstate == TCP_ESTABLISHED || oldstate == TCP_CLOSE_WAIT || closing) &&
	    f->threshold_ns && now - f->delivered_ns > f->threshold_ns) {
		f->idle = 1;
		stall_end(tp, f, cookie, now, 0,
			  OBS_STALL_F_AT_CLOSE | (closing ? OBS_STALL_F_CLOSING : 0));
	}
	struct obs_close_event *e = bpf_ringbuf_reserve(&obs_ring, sizeof(*e), 0);
	if (!e) {
		count(OBS_CNT_RING_LOST);
		bpf_map_delete_elem(&obs_flows, &cookie);
		count(OBS_CNT_FLOWS_CLOSED);
		return 0;
	}
	event_head(&e->ev, OBS_EV_FLOW_CLOSE, now, cookie, f);
	if (tp) {
		read_state(tp, &e->ev.st);
		/* tcp_probe runs in ESTABLISHED only: the bytes acked after the
		 * FIN was sent would be missing from a short flow's record */
		f->bytes_acked = tp->bytes_acked;
		f->bytes_sent = tp->bytes_sent;
		read_copies(tp, f); /* also those D-SACKed after our FIN was acknowledged */
		account_limits(tp, f, now);
	}
	/* close the books on the congestion state it ends in */
	if (f->ca_state < OBS_CA_STATES && now > f->ca_since_ns)
		f->ca_time_ns[f->ca_state] += now - f->ca_since_ns;
	f->ca_since_ns = now;
	e->flow = *f;
	e->closed_ns = now;
	bpf_ringbuf_submit(e, wakeup_flag(now));
	bpf_map_delete_elem(&obs_flows, &cookie);
	count(OBS_CNT_FLOWS_CLOSED);
	return 0;
}

/*
 * Flows that were open before the observer: run once at start, after the
 * sockops program is attached. Arms the retransmission callback of every
 * socket of the namespace (whatever its state) and records established flows.
 */
SEC("iter/tcp")
int obs_iter_tcp(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	if (!skc)
		return 0;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(skc);
	if (!tp)
		return 0; /* request and timewait sockets: nothing to retransmit */
	struct sock *sk = &tp->inet_conn.icsk_inet.sk;
	struct obs_config *cfg = get_config();
	if (!cfg || !in_netns(cfg, sk))
		return 0;
	__u32 flags = tp->bpf_sock_ops_cb_flags;
	__u32 want = BPF_SOCK_OPS_RETRANS_CB_FLAG | BPF_SOCK_OPS_STATE_CB_FLAG;
	if ((flags & want) != want) {
		flags |= want;
		if (bpf_setsockopt(tp, SOL_TCP, TCP_BPF_SOCK_OPS_CB_FLAGS, &flags, sizeof(flags)))
			count(OBS_CNT_ARM_FAILED);
		else
			count(OBS_CNT_ARMED_EXISTING);
	}
	if (sk->__sk_common.skc_state != TCP_ESTABLISHED)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 cookie = bpf_get_socket_cookie(skc);
	if (bpf_map_lookup_elem(&obs_flows, &cookie))
		return 0;
	struct obs_flow *f = flow_get(sk, cookie, now, 1);
	if (f) {
		f->preexisting = 1;
		f->ca_state = BPF_CORE_READ_BITFIELD_PROBED(&tp->inet_conn, icsk_ca_state);
		f->cwnd = f->cwnd_min = f->cwnd_max = tp->snd_cwnd;
		f->srtt_us = f->srtt_min_us = f->srtt_max_us = tp->srtt_us >> 3;
		f->bytes_acked = tp->bytes_acked;
		f->bytes_sent = tp->bytes_sent;
	}
	return 0;
}
