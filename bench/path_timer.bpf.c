// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Benchmark only: the kernel's own time for one skb's trip through a path,
 * measured in the kernel (bench/path_timer.cc loads it; bench/path_cost.py
 * uses it). Two tracepoints bracket the hooks a loss injector can sit on:
 *
 *   start  net:netif_receive_skb on the entry device (before generic XDP,
 *          tcx/clsact ingress, netfilter PREROUTING/FORWARD/INPUT)
 *   end    router path: net:net_dev_start_xmit on the exit device (after
 *          netfilter POSTROUTING and tcx/clsact egress);
 *          local path: tcp:tcp_probe (tcp_rcv_established, after INPUT)
 *
 * Both run in the same softirq on one CPU for a forwarded or locally
 * delivered skb, so a per-CPU slot holds the skb in flight; an end whose
 * skb is not the slot's (the socket was owned by the user and the skb went
 * to its backlog, say) is counted, not timed. What other processes do on
 * the machine is not in these times (softirq work is not preempted by
 * tasks), which is what makes them resolve a few ns where host CPU from
 * /proc/stat cannot. The two tracepoints' own cost is in every
 * configuration alike, none included.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define PT_BUCKET_NS 2
#define PT_BUCKETS 8192 /* 0 .. 16.4 us at 2 ns; longer in the last */

const volatile __u32 entry_ifindex;
const volatile __u32 exit_ifindex; /* 0: local delivery (tcp_probe) */
const volatile __u32 netns_ino;	   /* the path's network namespace */

struct slot {
	__u64 skb;
	__u64 t0;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct slot);
} inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PT_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} hist SEC(".maps");

enum { PT_STARTS, PT_TIMED, PT_UNMATCHED, PT_SUM_NS, PT_NCOUNTERS };

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PT_NCOUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 idx, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);

	if (c)
		*c += n;
}

static __always_inline bool on_path(const struct net_device *dev, __u32 ifindex)
{
	return dev && BPF_CORE_READ(dev, ifindex) == (int)ifindex &&
	       BPF_CORE_READ(dev, nd_net.net, ns.inum) == netns_ino;
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(pt_start, struct sk_buff *skb)
{
	__u32 zero = 0;
	struct slot *s;

	if (!on_path(BPF_CORE_READ(skb, dev), entry_ifindex))
		return 0;
	s = bpf_map_lookup_elem(&inflight, &zero);
	if (!s)
		return 0;
	s->skb = (__u64)skb;
	s->t0 = bpf_ktime_get_ns();
	count(PT_STARTS, 1);
	return 0;
}

static __always_inline void finish(const struct sk_buff *skb)
{
	__u64 now = bpf_ktime_get_ns(), dt, *b;
	__u32 zero = 0, idx;
	struct slot *s = bpf_map_lookup_elem(&inflight, &zero);

	if (!s || !s->skb)
		return;
	if (s->skb != (__u64)skb) {
		count(PT_UNMATCHED, 1);
		return;
	}
	s->skb = 0;
	dt = now - s->t0;
	idx = dt / PT_BUCKET_NS;
	if (idx >= PT_BUCKETS)
		idx = PT_BUCKETS - 1;
	b = bpf_map_lookup_elem(&hist, &idx);
	if (b)
		*b += 1;
	count(PT_TIMED, 1);
	count(PT_SUM_NS, dt);
}

SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(pt_end_xmit, struct sk_buff *skb, struct net_device *dev)
{
	if (exit_ifindex && on_path(dev, exit_ifindex))
		finish(skb);
	return 0;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(pt_end_local, struct sock *sk, struct sk_buff *skb)
{
	if (!exit_ifindex) /* the slot holds only the entry device's skbs */
		finish(skb);
	return 0;
}
