/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Header parsing into a flow tuple, with the offsets the rewrite needs. */
#ifndef MASQ_PARSE_H
#define MASQ_PARSE_H

#include "common.h"

enum l4_state {
	L4_OK = 0,          /* ports (or ICMP echo id) parsed */
	L4_FRAGMENT,        /* non-first fragment: no L4 header in this packet */
	L4_TRUNCATED,       /* header claims more than the packet holds */
	L4_UNSUPPORTED,     /* a protocol or ICMP type we do not translate */
	L4_ICMP_ERROR,      /* ICMP(v6) error: a quoted packet follows at l4_off + 8 */
};

enum frag_state {
	FRAG_NONE = 0,
	FRAG_FIRST,         /* offset 0, more fragments follow: carries the L4 header */
	FRAG_LATER,         /* offset > 0 */
};

#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_RST 0x04
#define TCP_FLAG_ACK 0x10

/*
 * One packet's tuple. For ICMP echo the identifier plays the role of the
 * pod-side port: a request carries it in sport (dport 0), a reply in dport
 * (sport 0), so requests and replies produce the fwd and rev keys directly.
 * flow4 and flow6 share every field name but the address type, so the NAT
 * template (nat/engine_tmpl.h) serves both.
 */
#define FLOW_COMMON_FIELDS                                                  \
	__u32 l3_off;                                                       \
	__u32 l4_off;                                                       \
	__u32 len;          /* skb->len, for byte counters */               \
	__be16 sport;                                                       \
	__be16 dport;                                                       \
	__u8 proto;                                                         \
	__u8 tcp_flags;     /* byte 13 of the TCP header */                 \
	__u8 l4;            /* enum l4_state */                             \
	__u8 icmp_type;                                                     \
	__u8 frag;          /* enum frag_state */                           \
	__u8 frag_proto;    /* what follows the IP (v6: fragment) header */ \
	__sum16 ip_check;   /* IPv4 header checksum as parsed (v6: 0) */    \
	__be32 frag_id;     /* IPv4: the 16-bit id; IPv6: the 32-bit id */

struct flow4 {
	FLOW_COMMON_FIELDS
	__be32 saddr;
	__be32 daddr;
};

struct flow6 {
	FLOW_COMMON_FIELDS
	struct in6_addr saddr;
	struct in6_addr daddr;
};

/*
 * load_hdr - copy @len (a constant) header bytes at @off into @buf, straight
 * from the packet. When they are not in its linear part (rare: most drivers and
 * the stack keep headers linear), bpf_skb_pull_data() makes them so first.
 * Both ways end in the same direct copy, so the verifier sees one state after it.
 *
 * For headers at a fixed offset (the IP header, fields of it). An L4 header
 * behind a variable IHL or extension headers is read with bpf_skb_load_bytes:
 * a direct read there makes the verifier track every header length apart,
 * which doubled the uplink programs' verification time for ~8 ns a packet.
 */
#define LOAD_HDR_DIRECT_MAX 0xff   /* a mask too */
static __always_inline int load_hdr(struct __sk_buff *skb, __u32 off, void *buf, __u32 len)
{
	void *data, *data_end, *p;

	if (off > LOAD_HDR_DIRECT_MAX)
		return bpf_skb_load_bytes(skb, off, buf, len);
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	/* The mask is a no-op here, but the verifier sees the bound on this very register. */
	p = data + (off & LOAD_HDR_DIRECT_MAX);
	if (p + len > data_end) {
		if (bpf_skb_pull_data(skb, off + len))
			return -1;
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		p = data + (off & LOAD_HDR_DIRECT_MAX);
		if (p + len > data_end)
			return -1;
	}
	__builtin_memcpy(buf, p, len);
	return 0;
}

/*
 * l4_has_ports - a protocol whose pairs are keyed and translated by port (or echo
 * id): TCP, UDP, ICMP(v6). Any other protocol parsed as L4_OK (l4_by_address) is
 * keyed with ports 0 and translated by address alone.
 */
static __always_inline bool l4_has_ports(__u8 proto)
{
	return proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6;
}

/*
 * l4_by_address - a protocol masqueraded by address alone, as netfilter's generic
 * handling does (GRE, ESP, AH, IPIP, ...: nf_nat_core can change nothing else
 * of theirs), and SCTP with its ports kept (its CRC32c covers no IP header, so
 * an address change needs no checksum work; netfilter keeps them too while they
 * are free). Not DCCP and UDP-Lite: their checksums cover the addresses; they
 * stay refused (DROP_UNSUPPORTED_PROTO). Nor IPv6 extension headers past those
 * walked.
 */
static __always_inline bool l4_by_address(__u8 proto)
{
	return proto != IPPROTO_DCCP && proto != IPPROTO_UDPLITE &&
	       proto != IPPROTO_ICMP && proto != IPPROTO_ICMPV6 && proto != NEXTHDR_HOP &&
	       proto != NEXTHDR_ROUTING && proto != NEXTHDR_DEST && proto != NEXTHDR_FRAGMENT &&
	       proto != NEXTHDR_NONE;
}

/*
 * l4_generic - a packet of a protocol masqueraded by address alone is L4_OK, with
 * ports 0, or SCTP's own (parse_l4 leaves every protocol it does not know
 * L4_UNSUPPORTED).
 */
static __always_inline void l4_generic(struct __sk_buff *skb, __u32 l4_off, __u8 proto, __be16 *sport,
				       __be16 *dport, __u8 *l4)
{
	__be16 ports[2];

	if (*l4 != L4_UNSUPPORTED || !l4_by_address(proto))
		return;
	*l4 = L4_OK;
	if (proto != IPPROTO_SCTP)
		return;
	/* SCTP: its common header's ports, kept (12 bytes: ports, verification tag, checksum). */
	if (skb->len < l4_off + 12 || bpf_skb_load_bytes(skb, l4_off, ports, sizeof(ports))) {
		*l4 = L4_TRUNCATED;
		return;
	}
	*sport = ports[0];
	*dport = ports[1];
}

/* ICMP echo request/reply ids, errors, and the rest, for either family. */
static __always_inline void classify_icmp(__u8 type, __be16 id, bool v6, __be16 *sport, __be16 *dport, __u8 *l4)
{
	__u8 req = v6 ? ICMPV6_ECHO_REQUEST : ICMP_ECHO;
	__u8 rep = v6 ? ICMPV6_ECHO_REPLY : ICMP_ECHOREPLY;

	if (type == req) {
		*sport = id;
		*l4 = L4_OK;
	} else if (type == rep) {
		*dport = id;
		*l4 = L4_OK;
	} else if (v6 ? (type == ICMPV6_DEST_UNREACH || type == ICMPV6_PKT_TOOBIG ||
			 type == ICMPV6_TIME_EXCEED || type == ICMPV6_PARAMPROB)
		      : (type == ICMP_DEST_UNREACH || type == ICMP_TIME_EXCEEDED ||
			 type == ICMP_PARAMETERPROB)) {
		*l4 = L4_ICMP_ERROR;
	} else {
		*l4 = L4_UNSUPPORTED;
	}
}

/*
 * parse_l4 - read ports / ICMP type+id at @l4_off into the common fields.
 * bpf_skb_load_bytes keeps this verifier-friendly at any offset (IP options,
 * IPv6 extension headers) and works on non-linear skbs (see load_hdr).
 */
static __always_inline void parse_l4(struct __sk_buff *skb, __u32 l4_off, __u8 proto, bool v6,
				     __be16 *sport, __be16 *dport, __u8 *tcp_flags, __u8 *icmp_type, __u8 *l4)
{
	__u8 hdr[14];

	*sport = 0;
	*dport = 0;
	*tcp_flags = 0;
	*icmp_type = 0;
	switch (proto) {
	case IPPROTO_TCP:
		if (bpf_skb_load_bytes(skb, l4_off, hdr, 14) || skb->len < l4_off + sizeof(struct tcphdr)) {
			*l4 = L4_TRUNCATED;
			return;
		}
		*sport = *(__be16 *)&hdr[0];
		*dport = *(__be16 *)&hdr[2];
		*tcp_flags = hdr[13];
		*l4 = L4_OK;
		return;
	case IPPROTO_UDP:
		if (bpf_skb_load_bytes(skb, l4_off, hdr, 8)) {
			*l4 = L4_TRUNCATED;
			return;
		}
		*sport = *(__be16 *)&hdr[0];
		*dport = *(__be16 *)&hdr[2];
		*l4 = L4_OK;
		return;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		if ((proto == IPPROTO_ICMPV6) != v6) {
			*l4 = L4_UNSUPPORTED;
			return;
		}
		if (bpf_skb_load_bytes(skb, l4_off, hdr, 8)) {
			*l4 = L4_TRUNCATED;
			return;
		}
		*icmp_type = hdr[0];
		classify_icmp(hdr[0], *(__be16 *)&hdr[4], v6, sport, dport, l4);
		return;
	default:
		*l4 = L4_UNSUPPORTED; /* parse_flow4, parse_flow6: perhaps by address (l4_generic) */
	}
}

/*
 * parse_l4_direct - the common case of parse_l4 without a helper call (~4 ns a
 * packet): TCP or UDP right behind a fixed IP header (IPv4 without options,
 * IPv6 without extension headers), in the linear part. @max_off (a constant:
 * Ethernet + that header) bounds @l4_off, so the verifier sees one bounded
 * offset rather than one per header length (a direct read behind a variable
 * IHL is what doubled verification, see load_hdr). False: not that case,
 * parse_l4 does it.
 */
static __always_inline bool parse_l4_direct(struct __sk_buff *skb, __u32 l4_off, __u32 max_off, __u8 proto,
					    __be16 *sport, __be16 *dport, __u8 *tcp_flags, __u8 *l4)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u8 *p;

	if (l4_off > max_off)
		return false;
	p = data + (l4_off & LOAD_HDR_DIRECT_MAX);
	switch (proto) {
	case IPPROTO_TCP:
		if (p + sizeof(struct tcphdr) > (__u8 *)data_end)
			return false;
		*tcp_flags = p[13];
		break;
	case IPPROTO_UDP:
		if (p + sizeof(struct udphdr) > (__u8 *)data_end)
			return false;
		*tcp_flags = 0;
		break;
	default:
		return false;
	}
	*sport = *(__be16 *)&p[0];
	*dport = *(__be16 *)&p[2];
	*l4 = L4_OK;
	return true;
}

/*
 * parse_flow4 - fill @f from the IPv4 header at @l3_off.
 * Returns 0 when an IPv4 header was parsed (f->l4 says how far L4 got), or -1
 * when there is no valid IPv4 header at all. Inlined: the call and its return
 * cost ~4 ns a packet, while the header copy adds only 40 bytes to the caller's
 * frame (the BPF stack is 512 bytes for the whole call chain; the verifier
 * checks every chain at load, and parse_flow6, with its larger copies, stays a call).
 */
static __always_inline int parse_flow4(struct __sk_buff *skb, __u32 l3_off, struct flow4 *f)
{
	struct iphdr ip;
	__u16 frag_off;

	if (load_hdr(skb, l3_off, &ip, sizeof(ip)))
		return -1;
	if (ip.version != 4 || ip.ihl < 5)
		return -1;

	f->l3_off = l3_off;
	f->l4_off = l3_off + ip.ihl * 4;
	f->len = skb->len;
	f->saddr = ip.saddr;
	f->daddr = ip.daddr;
	f->ip_check = ip.check;
	f->proto = ip.protocol;
	f->frag_id = ip.id;
	frag_off = bpf_ntohs(ip.frag_off);
	f->frag = (frag_off & IP_OFFSET) ? FRAG_LATER : (frag_off & IP_MF) ? FRAG_FIRST : FRAG_NONE;
	f->frag_proto = ip.protocol;
	if (f->frag == FRAG_LATER) {
		f->sport = 0;
		f->dport = 0;
		f->tcp_flags = 0;
		f->icmp_type = 0;
		f->l4 = L4_FRAGMENT;
		return 0;
	}
	f->icmp_type = 0;
	if (ip.ihl == 5 && parse_l4_direct(skb, f->l4_off, ETH_HLEN + sizeof(struct iphdr), f->proto,
					   &f->sport, &f->dport, &f->tcp_flags, &f->l4))
		return 0;
	parse_l4(skb, f->l4_off, f->proto, false, &f->sport, &f->dport, &f->tcp_flags, &f->icmp_type, &f->l4);
	l4_generic(skb, f->l4_off, f->proto, &f->sport, &f->dport, &f->l4);
	return 0;
}

#define IPV6_MAX_EXT_HDRS 6

static __always_inline bool ipv6_is_exthdr(__u8 nexthdr)
{
	return nexthdr == NEXTHDR_HOP || nexthdr == NEXTHDR_ROUTING || nexthdr == NEXTHDR_DEST ||
	       nexthdr == NEXTHDR_AUTH || nexthdr == NEXTHDR_FRAGMENT;
}

/* Where an IPv6 packet's upper layer starts, and what its fragment header says. */
struct ipv6_walk {
	__u32 off;          /* in: first byte after the fixed header; out: the upper-layer header */
	__be32 frag_id;
	__u8 nexthdr;       /* in: the fixed header's; out: the upper-layer protocol */
	__u8 frag;          /* enum frag_state */
	__u8 frag_proto;    /* the fragment header's next header */
	__u8 truncated;
};

/*
 * ipv6_walk_exthdrs - skip hop-by-hop, routing, destination options, AH and
 * fragment headers (at most IPV6_MAX_EXT_HDRS). Behind a later fragment's
 * header is payload, not headers (RFC 8200): the walk stops there.
 */
static __always_inline void ipv6_walk_exthdrs(struct __sk_buff *skb, struct ipv6_walk *w)
{
	int i;

#pragma unroll
	for (i = 0; i < IPV6_MAX_EXT_HDRS; i++) {
		__u8 eh[8];

		if (!ipv6_is_exthdr(w->nexthdr))
			return;
		if (bpf_skb_load_bytes(skb, w->off, eh, sizeof(eh))) {
			w->truncated = 1;
			return;
		}
		if (w->nexthdr == NEXTHDR_FRAGMENT) {
			__u16 fo = bpf_ntohs(*(__be16 *)&eh[2]);

			w->frag_id = *(__be32 *)&eh[4];
			w->frag = (fo & 0xfff8) ? FRAG_LATER : (fo & 1) ? FRAG_FIRST : FRAG_NONE;
			w->frag_proto = eh[0];
			w->nexthdr = eh[0];
			w->off += 8;
			if (w->frag == FRAG_LATER)
				return;
		} else if (w->nexthdr == NEXTHDR_AUTH) {
			w->nexthdr = eh[0];
			w->off += (eh[1] + 2) * 4;
		} else {
			w->nexthdr = eh[0];
			w->off += (eh[1] + 1) * 8;
		}
	}
}

/* parse_flow6 - fill @f from the IPv6 header at @l3_off, walking extension headers. */
static __noinline int parse_flow6(struct __sk_buff *skb, __u32 l3_off, struct flow6 *f)
{
	struct ipv6hdr ip6;
	struct ipv6_walk w = {};

	if (load_hdr(skb, l3_off, &ip6, sizeof(ip6)))
		return -1;
	if (ip6.version != 6)
		return -1;

	f->l3_off = l3_off;
	f->len = skb->len;
	f->ip_check = 0;
	f->saddr = ip6.saddr;
	f->daddr = ip6.daddr;
	f->sport = 0;
	f->dport = 0;
	f->tcp_flags = 0;
	f->icmp_type = 0;

	w.off = l3_off + sizeof(ip6);
	w.nexthdr = ip6.nexthdr;
	ipv6_walk_exthdrs(skb, &w);
	f->frag = w.frag;
	f->frag_id = w.frag_id;
	f->frag_proto = w.frag_proto;
	f->proto = w.nexthdr;
	f->l4_off = w.off;
	if (w.truncated) {
		f->l4 = L4_TRUNCATED;
		return 0;
	}
	if (f->frag == FRAG_LATER) {
		f->l4 = L4_FRAGMENT;
		return 0;
	}
	if (ipv6_is_exthdr(w.nexthdr)) {
		f->l4 = L4_UNSUPPORTED; /* more extension headers than we walk */
		return 0;
	}
	/* No extension headers: the offset from l3_off, not from the walk, so the
	 * verifier does not carry the walk's offsets into the direct read. */
	if (w.nexthdr == ip6.nexthdr &&
	    parse_l4_direct(skb, l3_off + sizeof(ip6), ETH_HLEN + sizeof(struct ipv6hdr), w.nexthdr,
			    &f->sport, &f->dport, &f->tcp_flags, &f->l4))
		return 0;
	parse_l4(skb, w.off, w.nexthdr, true, &f->sport, &f->dport, &f->tcp_flags, &f->icmp_type, &f->l4);
	l4_generic(skb, f->l4_off, f->proto, &f->sport, &f->dport, &f->l4);
	return 0;
}

/*
 * tcp_fin_end - the ack number that acknowledges the TCP segment at @l4_off as a
 * FIN (its sequence number + its payload length + 1, host order). The payload
 * length comes from the IP header's length, never skb->len, which may hold
 * link-layer padding. Only a direction's first FIN reads it (nat/pair_tmpl.h
 * nat_touch). 0, or -1 when the headers cannot be read.
 */
static __always_inline int tcp_fin_end(struct __sk_buff *skb, __u32 l3_off, __u32 l4_off, bool v6, __u32 *fin_end)
{
	__u8 th[9];      /* seq, ack, data offset */
	__be16 iplen;
	__u32 l3_len, hdrs;

	if (bpf_skb_load_bytes(skb, l4_off + 4, th, sizeof(th)) ||
	    bpf_skb_load_bytes(skb, l3_off + (v6 ? 4 : 2), &iplen, sizeof(iplen)))
		return -1;
	l3_len = bpf_ntohs(iplen) + (v6 ? 40 : 0);
	hdrs = (l4_off - l3_off) + (th[8] >> 4) * 4;
	*fin_end = bpf_ntohl(*(__be32 *)&th[0]) + (l3_len > hdrs ? l3_len - hdrs : 0) + 1;
	return 0;
}

#endif /* MASQ_PARSE_H */
