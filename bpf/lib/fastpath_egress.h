/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Fast path (fastPath: true), egress half, run by masq_veth_in after the source
 * check: a registered pod's IPv4 packet to a masqueraded destination is routed
 * with bpf_fib_lookup() (as the stack would route it from the pod's L3
 * interface, with the packet's length for the MTU), translated with the NAT
 * engine's own pair (snat_flow_entry / nat_touch / snat_sync_rev: the same pair the
 * uplink egress program would make, marked NAT_F_FAST), its TTL decremented,
 * and sent with bpf_redirect_neigh() to the uplink, skipping the host stack.
 *
 * Left to the stack (MASQ_PASS, counted CNT_FP_FALLBACK), which then masquerades
 * it at the uplink exactly as without the fast path:
 *   - fragments, IP options, TTL <= 1 (the stack sends time exceeded),
 *   - anything but TCP, UDP and ICMP echo requests (ICMP errors, echo replies...),
 *   - destinations in serviceCIDRs (svc4: netfilter must DNAT ClusterIPs),
 *   - natOutgoing false, an excluded destination, a masqueradeRules match,
 *   - a route that is not a unicast forward (local, blackhole, unreachable...)
 *     or that does not leave by an uplink in `uplinks`,
 *   - a packet bigger than the route's MTU (BPF_FIB_LKUP_RET_FRAG_NEEDED; for
 *     GSO packets the size of one segment counts, not skb->len): the stack
 *     fragments it or sends fragmentation needed,
 *   - a flow that began on the normal path (its pair lacks NAT_F_FAST): a flow
 *     stays on the path it started on, so netfilter state is never half-seen,
 *   - a pod whose L2 facts are unknown (its pod_info.l2), or no free NAT port
 *     (the normal path drops and counts it).
 * IPv6 the same, plus any extension header (the stack handles those); hop limit
 * instead of TTL. The path is written once (fastpath_tmpl.h, included here for
 * each family); this file holds what differs: the L3 header's facts, the route,
 * the hop count, the ClusterIP lookup, where the flow lives.
 * Missing neighbour (BPF_FIB_LKUP_RET_NO_NEIGH): not a fallback;
 * bpf_redirect_neigh() resolves the next hop through the neighbour subsystem
 * (the packet waits in the neighbour's queue, as the stack's own would), and
 * going through neigh_output keeps the entry's reachability confirmation alive.
 */
#ifndef MASQ_FASTPATH_EGRESS_H
#define MASQ_FASTPATH_EGRESS_H

#include "drop.h"
#include "fastpath.h"
#include "nat/nat.h"

struct fp_route {
	__u32 ifindex;     /* in: where the packet enters L3; out: egress device */
	__u16 tot_len;     /* in: L3 length to check against the route's MTU */
	__u8 tos;          /* in (IPv4; IPv6 routes on no traffic class) */
	__u8 pad;
	struct bpf_redir_neigh nh; /* out: next hop (the gateway, or the destination on a connected route) */
};

/* The L3 header's facts the fast path needs: one packet's length, its hop count. */
struct fp_l3 {
	__u32 len;         /* IPv4 tot_len, IPv6 payload_len + its 40-byte header */
	__u8 hop;          /* TTL, hop limit */
	__u8 tos;
	__u16 pad;
};

/* The pod's L2 facts when its packets may take the fast path (natOutgoing, facts known), else NULL. */
static __always_inline const struct pod_l2 *fp_pod_l2(const struct pod_info *pod)
{
	if (!(pod->flags & POD_F_NAT_OUTGOING) || !pod->l2.l3_ifindex)
		return NULL;
	return &pod->l2;
}

/*
 * bpf_fib_lookup() of @p without its neighbour lookup (bpf_redirect_neigh()
 * resolves the next hop itself). True: a forward, its neighbour known or not.
 */
static __always_inline bool fp_fib_forward(struct __sk_buff *skb, struct bpf_fib_lookup *p)
{
	long rc = bpf_fib_lookup(skb, p, sizeof(*p), BPF_FIB_LOOKUP_SKIP_NEIGH);

	if (rc < 0) /* a kernel before 6.3 refuses the flag (EINVAL) and touches nothing */
		rc = bpf_fib_lookup(skb, p, sizeof(*p), 0);
	return rc == BPF_FIB_LKUP_RET_NO_NEIGH || rc == BPF_FIB_LKUP_RET_SUCCESS;
}

/*
 * The L3 length one packet (one segment of a GSO packet) will have on the wire,
 * or 0: @l3_len is the packet's own (IPv4 tot_len, IPv6 payload_len + 40).
 */
static __always_inline __u32 fp_wire_len(struct __sk_buff *skb, __u32 l3_off, __u32 l4_off, __u8 proto,
					 __u32 l3_len)
{
	__u32 gso = skb->gso_size;
	__u32 l4_hl = 8;
	__u8 doff;

	if (!gso)
		return l3_len;
	if (proto == IPPROTO_TCP) {
		if (bpf_skb_load_bytes(skb, l4_off + 12, &doff, 1))
			return 0;
		l4_hl = (doff >> 4) * 4;
	} else if (proto != IPPROTO_UDP) {
		return 0;
	}
	return (l4_off - l3_off) + l4_hl + gso;
}

/* ---- IPv4 ---- */

/* The forwarding decision for @f entering at r->ifindex, MTU-checked against r->tot_len. */
static __noinline int fp_route_v4(struct __sk_buff *skb, const struct flow4 *f, struct fp_route *r)
{
	struct bpf_fib_lookup p = {};

	p.family = AF_INET;
	p.tos = r->tos;
	p.l4_protocol = f->proto;
	if (f->proto != IPPROTO_ICMP) {
		p.sport = f->sport;
		p.dport = f->dport;
	}
	p.tot_len = r->tot_len;
	p.ipv4_src = f->saddr;
	p.ipv4_dst = f->daddr;
	p.ifindex = r->ifindex;
	if (!fp_fib_forward(skb, &p))
		return -1;
	r->ifindex = p.ifindex;
	r->nh = (struct bpf_redir_neigh){ .nh_family = AF_INET, .ipv4_nh = p.ipv4_dst };
	return 0;
}

/* The header's facts; -1: left to the stack (IP options, TTL <= 1: it sends time exceeded). */
static __always_inline int fp_l3_v4(struct __sk_buff *skb, const struct flow4 *f, struct fp_l3 *l3)
{
	struct iphdr ip;

	if (load_hdr(skb, ETH_HLEN, &ip, sizeof(ip)) || ip.ihl != 5 || ip.ttl <= 1)
		return -1;
	l3->len = bpf_ntohs(ip.tot_len);
	l3->hop = ip.ttl;
	l3->tos = ip.tos;
	return 0;
}

/* Is the destination a ClusterIP (serviceCIDRs)? */
static __always_inline bool fp_is_service_v4(const struct flow4 *f)
{
	struct lpm4_key sk = { .prefixlen = 32, .addr = f->daddr };

	return bpf_map_lookup_elem(&svc4, &sk) != NULL;
}

#define FP_FN(x)          x##_v4
#define FP_CALL           __always_inline
#define FLOW_T            struct flow4
#define KEY_T             struct nat4_key
#define ENTRY_T           struct nat4_entry
#define DEC_T             struct masq_decision4
#define FP_FLOW(f)        struct flow4 f##_on_stack, *f = &f##_on_stack
#define FP_PARSE(skb, f)  parse_flow4(skb, ETH_HLEN, f)
#define FP_ECHO(f)        ((f)->proto == IPPROTO_ICMP && (f)->icmp_type == ICMP_ECHO)
#define FP_DECIDE(ifindex, up, f, d) masq_decide_v4(ifindex, up, (f)->saddr, (f)->daddr, d, false)
#define FP_REWRITE(skb, f, fwd) nat4_rewrite(skb, f, true, &(fwd)->addr, (fwd)->port)
#define FP_HOP_DEC(skb, l3, f) fp_ttl_dec4(skb, (l3)->hop, (f)->proto)
#define FP_CNT_PKTS       CNT_SNAT_PKTS_V4
#define FP_CNT_BYTES      CNT_SNAT_BYTES_V4
#include "fastpath_tmpl.h"

/* ---- IPv6 ---- */

/*
 * fp_egress_v6's flow lives in a per-CPU scratch map, not on its stack: the IPv6
 * chain down to snat_flow_entry_v6 and its port probe would not fit the 512-byte BPF
 * stack otherwise. Not pinned: each loaded object has its own.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct flow6);
} fp_flow6 SEC(".maps");

/* The IPv6 forwarding decision: as fp_route_v4 (the flow label is not routed on). */
static __noinline int fp_route_v6(struct __sk_buff *skb, const struct flow6 *f, struct fp_route *r)
{
	struct bpf_fib_lookup p = {};

	p.family = AF_INET6;
	p.l4_protocol = f->proto;
	if (f->proto != IPPROTO_ICMPV6) {
		p.sport = f->sport;
		p.dport = f->dport;
	}
	p.tot_len = r->tot_len;
	__builtin_memcpy(p.ipv6_src, &f->saddr, sizeof(p.ipv6_src));
	__builtin_memcpy(p.ipv6_dst, &f->daddr, sizeof(p.ipv6_dst));
	p.ifindex = r->ifindex;
	if (!fp_fib_forward(skb, &p))
		return -1;
	r->ifindex = p.ifindex;
	r->nh.nh_family = AF_INET6;
	__builtin_memcpy(r->nh.ipv6_nh, p.ipv6_dst, sizeof(r->nh.ipv6_nh));
	return 0;
}

/* The header's facts; -1: left to the stack (an extension header, hop limit <= 1). */
static __always_inline int fp_l3_v6(struct __sk_buff *skb, const struct flow6 *f, struct fp_l3 *l3)
{
	__be16 payload_len;
	__u8 hl;

	if (f->l4_off != ETH_HLEN + sizeof(struct ipv6hdr) ||
	    load_hdr(skb, ETH_HLEN + offsetof(struct ipv6hdr, hop_limit), &hl, 1) || hl <= 1 ||
	    load_hdr(skb, ETH_HLEN + offsetof(struct ipv6hdr, payload_len), &payload_len, 2))
		return -1;
	l3->len = bpf_ntohs(payload_len) + sizeof(struct ipv6hdr);
	l3->hop = hl;
	l3->tos = 0;
	return 0;
}

/* Is the destination a ClusterIP (serviceCIDRs)? A call of its own: see FP_CALL. */
static __noinline bool fp_is_service_v6(const struct flow6 *f)
{
	struct lpm6_key sk = { .prefixlen = 128 };

	__builtin_memcpy(sk.addr, &f->daddr, sizeof(sk.addr));
	return bpf_map_lookup_elem(&svc6, &sk) != NULL;
}

/*
 * The IPv6 pieces are calls of their own (FP_CALL): their keys (40 bytes each)
 * then live in frames that are gone before the deepest call (snat_flow_entry_v6)
 * is made, which keeps the chain inside the 512-byte BPF stack.
 */
#define FP_FN(x)          x##_v6
#define FP_CALL           __noinline
#define FLOW_T            struct flow6
#define KEY_T             struct nat6_key
#define ENTRY_T           struct nat6_entry
#define DEC_T             struct masq_decision6
#define FP_FLOW(f)        struct flow6 *f = bpf_map_lookup_elem(&fp_flow6, &nat_zero_key)
#define FP_PARSE(skb, f)  parse_flow6(skb, ETH_HLEN, f)
#define FP_ECHO(f)        ((f)->proto == IPPROTO_ICMPV6 && (f)->icmp_type == ICMPV6_ECHO_REQUEST)
#define FP_DECIDE(ifindex, up, f, d) masq_decide_v6(ifindex, up, &(f)->saddr, &(f)->daddr, d, false)
#define FP_REWRITE(skb, f, fwd) nat6_rewrite(skb, f, true, &(fwd)->addr, (fwd)->port)
#define FP_HOP_DEC(skb, l3, f) fp_hop_dec6(skb, (l3)->hop)
#define FP_CNT_PKTS       CNT_SNAT_PKTS_V6
#define FP_CNT_BYTES      CNT_SNAT_BYTES_V6
#include "fastpath_tmpl.h"

#endif /* MASQ_FASTPATH_EGRESS_H */
