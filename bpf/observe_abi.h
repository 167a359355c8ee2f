/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * TCP observer ABI: events, per-flow aggregates, totals and filters shared
 * by bpf/observe.bpf.c and the C++ observer (daemon/observer).
 *
 * Byte order: addresses in network byte order, ports in host byte order,
 * everything else host order. Times are CLOCK_MONOTONIC ns (bpf_ktime_get_ns).
 */
#ifndef LOSSD_OBSERVE_ABI_H
#define LOSSD_OBSERVE_ABI_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#ifdef __cplusplus
#define OBS_STATIC_ASSERT static_assert
#else
#define OBS_STATIC_ASSERT _Static_assert
#endif

/*
 * Retransmission types, classified at the sock_ops RETRANS_CB from the
 * socket's own state (TCP state, icsk_pending, icsk_ca_state); see
 * docs/observer.md for the rules and their blind spots.
 */
enum obs_rtx_type {
	OBS_RTX_FAST = 0,    /* resent in Disorder/CWR/Recovery: TCPFastRetrans */
	OBS_RTX_RTO = 1,     /* the retransmission timer's own resend of the head */
	OBS_RTX_LOSS = 2,    /* further resends in Loss state after an RTO: TCPSlowStartRetrans */
	OBS_RTX_TLP = 3,     /* tail loss probe resending the last segment */
	OBS_RTX_SYN = 4,     /* SYN resent by the timer */
	OBS_RTX_SYNACK = 5,  /* SYN-ACK resent (tcp:tcp_retransmit_synack) */
	OBS_RTX_PROBE0 = 6,  /* zero-window probe by the retransmission timer */
	OBS_RTX_UNKNOWN = 7, /* in Open state, not timer nor TLP (should stay 0) */
	OBS_RTX_MAX = 8,
};

/*
 * What became of a counted retransmission (RETRANS_CB's err, the return of
 * tcp_transmit_skb). Both are in TcpRetransSegs; attempts the kernel gave up
 * before counting (EBUSY, EAGAIN, ENOMEM) do not reach the callback.
 */
enum obs_outcome {
	OBS_SENT = 0,	/* err == 0 */
	OBS_FAILED = 1, /* err != 0: also in TCPRetransFail */
	OBS_OUTCOME_MAX = 2,
};

/* Per-CPU totals, index obs_rtx_type * OBS_OUTCOME_MAX + obs_outcome. */
struct obs_total {
	__u64 events;
	__u64 segs;
};
OBS_STATIC_ASSERT(sizeof(struct obs_total) == 16, "obs_total layout");
#define OBS_TOTALS (OBS_RTX_MAX * OBS_OUTCOME_MAX)

/* Per-CPU observer self-counters, index into an array. */
enum obs_counter {
	OBS_CNT_RING_LOST = 0, /* events that could not be reserved in the ring */
	OBS_CNT_FILTERED = 1,  /* events filtered out in the kernel */
	OBS_CNT_FLOWS_OPENED = 2,
	OBS_CNT_FLOWS_CLOSED = 3,
	OBS_CNT_FLOW_TABLE_FULL = 4,
	OBS_CNT_ARM_FAILED = 5,	    /* sockets whose retransmission callback could not be armed */
	OBS_CNT_ARMED_EXISTING = 6, /* pre-existing sockets armed by the iterator */
	OBS_CNT_MAX = 7,
};

/* Ring wakeups: at most one per OBS_WAKEUP_NS, or when this much waits. */
#define OBS_WAKEUP_NS (1000ULL * 1000)
#define OBS_WAKEUP_BYTES (64 * 1024)

enum obs_event_kind {
	OBS_EV_RETRANSMIT = 1,
	OBS_EV_FLOW_CLOSE = 2,
};

struct obs_tuple {
	__u32 saddr[4]; /* local address, network byte order (IPv4 in [0]) */
	__u32 daddr[4]; /* remote address */
	__u16 sport;	/* local port, host byte order */
	__u16 dport;	/* remote port, host byte order */
	__u16 family;	/* AF_INET / AF_INET6 */
	__u16 _pad;
};
OBS_STATIC_ASSERT(sizeof(struct obs_tuple) == 40, "obs_tuple layout");

/* Socket state read from tcp_sock at the event. */
struct obs_sock_state {
	__u32 snd_cwnd;	    /* segments */
	__u32 snd_ssthresh; /* segments; 0x7fffffff = infinite */
	__u32 srtt_us;	    /* smoothed RTT, us */
	__u32 rttvar_us;    /* mdev, us (tcpi_rttvar) */
	__u32 mss;	    /* mss_cache */
	__u32 packets_out;
	__u32 retrans_out;
	__u32 lost_out;
	__u32 sacked_out;
	__u32 in_flight;     /* packets_out - sacked_out - lost_out + retrans_out */
	__u32 snd_wnd;	     /* bytes */
	__u32 rcv_wnd;	     /* bytes */
	__u32 total_retrans; /* segments, this socket's life */
	__u8 ca_state;	     /* TCP_CA_Open .. TCP_CA_Loss */
	__u8 backoff;	     /* icsk_backoff */
	__u8 retransmits;    /* icsk_retransmits */
	__u8 tcp_state;	     /* TCP_ESTABLISHED ... */
	__u64 bytes_acked;
	__u64 bytes_sent;
};
OBS_STATIC_ASSERT(sizeof(struct obs_sock_state) == 72, "obs_sock_state layout");

struct obs_event {
	__u32 kind; /* obs_event_kind */
	__u32 cpu;
	__u64 time_ns;
	__u64 cookie;	 /* socket cookie */
	__u64 cgroup_id; /* cgroup v2 id of the socket */
	struct obs_tuple tuple;
	/* OBS_EV_RETRANSMIT */
	__u32 type;    /* obs_rtx_type */
	__u32 outcome; /* obs_outcome */
	__s32 err;
	__u32 segs; /* tcp_skb_pcount of the resent skb */
	__u32 seq;  /* first sequence number resent */
	__u32 _pad;
	struct obs_sock_state st;
};
OBS_STATIC_ASSERT(sizeof(struct obs_event) == 168, "obs_event layout");

/* Per-flow aggregate, kept in the kernel (never one event per ACK). */
#define OBS_CA_STATES 5 /* Open, Disorder, CWR, Recovery, Loss */
struct obs_flow {
	struct obs_tuple tuple;
	__u64 cgroup_id;
	__u64 opened_ns;  /* when seen established (or first seen) */
	__u64 updated_ns; /* last tcp_probe / event */
	__u32 cwnd, cwnd_min, cwnd_max;
	__u32 srtt_us, srtt_min_us, srtt_max_us;
	__u64 bytes_acked;
	__u64 bytes_sent;
	__u64 rtx_segs[OBS_RTX_MAX]; /* sent retransmissions by type (segments) */
	__u64 ca_time_ns[OBS_CA_STATES];
	__u64 ca_since_ns; /* when the current congestion state began */
	__u32 ca_state;
	__u32 max_backoff;
	__u32 preexisting; /* 1 if picked up by the iterator */
	__u32 _pad;
};
OBS_STATIC_ASSERT(sizeof(struct obs_flow) == 232, "obs_flow layout");

/* The closing summary of a flow travels as an event followed by its flow. */
struct obs_close_event {
	struct obs_event ev; /* kind OBS_EV_FLOW_CLOSE; st = last state */
	struct obs_flow flow;
	__u64 closed_ns;
};
OBS_STATIC_ASSERT(sizeof(struct obs_close_event) == 408, "obs_close_event layout");

/*
 * Kernel-side filters: a socket is observed when there are no filters, or
 * when it matches any one of them (AND inside a filter, OR across).
 */
#define OBS_MAX_FILTERS 16
struct obs_filter {
	__u32 addr[4]; /* remote or local address (either matches), pre-masked */
	__u32 mask[4];
	__u16 port_lo; /* local or remote port (either matches) */
	__u16 port_hi;
	__u16 family; /* 0 any */
	__u16 _pad;
	__u64 cgroup_id; /* 0 any */
};
OBS_STATIC_ASSERT(sizeof(struct obs_filter) == 48, "obs_filter layout");

struct obs_config {
	__u64 netns_ino; /* only sockets of this network namespace; 0 = all */
	__u32 n_filters;
	__u32 _pad;
	struct obs_filter filters[OBS_MAX_FILTERS];
};
OBS_STATIC_ASSERT(sizeof(struct obs_config) == 16 + 48 * OBS_MAX_FILTERS, "obs_config layout");

#endif /* LOSSD_OBSERVE_ABI_H */
