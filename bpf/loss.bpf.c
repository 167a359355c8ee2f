// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * lossd loss injector: one loss decision (loss_decide) run from every hook
 * (XDP, tc ingress/egress, cgroup_skb ingress) through a thin shim.
 *
 * Per packet: parse, then look up candidate rules through the anchor
 * indexes (port array, host hash, short scan list) so the cost does not grow
 * with the number of rules; the highest-priority matching rule decides. No
 * match means pass, and no random number is drawn. Anything the parser
 * cannot read passes and is counted.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "loss_abi.h"
#include "lib/parse.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define TC_ACT_UNSPEC (-1)
#define TC_ACT_SHOT 2
#define TC_ACT_STOLEN 4

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct loss_config);
} loss_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LOSS_MAX_RULES);
	__type(key, __u32);
	__type(value, struct loss_rule);
} loss_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LOSS_PORT_INDEX_SIZE);
	__type(key, __u32);
	__type(value, struct loss_bucket);
} loss_port_idx SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2 * LOSS_MAX_RULES);
	__type(key, struct loss_host_key);
	__type(value, struct loss_bucket);
} loss_host_idx SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * LOSS_BLOOM_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} loss_host_bloom SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LOSS_MAX_RULES);
	__type(key, __u32);
	__type(value, struct loss_rule_stats);
} loss_rule_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LOSS_HOOK_MAX);
	__type(key, __u32);
	__type(value, struct loss_hook_stats);
} loss_hook_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, LOSS_FLOW_STATES);
	__type(key, struct loss_flow_key);
	__type(value, struct loss_flow_state);
} loss_flow_state SEC(".maps");

/* The drop log and the guards: loss_drops, loss_guards. */
#include "lib/shared_maps.h"

/* Ramps by rule slot, and each step's counters (loss_abi.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LOSS_MAX_RAMPS);
	__type(key, __u32);
	__type(value, struct loss_ramp);
} loss_ramps SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, LOSS_MAX_RAMPS);
	__type(key, __u32);
	__type(value, struct loss_ramp_stats);
} loss_ramp_stats SEC(".maps");

/* Policing rules' buckets, by slot (loss_abi.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LOSS_MAX_RULES);
	__type(key, __u32);
	__type(value, struct loss_policer);
} loss_policers SEC(".maps");

/* A flow's first log entry is built here: too large for the stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct loss_drop_log);
} loss_drop_scratch SEC(".maps");

/* Traced flows and the ring their drops go to (loss_abi.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LOSS_TRACED_FLOWS);
	__type(key, struct loss_drop_key);
	__type(value, struct loss_traced);
} loss_traced SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, LOSS_DROP_RING_BYTES);
} loss_drop_ring SEC(".maps");

/*
 * Which cgroup a cgroup_skb program runs for. The kernel runs the programs
 * attached to a socket's cgroup and to each of its ancestors (links are
 * BPF_F_ALLOW_MULTI), so with rules on T and on T/C a packet from T/C runs
 * this program twice. Each attachment has its own storage here (keyed by the
 * cgroup it is attached to), into which the injector writes that cgroup's id
 * right after attaching; a run decides only the rules whose target is that
 * cgroup, so each rule is decided once per packet
 * (docs/architecture.md#nested-cgroups). 0 (not written yet): no rule.
 */
struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_STORAGE);
	__type(key, __u64); /* cgroup id: one value per cgroup, both directions */
	__type(value, __u64);
} loss_cg_self SEC(".maps");

/* The context of a program: what its shims can do. */
#define CTX_XDP 0    /* struct xdp_md */
#define CTX_TC 1     /* struct __sk_buff at tc: cgroup ancestry through skb->sk */
#define CTX_CGROUP 2 /* struct __sk_buff at cgroup_skb: p->attach_cgroup is set */

/* ---- rule matching ---------------------------------------------------- */

/*
 * Everything but the cgroup condition. Returns 0 when the rule in slot does
 * not match, else its rank: higher is better (priority first, then the lower
 * slot), bit 0 set when the cgroup condition is still to be checked by the
 * caller.
 *
 * Inlined for the first candidate of each list (the common case: one rule
 * per anchor), called as the global function loss_rank for the others: the
 * verifier checks that once instead of once per candidate per path, which
 * keeps the program small enough to verify however many candidates it
 * scans. The call is what the first candidate saves: about 9 ns here
 * (BPF_PROG_TEST_RUN; the call's return goes through the kernel's return
 * thunk on this CPU; docs/benchmarks.md#the-matched-path-step-by-step).
 */
static __always_inline __u64 loss_rank_body(__u32 slot, const struct pkt *p)
{
	if (!p)
		return 0;
	slot &= LOSS_MAX_RULES - 1;
	const struct loss_rule *r = bpf_map_lookup_elem(&loss_rules, &slot);
	if (!r || !(r->flags & LOSS_RULE_ACTIVE))
		return 0;
	/* An expired rule is gone: it must not shadow lower-priority rules.
	 * The coarse clock (a tick) is plenty for a TTL and costs a third. */
	if (r->expires_ns && bpf_ktime_get_coarse_ns() >= r->expires_ns)
		return 0;
	/* Not started, or dormant: it matches nothing (a pulse's edges want the
	 * precise clock; rules without a schedule do not read it). */
	if (r->start_ns) {
		__u64 now = bpf_ktime_get_ns();
		if (now < r->start_ns)
			return 0;
		/* its end (the last window's, a ramp's last step's) to the ns: the
		 * coarse check above may be a tick late, and the period repeats */
		if (r->expires_ns && now >= r->expires_ns)
			return 0;
		if (r->on_ns && r->period_ns && (now - r->start_ns) % r->period_ns >= r->on_ns)
			return 0;
	}
	/* Stopped by its guard (set by the observer's program): as if expired. */
	if (r->flags & LOSS_RULE_GUARDED) {
		const struct loss_guard *g = bpf_map_lookup_elem(&loss_guards, &slot);
		if (g && g->stopped_ns && g->rule_id == r->id && g->generation == r->generation)
			return 0;
	}
	const struct loss_match *m = &r->m;

	if (m->hook_mask && !(m->hook_mask & (1 << p->hook)))
		return 0;
	if (m->dir_mask && !(m->dir_mask & p->dir))
		return 0;
	if (m->family && m->family != p->family)
		return 0;
	if (m->l4proto && m->l4proto != p->l4proto)
		return 0;
	if (m->ifindex && m->ifindex != p->ifindex)
		return 0;
	if (r->flags & LOSS_RULE_HAS_PORTS) {
		if (!p->has_ports)
			return 0;
		if (p->sport < m->sport_lo || p->sport > m->sport_hi || p->dport < m->dport_lo ||
		    p->dport > m->dport_hi)
			return 0;
	}
	if (m->tcp_flags_mask && (p->l4proto != PROTO_TCP || !p->has_ports ||
				  (p->tcp_flags & m->tcp_flags_mask) != m->tcp_flags_value))
		return 0;
	if (m->payload == LOSS_PAYLOAD_ONLY && (!p->has_ports || !p->has_payload))
		return 0;
	if (m->payload == LOSS_PAYLOAD_NONE && (!p->has_ports || p->has_payload))
		return 0;
	for (int i = 0; i < 4; i++) {
		if ((p->saddr[i] & m->src_mask[i]) != m->src_addr[i] ||
		    (p->daddr[i] & m->dst_mask[i]) != m->dst_addr[i])
			return 0;
	}
	return ((__u64)(r->priority + 1) << 32) | ((__u64)(LOSS_MAX_RULES - 1 - slot) << 1) |
	       (m->cgroup_id ? 1 : 0);
}

__noinline __u64 loss_rank(__u32 slot, const struct pkt *p)
{
	return loss_rank_body(slot, p);
}

static __always_inline __u32 rank_slot(__u64 rank)
{
	return LOSS_MAX_RULES - 1 - ((rank >> 1) & (LOSS_MAX_RULES - 1));
}

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;

#define NETNS_OWN 1
#define NETNS_FOREIGN 2

/*
 * Whether a tc program runs on a device of another network namespace than
 * lossd's (a cgroup target's egress device in a container): an ifindex in a
 * rule names a device of lossd's namespace, and the same number there is
 * another device. Read from the device (the netns cookie helper answers from
 * the socket, and an ingress skb has none), once per packet, and only for a
 * candidate that names an interface.
 */
static __always_inline int foreign_netns(void *ctx, struct pkt *p)
{
	if (!p->foreign) {
		struct sk_buff *skb = bpf_cast_to_kern_ctx(ctx);
		__u64 cookie = BPF_CORE_READ(skb, dev, nd_net.net, net_cookie);
		p->foreign = cookie && p->own_netns && cookie != p->own_netns ? NETNS_FOREIGN : NETNS_OWN;
	}
	return p->foreign == NETNS_FOREIGN;
}

/* is_skb: CTX_*, the context (CTX_TC, CTX_CGROUP: a struct __sk_buff, cgroup
 * helpers allowed); inl: rank inline (the first candidate of a list) rather
 * than by the call. */
static __always_inline __u64 rank_with_cgroup(__u32 slot, struct pkt *p, void *ctx,
					      const int is_skb, const int inl)
{
	__u64 rank = inl ? loss_rank_body(slot, p) : loss_rank(slot, p);
	if (!rank)
		return 0;
	if (is_skb == CTX_XDP)
		return (rank & 1) ? 0 : rank; /* no socket: a cgroup rule never matches */
	/* The rule that matched, looked up once for what the body cannot check. */
	slot = rank_slot(rank);
	const struct loss_rule *r = bpf_map_lookup_elem(&loss_rules, &slot);
	if (!r)
		return 0;
	if (is_skb == CTX_CGROUP) {
		/* Only the rules of the cgroup this attachment is on; a rule with
		 * no cgroup is never decided here (it would be, once per
		 * attachment). The attachment's subtree is the rule's. */
		if (!(rank & 1) || !p->attach_cgroup || r->m.cgroup_id != p->attach_cgroup)
			return 0;
		return rank & ~1ULL;
	}
	/* tc: an ifindex names a device of lossd's namespace. */
	if (r->m.ifindex && foreign_netns(ctx, p))
		return 0;
	if (!(rank & 1))
		return rank;
	/* A VLAN device's egress decided this packet already (it carries the tag
	 * that device put on it): a cgroup rule decides once per packet. */
	if (p->stacked || bpf_skb_ancestor_cgroup_id(ctx, r->m.cgroup_level) != r->m.cgroup_id)
		return 0;
	return rank & ~1ULL;
}

/* Candidate lists are sorted, so the first rule that matches is the list's best. */
static __always_inline __u64 scan_slots(__u64 best, const __u32 *slots, __u32 n, const int max,
					struct pkt *p, void *ctx, const int is_skb)
{
	if (!n)
		return best;
	__u64 rank = rank_with_cgroup(slots[0], p, ctx, is_skb, 1);
	if (rank)
		return rank > best ? rank : best;
	for (int i = 1; i < max; i++) {
		if (i >= n)
			break;
		rank = rank_with_cgroup(slots[i], p, ctx, is_skb, 0);
		if (rank) {
			if (rank > best)
				best = rank;
			break;
		}
	}
	return best;
}

static __always_inline __u64 scan_bucket(__u64 best, const struct loss_bucket *bk,
					 struct pkt *p, void *ctx, const int is_skb)
{
	if (bk && bk->n)
		best = scan_slots(best, bk->slot, bk->n, LOSS_BUCKET_SLOTS, p, ctx, is_skb);
	return best;
}

static __always_inline __u64 scan_host(__u64 best, __u32 kind, const __u32 *addr,
				       struct pkt *p, void *ctx, const int is_skb)
{
	__u32 h = loss_addr_hash(addr);
	__u32 word = kind * LOSS_BLOOM_WORDS + ((h >> 6) & (LOSS_BLOOM_WORDS - 1));
	__u64 *bits = bpf_map_lookup_elem(&loss_host_bloom, &word);
	if (!bits || !(*bits & (1ULL << (h & 63))))
		return best; /* no rule anchored on this address */
	struct loss_host_key k = {
		.kind = kind,
		.family = p->family,
	};
	__builtin_memcpy(k.addr, addr, 16);
	return scan_bucket(best, bpf_map_lookup_elem(&loss_host_idx, &k), p, ctx, is_skb);
}

/* ---- loss models -------------------------------------------------------- */

static __always_inline __u64 mix64(__u64 z)
{
	/* splitmix64 finaliser */
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static __always_inline __u32 next32(struct loss_flow_state *st)
{
	/* xorshift64* */
	__u64 x = st->prng;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	st->prng = x;
	return (x * 0x2545F4914F6CDD1DULL) >> 32;
}

static __always_inline __u64 flow_seed(__u64 seed, const struct loss_flow_key *k)
{
	const __u32 *w = (const __u32 *)k;
	__u64 h = mix64(seed ^ 0x9e3779b97f4a7c15ULL);
	/* skip slot and generation (words 0,1): the same flow gets the same
	 * sequence whichever slot the rule landed in */
#pragma unroll
	for (int i = 2; i < (int)(sizeof(*k) / 4); i++)
		h = mix64(h ^ w[i]);
	return h ? h : 0x9e3779b97f4a7c15ULL;
}

static __always_inline __u32 draw(const struct loss_rule *r, struct loss_flow_state *st)
{
	return (r->flags & LOSS_RULE_SEEDED) ? next32(st) : bpf_get_prandom_u32();
}

/* Returns 1 to drop. Plain unseeded Bernoulli needs no flow state. */
/*
 * A ramp's step now (its index, threshold in *thr), or LOSS_RAMP_STEPS when
 * its entry is missing (pass on any doubt). The rank found the rule inside
 * its steps a moment ago: a clock read past the last step's end (by those
 * few ns) is still the last step, so every matched packet is some step's.
 */
static __always_inline __u32 ramp_step(const struct loss_rule *r, __u32 slot, __u64 *thr)
{
	const struct loss_ramp *rp = bpf_map_lookup_elem(&loss_ramps, &slot);
	if (!rp || rp->generation != r->generation)
		return LOSS_RAMP_STEPS;
	__u64 off = bpf_ktime_get_ns() - r->start_ns;
	__u32 last = LOSS_RAMP_STEPS;
	for (__u32 i = 0; i < LOSS_RAMP_STEPS; i++) {
		if (i >= rp->n)
			break;
		last = i;
		if (off < rp->end_ns[i])
			break;
	}
	if (last < LOSS_RAMP_STEPS)
		*thr = rp->p[last];
	return last;
}

/*
 * A policer: 1 (picked) when the rule's bucket holds fewer tokens than the
 * packet's bits, else it takes them. The bucket fills at the rule's rate from
 * the last packet's time, up to its capacity; a new rule in the slot (another
 * generation) finds it full. One lock per rule: every CPU's packets draw on
 * the same bucket, as on one link.
 */
static __always_inline int police(const struct loss_rule *r, __u32 slot, const struct pkt *p)
{
	struct loss_policer *b = bpf_map_lookup_elem(&loss_policers, &slot);
	if (!b)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 cost = (__u64)p->len * 8000000000ULL;
	int over;
	bpf_spin_lock(&b->lock);
	if (b->generation != r->generation) {
		b->generation = r->generation;
		b->tokens = r->r;
		b->last_ns = now;
	}
	if (now > b->last_ns) {
		__u64 dt = now - b->last_ns;
		/* below fill_ns, dt * rate < capacity: no overflow */
		__u64 add = dt >= r->bad_loss ? r->r : dt * r->p;
		b->tokens = add >= r->r - b->tokens ? r->r : b->tokens + add;
		b->last_ns = now;
	}
	over = cost > b->tokens;
	if (!over)
		b->tokens -= cost;
	bpf_spin_unlock(&b->lock);
	return over;
}

/*
 * A policer per flow (LOSS_MODEL_POLICE_FLOW): the same token bucket as
 * police()'s, run as GCRA (virtual scheduling) on the flow's one variable
 * st->tat, in 1/16 ns. A packet of len bytes costs its bits' time at the rate
 * (rounded up); it is picked (1) when the bucket's time would run past tau
 * (r->good_loss) ahead of now, and takes nothing; else it moves tat by its
 * cost, by compare-and-swap (an LRU value holds no lock), retried a few times
 * when another CPU moved tat meanwhile: passed when all of them lose (on any
 * doubt). A global function, verified once on its own: inlined, its loop and
 * compare-and-swap multiply the states of every hook's decision past the
 * verifier's limit.
 */
#define POLICE_FLOW_TRIES 3
#define POLICE_FLOW_MAX_LEN (1U << 27) /* len * 128e9 stays below 2^64 */
__noinline int loss_police_flow(const struct loss_rule *r, struct loss_flow_state *st, __u32 len)
{
	if (!r || !st)
		return 0;
	__u64 rate = r->p;
	if (!rate)
		return 0;
	__u64 bytes = len < POLICE_FLOW_MAX_LEN ? len : POLICE_FLOW_MAX_LEN;
	__u64 cost = (bytes * 128000000000ULL + rate - 1) / rate; /* 8e9 * 16 a byte */
	__u64 now = bpf_ktime_get_ns() * 16;
	__u64 tat = *(volatile __u64 *)&st->tat;
	for (int i = 0; i < POLICE_FLOW_TRIES; i++) {
		__u64 base = tat > now ? tat : now;
		/* base - now <= tau (a tat is set only so), cost < 2^61: no overflow */
		if (base - now + cost > r->good_loss)
			return 1;
		__u64 seen = __sync_val_compare_and_swap(&st->tat, tat, base + cost);
		if (seen == tat)
			return 0;
		tat = seen;
	}
	return 0;
}

/* Returns 1 to drop; a ramp's step in *step (else LOSS_RAMP_STEPS). */
static __always_inline int decide(struct loss_rule *r, __u32 slot, const struct pkt *p, __u32 *step)
{
	*step = LOSS_RAMP_STEPS;
	__u64 thr = r->p; /* Bernoulli's (and a ramp's step's) threshold */
	if (r->model == LOSS_MODEL_RAMP) {
		*step = ramp_step(r, slot, &thr);
		if (*step >= LOSS_RAMP_STEPS)
			return 0;
	}
	if (r->model == LOSS_MODEL_POLICE)
		return police(r, slot, p);
	if ((r->model == LOSS_MODEL_BERNOULLI || r->model == LOSS_MODEL_RAMP) &&
	    !(r->flags & LOSS_RULE_SEEDED)) {
		if (thr == 0)
			return 0;
		return (__u64)bpf_get_prandom_u32() < thr;
	}

	struct loss_flow_key k = {
		.slot = slot,
		.generation = r->generation,
		.sport = p->sport,
		.dport = p->dport,
		.l4proto = p->l4proto,
		.family = p->family,
	};
	__builtin_memcpy(k.saddr, p->saddr, 16);
	__builtin_memcpy(k.daddr, p->daddr, 16);

	struct loss_flow_state *st = bpf_map_lookup_elem(&loss_flow_state, &k);
	if (!st) {
		struct loss_flow_state init = {};
		if (r->flags & LOSS_RULE_SEEDED)
			init.prng = flow_seed(r->seed, &k);
		bpf_map_update_elem(&loss_flow_state, &k, &init, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&loss_flow_state, &k);
		if (!st)
			return 0; /* pass on any doubt */
	}
	__u64 count = ++st->count;

	switch (r->model) {
	case LOSS_MODEL_BERNOULLI:
	case LOSS_MODEL_RAMP:
		return (__u64)draw(r, st) < thr;
	case LOSS_MODEL_POLICE_FLOW:
		return loss_police_flow(r, st, p->len);
	case LOSS_MODEL_NTH:
		return r->n && count % r->n == 0;
	case LOSS_MODEL_FIRST:
		return count <= r->n;
	case LOSS_MODEL_MARKOV4: {
		/* One transition per packet (one draw); the packet is lost when
		 * the state it enters is 3 (burst loss) or 4 (isolated loss). */
		__u64 u = draw(r, st);
		switch (st->bad) {
		case 0: /* 1: receiving in a gap */
			if (u < r->q) {
				st->bad = 3;
				return 1;
			}
			if (u < r->q + r->p) {
				st->bad = 2;
				return 1;
			}
			return 0;
		case 1: /* 2: receiving in a burst */
			if (u < r->good_loss) {
				st->bad = 2;
				return 1;
			}
			return 0;
		case 2: /* 3: losing in a burst */
			if (u < r->r) {
				st->bad = 0;
				return 0;
			}
			if (u < r->r + r->bad_loss) {
				st->bad = 1;
				return 0;
			}
			return 1;
		default: /* 4: an isolated loss, then back to 1 */
			st->bad = 0;
			return 0;
		}
	}
	case LOSS_MODEL_GE: {
		/* netem gemodel: the loss draw uses the state the packet found,
		 * then the state may change. */
		int drop;
		if (st->bad) {
			drop = (__u64)draw(r, st) < r->bad_loss;
			if ((__u64)draw(r, st) < r->r)
				st->bad = 0;
		} else {
			drop = (__u64)draw(r, st) < r->good_loss;
			if ((__u64)draw(r, st) < r->p)
				st->bad = 1;
		}
		return drop;
	}
	}
	return 0;
}

/* ---- the drop log ------------------------------------------------------- */

#define AF_INET_ 2
#define AF_INET6_ 10
#define L4OFF_MAX 512 /* deeper than any header chain the parser walks: not logged */
_Static_assert((LOSS_DROP_RANGES & (LOSS_DROP_RANGES - 1)) == 0, "ring index by mask");

/*
 * Records a dropped (or corrupted) TCP skb carrying payload in the flow's drop
 * log: its first sequence number (the parser's: an action may have changed
 * the packet since, and its pointers with it), payload bytes, wire segments,
 * the rule's id and the time. Anything in doubt records nothing (the drop
 * stands).
 */
static __always_inline void log_drop(const struct pkt *p, const struct loss_rule *r, __u32 slot,
				     struct loss_rule_stats *rs)
{
	if (p->l4proto != PROTO_TCP || !p->has_ports || !p->payload)
		return;
	__u32 seq = p->tcp_seq;

	struct loss_drop_key k = {
		.sport = p->sport,
		.dport = p->dport,
		.family = p->family == 6 ? AF_INET6_ : AF_INET_,
	};
	__builtin_memcpy(k.saddr, p->saddr, 16);
	__builtin_memcpy(k.daddr, p->daddr, 16);
	struct loss_drop_log *log = bpf_map_lookup_elem(&loss_drops, &k);
	if (!log) {
		__u32 zero = 0;
		struct loss_drop_log *init = bpf_map_lookup_elem(&loss_drop_scratch, &zero);
		if (!init)
			return;
		__builtin_memset(init, 0, sizeof(*init));
		bpf_map_update_elem(&loss_drops, &k, init, BPF_NOEXIST);
		log = bpf_map_lookup_elem(&loss_drops, &k);
		if (!log)
			return;
	}
	__u64 n = __sync_fetch_and_add(&log->drops, 1);
	struct loss_drop_range d = {
		.time_ns = bpf_ktime_get_ns(),
		.seq = seq,
		.len = p->payload,
		.rule_id = r->id,
		.segs = p->segs > 0xffff ? 0xffff : p->segs,
		.slot = slot,
	};
	log->ranges[n & (LOSS_DROP_RANGES - 1)] = d;
	if (rs)
		rs->logged_pkts++;

	struct loss_traced *t = bpf_map_lookup_elem(&loss_traced, &k);
	if (!t)
		return;
	struct loss_drop_event *e = bpf_ringbuf_reserve(&loss_drop_ring, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&t->lost, 1);
		return;
	}
	e->key = k;
	e->range = d;
	bpf_ringbuf_submit(e, 0);
}

/* ---- actions beside drop (tc only) ---------------------------------------- */

#define CHECKSUM_NONE_ 0
#define CHECKSUM_UNNECESSARY_ 1
#define CHECKSUM_COMPLETE_ 2
#define CHECKSUM_PARTIAL_ 3
#define BPF_CSUM_LEVEL_RESET_ 3 /* bpf_csum_level: UNNECESSARY -> NONE */

enum act_result {
	ACT_DONE = 0,  /* changed or copied: the packet passes */
	ACT_DROP = 1,  /* the action drops it (ECN: a non-ECT packet) */
	ACT_NONE = 2,  /* could not act: it passes unchanged */
};

/* Flips bit `bit` (0-7) of the byte at off. */
static __always_inline int flip_bit(struct __sk_buff *skb, __u32 off, __u32 bit, __u64 flags)
{
	__u8 b;
	if (bpf_skb_load_bytes(skb, off, &b, 1))
		return -1;
	b ^= 1 << (bit & 7);
	return bpf_skb_store_bytes(skb, off, &b, 1, flags) ? -1 : 0;
}

/* Where a flipped bit is covered by the L4 checksum, for each protocol: from
 * this far into the L4 header (TCP past its ports, UDP its payload: a flipped
 * length or port would be judged before the checksum). 0: none (a later
 * fragment has no L4 header: the parser left l4off 0). */
static __always_inline __u32 l4_flip_start(const struct pkt *p)
{
	if (!p->l4off)
		return 0;
	if (!p->has_ports)
		return p->l4proto == PROTO_ICMP || p->l4proto == PROTO_ICMPV6 ? 4 : 0;
	return p->l4proto == PROTO_TCP ? 4 : p->l4proto == PROTO_UDP ? 8 : 0;
}

/* The end of the IP datagram in the skb: its length field's, never past the
 * data (a short frame's link padding is no part of it). */
static __always_inline __u32 datagram_end(struct __sk_buff *skb, const struct pkt *p)
{
	return p->ip_end && p->ip_end < skb->len ? p->ip_end : skb->len;
}

/*
 * LOSS_ACTION_CORRUPT: one bit flipped where the receiving kernel's checksum
 * check will find it, by the skb's checksum state (docs/architecture.md#corrupt):
 *  NONE, COMPLETE: the L4 checksum in the packet (or skb->csum) is final; a
 *   bit of the L4 segment flips and both are left stale.
 *  UNNECESSARY (a device verified it): the same, then the skb says NONE, so
 *   the stack checks again.
 *  PARTIAL (the device finishes the L4 checksum later, over the flipped
 *   bit; a veth peer never checks it): IPv4 and one segment: a bit of the IP
 *   header's identification, its header checksum stale (every receiver checks
 *   that); else nothing can be corrupted so that a receiver sees it
 *   (segmentation rewrites each IP header; IPv6 has no header checksum).
 * A UDP datagram over IPv4 without a checksum (0), or one with no payload, and
 * other protocols: the IPv4 header's bit too.
 */
static __always_inline int act_corrupt(struct __sk_buff *skb, const struct pkt *p)
{
	struct sk_buff *kskb = bpf_cast_to_kern_ctx(skb);
	__u8 summed = BPF_CORE_READ_BITFIELD(kskb, ip_summed);
	__u32 rnd = bpf_get_prandom_u32();
	__u32 start = l4_flip_start(p);
	__u32 end = datagram_end(skb, p);
	/* COMPLETE: skb->csum follows the flipped bit, so the packet's own
	 * checksum no longer matches it (left alone it would still vouch for the
	 * old bytes, and the check would pass) */
	__u64 flags = summed == CHECKSUM_COMPLETE_ ? BPF_F_RECOMPUTE_CSUM : 0;
	int ip_header = summed == CHECKSUM_PARTIAL_ || !start || p->l4off + start >= end;
	if (!ip_header && p->l4proto == PROTO_UDP && p->family == 4) {
		__u16 ucsum;
		if (bpf_skb_load_bytes(skb, p->l4off + 6, &ucsum, 2) || !ucsum)
			ip_header = 1;
	}
	if (ip_header) {
		if (p->family != 4 || (summed == CHECKSUM_PARTIAL_ && skb->gso_segs > 1))
			return ACT_NONE;
		/* the identification's 16 bits (bytes 4-5 of the IPv4 header) */
		if (flip_bit(skb, p->l3off + 4 + ((rnd >> 3) & 1), rnd, flags))
			return ACT_NONE;
		return ACT_DONE;
	}
	__u32 span = end - p->l4off - start;
	__u32 off = p->l4off + start + (rnd >> 3) % span;
	if (flip_bit(skb, off, rnd, flags))
		return ACT_NONE;
	if (summed == CHECKSUM_UNNECESSARY_)
		bpf_csum_level(skb, BPF_CSUM_LEVEL_RESET_);
	return ACT_DONE;
}

/*
 * LOSS_ACTION_CORRUPT_PAYLOAD: one bit of the TCP or UDP payload flipped, the
 * checksum kept valid: PARTIAL, the device computes it over the new bytes;
 * otherwise the checksum field changes by the same 16-bit word (the packet's
 * sum, and a COMPLETE skb->csum, stay right; a UDP checksum 0 stays 0).
 */
static __always_inline int act_corrupt_payload(struct __sk_buff *skb, const struct pkt *p)
{
	if (!p->has_ports || !p->has_payload || p->l4off > L4OFF_MAX)
		return ACT_NONE;
	__u32 hdr;
	if (p->l4proto == PROTO_TCP) {
		__u8 doff;
		if (bpf_skb_load_bytes(skb, p->l4off + 12, &doff, 1))
			return ACT_NONE;
		hdr = (doff >> 4) * 4;
	} else {
		hdr = 8;
	}
	__u32 from = p->l4off + hdr;
	__u32 end = datagram_end(skb, p);
	if (from >= end)
		return ACT_NONE;
	struct sk_buff *kskb = bpf_cast_to_kern_ctx(skb);
	__u8 summed = BPF_CORE_READ_BITFIELD(kskb, ip_summed);
	__u32 rnd = bpf_get_prandom_u32();
	__u32 off = from + (rnd >> 3) % (end - from);
	/* the checksum's 16-bit word holding the byte: even offsets from the L4
	 * header; an odd segment's last byte is a word padded with a zero */
	__u32 woff = off - ((off - p->l4off) & 1);
	__u32 wlen = woff + 2 <= end ? 2 : 1;
	__be16 oldw = 0, neww;
	if (bpf_skb_load_bytes(skb, woff, &oldw, wlen))
		return ACT_NONE;
	neww = oldw;
	if (off == woff)
		((__u8 *)&neww)[0] ^= 1 << (rnd & 7);
	else
		((__u8 *)&neww)[1] ^= 1 << (rnd & 7);
	if (bpf_skb_store_bytes(skb, woff, &neww, wlen, 0))
		return ACT_NONE;
	if (summed != CHECKSUM_PARTIAL_) {
		__u32 csum_off = p->l4off + (p->l4proto == PROTO_TCP ? 16 : 6);
		__u64 flags = 2 | (p->l4proto == PROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0);
		if (bpf_l4_csum_replace(skb, csum_off, oldw, neww, flags))
			return ACT_NONE;
	}
	return ACT_DONE;
}

/*
 * LOSS_ACTION_ECN and _PASS: ECT(0) or ECT(1) becomes CE (the IPv4 header
 * checksum follows; IPv6 has none, and a COMPLETE skb->csum is kept right).
 * A non-ECT packet is dropped (ECN) or passes (ECN_PASS); one already CE
 * passes as it is.
 */
static __always_inline int act_ecn(struct __sk_buff *skb, const struct pkt *p, __u32 action)
{
	__u8 b[2];
	if (bpf_skb_load_bytes(skb, p->l3off, b, 2))
		return ACT_NONE;
	__u8 ecn = p->family == 4 ? (b[1] & 3) : ((b[1] >> 4) & 3);
	if (ecn == 0)
		return action == LOSS_ACTION_ECN ? ACT_DROP : ACT_NONE;
	if (ecn == 3)
		return ACT_NONE;
	if (p->family == 4) {
		__be16 oldw, neww;
		__builtin_memcpy(&oldw, b, 2);
		b[1] |= 3;
		__builtin_memcpy(&neww, b, 2);
		if (bpf_skb_store_bytes(skb, p->l3off, b, 2, 0) ||
		    bpf_l3_csum_replace(skb, p->l3off + 10, oldw, neww, 2))
			return ACT_NONE;
	} else {
		b[1] |= 0x30;
		if (bpf_skb_store_bytes(skb, p->l3off + 1, &b[1], 1, BPF_F_RECOMPUTE_CSUM))
			return ACT_NONE;
	}
	return ACT_DONE;
}

/*
 * LOSS_ACTION_DUPLICATE: a copy goes out (egress) or in (ingress) on the same
 * device ahead of the packet. The copy meets a lossd tc program again
 * (synchronously on egress, from the backlog on ingress): it carries
 * LOSS_DUP_TC_INDEX, which that run clears, passing it undecided. A packet
 * with a tc_index of its own is not copied (it could not be given back).
 */
static __always_inline int act_duplicate(struct __sk_buff *skb, const struct pkt *p)
{
	if (skb->tc_index)
		return ACT_NONE;
	skb->tc_index = LOSS_DUP_TC_INDEX;
	long err = bpf_clone_redirect(skb, skb->ifindex, p->dir == LOSS_DIR_INGRESS ? BPF_F_INGRESS : 0);
	skb->tc_index = 0;
	return err ? ACT_NONE : ACT_DONE;
}

static __always_inline int act_tc(struct __sk_buff *skb, const struct pkt *p, __u32 action)
{
	switch (action) {
	case LOSS_ACTION_CORRUPT:
		return act_corrupt(skb, p);
	case LOSS_ACTION_CORRUPT_PAYLOAD:
		return act_corrupt_payload(skb, p);
	case LOSS_ACTION_DUPLICATE:
		return act_duplicate(skb, p);
	case LOSS_ACTION_ECN:
	case LOSS_ACTION_ECN_PASS:
		return act_ecn(skb, p, action);
	}
	return ACT_NONE;
}

/* ---- the shared decision ------------------------------------------------ */

/*
 * Returns 1 to drop. hook and is_skb are compile-time constants in each
 * program, so the helpers one context type lacks are never emitted for it.
 */
static __always_inline int loss_decide(void *ctx, struct cursor *c, __be16 l3proto, struct pkt *p,
				       void *base, const int hook, const int is_skb)
{
	__u32 hk = hook;
	p->hook = hook;
	struct loss_hook_stats *hs = bpf_map_lookup_elem(&loss_hook_stats, &hk);
	if (!hs)
		return 0;
	hs->seen++;

	int ret = parse_l3(c, l3proto, p, base);
	if (ret != PARSE_OK) {
		if (ret == PARSE_BAD)
			hs->unparsable++;
		else if (ret == PARSE_ALWAYS)
			hs->always_pass++;
		hs->passed++;
		return 0;
	}

	__u32 zero = 0;
	struct loss_config *cfg = bpf_map_lookup_elem(&loss_cfg, &zero);
	if (!cfg) {
		hs->passed++;
		return 0;
	}

	p->own_netns = cfg->netns_cookie;

	__u64 best = 0;
	if (cfg->n_port_rules && p->has_ports) {
		__u32 k = LOSS_ANCHOR_DPORT * 65536 + p->dport;
		best = scan_bucket(best, bpf_map_lookup_elem(&loss_port_idx, &k), p, ctx, is_skb);
		k = LOSS_ANCHOR_SPORT * 65536 + p->sport;
		best = scan_bucket(best, bpf_map_lookup_elem(&loss_port_idx, &k), p, ctx, is_skb);
	}
	if (cfg->n_dhost_rules)
		best = scan_host(best, LOSS_ANCHOR_DHOST, p->daddr, p, ctx, is_skb);
	if (cfg->n_shost_rules)
		best = scan_host(best, LOSS_ANCHOR_SHOST, p->saddr, p, ctx, is_skb);
	if (cfg->n_scan)
		best = scan_slots(best, cfg->scan, cfg->n_scan, LOSS_SCAN_MAX, p, ctx, is_skb);
	if (!best) {
		hs->passed++;
		return 0;
	}
	__u32 slot = rank_slot(best);
	struct loss_rule *r = bpf_map_lookup_elem(&loss_rules, &slot);
	if (!r) {
		hs->passed++;
		return 0;
	}
	/* The daemon's guard stopped everything: as if no rule matched. */
	struct loss_guard *guard_all = NULL;
	if (cfg->guard_all) {
		__u32 all = LOSS_GUARD_ALL;
		guard_all = bpf_map_lookup_elem(&loss_guards, &all);
		if (guard_all && guard_all->stopped_ns) {
			hs->passed++;
			return 0;
		}
	}

	struct loss_rule_stats *rs = bpf_map_lookup_elem(&loss_rule_stats, &slot);
	__u32 step;
	int drop = decide(r, slot, p, &step);
	/* The clock is read only to drop: a lease that ran out (owner gone)
	 * turns the drop into a pass. */
	if (drop && cfg->lease_until_ns && bpf_ktime_get_coarse_ns() >= cfg->lease_until_ns) {
		hs->lease_expired++;
		drop = 0;
	}
	/* The model picked it: a rule with another action than drop acts on it
	 * (tc only: Validate keeps such rules off XDP and cgroup_skb). The ramp's
	 * step counts what the model picked. */
	int picked = drop, acted = 0;
	if (drop && r->action != LOSS_ACTION_DROP) {
		int res = ACT_NONE;
		if (is_skb == CTX_TC)
			res = act_tc(ctx, p, r->action);
		drop = res == ACT_DROP;
		acted = res == ACT_DONE;
	}
	if (rs) {
		rs->matched_pkts++;
		rs->matched_segs += p->segs;
		rs->matched_bytes += p->len;
		if (drop) {
			rs->dropped_pkts++;
			rs->dropped_segs += p->segs;
			rs->dropped_bytes += p->len;
		} else if (acted) {
			rs->acted_pkts++;
			rs->acted_segs += p->segs;
			rs->acted_bytes += p->len;
		} else if (picked) {
			rs->unacted_pkts++;
		}
	}
	if (step < LOSS_RAMP_STEPS) {
		struct loss_ramp_stats *st = bpf_map_lookup_elem(&loss_ramp_stats, &slot);
		if (st) {
			st->matched_pkts[step]++;
			st->matched_segs[step] += p->segs;
			if (picked) {
				st->dropped_pkts[step]++;
				st->dropped_segs[step] += p->segs;
			}
		}
	}
	/* A corrupted packet is lost to its receiver like a dropped one: its
	 * resend is linked the same way (the drop log; the guard's clock). */
	int lost = drop || (acted && r->action == LOSS_ACTION_CORRUPT);
	if (drop)
		hs->dropped++;
	else
		hs->passed++;
	if (lost) {
		if (r->flags & LOSS_RULE_GUARDED) {
			struct loss_guard *g = bpf_map_lookup_elem(&loss_guards, &slot);
			if (g)
				g->last_drop_ns = bpf_ktime_get_ns();
		}
		if (guard_all)
			guard_all->last_drop_ns = bpf_ktime_get_ns();
		log_drop(p, r, slot, rs);
	}
	return drop;
}

/* ---- hooks: thin shims over loss_decide ---------------------------------- */

SEC("xdp")
int lossd_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	struct cursor c = {.pos = data, .end = (void *)(long)ctx->data_end};
	struct pkt p = {
		.dir = LOSS_DIR_INGRESS,
		.ifindex = ctx->ingress_ifindex,
		.len = c.end - c.pos,
		.segs = 1,
	};
	__be16 proto = parse_eth(&c);
	return loss_decide(ctx, &c, proto, &p, data, LOSS_HOOK_XDP, CTX_XDP) ? XDP_DROP : XDP_PASS;
}

/* An skb hook: tc (data at the Ethernet header) or cgroup_skb (data at the
 * network header; skb->protocol says which). l2: tc, else cgroup_skb. */
static __always_inline int skb_run(struct __sk_buff *skb, const int hook, __u8 dir, const bool l2)
{
	if (l2 && skb->tc_index == LOSS_DUP_TC_INDEX) {
		/* a duplicate's copy (act_duplicate): undecided, its tc_index given back */
		skb->tc_index = 0;
		__u32 hk = hook;
		struct loss_hook_stats *hs = bpf_map_lookup_elem(&loss_hook_stats, &hk);
		if (hs)
			hs->copies++;
		return 0;
	}
	void *data = (void *)(long)skb->data;
	struct cursor c = {.pos = data, .end = (void *)(long)skb->data_end};
	struct pkt p = {
		.dir = dir,
		.ifindex = skb->ifindex,
		.len = skb->len,
		.segs = skb->gso_segs ? skb->gso_segs : 1,
	};
	if (!l2) {
		__u64 *self = bpf_get_local_storage(&loss_cg_self, 0);
		p.attach_cgroup = self ? *self : 0;
	} else if (dir == LOSS_DIR_EGRESS) {
		p.stacked = skb->vlan_present;
	}
	__be16 proto = l2 ? parse_eth(&c) : skb->protocol;
	return loss_decide(skb, &c, proto, &p, data, hook, l2 ? CTX_TC : CTX_CGROUP);
}

/* tc ingress (tcx link or clsact): a drop is network loss to the receiver. */
SEC("tc")
int lossd_tc_in(struct __sk_buff *skb)
{
	return skb_run(skb, LOSS_HOOK_TC_INGRESS, LOSS_DIR_INGRESS, true) ? TC_ACT_SHOT
									  : TC_ACT_UNSPEC;
}

/*
 * tc egress, clsact only: STOLEN consumes the skb and reports success to the
 * stack, so a local TCP sender sees loss, not a local drop (docs/architecture.md#egress-verdicts).
 * Never attach through tcx: tcx treats 4 as "next" and would pass. This is
 * also where a cgroup target's egress is decided (matched by the socket's
 * cgroup ancestry), on the devices of its network namespace: a cgroup_skb
 * egress drop would be a local refusal the sender is told about (DESIGN 14).
 */
SEC("tc")
int lossd_tc_out(struct __sk_buff *skb)
{
	return skb_run(skb, LOSS_HOOK_TC_EGRESS, LOSS_DIR_EGRESS, true) ? TC_ACT_STOLEN
									: TC_ACT_UNSPEC;
}

SEC("cgroup_skb/ingress")
int lossd_cg_in(struct __sk_buff *skb)
{
	return skb_run(skb, LOSS_HOOK_CGROUP_INGRESS, LOSS_DIR_INGRESS, false) ? 0 : 1;
}

