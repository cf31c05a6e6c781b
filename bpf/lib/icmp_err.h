/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ICMP error rewrites, per family: the outer header and the packet it quotes
 * (inner.h parses it). Fields inside the quoted packet are plain payload: every
 * change there is folded into the outer ICMP checksum as well. Writes the
 * packet, touches no map.
 */
#ifndef MASQ_ICMP_ERR_H
#define MASQ_ICMP_ERR_H

#include "inner.h"
#include "rewrite.h"

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

	if (!l4_has_ports(proto))
		return 0; /* GRE, ESP...: no port, and nothing of theirs covers the addresses */
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

#endif /* MASQ_ICMP_ERR_H */
