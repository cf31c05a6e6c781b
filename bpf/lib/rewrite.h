/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Packet rewrites with incremental checksum updates, per family.
 *
 * bpf_l4_csum_replace() with BPF_F_PSEUDO_HDR keeps CHECKSUM_PARTIAL (GSO,
 * offloaded) packets right: only the pseudo-header seed changes for those, the
 * device or the stack folds in the rest. UDP with a zero checksum stays zero
 * (BPF_F_MARK_MANGLED_0). ICMPv4 has no pseudo-header; ICMPv6 has one.
 * Fields inside an ICMP error's quoted packet are plain payload: every change
 * there is folded into the outer ICMP checksum as well.
 */
#ifndef MASQ_REWRITE_H
#define MASQ_REWRITE_H

#include "inner.h"

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

/*
 * rewrite_window - where the rewrite can write straight into the packet, after
 * the checksum helpers (which may have moved it, and made it writable up to the
 * L4 checksum): the IP header at @l3_off (@hdr_len bytes, a constant) and the
 * 16-bit port at @port_off, both in the linear part. NULL when they are not
 * (rare): the caller writes through helpers.
 */
static __always_inline void *rewrite_window(struct __sk_buff *skb, __u32 l3_off, __u32 hdr_len, __u32 port_off,
					    __be16 **port)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	void *ip, *p;

	if (l3_off > ETH_HLEN || port_off > LOAD_HDR_DIRECT_MAX)
		return NULL;
	/* The masks bound the very registers the verifier sees (see load_hdr); the
	 * empty asm keeps the compiler from dropping them as redundant after the test. */
	asm volatile("" : "+r"(port_off), "+r"(l3_off));
	p = data + (port_off & LOAD_HDR_DIRECT_MAX);
	ip = data + (l3_off & 0xf);
	if (ip + hdr_len > data_end || p + sizeof(__be16) > data_end)
		return NULL;
	*port = p;
	return ip;
}

/*
 * nat4_rewrite - replace the source (@src) or destination address and port.
 * The L4 checksum goes through bpf_l4_csum_replace (it alone knows whether the
 * skb is CHECKSUM_PARTIAL or COMPLETE); the IPv4 header checksum is folded here,
 * and the new header fields are written straight into the packet, which the
 * checksum helpers have just made writable up to the L4 checksum. Inlined
 * into its callers: the BPF-to-BPF call and return cost ~4 ns a packet.
 */
static __always_inline int nat4_rewrite(struct __sk_buff *skb, const struct flow4 *f, bool src,
				   const __be32 *new_addr_p, __be16 new_port)
{
	__be32 new_addr = *new_addr_p;
	__be32 old_addr = src ? f->saddr : f->daddr;
	__be16 old_port = src ? f->sport : f->dport;
	__sum16 check = csum4_replace(f->ip_check, old_addr, new_addr);
	__u32 l3_off = f->l3_off;
	struct l4_offsets o;
	struct iphdr *ip;
	__be16 *port;

	l4_offsets(f->proto, f->l4_off, src, &o);
	if (f->proto != IPPROTO_ICMP &&
	    bpf_l4_csum_replace(skb, o.csum, old_addr, new_addr, BPF_F_PSEUDO_HDR | o.flags | sizeof(new_addr)))
		return -1;
	if (old_port != new_port &&
	    bpf_l4_csum_replace(skb, o.csum, old_port, new_port, o.flags | sizeof(new_port)))
		return -1;

	ip = rewrite_window(skb, l3_off, sizeof(*ip), o.port, &port);
	if (ip) {
		ip->check = check;
		if (src)
			ip->saddr = new_addr;
		else
			ip->daddr = new_addr;
		if (old_port != new_port)
			*port = new_port;
		return 0;
	}
	/* Headers not in the linear part (rare): the same writes through helpers. */
	if (old_port != new_port && bpf_skb_store_bytes(skb, o.port, &new_port, sizeof(new_port), 0))
		return -1;
	if (bpf_skb_store_bytes(skb, l3_off + offsetof(struct iphdr, check), &check, sizeof(check), 0))
		return -1;
	return bpf_skb_store_bytes(skb, l3_off + (src ? offsetof(struct iphdr, saddr) : offsetof(struct iphdr, daddr)),
				   &new_addr, sizeof(new_addr), 0);
}

/* Address only: a later fragment carries no L4 header (the first one's checksum covers it). */
static __always_inline int nat4_rewrite_addr(struct __sk_buff *skb, const struct flow4 *f, bool src,
					     const __be32 *new_addr_p)
{
	__be32 new_addr = *new_addr_p;
	__be32 old_addr = src ? f->saddr : f->daddr;
	__u32 addr_off = f->l3_off + (src ? offsetof(struct iphdr, saddr) : offsetof(struct iphdr, daddr));

	if (bpf_l3_csum_replace(skb, f->l3_off + offsetof(struct iphdr, check), old_addr, new_addr,
				sizeof(new_addr)))
		return -1;
	return bpf_skb_store_bytes(skb, addr_off, &new_addr, sizeof(new_addr), 0);
}

/* Checksum difference between two IPv6 addresses, or < 0 on error. */
static __always_inline __s64 csum_diff6(const struct in6_addr *from, const struct in6_addr *to)
{
	struct in6_addr a = *from, b = *to;

	return bpf_csum_diff((__be32 *)&a, sizeof(a), (__be32 *)&b, sizeof(b), 0);
}

static __always_inline int nat6_rewrite_addr(struct __sk_buff *skb, const struct flow6 *f, bool src,
					     const struct in6_addr *new_addr)
{
	__u32 addr_off = f->l3_off + (src ? offsetof(struct ipv6hdr, saddr) : offsetof(struct ipv6hdr, daddr));
	struct in6_addr a = *new_addr;

	return bpf_skb_store_bytes(skb, addr_off, &a, sizeof(a), 0);
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

/*
 * nat6_rewrite - the IPv6 counterpart of nat4_rewrite: the L4 checksum through
 * bpf_l4_csum_replace (pseudo-header address change, then the port), the new
 * address and port written straight into the packet, which the checksum
 * helpers have just made writable; helpers only when the headers are not in
 * the linear part.
 */
static __noinline int nat6_rewrite(struct __sk_buff *skb, const struct flow6 *f, bool src,
				   const struct in6_addr *new_addr, __be16 new_port)
{
	const struct in6_addr *old_addr = src ? &f->saddr : &f->daddr;
	__be16 old_port = src ? f->sport : f->dport;
	struct l4_offsets o;
	struct ipv6hdr *ip6;
	__be16 *port;

	l4_offsets(f->proto, f->l4_off, src, &o);
	/* Every IPv6 L4 checksum, ICMPv6's included, covers the pseudo-header. */
	if (bpf_l4_csum_replace(skb, o.csum, 0, csum_diff6_inline(old_addr, new_addr), BPF_F_PSEUDO_HDR | o.flags))
		return -1;
	if (old_port != new_port &&
	    bpf_l4_csum_replace(skb, o.csum, old_port, new_port, o.flags | sizeof(new_port)))
		return -1;

	ip6 = rewrite_window(skb, f->l3_off, sizeof(*ip6), o.port, &port);
	if (ip6) {
		if (src)
			ip6->saddr = *new_addr;
		else
			ip6->daddr = *new_addr;
		if (old_port != new_port)
			*port = new_port;
		return 0;
	}
	if (old_port != new_port && bpf_skb_store_bytes(skb, o.port, &new_port, sizeof(new_port), 0))
		return -1;
	return nat6_rewrite_addr(skb, f, src, new_addr);
}

static __always_inline int load_csum(struct __sk_buff *skb, __u32 off, __be16 *v)
{
	return bpf_skb_load_bytes(skb, off, v, sizeof(*v));
}

/*
 * Quoted L4 port (or echo id): store it, fix the quoted L4 checksum for the
 * port (and, via @addr_diff, for the quoted pseudo-header) and fold both
 * changes into the outer ICMP checksum at @outer_csum.
 */
static __always_inline int inner_port_rewrite(struct __sk_buff *skb, __u8 proto, __u32 l4_off, bool src,
					      bool csum_ok, __be16 old_port, __be16 new_port,
					      __s64 addr_diff, bool addr_in_pseudo, __u32 outer_csum)
{
	struct l4_offsets o;
	__be16 c_old, c_new;

	l4_offsets(proto, l4_off, src, &o);
	if (csum_ok) {
		if (load_csum(skb, o.csum, &c_old))
			return -1;
		/* A zero UDP checksum means "none": leave it so. */
		if (!(proto == IPPROTO_UDP && c_old == 0)) {
			if (addr_in_pseudo && bpf_l4_csum_replace(skb, o.csum, 0, addr_diff, 0))
				return -1;
			if (bpf_l4_csum_replace(skb, o.csum, old_port, new_port, sizeof(new_port)))
				return -1;
			if (load_csum(skb, o.csum, &c_new))
				return -1;
			if (bpf_l4_csum_replace(skb, outer_csum, c_old, c_new, sizeof(c_new)))
				return -1;
		}
	}
	if (bpf_skb_store_bytes(skb, o.port, &new_port, sizeof(new_port), 0))
		return -1;
	return bpf_l4_csum_replace(skb, outer_csum, old_port, new_port, sizeof(new_port));
}

/*
 * icmp4_err_rewrite - translate an ICMP error and the packet it quotes.
 * Towards the pod (@egress false): outer destination, quoted source and source
 * port become the pod's. Outward (@egress true): quoted destination and
 * destination port become the node's, and the outer source too when @outer
 * (the pod sent the error; the node's own errors keep their source).
 */
static __always_inline int icmp4_err_rewrite(struct __sk_buff *skb, const struct flow4 *f,
					     const struct inner4 *in, bool egress, bool outer,
					     const __be32 *new_addr_p, __be16 new_port)
{
	__be32 new_addr = *new_addr_p;
	__u32 icmp_csum = f->l4_off + offsetof(struct icmphdr, checksum);
	__u32 in_csum = in->l3_off + offsetof(struct iphdr, check);
	__be32 in_old = egress ? in->daddr : in->saddr;
	__u32 in_addr_off = in->l3_off + (egress ? offsetof(struct iphdr, daddr) : offsetof(struct iphdr, saddr));
	__be16 ic_old, ic_new;
	__s64 diff;

	/* The outer header: only the IPv4 header checksum covers it. */
	if (outer && nat4_rewrite_addr(skb, f, egress, &new_addr))
		return -1;

	/* The quoted IPv4 header: its own checksum, then both changes into ICMP's. */
	if (load_csum(skb, in_csum, &ic_old) ||
	    bpf_l3_csum_replace(skb, in_csum, in_old, new_addr, sizeof(new_addr)) ||
	    load_csum(skb, in_csum, &ic_new) ||
	    bpf_skb_store_bytes(skb, in_addr_off, &new_addr, sizeof(new_addr), 0) ||
	    bpf_l4_csum_replace(skb, icmp_csum, in_old, new_addr, sizeof(new_addr)) ||
	    bpf_l4_csum_replace(skb, icmp_csum, ic_old, ic_new, sizeof(ic_new)))
		return -1;

	diff = bpf_csum_diff(&in_old, sizeof(in_old), &new_addr, sizeof(new_addr), 0);
	if (diff < 0)
		return -1;
	return inner_port_rewrite(skb, in->proto, in->l4_off, !egress, in->l4_csum_ok,
				  in->echo ? (in->sport | in->dport) : (egress ? in->dport : in->sport),
				  new_port, diff, !in->echo, icmp_csum);
}

static __always_inline int icmp6_err_rewrite(struct __sk_buff *skb, const struct flow6 *f,
					     const struct inner6 *in, bool egress, bool outer,
					     const struct in6_addr *new_addr_p, __be16 new_port)
{
	struct in6_addr new_addr = *new_addr_p;
	__u32 icmp_csum = f->l4_off + 2;
	const struct in6_addr *outer_old = egress ? &f->saddr : &f->daddr;
	const struct in6_addr *in_old = egress ? &in->daddr : &in->saddr;
	__u32 in_addr_off = in->l3_off + (egress ? offsetof(struct ipv6hdr, daddr) : offsetof(struct ipv6hdr, saddr));
	__s64 diff;

	/* Outer address: in ICMPv6's pseudo-header. */
	if (outer) {
		diff = csum_diff6(outer_old, &new_addr);
		if (diff < 0 || bpf_l4_csum_replace(skb, icmp_csum, 0, diff, BPF_F_PSEUDO_HDR) ||
		    nat6_rewrite_addr(skb, f, egress, &new_addr))
			return -1;
	}

	/* Quoted address: payload of the ICMPv6 message. */
	diff = csum_diff6(in_old, &new_addr);
	if (diff < 0 || bpf_skb_store_bytes(skb, in_addr_off, &new_addr, sizeof(new_addr), 0) ||
	    bpf_l4_csum_replace(skb, icmp_csum, 0, diff, 0))
		return -1;

	/* Quoted L4: every IPv6 L4 checksum (echo included) covers the quoted addresses. */
	return inner_port_rewrite(skb, in->proto, in->l4_off, !egress, in->l4_csum_ok,
				  in->echo ? (in->sport | in->dport) : (egress ? in->dport : in->sport),
				  new_port, diff, true, icmp_csum);
}

#endif /* MASQ_REWRITE_H */
