/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Bounds-checked packet parsing for the loss injector (BPF side only).
 * A cursor walks the linear packet data; every header is checked against
 * data_end before it is read. Anything unexpected yields PARSE_BAD, which
 * the caller turns into "pass and count".
 */
#ifndef LOSSD_BPF_PARSE_H
#define LOSSD_BPF_PARSE_H

#include <bpf/bpf_endian.h>

/* vmlinux.h carries types, not the UAPI macros: the few we need. */
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_ARP 0x0806
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_AUTH 51
#define NEXTHDR_DEST 60
#define IP_OFFSET_MASK 0x1fff
#define IP6_OFFSET_MASK 0xfff8
#define PROTO_ICMP 1
#define PROTO_TCP 6
#define PROTO_UDP 17
#define PROTO_ICMPV6 58
#define ICMPV6_ND_FIRST 133 /* router solicitation .. redirect (137) */
#define ICMPV6_ND_LAST 137

enum parse_result {
	PARSE_OK = 0,		  /* IP packet, fields filled in */
	PARSE_NOT_IP = 1,	  /* some other ethertype: pass, not an error */
	PARSE_ALWAYS = 2,	  /* ARP / IPv6 ND: always pass */
	PARSE_BAD = 3,		  /* truncated or malformed: pass and count */
	PARSE_LATER_FRAGMENT = 4, /* internal: IP fragment without L4 header */
};

/* What the matcher needs to know about one packet. */
struct pkt {
	__u32 saddr[4]; /* network byte order */
	__u32 daddr[4];
	__u16 sport; /* host byte order */
	__u16 dport;
	__u8 family; /* 4 or 6 */
	__u8 l4proto;
	__u8 has_ports; /* TCP/UDP header present (not a later fragment) */
	__u8 tcp_flags;
	__u8 has_payload;
	__u8 dir;  /* LOSS_DIR_* */
	__u8 hook; /* enum loss_hook */
	__u8 foreign; /* tc: 0 not looked up yet, NETNS_OWN or NETNS_FOREIGN (loss.bpf.c) */
	__u32 ifindex;
	__u32 len;	     /* bytes */
	__u32 segs;	     /* wire segments (gso_segs, at least 1) */
	__u64 attach_cgroup; /* cgroup_skb hooks: id of the cgroup this run's attachment is on */
	__u32 payload; /* L4 payload bytes when the IP header gives them (0: none or unknown) */
	__u16 l4off;   /* offset of the L4 header from the start of the data */
	__u8 stacked;  /* tc egress: a VLAN device above this one already saw it */
	__u8 _pad2;
	__u16 l3off;   /* offset of the IP header from the start of the data */
	__u16 _pad3;
	__u64 own_netns; /* tc: lossd's netns cookie (loss_config.netns_cookie) */
	__u32 tcp_seq;	 /* TCP: the first sequence number, host order (the drop log's) */
	__u32 ip_end;	 /* offset of the IP datagram's end (its length field); 0: not given
			  * (a GSO packet): the data's end. Past it: link padding. */
};

struct cursor {
	void *pos;
	void *end;
};

#define CURSOR_TAKE(c, type)                                                                       \
	({                                                                                         \
		type *__h = (type *)(c)->pos;                                                      \
		if ((void *)(__h + 1) > (c)->end)                                                  \
			__h = NULL;                                                                \
		else                                                                               \
			(c)->pos = (void *)(__h + 1);                                              \
		__h;                                                                               \
	})

struct vlan_hdr_ {
	__be16 tci;
	__be16 proto;
};

struct ip6_opt_ {
	__u8 nexthdr;
	__u8 hdrlen;
};

struct ip6_frag_ {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off;
	__be32 id;
};

/*
 * Ethernet + up to two VLAN tags. Returns the L3 ethertype (network order);
 * a truncated header leaves c->pos NULL (a real ethertype may be 0).
 */
static __always_inline __be16 parse_eth(struct cursor *c)
{
	struct ethhdr *eth = CURSOR_TAKE(c, struct ethhdr);
	if (!eth) {
		c->pos = NULL;
		return 0;
	}
	__be16 proto = eth->h_proto;
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		struct vlan_hdr_ *vh = CURSOR_TAKE(c, struct vlan_hdr_);
		if (!vh) {
			c->pos = NULL;
			return 0;
		}
		proto = vh->proto;
	}
	return proto;
}

/*
 * L4 headers. l4len is the L4 length (header + payload) from the IP header,
 * or from the bytes left when the IP header gives none (GSO super-packets).
 */
static __always_inline int parse_l4(struct cursor *c, struct pkt *p, __u32 l4len)
{
	__u32 hdr;

	if (p->l4proto == PROTO_TCP) {
		struct tcphdr *th = CURSOR_TAKE(c, struct tcphdr);
		if (!th)
			return PARSE_BAD;
		hdr = th->doff * 4;
		if (hdr < sizeof(*th))
			return PARSE_BAD;
		p->sport = bpf_ntohs(th->source);
		p->dport = bpf_ntohs(th->dest);
		p->tcp_flags = ((__u8 *)th)[13];
		p->tcp_seq = bpf_ntohl(th->seq);
		p->has_ports = 1;
	} else if (p->l4proto == PROTO_UDP) {
		struct udphdr *uh = CURSOR_TAKE(c, struct udphdr);
		if (!uh)
			return PARSE_BAD;
		hdr = sizeof(*uh);
		p->sport = bpf_ntohs(uh->source);
		p->dport = bpf_ntohs(uh->dest);
		p->has_ports = 1;
	} else if (p->l4proto == PROTO_ICMP || p->l4proto == PROTO_ICMPV6) {
		__u8 *type = CURSOR_TAKE(c, __u8);
		if (!type)
			return PARSE_BAD;
		if (p->l4proto == PROTO_ICMPV6 && p->family == 6 && *type >= ICMPV6_ND_FIRST &&
		    *type <= ICMPV6_ND_LAST)
			return PARSE_ALWAYS;
		return PARSE_OK;
	} else {
		return PARSE_OK;
	}
	p->has_payload = l4len > hdr;
	if (p->has_payload && l4len != ~0U)
		p->payload = l4len - hdr;
	return PARSE_OK;
}

static __always_inline int parse_ipv4(struct cursor *c, struct pkt *p, __u32 *l4len)
{
	struct iphdr *ip = CURSOR_TAKE(c, struct iphdr);
	if (!ip || ip->version != 4 || ip->ihl < 5)
		return PARSE_BAD;
	__u32 hl = ip->ihl * 4;
	if (c->pos + (hl - sizeof(*ip)) > c->end)
		return PARSE_BAD;
	c->pos += hl - sizeof(*ip);
	__u32 tot = bpf_ntohs(ip->tot_len);
	if (tot && tot < hl)
		return PARSE_BAD;
	*l4len = tot ? tot - hl : 0;
	p->ip_end = tot ? p->l3off + tot : 0;
	p->family = 4;
	p->l4proto = ip->protocol;
	p->saddr[0] = ip->saddr;
	p->daddr[0] = ip->daddr;
	if (bpf_ntohs(ip->frag_off) & IP_OFFSET_MASK)
		return PARSE_LATER_FRAGMENT; /* no L4 header */
	return PARSE_OK;
}

static __always_inline int parse_ipv6(struct cursor *c, struct pkt *p, __u32 *l4len)
{
	struct ipv6hdr *ip6 = CURSOR_TAKE(c, struct ipv6hdr);
	if (!ip6 || ip6->version != 6)
		return PARSE_BAD;
	__u32 plen = bpf_ntohs(ip6->payload_len);
	__u8 nh = ip6->nexthdr;
	void *start = c->pos;
	int later_fragment = 0;

	p->family = 6;
	p->ip_end = plen ? p->l3off + sizeof(*ip6) + plen : 0;
	__builtin_memcpy(p->saddr, &ip6->saddr, 16);
	__builtin_memcpy(p->daddr, &ip6->daddr, 16);
#pragma unroll
	for (int i = 0; i < 6; i++) {
		if (nh == NEXTHDR_HOP || nh == NEXTHDR_ROUTING || nh == NEXTHDR_DEST ||
		    nh == NEXTHDR_AUTH) {
			struct ip6_opt_ *o = CURSOR_TAKE(c, struct ip6_opt_);
			if (!o)
				return PARSE_BAD;
			__u32 skip = nh == NEXTHDR_AUTH ? (o->hdrlen + 2) * 4 : (o->hdrlen + 1) * 8;
			skip -= sizeof(*o);
			if (c->pos + skip > c->end)
				return PARSE_BAD;
			c->pos += skip;
			nh = o->nexthdr;
		} else if (nh == NEXTHDR_FRAGMENT) {
			struct ip6_frag_ *f = CURSOR_TAKE(c, struct ip6_frag_);
			if (!f)
				return PARSE_BAD;
			if (bpf_ntohs(f->frag_off) & IP6_OFFSET_MASK)
				later_fragment = 1;
			nh = f->nexthdr;
		} else {
			break;
		}
	}
	if (nh == NEXTHDR_HOP || nh == NEXTHDR_ROUTING || nh == NEXTHDR_DEST ||
	    nh == NEXTHDR_AUTH || nh == NEXTHDR_FRAGMENT)
		return PARSE_BAD; /* deeper chain than we walk: pass and count */
	p->l4proto = nh;
	__u32 ext = c->pos - start;
	if (plen && plen < ext)
		return PARSE_BAD;
	*l4len = plen ? plen - ext : 0;
	if (later_fragment)
		return PARSE_LATER_FRAGMENT;
	return PARSE_OK;
}

/*
 * Parse from the L3 header at c->pos. eth_proto is the ethertype (network
 * order). base is the start of the data p->len counts from.
 */
static __always_inline int parse_l3(struct cursor *c, __be16 eth_proto, struct pkt *p, void *base)
{
	__u32 l4len = 0;
	int ret;

	if (!c->pos)
		return PARSE_BAD; /* truncated L2 header */
	p->l3off = c->pos - base;
	if (eth_proto == bpf_htons(ETH_P_IP))
		ret = parse_ipv4(c, p, &l4len);
	else if (eth_proto == bpf_htons(ETH_P_IPV6))
		ret = parse_ipv6(c, p, &l4len);
	else if (eth_proto == bpf_htons(ETH_P_ARP))
		return PARSE_ALWAYS;
	else
		return PARSE_NOT_IP;

	if (ret == PARSE_LATER_FRAGMENT)
		return PARSE_OK; /* matches rules without port/flag conditions */
	if (ret != PARSE_OK)
		return ret;
	if (l4len == 0) {
		/* GSO super-packet without a length field: judge by bytes left. */
		__u32 off = c->pos - base;
		l4len = p->len > off ? p->len - off : 0;
		if (!l4len)
			l4len = ~0U; /* unknown: do not claim "no payload" */
	}
	p->l4off = c->pos - base;
	return parse_l4(c, p, l4len);
}

#endif /* LOSSD_BPF_PARSE_H */
