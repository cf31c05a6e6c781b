/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The packet quoted inside an ICMP(v6) error (RFC 5508): its tuple, read with
 * the same conventions as the outer flow, so it maps onto our NAT keys.
 */
#ifndef MASQ_INNER_H
#define MASQ_INNER_H

#include "parse.h"
#include "maps.h"

#define INNER_COMMON_FIELDS                                                 \
	__u32 l3_off;                                                       \
	__u32 l4_off;                                                       \
	__be16 sport;       /* echo request: the id */                      \
	__be16 dport;       /* echo reply: the id */                        \
	__u8 proto;                                                         \
	__u8 echo;          /* the quoted packet is an ICMP echo */         \
	__u8 l4_csum_ok;    /* its L4 checksum field is inside the packet */\
	__u8 pad;

struct inner4 {
	INNER_COMMON_FIELDS
	__be32 saddr;
	__be32 daddr;
};

struct inner6 {
	INNER_COMMON_FIELDS
	struct in6_addr saddr;
	struct in6_addr daddr;
};

/* Offset of the quoted L4 checksum field, for the protocols we translate. */
static __always_inline __u32 inner_l4_csum_off(__u8 proto)
{
	switch (proto) {
	case IPPROTO_TCP:
		return offsetof(struct tcphdr, check);
	case IPPROTO_UDP:
		return offsetof(struct udphdr, check);
	default: /* ICMP / ICMPv6 echo */
		return 2;
	}
}

static __always_inline int parse_inner_l4(struct __sk_buff *skb, __u8 proto, bool v6, __u32 l4_off,
					  __be16 *sport, __be16 *dport, __u8 *echo, __u8 *csum_ok)
{
	__u8 tcp_flags, icmp_type, l4;

	parse_l4(skb, l4_off, proto, v6, sport, dport, &tcp_flags, &icmp_type, &l4);
	/* An error quotes at least 8 bytes of L4: TCP's checksum may be cut off. */
	if (l4 == L4_TRUNCATED && proto == IPPROTO_TCP) {
		__u8 p[4];

		if (bpf_skb_load_bytes(skb, l4_off, p, 4))
			return -1;
		*sport = *(__be16 *)&p[0];
		*dport = *(__be16 *)&p[2];
		l4 = L4_OK;
	}
	if (l4 != L4_OK)
		return -1; /* an error about an error, a fragment, or an unknown protocol */
	*echo = proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6;
	*csum_ok = skb->len >= l4_off + inner_l4_csum_off(proto) + 2;
	return 0;
}

/*
 * inner_by_address - @ret, parse_inner_l4's answer, for a quoted packet of a
 * protocol translated by address alone (GRE, ESP...): parsed, ports 0 (parse_l4
 * left them so), or SCTP's own.
 */
static __always_inline int inner_by_address(struct __sk_buff *skb, int ret, __u8 proto,
					    __u32 l4_off, __be16 *sport, __be16 *dport, __u8 *echo, __u8 *csum_ok)
{
	if (!ret || !l4_by_address(proto))
		return ret;
	/* An error quotes at least 8 bytes of L4: SCTP's ports are there, its checksum not always. */
	if (proto == IPPROTO_SCTP) {
		__be16 ports[2];

		if (bpf_skb_load_bytes(skb, l4_off, ports, sizeof(ports)))
			return -1;
		*sport = ports[0];
		*dport = ports[1];
	}
	*echo = 0;
	*csum_ok = 0;
	return 0;
}

/*
 * parse_inner4 - the IPv4 packet quoted by the ICMP error of @f. A quoted packet
 * of a protocol translated by address alone (GRE, ESP...) is parsed too
 * (inner_by_address).
 */
static __always_inline int parse_inner4(struct __sk_buff *skb, const struct flow4 *f, struct inner4 *in)
{
	struct iphdr ip;

	in->l3_off = f->l4_off + 8;
	if (bpf_skb_load_bytes(skb, in->l3_off, &ip, sizeof(ip)))
		return -1;
	if (ip.version != 4 || ip.ihl < 5 || (bpf_ntohs(ip.frag_off) & IP_OFFSET))
		return -1;
	in->l4_off = in->l3_off + ip.ihl * 4;
	in->saddr = ip.saddr;
	in->daddr = ip.daddr;
	in->proto = ip.protocol;
	return inner_by_address(skb, parse_inner_l4(skb, ip.protocol, false, in->l4_off, &in->sport, &in->dport,
						    &in->echo, &in->l4_csum_ok),
				ip.protocol, in->l4_off, &in->sport, &in->dport, &in->echo, &in->l4_csum_ok);
}

/*
 * parse_inner6 - the IPv6 packet quoted by the ICMPv6 error of @f, extension
 * headers included: a packet too big about a fragmented datagram quotes its
 * first fragment, Fragment header and all. A quoted later fragment carries no
 * ports and is not translated.
 */
static __always_inline int parse_inner6(struct __sk_buff *skb, const struct flow6 *f, struct inner6 *in)
{
	struct ipv6hdr ip6;
	struct ipv6_walk w = {};

	in->l3_off = f->l4_off + 8;
	if (bpf_skb_load_bytes(skb, in->l3_off, &ip6, sizeof(ip6)))
		return -1;
	if (ip6.version != 6)
		return -1;
	w.off = in->l3_off + sizeof(ip6);
	w.nexthdr = ip6.nexthdr;
	ipv6_walk_exthdrs(skb, &w);
	if (w.truncated || w.frag == FRAG_LATER || ipv6_is_exthdr(w.nexthdr))
		return -1;
	in->l4_off = w.off;
	in->saddr = ip6.saddr;
	in->daddr = ip6.daddr;
	in->proto = w.nexthdr;
	return inner_by_address(skb, parse_inner_l4(skb, w.nexthdr, true, in->l4_off, &in->sport, &in->dport,
						    &in->echo, &in->l4_csum_ok),
				w.nexthdr, in->l4_off, &in->sport, &in->dport, &in->echo, &in->l4_csum_ok);
}

/*
 * Does the ICMP error of @f quote a packet addressed to a registered pod? Such a
 * quote that we cannot translate (a later fragment: no ports) must not leave the
 * node, or it would show the remote the pod's address.
 */
static __always_inline bool inner4_quotes_pod(struct __sk_buff *skb, const struct flow4 *f)
{
	__be32 daddr;

	if (bpf_skb_load_bytes(skb, f->l4_off + 8 + offsetof(struct iphdr, daddr), &daddr, sizeof(daddr)))
		return false;
	return bpf_map_lookup_elem(&pods4, &daddr) != NULL;
}

static __always_inline bool inner6_quotes_pod(struct __sk_buff *skb, const struct flow6 *f)
{
	struct in6_addr daddr;

	if (bpf_skb_load_bytes(skb, f->l4_off + 8 + offsetof(struct ipv6hdr, daddr), &daddr, sizeof(daddr)))
		return false;
	return bpf_map_lookup_elem(&pods6, &daddr) != NULL;
}

#endif /* MASQ_INNER_H */
