// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Benchmark only: a synthetic producer of retransmit events for a running
 * lossd's observer ring. TCP on this 2-core machine cannot retransmit fast
 * enough to load the transport (~47,000 retransmissions/s at best), so this
 * BPF_PROG_TYPE_SYSCALL program, run through BPF_PROG_TEST_RUN by
 * bench/ring_producer.cc, reserves and submits events into lossd's own
 * obs_ring exactly as the sockops program does (same record, same wakeup
 * rule), and counts a failed reservation in lossd's own ring_lost counter.
 * Both maps are lossd's, reused by fd before load.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "observe_abi.h"
#include "lib/obs_ring.h"
#include "lib/ring_wakeup.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct produce_args {
	__u32 n;	 /* events to submit in this run */
	__u32 family;	 /* AF_INET */
	__u64 first_id;	 /* cookie of the first event; +1 per event */
	__u64 submitted; /* out */
	__u64 lost;	 /* out: reservations that failed (also in ring_lost) */
};

__u64 last_wakeup_ns;

struct loop_ctx {
	struct produce_args *args;
	__u64 submitted, lost;
};

static long produce_one(__u64 i, struct loop_ctx *c)
{
	struct obs_event *e = bpf_ringbuf_reserve(&obs_ring, sizeof(*e), 0);
	if (!e) {
		__u32 idx = OBS_CNT_RING_LOST;
		__u64 *cnt = bpf_map_lookup_elem(&obs_counters, &idx);
		if (cnt)
			__sync_fetch_and_add(cnt, 1);
		c->lost++;
		return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	__builtin_memset(e, 0, sizeof(*e));
	e->kind = OBS_EV_RETRANSMIT;
	e->cpu = bpf_get_smp_processor_id();
	e->time_ns = now;
	e->cookie = c->args->first_id + i;
	e->tuple.family = c->args->family;
	e->tuple.saddr[0] = 0x0100000a; /* 10.0.0.1 */
	e->tuple.daddr[0] = 0x0200000a; /* 10.0.0.2 */
	e->tuple.sport = 40000;
	e->tuple.dport = 5202;
	e->type = OBS_RTX_FAST;
	e->outcome = OBS_SENT;
	e->segs = 1;
	e->seq = (__u32)i;
	e->st.snd_cwnd = 10;
	e->st.mss = 1448;
	e->st.tcp_state = 1;
	bpf_ringbuf_submit(e, ring_wakeup_flag(&obs_ring, &last_wakeup_ns, now));
	c->submitted++;
	return 0;
}

SEC("syscall")
int produce(struct produce_args *args)
{
	struct loop_ctx c = {.args = args};
	bpf_loop(args->n, produce_one, &c, 0);
	args->submitted = c.submitted;
	args->lost = c.lost;
	return 0;
}
