/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Loss injector ABI: the structs and constants shared by bpf/loss.bpf.c and
 * the C++ side (daemon/injector). Included by both; never mirror by hand.
 *
 * Byte order: addresses are kept in network byte order (as on the wire),
 * ports in host byte order (converted once by the parser), everything else
 * in host byte order.
 */
#ifndef LOSSD_LOSS_ABI_H
#define LOSSD_LOSS_ABI_H

#ifndef __VMLINUX_H__
#include <linux/bpf.h> /* struct bpf_spin_lock */
#include <linux/types.h>
#endif

#ifdef __cplusplus
#define LOSS_STATIC_ASSERT static_assert
#else
#define LOSS_STATIC_ASSERT _Static_assert
#endif

#define LOSS_MAX_RULES 16384   /* rule slots (array map size) */
#define LOSS_BUCKET_SLOTS 16   /* rules anchored on one port/host */
#define LOSS_SCAN_MAX 64       /* rules with no port/host anchor */
#define LOSS_FLOW_STATES 65536 /* per-rule per-flow model state (LRU) */

/* Where a program runs. Index into the per-hook counters. */
enum loss_hook {
	LOSS_HOOK_XDP = 0,
	LOSS_HOOK_TC_INGRESS = 1,
	LOSS_HOOK_TC_EGRESS = 2,
	LOSS_HOOK_CGROUP_INGRESS = 3,
	LOSS_HOOK_MAX = 4,
};

/* Direction bits of loss_match.dir_mask. */
#define LOSS_DIR_INGRESS 0x1
#define LOSS_DIR_EGRESS 0x2

/* loss_match.payload */
#define LOSS_PAYLOAD_ANY 0
#define LOSS_PAYLOAD_ONLY 1 /* only TCP/UDP packets carrying payload */
#define LOSS_PAYLOAD_NONE 2 /* only packets without L4 payload (pure ACK, SYN, ...) */

/* Loss models (loss_rule.model). */
enum loss_model {
	LOSS_MODEL_BERNOULLI = 0, /* drop with probability p per packet */
	LOSS_MODEL_GE = 1,	  /* Gilbert-Elliott, netem gemodel p r 1-h 1-k */
	LOSS_MODEL_NTH = 2,	  /* drop every n-th packet of each flow */
	LOSS_MODEL_FIRST = 3,	  /* drop the first k packets of each flow */
	LOSS_MODEL_RAMP = 4,	  /* Bernoulli, its rate by step (loss_ramps) */
	LOSS_MODEL_MARKOV4 = 5,	  /* netem's 4-state loss: p p13, r p31, bad_loss p32,
				   * good_loss p23, q p14 (flow state: 0..3 = states 1..4) */
	LOSS_MODEL_POLICE = 6,	  /* a token bucket (loss_policers): p the rate in bits/s,
				   * r the capacity and bad_loss the ns it takes to fill
				   * from empty; tokens in 1e-9 bits */
	LOSS_MODEL_POLICE_FLOW = 7, /* a token bucket per flow, as GCRA (virtual scheduling) on
				     * loss_flow_state.tat: p the rate in bits/s, good_loss
				     * (a field LOSS_MODEL_POLICE leaves unused) tau, the
				     * bucket's depth in time: burst_bytes * 8e9 * 16 / rate,
				     * in 1/16 ns, rounded down, at most LOSS_POLICE_TAU_MAX;
				     * docs/architecture.md#police-flow */
};
/* LOSS_MODEL_POLICE_FLOW: the largest tau (2^62 / 16 ns, 9 years: a 1 GiB
 * burst at 8 bit/s is 34 years), so tau + a packet's cost stays far below
 * 2^64. */
#define LOSS_POLICE_TAU_MAX (1ULL << 62)

/*
 * What a rule does to a packet its model picks (loss_rule.action;
 * docs/architecture.md#impairments). Anything but DROP runs at tc only (it
 * changes or copies the skb); a packet it cannot act on passes unchanged and
 * is counted (loss_rule_stats.unacted_pkts).
 */
enum loss_action {
	LOSS_ACTION_DROP = 0,
	/* flip one bit where the receiver's checksum check finds it (by the skb's
	 * checksum state), so the receiving kernel discards the packet */
	LOSS_ACTION_CORRUPT = 1,
	/* flip one bit of the L4 payload and keep every checksum valid: wrong
	 * bytes delivered */
	LOSS_ACTION_CORRUPT_PAYLOAD = 2,
	/* send it twice: a copy (bpf_clone_redirect) goes ahead of it */
	LOSS_ACTION_DUPLICATE = 3,
	/* ECT(0)/ECT(1) -> CE; a non-ECT packet is dropped (netem's ecn) */
	LOSS_ACTION_ECN = 4,
	/* ECT -> CE; a non-ECT packet passes unchanged */
	LOSS_ACTION_ECN_PASS = 5,
	LOSS_ACTION_MAX = 6,
};
/* A duplicate's copy carries this in skb->tc_index (no qdisc of this kernel
 * reads it) until a lossd tc program sees it again: that run passes it
 * undecided and clears it (loss_hook_stats.copies). */
#define LOSS_DUP_TC_INDEX 0x1055

/* loss_rule.flags */
#define LOSS_RULE_ACTIVE 0x1	/* slot holds a live rule */
#define LOSS_RULE_SEEDED 0x2	/* per-flow PRNG seeded from loss_rule.seed */
#define LOSS_RULE_HAS_PORTS 0x4 /* rule needs L4 ports (never matches fragments) */
#define LOSS_RULE_GUARDED 0x8	/* has a loss_guards entry: stops when it says so */

/*
 * Probabilities are fixed-point over 2^32: a packet is dropped when a
 * uniform 32-bit draw is < threshold, so threshold = p * 2^32 (0 .. 2^32,
 * hence 64 bits wide: 2^32 means always).
 */
#define LOSS_PROB_ONE (1ULL << 32)

/*
 * Match, any subset of fields. Addresses are 16 bytes: IPv4 occupies the
 * first 4 bytes, the rest 0. addr is pre-masked; mask has 1-bits for the
 * prefix. A zero mask matches everything.
 */
struct loss_match {
	__u32 src_addr[4]; /* network byte order */
	__u32 src_mask[4]; /* network byte order */
	__u32 dst_addr[4]; /* network byte order */
	__u32 dst_mask[4]; /* network byte order */
	__u16 sport_lo;	   /* host byte order, inclusive; 0..65535 = any */
	__u16 sport_hi;
	__u16 dport_lo; /* host byte order, inclusive */
	__u16 dport_hi;
	__u8 family;	     /* 0 any, 4 IPv4, 6 IPv6 */
	__u8 l4proto;	     /* 0 any, else IPPROTO_* (ICMPv6 = 58) */
	__u8 tcp_flags_mask; /* match (flags & mask) == value; FIN=0x01 SYN=0x02 RST=0x04 PSH=0x08
				ACK=0x10 */
	__u8 tcp_flags_value;
	__u8 dir_mask;	   /* LOSS_DIR_*; 0 = both */
	__u8 payload;	   /* LOSS_PAYLOAD_* */
	__u8 cgroup_level; /* ancestor level of cgroup_id (cgroup/tc hooks) */
	__u8 hook_mask;	   /* 1 << enum loss_hook the rule runs in; 0 = all */
	__u32 ifindex;	   /* 0 any */
	__u64 cgroup_id;   /* 0 any; cgroup v2 id */
};
LOSS_STATIC_ASSERT(sizeof(struct loss_match) == 96, "loss_match layout");

struct loss_rule {
	struct loss_match m;
	__u32 priority;	  /* higher wins */
	__u32 model;	  /* enum loss_model */
	__u64 p;	  /* Bernoulli: drop threshold; GE: good->bad threshold */
	__u64 r;	  /* GE: bad->good threshold */
	__u64 bad_loss;	  /* GE: loss threshold in bad state (1-h) */
	__u64 good_loss;  /* GE: loss threshold in good state (1-k) */
	__u32 n;	  /* NTH: period; FIRST: k */
	__u32 flags;	  /* LOSS_RULE_* */
	__u64 seed;	  /* LOSS_RULE_SEEDED */
	__u64 expires_ns; /* CLOCK_MONOTONIC (bpf_ktime_get_ns); 0 = never */
	__u32 generation; /* bumped on every (re)use of the slot */
	__u32 id;	  /* the rule's id (RuleInfo.id): what the drop log records */
	/* Schedule (CLOCK_MONOTONIC, read per packet while one is set): the rule
	 * matches nothing before start_ns nor, with a pulse (on_ns > 0), from
	 * on_ns into each period_ns after it. */
	__u64 start_ns;
	__u64 on_ns;
	__u64 period_ns;
	__u32 action; /* enum loss_action */
	__u32 _pad_action;
	__u64 q; /* MARKOV4: p14's threshold */
};
LOSS_STATIC_ASSERT(sizeof(struct loss_rule) == 208, "loss_rule layout");

/*
 * A bucket of rule slots sharing one anchor (a port, or a host address),
 * sorted by priority (highest first, then lowest slot).
 */
struct loss_bucket {
	__u32 n;
	__u32 slot[LOSS_BUCKET_SLOTS];
};
LOSS_STATIC_ASSERT(sizeof(struct loss_bucket) == 68, "loss_bucket layout");

/* Index of port anchors: array keyed by kind * 65536 + port. */
#define LOSS_ANCHOR_DPORT 0
#define LOSS_ANCHOR_SPORT 1
#define LOSS_PORT_INDEX_SIZE (2 * 65536)

/* Key of the host-anchor hash map: an exact (full-length) address. */
#define LOSS_ANCHOR_DHOST 0
#define LOSS_ANCHOR_SHOST 1
struct loss_host_key {
	__u32 kind;    /* LOSS_ANCHOR_DHOST / SHOST */
	__u32 family;  /* 4 or 6 */
	__u32 addr[4]; /* network byte order */
};
LOSS_STATIC_ASSERT(sizeof(struct loss_host_key) == 24, "loss_host_key layout");

/*
 * Pre-filter in front of the host hash: one bit per hashed address and
 * kind, set while some rule is anchored on an address with that hash. A
 * clear bit turns a packet away with one array read instead of a hash
 * lookup. Array of u64 words, key = kind * LOSS_BLOOM_WORDS + word.
 */
#define LOSS_BLOOM_BITS (1 << 20)
#define LOSS_BLOOM_WORDS (LOSS_BLOOM_BITS / 64)

/* The pre-filter's hash of an address (the same in BPF and user space). */
static inline __u32 loss_addr_hash(const __u32 *addr)
{
	__u32 h = (addr[0] ^ (addr[1] * 0x85ebca6bU) ^ (addr[2] * 0xc2b2ae35U) ^
		   (addr[3] * 0x27d4eb2fU));
	h *= 0x9E3779B1U;
	return h >> 12; /* 20 bits */
}

/* Global state: one entry of an array map. */
struct loss_config {
	__u64 lease_until_ns; /* bpf_ktime_get_ns; 0 = no lease. Past it, nothing is dropped. */
	__u32 n_port_rules;   /* rules anchored in the port index (skip it when 0) */
	__u32 n_dhost_rules;  /* rules anchored on a destination host */
	__u32 n_scan;	      /* valid entries of scan[] */
	__u32 n_shost_rules;  /* rules anchored on a source host */
	__u32 scan[LOSS_SCAN_MAX]; /* unanchored rule slots, sorted like a bucket */
	/* The injector's network namespace (its netns cookie). A tc program runs
	 * in other namespaces too (a cgroup target's egress devices there); a rule
	 * bound to an interface (an ifindex of lossd's namespace) never matches
	 * on theirs. 0: not known (every tc run counts as lossd's namespace). */
	__u64 netns_cookie;
	/* 1 while the daemon's guard (loss_guards[LOSS_GUARD_ALL]) is set: a packet
	 * a rule would decide first looks whether it stopped (then nothing drops). */
	__u32 guard_all;
	__u32 _pad;
};
LOSS_STATIC_ASSERT(sizeof(struct loss_config) == 296, "loss_config layout");

/* A policing rule's bucket, keyed by its slot (an array: the entry of a slot
 * whose generation differs is a former rule's, and starts full again). */
struct loss_policer {
	struct bpf_spin_lock lock;
	__u32 generation;
	__u64 tokens;  /* 1e-9 bits */
	__u64 last_ns; /* bpf_ktime_get_ns when tokens was last filled */
};

/* Per-rule counters (per-CPU; the reader sums). */
struct loss_rule_stats {
	__u64 matched_pkts; /* skbs / frames */
	__u64 matched_segs; /* wire segments (gso_segs) */
	__u64 matched_bytes;
	__u64 dropped_pkts;
	__u64 dropped_segs;
	__u64 dropped_bytes;
	__u64 logged_pkts; /* dropped TCP skbs with payload written to the drop log */
	/* What the rule's action did to the packets its model picked (the rule's
	 * action says which: corrupted, duplicated or marked CE); a drop is
	 * counted as dropped (an ECN rule's non-ECT packets too). */
	__u64 acted_pkts;
	__u64 acted_segs;
	__u64 acted_bytes;
	/* picked, but the action could not apply: passed unchanged (a non-ECT
	 * packet under ECN_PASS, one already CE, a checksum the device finishes
	 * later that no receiver would check, a copy the kernel refused) */
	__u64 unacted_pkts;
};
LOSS_STATIC_ASSERT(sizeof(struct loss_rule_stats) == 88, "loss_rule_stats layout");

/* Per-hook counters (per-CPU). */
struct loss_hook_stats {
	__u64 seen;   /* every packet the hook ran on */
	__u64 passed; /* passed (no match, not dropped, or not IP) */
	__u64 dropped;
	__u64 unparsable;    /* truncated/malformed/non-linear: passed */
	__u64 always_pass;   /* ARP and IPv6 neighbour discovery */
	__u64 lease_expired; /* matched a dropping rule after the lease ran out */
	__u64 copies;	     /* duplicates' copies seen again and passed undecided */
};
LOSS_STATIC_ASSERT(sizeof(struct loss_hook_stats) == 56, "loss_hook_stats layout");

/* Key of per-rule per-flow model state. */
struct loss_flow_key {
	__u32 slot;
	__u32 generation;
	__u32 saddr[4]; /* network byte order */
	__u32 daddr[4]; /* network byte order */
	__u16 sport;	/* host byte order */
	__u16 dport;
	__u8 l4proto;
	__u8 family;
	__u8 _pad[2];
};
LOSS_STATIC_ASSERT(sizeof(struct loss_flow_key) == 48, "loss_flow_key layout");

struct loss_flow_state {
	__u64 prng;  /* xorshift64* state (seeded rules) */
	__u64 count; /* packets of this flow seen by the rule */
	__u32 bad;   /* GE: 1 while in the bad state */
	__u32 _pad;
	/* POLICE_FLOW: the theoretical arrival time of the flow's next packet
	 * (GCRA), bpf_ktime_get_ns * 16 (1/16 ns); 0 (a new state, or one the
	 * LRU evicted and a packet created again) is a full bucket. Changed only
	 * by compare-and-swap (no lock in an LRU map's value). */
	__u64 tat;
};
LOSS_STATIC_ASSERT(sizeof(struct loss_flow_state) == 32, "loss_flow_state layout");

/*
 * Drop log: per TCP flow (as on the wire: src -> dst), the sequence ranges of
 * the last LOSS_DROP_RANGES skbs with payload a rule dropped, so the daemon
 * can link a retransmission or a stall to the drop that caused it
 * (docs/architecture.md#drops-to-effects). Written only on a drop.
 */
#define LOSS_DROP_RANGES 16
#define LOSS_DROP_FLOWS 16384 /* LRU */
struct loss_drop_key {
	__u32 saddr[4]; /* network byte order (IPv4 in [0]) */
	__u32 daddr[4];
	__u16 sport; /* host byte order */
	__u16 dport;
	__u16 family; /* AF_INET / AF_INET6 */
	__u16 _pad;
};
LOSS_STATIC_ASSERT(sizeof(struct loss_drop_key) == 40, "loss_drop_key layout");

struct loss_drop_range {
	__u64 time_ns; /* bpf_ktime_get_ns at the drop (CLOCK_MONOTONIC) */
	__u32 seq;     /* first sequence number of the dropped skb, host order */
	__u32 len;     /* TCP payload bytes (a GSO skb: all its segments) */
	__u32 rule_id; /* the rule that dropped it (loss_rule.id) */
	__u16 segs;    /* wire segments */
	__u16 slot;    /* its slot in loss_rules (< LOSS_MAX_RULES) */
};
LOSS_STATIC_ASSERT(sizeof(struct loss_drop_range) == 24, "loss_drop_range layout");

struct loss_drop_log {
	__u64 drops; /* drops recorded for this flow, ever: ranges[(drops - 1) % N] is the newest */
	struct loss_drop_range ranges[LOSS_DROP_RANGES];
};
LOSS_STATIC_ASSERT(sizeof(struct loss_drop_log) == 8 + 24 * LOSS_DROP_RANGES, "loss_drop_log layout");

/*
 * Traced flows (TraceFlow): a flow in loss_traced also has each drop of its
 * data pushed, as one loss_drop_event, to loss_drop_ring, which the daemon
 * reads on a thread of its own, so a trace gets every drop however slowly
 * its client reads (the drop log keeps only the last LOSS_DROP_RANGES). A
 * drop the ring has no room for is counted in the flow's loss_traced.lost.
 */
#define LOSS_TRACED_FLOWS 64
#define LOSS_DROP_RING_BYTES (256 * 1024)
struct loss_traced {
	__u64 lost; /* drops of this flow the ring had no room for */
};
LOSS_STATIC_ASSERT(sizeof(struct loss_traced) == 8, "loss_traced layout");

struct loss_drop_event {
	struct loss_drop_key key;
	struct loss_drop_range range;
};
LOSS_STATIC_ASSERT(sizeof(struct loss_drop_event) == 64, "loss_drop_event layout");

/*
 * Ramps: a rule whose Bernoulli rate changes by step, on the data plane's
 * clock from the rule's start_ns: step i holds from end_ns[i-1] (0 for the
 * first) to end_ns[i] (offsets from start_ns). Each step's decisions are
 * counted apart (loss_ramp_stats), so each step's rate has its own interval.
 * Keyed by the rule's slot; written before the rule.
 */
#define LOSS_RAMP_STEPS 16
#define LOSS_MAX_RAMPS 1024 /* ramped rules at once */
struct loss_ramp {
	__u64 p[LOSS_RAMP_STEPS];      /* drop thresholds (as loss_rule.p) */
	__u64 end_ns[LOSS_RAMP_STEPS]; /* step i ends this long after start_ns */
	__u32 n;		       /* steps */
	__u32 generation;	       /* the slot's rule's */
};
LOSS_STATIC_ASSERT(sizeof(struct loss_ramp) == 16 * LOSS_RAMP_STEPS + 8, "loss_ramp layout");

/* Per step (per-CPU; the reader sums). */
struct loss_ramp_stats {
	__u64 matched_pkts[LOSS_RAMP_STEPS];
	__u64 matched_segs[LOSS_RAMP_STEPS];
	__u64 dropped_pkts[LOSS_RAMP_STEPS];
	__u64 dropped_segs[LOSS_RAMP_STEPS];
};
LOSS_STATIC_ASSERT(sizeof(struct loss_ramp_stats) == 32 * LOSS_RAMP_STEPS, "loss_ramp_stats layout");

/*
 * Guards (docs/guards.md): a rule's stop conditions, kept where both BPF
 * objects see them. The observer's sock_ops program, at a retransmission of
 * a segment the drop log says a guarded rule dropped, counts it and decides;
 * a timer of its own ends a stall that lasts past the limit. When one holds
 * it sets stopped_ns, and from then on the injector's programs pass what the
 * rule matched (it matches nothing, like an expired rule): the stop never
 * waits for user space. Keyed by the rule's slot; an entry whose rule_id or
 * generation is not the slot's rule's is stale.
 */
#define LOSS_MAX_GUARDED 1024 /* guarded rules at once */
/* The daemon's guard (lossd --guard-all), over every rule's drops: its key in
 * loss_guards (rule_id 0). When it stops, loss_config.guard_all makes every
 * program pass. */
#define LOSS_GUARD_ALL 0xffffffffu
#define LOSS_GUARD_RING 64    /* RTO times kept: at most 63 RTOs in a window */

enum loss_guard_reason {
	LOSS_GUARD_NONE = 0,
	LOSS_GUARD_STALL = 1, /* a flow stalled longer than stall_ns */
	LOSS_GUARD_RTOS = 2,  /* more than rtos RTOs within rtos_window_ns */
	LOSS_GUARD_RESENDS = 3, /* more than rtos resends (any type) within rtos_window_ns */
	LOSS_GUARD_RESETS = 4,	/* more than rtos resets or aborts within rtos_window_ns */
	LOSS_GUARD_RETRANS = 5, /* a flow resent more than rate_ppm of its data segments in a window */
};
/* The retransmit share is judged over at least this many data segments. */
#define LOSS_GUARD_RETRANS_MIN_SEGS 50
/* In loss_guard.rtos: the count condition counts every resend of the rule's
 * drops (fast, RTO, TLP, ...), not only RTOs (lossd.v1 Guard.resends). */
#define LOSS_GUARD_COUNT_RESENDS (1u << 31)
/* In loss_guard.rtos: the count condition counts flows that end in an error
 * (a reset received, a timeout: sk_err set at the close; lossd.v1 Guard.resets). */
#define LOSS_GUARD_COUNT_RESETS (1u << 30)
/* In loss_guard.rtos: the guard judges the flows of a port it watches
 * (loss_guard_watch) instead of the flows its rule dropped from. */
#define LOSS_GUARD_WATCHING (1u << 29)

/* Guards watching a port (lossd.v1 Guard.watch_port): keyed by the port (host
 * order, a __u32), the slots of the guards that judge every flow with that
 * port at either end. Written whole by the daemon. */
#define LOSS_WATCH_PORTS 256 /* ports watched at once */
#define LOSS_WATCH_GUARDS 8  /* guards watching one port */
struct loss_guard_watch {
	__u32 n;
	__u32 slots[LOSS_WATCH_GUARDS];
};
LOSS_STATIC_ASSERT(sizeof(struct loss_guard_watch) == 36, "loss_guard_watch layout");

struct loss_guard {
	/* set by the daemon */
	__u32 rule_id;
	__u32 generation;
	__u64 stall_ns;	      /* stop on a stall longer than this; 0: no */
	__u64 rtos_window_ns; /* with rtos: the window; 0: no RTO condition */
	__u32 rtos;	      /* stop on more than this many RTOs within the window
			       * (| LOSS_GUARD_COUNT_RESENDS: resends of any type,
			       * | LOSS_GUARD_COUNT_RESETS: resets and aborts;
			       * | LOSS_GUARD_WATCHING: of a watched port's flows) */
	__u32 evidence_rule;  /* set in the kernel: the rule whose drop the evidence resent */
	__u64 rate_window_ns; /* with rate_ppm: a flow's retransmit share over this; 0: none */
	__u32 rate_ppm;	      /* stop when a flow resent more than this share (parts per
			       * million) of the data segments it sent within the window */
	__u32 segs;	      /* set in the kernel: LOSS_GUARD_RETRANS: the data segments sent */
	__u32 stall_causes;   /* with stall_ns: 1 << obs_stall_cause of the stalls that count
			       * (the cause their resends so far give); 0: any */
	__u32 _pad;
	/* set in the kernel */
	__u64 stopped_ns;      /* bpf_ktime_get_ns when it stopped; 0: running */
	__u64 crossed_ns;      /* when the condition came to hold (the stall's limit, the RTO) */
	__u64 last_drop_ns;    /* the rule's last drop (written on each drop) */
	__u32 reason;	       /* enum loss_guard_reason */
	__u32 count;	       /* LOSS_GUARD_RTOS, _RESENDS, _RESETS: how many in the window;
				* _RETRANS: the segments resent of `segs` */
	__u64 evidence_start_ns; /* the stall's start, the window's first RTO, the share's start */
	__u64 evidence_cookie;   /* the socket of the flow */
	struct loss_drop_key flow; /* the flow (as the sender sees it: local -> remote) */
	__u64 rtos_seen;	   /* RTOs (resends) counted, ever */
	__u64 rto_ns[LOSS_GUARD_RING]; /* their times, rto_ns[(n) % RING] the n-th */
};
LOSS_STATIC_ASSERT(sizeof(struct loss_guard) == 152 + 8 * LOSS_GUARD_RING, "loss_guard layout");

#endif /* LOSSD_LOSS_ABI_H */
