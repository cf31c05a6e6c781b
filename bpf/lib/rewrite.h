/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NAT rewrites of a packet's own header, per family: address and port (or echo
 * id), with incremental checksum updates. Writes the packet, touches no map.
 * ICMP errors' quoted packets are rewritten in icmp_err.h.
 *
 * bpf_l4_csum_replace() with BPF_F_PSEUDO_HDR keeps CHECKSUM_PARTIAL (GSO,
 * offloaded) packets right: only the pseudo-header seed changes for those, the
 * device or the stack folds in the rest. UDP with a zero checksum stays zero
 * (BPF_F_MARK_MANGLED_0). ICMPv4 has no pseudo-header; ICMPv6 has one.
 */
#ifndef MASQ_REWRITE_H
#define MASQ_REWRITE_H

#include "parse.h"
#include "csum.h"

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
 * Address only: a later fragment carries no L4 header (the first one's checksum
 * covers it), and a protocol without ports (l4_by_address) has no checksum over
 * the addresses: GRE's and ESP's cover their own header and payload alone.
 */
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

static __always_inline int nat6_rewrite_addr(struct __sk_buff *skb, const struct flow6 *f, bool src,
					     const struct in6_addr *new_addr)
{
	__u32 addr_off = f->l3_off + (src ? offsetof(struct ipv6hdr, saddr) : offsetof(struct ipv6hdr, daddr));
	struct in6_addr a = *new_addr;

	return bpf_skb_store_bytes(skb, addr_off, &a, sizeof(a), 0);
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

	if (!l4_has_ports(f->proto))
		return nat4_rewrite_addr(skb, f, src, new_addr_p);
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

	if (!l4_has_ports(f->proto))
		return nat6_rewrite_addr(skb, f, src, new_addr);
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

#endif /* MASQ_REWRITE_H */
