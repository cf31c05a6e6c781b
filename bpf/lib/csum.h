/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Checksum arithmetic for the rewrites: where an L4 header keeps its port and
 * checksum (l4_offsets), RFC 1624 incremental updates folded by hand, IPv6
 * address differences. Reads the packet at most (load_csum); never writes it.
 */
#ifndef MASQ_CSUM_H
#define MASQ_CSUM_H

#include "common.h"

struct l4_offsets {
	__u32 port;         /* the port (or echo id) being rewritten */
	__u32 csum;
	__u64 flags;        /* extra bpf_l4_csum_replace flags */
};

static __always_inline void l4_offsets(__u8 proto, __u32 l4_off, bool src, struct l4_offsets *o)
{
	o->flags = 0;
	switch (proto) {
	case IPPROTO_TCP:
		o->port = l4_off + (src ? 0 : 2);
		o->csum = l4_off + offsetof(struct tcphdr, check);
		break;
	case IPPROTO_UDP:
		o->port = l4_off + (src ? 0 : 2);
		o->csum = l4_off + offsetof(struct udphdr, check);
		o->flags = BPF_F_MARK_MANGLED_0;
		break;
	default: /* ICMP / ICMPv6 echo: the id */
		o->port = l4_off + offsetof(struct icmphdr, un.echo.id);
		o->csum = l4_off + offsetof(struct icmphdr, checksum);
		break;
	}
}

/*
 * csum4_replace - an IPv4 header checksum after a 32-bit field changed from
 * @from to @to (RFC 1624, eqn. 3: HC' = ~(~HC + ~m + m')). Works on the raw
 * (network order) words: the one's complement sum does not care about byte order.
 * The IPv4 header checksum is never offloaded, so this is always the whole story.
 */
static __always_inline __sum16 csum4_replace(__sum16 check, __be32 from, __be32 to)
{
	__u32 s = (__u16)~check;

	s += (__u16)~(from & 0xffff) + (__u16)~(from >> 16);
	s += (to & 0xffff) + (to >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__sum16)~s;
}

/* The same for a 16-bit field. */
static __always_inline __sum16 csum2_replace(__sum16 check, __be16 from, __be16 to)
{
	__u32 s = (__u16)~check;

	s += (__u16)~from + (__u16)to;
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__sum16)~s;
}

/* Checksum difference between two IPv6 addresses, or < 0 on error. */
static __always_inline __s64 csum_diff6(const struct in6_addr *from, const struct in6_addr *to)
{
	struct in6_addr a = *from, b = *to;

	return bpf_csum_diff((__be32 *)&a, sizeof(a), (__be32 *)&b, sizeof(b), 0);
}

/*
 * csum_diff6_inline - what bpf_csum_diff(old, 16, new, 16, 0) returns, up to
 * one's-complement equivalence (all bpf_l4_csum_replace needs): the sum of
 * the new address's 32-bit words and the complements of the old one's,
 * without the helper call.
 */
static __always_inline __u32 csum_diff6_inline(const struct in6_addr *from, const struct in6_addr *to)
{
	__u64 s = 0;
	int i;

#pragma unroll
	for (i = 0; i < 4; i++)
		s += (__u32)~from->in6_u.u6_addr32[i] + (__u64)to->in6_u.u6_addr32[i];
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffffffff) + (s >> 32);
	return (__u32)s;
}

static __always_inline int load_csum(struct __sk_buff *skb, __u32 off, __be16 *v)
{
	return bpf_skb_load_bytes(skb, off, v, sizeof(*v));
}

#endif /* MASQ_CSUM_H */
