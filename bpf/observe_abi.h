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

/*
 * The totals of one network namespace (obs_ns_totals: netns inode -> this,
 * per CPU), so that each reconciles with that namespace's own MIB. At most
 * OBS_MAX_NETNS namespaces have their own entry; the retransmissions of the
 * others, once the table is full, are counted in obs_ns_other.
 */
struct obs_ns_total {
	struct obs_total t[OBS_TOTALS];
};
OBS_STATIC_ASSERT(sizeof(struct obs_ns_total) == 16 * OBS_TOTALS, "obs_ns_total layout");
#define OBS_MAX_NETNS 1024

/* Which network namespaces are watched (obs_config.netns_mode). */
enum obs_netns_mode {
	OBS_NETNS_ONE = 0, /* only obs_config.netns_ino (0: every namespace) */
	OBS_NETNS_ALL = 1, /* every namespace */
	OBS_NETNS_SET = 2, /* those in obs_netns_set (netns inode -> 1) */
};
#define OBS_MAX_WATCHED_NETNS 64

/* Per-CPU observer self-counters, index into an array. */
enum obs_counter {
	OBS_CNT_RING_LOST = 0, /* events that could not be reserved in the ring */
	OBS_CNT_FILTERED = 1,  /* events filtered out in the kernel */
	OBS_CNT_FLOWS_OPENED = 2,
	OBS_CNT_FLOWS_CLOSED = 3,
	OBS_CNT_FLOW_TABLE_FULL = 4,
	OBS_CNT_ARM_FAILED = 5,	    /* sockets whose retransmission callback could not be armed */
	OBS_CNT_ARMED_EXISTING = 6, /* pre-existing sockets armed by the iterator */
	OBS_CNT_STALLS = 7,	    /* stall events (in the ring, or in RING_LOST) */
	OBS_CNT_SAMPLES = 8,	    /* ACK samples of traced flows (likewise) */
	OBS_CNT_DSACKS = 9,	    /* D-SACK events (likewise) */
	OBS_CNT_MAX = 10,
};

/* Ring wakeups: at most one per OBS_WAKEUP_NS, or when this much waits. */
#define OBS_WAKEUP_NS (1000ULL * 1000)
#define OBS_WAKEUP_BYTES (64 * 1024)

enum obs_event_kind {
	OBS_EV_RETRANSMIT = 1,
	OBS_EV_FLOW_CLOSE = 2,
	OBS_EV_STALL = 3,  /* struct obs_stall_event: a stall ended (or the flow closed in one) */
	OBS_EV_SAMPLE = 4, /* struct obs_sample_event: one ACK of a traced flow */
	OBS_EV_DSACK = 5,  /* struct obs_dsack_event: the peer D-SACKed data we resent */
	OBS_EV_FLOW_OPEN = 6, /* struct obs_event, head only: a flow record was created (sent
			       * only while obs_config.open_waiters is set) */
};

/*
 * Where a flow's time went (obs_flow.limit_ns), the model of Windows ESTATS'
 * SndLim* and of `ss -i`'s busy/rwnd_limited/sndbuf_limited:
 *  BUSY, RWND, SNDBUF are the kernel's own chrono stats (tcp_sock.chrono_stat,
 *  jiffies resolution: 1/CONFIG_HZ): BUSY is all the time the socket had data
 *  in flight or queued, RWND and SNDBUF the parts of it the receiver's window
 *  or the send buffer held the sender back.
 *  CWND is sampled per ACK in BPF: busy time outside RWND/SNDBUF in which the
 *  last window was congestion-window limited (tcp_sock.is_cwnd_limited).
 *  Application-limited time is what is left of BUSY (the sender had less in
 *  flight than cwnd allowed and nothing waiting); idle time is the flow's life
 *  outside BUSY. Both are computed in user space.
 */
enum obs_limit {
	OBS_LIM_BUSY = 0,
	OBS_LIM_RWND = 1,
	OBS_LIM_SNDBUF = 2,
	OBS_LIM_CWND = 3,
	OBS_LIM_MAX = 4,
};

/*
 * Why a stall happened, decided in BPF at its end from the socket's state and
 * what happened during it (docs/observer.md#stalls), first rule that fits:
 */
enum obs_stall_cause {
	OBS_STALL_UNKNOWN = 0,	      /* none fits: the stall carries its evidence */
	OBS_STALL_RTO = 1,	      /* the first resend in it was the retransmission timer's */
	OBS_STALL_TLP = 2,	      /* ... a tail loss probe */
	OBS_STALL_FAST_RECOVERY = 3,  /* ... a fast retransmission (SACK / dupacks, RACK) */
	OBS_STALL_ZERO_WINDOW = 4,    /* the peer's window was 0 in it (probes answered: acks) */
	OBS_STALL_RWND_LIMITED = 5,   /* data waiting, the peer's window too small to send it */
	OBS_STALL_NAGLE_DELAYED_ACK = 6, /* a sub-MSS segment held by Nagle (nonagle off) while the
					  * peer delayed its ACK of what was in flight */
	OBS_STALL_CWND_LIMITED = 7,   /* data waiting, in flight >= cwnd, no resend */
	OBS_STALL_SNDBUF_LIMITED = 8, /* the kernel's chrono said send-buffer limited */
	OBS_STALL_APP_LIMITED = 9,    /* nothing more to send, in flight < cwnd, no resend: the
				       * sender waited on the ACK of all it had (not the network) */
	OBS_STALL_MAX = 10,
};

/* A stall's threshold: max(min_ns, rtts * the flow's minimum RTT). */
#define OBS_STALL_MIN_NS_DEFAULT (10ULL * 1000 * 1000)
#define OBS_STALL_RTTS_DEFAULT 2

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
	__u32 netns; /* inode of the socket's network namespace (ns.inum) */
	struct obs_sock_state st;
	/*
	 * The flow's record (obs_flow) as this event left it, low 32 bits: its
	 * sent retransmitted segments (rtx_segs summed) and its stalls. A reader
	 * that took the record at some moment tells from these which events it
	 * already holds (a record is updated before its event is submitted).
	 * 0 for an event of no flow (a SYN-ACK's).
	 */
	__u32 flow_rtx_segs;
	__u32 flow_stalls;
};
OBS_STATIC_ASSERT(sizeof(struct obs_event) == 176, "obs_event layout");

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
	__u32 netns;	   /* inode of the socket's network namespace (ns.inum) */
	/* where the time went (obs_limit), ns; refreshed at every ACK and at close */
	__u64 limit_ns[OBS_LIM_MAX];
	/* stalls that ended (or the close ended), their time by cause */
	__u64 stall_ns[OBS_STALL_MAX];
	__u32 stalls;
	/* state of the stall detector (owned by BPF) */
	__u32 idle;	       /* nothing sent-and-unacknowledged or queued since the last ACK */
	__u64 delivered_ns;    /* last ACK that advanced snd_una (or first send after idle) */
	__u64 threshold_ns;    /* the stall threshold at the last ACK */
	__u32 min_rtt_us;      /* tcp_min_rtt at the last ACK */
	__u32 sample_flags;    /* OBS_SAMPLE_*: state at the last ACK (CWND accounting) */
	__u64 sample_ns;       /* that ACK's time */
	__u32 st_rtx_type;     /* first resend since delivered_ns: obs_rtx_type, OBS_RTX_MAX none */
	__u32 st_rtx_seq;      /* its sequence number */
	__u32 st_rtx_count;    /* resends since delivered_ns */
	__u32 st_backoff;      /* highest icsk_backoff since delivered_ns */
	__u32 st_acks;	       /* ACKs since delivered_ns that delivered nothing */
	__u32 st_min_wnd;      /* smallest peer window seen since delivered_ns, bytes */
	__u32 st_rtx_mask;     /* 1 << obs_rtx_type of every resend since delivered_ns */
	/* resent segments the peer reported arriving twice (D-SACK, RFC 2883):
	 * needless resends, as the kernel counts them (TcpExtTCPDSACKRecvSegs) */
	__u32 dsack_segs;
	/* times it entered each congestion state (CWR: its answer to an ECN echo
	 * or a local congestion signal) */
	__u32 ca_entries[8]; /* [0, OBS_CA_STATES) used: 8 to index by a mask */
	/* ACKs it received with ECE set (not SYNs): the peer's echoes of CE
	 * marks (RFC 3168: repeated until our CWR reaches it) */
	__u32 ece_acks;
	/* segments the peer D-SACKed that it never resent: copies the path made
	 * (a duplicating link, lossd's duplicate action). The kernel counts each
	 * such block in TcpExtTCPDSACKRecv or TCPDSACKOfoRecv, then ignores it
	 * as dubious (TCPDSACKIgnoredDubious): more duplicates than resends.
	 * tcp_sock.dsack_dups less dsack_segs, read at each ACK (as of the one
	 * before) and at the close. */
	__u32 dsack_copy_segs;
};
OBS_STATIC_ASSERT(sizeof(struct obs_flow) == 456, "obs_flow layout");

#define OBS_SAMPLE_BUSY 1u /* chrono type BUSY (not rwnd/sndbuf limited) */
#define OBS_SAMPLE_CWND 2u /* tcp_sock.is_cwnd_limited */

/*
 * A stall: the flow had data to deliver (sent and unacknowledged, or queued)
 * and no ACK advanced snd_una for longer than its threshold. Travels as an
 * event whose st is the socket's state at the stall's end (before the ACK
 * that ended it was processed), followed by this.
 */
#define OBS_STALL_F_AT_CLOSE 1u /* the flow closed while stalled: the close ended it */
#define OBS_STALL_F_CLOSING 2u	/* after our FIN (FIN_WAIT1, CLOSING, LAST_ACK): the
				 * application had closed with data unacknowledged */
struct obs_stall {
	__u64 start_ns;	     /* the last delivery before it (or the send after idle) */
	__u64 duration_ns;   /* start to the ACK (or close) that ended it */
	__u64 threshold_ns;  /* what it had to exceed */
	__u32 cause;	     /* obs_stall_cause */
	__u32 flags;	     /* OBS_STALL_F_* */
	__u32 snd_una;	     /* the first byte not delivered during it: where the hole was */
	__u32 ack_seq;	     /* the ACK that ended it (0 at close) */
	__u32 unsent;	     /* bytes queued and not sent at its end (write_seq - snd_nxt) */
	__u32 rtx_type;	     /* first resend in it (obs_rtx_type), OBS_RTX_MAX: none */
	__u32 rtx_seq;	     /* its sequence number */
	__u32 rtx_count;     /* resends during it */
	__u32 backoff;	     /* highest icsk_backoff during it (RTO, zero-window probes) */
	__u32 acks;	     /* ACKs during it that delivered nothing (dupacks, probe answers) */
	__u32 min_wnd;	     /* smallest peer window during it, bytes */
	__u32 min_rtt_us;    /* the flow's minimum RTT */
	__u32 nonagle;	     /* tcp_sock.nonagle: 0 = Nagle on; 1 off (NODELAY), 2 cork */
	__u32 _pad;
};
OBS_STATIC_ASSERT(sizeof(struct obs_stall) == 80, "obs_stall layout");

struct obs_stall_event {
	struct obs_event ev; /* kind OBS_EV_STALL; st = state at the end; seq = snd_una */
	struct obs_stall stall;
};
OBS_STATIC_ASSERT(sizeof(struct obs_stall_event) == 256, "obs_stall_event layout");

/* One ACK of a traced flow (tp_btf/tcp_probe: before the ACK is processed). */
struct obs_sample {
	__u32 ack_seq; /* the ACK's acknowledgment number */
	__u32 snd_una; /* before it */
	__u32 snd_nxt;
	__u32 write_seq; /* end of what the application wrote */
	__u32 cwnd;
	__u32 ssthresh;
	__u32 srtt_us;
	__u32 in_flight;
	__u32 snd_wnd; /* the window before this ACK, bytes */
	__u32 ack_wnd; /* the window this ACK advertises, bytes (scaled) */
	__u32 sacked_out;
	__u32 lost_out;
	__u32 ca_state;
	__u32 delivered; /* tcp_sock.delivered: segments */
};
OBS_STATIC_ASSERT(sizeof(struct obs_sample) == 56, "obs_sample layout");

struct obs_sample_event {
	struct obs_event ev; /* kind OBS_EV_SAMPLE; only kind, cpu, time_ns, cookie, tuple set */
	struct obs_sample sample;
};
OBS_STATIC_ASSERT(sizeof(struct obs_sample_event) == 232, "obs_sample_event layout");

/* Flows traced at once (obs_traced: cookie -> 1). */
#define OBS_MAX_TRACED 16

/*
 * A D-SACK the peer sent (RFC 2883: the first SACK block below the ACK, or
 * inside the second), as the kernel accepts it (tcp_check_dsack,
 * tcp_dsack_seen: none that is dubious): data we resent had arrived before.
 */
struct obs_dsack_event {
	struct obs_event ev; /* kind OBS_EV_DSACK; seq = the block's start, segs = its
			      * duplicate segments; st = state before the ACK */
	__u32 end_seq;       /* the block's end */
	__u32 _pad;
};
OBS_STATIC_ASSERT(sizeof(struct obs_dsack_event) == 184, "obs_dsack_event layout");

/* The closing summary of a flow travels as an event followed by its flow. */
struct obs_close_event {
	struct obs_event ev; /* kind OBS_EV_FLOW_CLOSE; st = last state */
	struct obs_flow flow;
	__u64 closed_ns;
};
OBS_STATIC_ASSERT(sizeof(struct obs_close_event) == 640, "obs_close_event layout");

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
	__u64 netns_ino; /* OBS_NETNS_ONE: only sockets of this network namespace; 0 = all */
	__u32 n_filters;
	__u32 n_traced;	     /* entries in obs_traced (0: tcp_probe skips the lookup) */
	__u64 stall_min_ns;  /* stall threshold floor; 0 = OBS_STALL_MIN_NS_DEFAULT */
	__u32 stall_rtts;    /* ... times the flow's minimum RTT; 0 = OBS_STALL_RTTS_DEFAULT */
	__u32 netns_mode;    /* obs_netns_mode */
	__u32 open_waiters;  /* callers waiting for a flow to open (0: no OBS_EV_FLOW_OPEN) */
	__u32 reserved;
	struct obs_filter filters[OBS_MAX_FILTERS];
};
OBS_STATIC_ASSERT(sizeof(struct obs_config) == 40 + 48 * OBS_MAX_FILTERS, "obs_config layout");

#endif /* LOSSD_OBSERVE_ABI_H */
