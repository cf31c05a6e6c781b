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
 * Missing neighbour (BPF_FIB_LKUP_RET_NO_NEIGH): not a fallback;
 * bpf_redirect_neigh() resolves the next hop through the neighbour subsystem
 * (the packet waits in the neighbour's queue, as the stack's own would), and
 * going through neigh_output keeps the entry's reachability confirmation alive.
 */
#ifndef MASQ_FASTPATH_EGRESS_H
#define MASQ_FASTPATH_EGRESS_H

#include "drop.h"
#include "nat/nat.h"

struct fp_route {
	__u32 ifindex;     /* in: where the packet enters L3; out: egress device */
	__be32 nh;         /* out: next hop (the gateway, or the destination on a connected route) */
	__u16 tot_len;     /* in: L3 length to check against the route's MTU */
	__u8 tos;          /* in */
	__u8 pad;
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
	r->nh = p.ipv4_dst;
	return 0;
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

/* The IPv6 forwarding decision: as fp_route_v4 (the flow label is not routed on). */
static __noinline int fp_route_v6(struct __sk_buff *skb, const struct flow6 *f, struct fp_route *r,
				  struct in6_addr *nh)
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
	__builtin_memcpy(nh, p.ipv6_dst, sizeof(*nh));
	return 0;
}

/*
 * fp_egress_v4 - the packet from the pod behind skb->ifindex (source already
 * checked; @pod the pod's facts: its veths or pods4 entry), fastPath on (@cfg).
 * TC_ACT_REDIRECT when sent, MASQ_PASS when left to the stack, a drop when a
 * rewrite half-failed, a new flow found no port or room, or the flow's pair is
 * changing hands this instant (snat_refresh's NAT_SYNC_BUSY).
 */
static __noinline int fp_egress_v4(struct __sk_buff *skb, const struct node_config *cfg,
				const struct pod_info *pod)
{
	struct nat4_entry *fwd;
	struct uplink_info *up;
	const struct pod_l2 *l2;
	struct fp_route r;
	struct iphdr ip;
	struct flow4 f;
	__u32 wire_len, reason;
	__u64 now;

	l2 = fp_pod_l2(pod);
	if (!l2)
		goto fallback;
	if (parse_flow4(skb, ETH_HLEN, &f) || f.l4 != L4_OK || f.frag != FRAG_NONE)
		goto fallback;
	if (f.proto == IPPROTO_ICMP ? f.icmp_type != ICMP_ECHO : (f.proto != IPPROTO_TCP && f.proto != IPPROTO_UDP))
		goto fallback;
	if (load_hdr(skb, ETH_HLEN, &ip, sizeof(ip)) || ip.ihl != 5 || ip.ttl <= 1)
		goto fallback;
	{
		struct nat4_key fk = {
			.saddr = f.saddr, .daddr = f.daddr,
			.sport = f.sport, .dport = f.dport, .proto = f.proto,
		};

		fwd = fwd_get_inline_v4(&fk);
		if (fwd && !(fwd->flags & NAT_F_FAST))
			goto fallback; /* began on the normal path: stays there */
	}
	if (!fwd) {
		/* A new flow: never to a ClusterIP (an established fast flow was checked
		 * when it began, so its packets skip the LPM lookup). */
		struct lpm4_key sk = { .prefixlen = 32, .addr = f.daddr };

		if (bpf_map_lookup_elem(&svc4, &sk))
			goto fallback;
	}
	wire_len = fp_wire_len(skb, f.l3_off, f.l4_off, f.proto, bpf_ntohs(ip.tot_len));
	if (!wire_len || wire_len > 0xffff)
		goto fallback;
	r.ifindex = l2->l3_ifindex;
	r.tot_len = wire_len;
	r.tos = ip.tos;
	if (fp_route_v4(skb, &f, &r))
		goto fallback;
	up = uplink_get(r.ifindex);
	if (!up)
		goto fallback;

	now = bpf_ktime_get_coarse_ns();
	if (fwd) {
		int sync = snat_refresh_v4(skb, &f, fwd, now);

		if (sync == NAT_SYNC_BUSY)
			return drop_with(skb, DROP_NAT_INSERT); /* its pair is changing hands this instant */
		if (sync != NAT_SYNC_OK) {
			/* Our pair is going, or its reply slot was taken over: start afresh. */
			struct nat4_key fk = {
				.saddr = f.saddr, .daddr = f.daddr,
				.sport = f.sport, .dport = f.dport, .proto = f.proto,
			};

			fwd_del_v4(&fk);
			fwd = NULL;
		}
	}
	if (!fwd) {
		struct masq_decision4 d = {};

		masq_decide_v4(r.ifindex, up, f.saddr, f.daddr, &d, false);
		if (d.verdict != VERDICT_POD)
			goto fallback;
		d.ifindex = r.ifindex;
		d.nat_flags = NAT_F_FAST;
		fwd = snat_flow_entry_v4(skb, &f, &d, now, &reason);
		if (!fwd) {
			/* No port, or no room: the normal path would search again and
			 * find the same (one search a new flow). Anything else: it decides. */
			if (reason == DROP_NO_PORT || reason == DROP_NAT_FULL || reason == DROP_OVER_SHARE ||
			    reason == DROP_OVER_LIMIT)
				return drop_with(skb, reason);
			goto fallback;
		}
		if (nat_touch_v4(skb, fwd, &f, now))
			snat_sync_rev_v4(skb, &f, fwd, now);
	}
	if (nat4_rewrite(skb, &f, true, &fwd->addr, fwd->port) || fp_ttl_dec4(skb, ip.ttl, f.proto))
		return drop_with(skb, DROP_CSUM);
	count_add(CNT_SNAT_PKTS_V4, 1);
	count_add(CNT_SNAT_BYTES_V4, f.len);
	count_add(CNT_FP_EGRESS, 1);
	if (fwd->policy)
		policy_account(fwd->policy, f.len);
	{
		struct bpf_redir_neigh nh = { .nh_family = AF_INET, .ipv4_nh = r.nh };

		skb->cb[0] = FP_CB_MARK;
		return bpf_redirect_neigh(r.ifindex, &nh, sizeof(nh), 0);
	}

fallback:
	count_add(CNT_FP_FALLBACK, 1);
	return MASQ_PASS;
}

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

/*
 * The IPv6 pieces below are calls of their own: their keys (40 bytes each) then
 * live in frames that are gone before the deepest call (snat_flow_entry_v6) is made,
 * which keeps the chain inside the 512-byte BPF stack.
 */
static __always_inline void fp_key_v6(const struct flow6 *f, struct nat6_key *k)
{
	k->saddr = f->saddr;
	k->daddr = f->daddr;
	k->sport = f->sport;
	k->dport = f->dport;
	k->proto = f->proto;
}

/* The flow's pair (its forward half), or NULL. */
static __noinline struct nat6_entry *fp_lookup_v6(const struct flow6 *f)
{
	struct nat6_key fk = {};

	fp_key_v6(f, &fk);
	return fwd_get_inline_v6(&fk);
}

/* Drop the flow's forward half (its pair is going, or its reply slot was taken over). */
static __noinline void fp_forget_v6(const struct flow6 *f)
{
	struct nat6_key fk = {};

	fp_key_v6(f, &fk);
	fwd_del_v6(&fk);
}

/* Is the destination a ClusterIP (serviceCIDRs)? */
static __noinline bool fp_is_service_v6(const struct flow6 *f)
{
	struct lpm6_key sk = { .prefixlen = 128 };

	__builtin_memcpy(sk.addr, &f->daddr, sizeof(sk.addr));
	return bpf_map_lookup_elem(&svc6, &sk) != NULL;
}

/* The verdict, asked quietly (when the fast path falls back, the uplink decides and counts). */
static __noinline void fp_decide_v6(__u32 ifindex, const struct uplink_info *up, const struct flow6 *f,
				    struct masq_decision6 *d)
{
	masq_decide_v6(ifindex, up, &f->saddr, &f->daddr, d, false);
}

/*
 * A new IPv6 fast flow: the pod verdict and the pair, or NULL with *@reason 0
 * (the normal path decides) or the drop reason when no port or no room was
 * found (the normal path would search again and find the same).
 */
static __noinline struct nat6_entry *fp_new_flow_v6(struct __sk_buff *skb, const struct flow6 *f,
						    const struct uplink_info *up, __u32 ifindex, __u32 *reason)
{
	struct masq_decision6 d = {};
	struct nat6_entry *fwd;
	__u64 now = bpf_ktime_get_coarse_ns();

	if (!reason)
		return NULL;
	*reason = 0;
	fp_decide_v6(ifindex, up, f, &d);
	if (d.verdict != VERDICT_POD)
		return NULL;
	d.ifindex = ifindex;
	d.nat_flags = NAT_F_FAST;
	fwd = snat_flow_entry_v6(skb, f, &d, now, reason);
	if (!fwd) {
		if (*reason != DROP_NO_PORT && *reason != DROP_NAT_FULL && *reason != DROP_OVER_SHARE &&
		    *reason != DROP_OVER_LIMIT)
			*reason = 0;
	} else if (nat_touch_v6(skb, fwd, f, now)) {
		snat_sync_rev_v6(skb, f, fwd, now);
	}
	return fwd;
}

/*
 * fp_egress_v6 - the IPv6 twin of fp_egress_v4: the same fallbacks, plus any
 * extension header (the stack handles those); hop limit instead of TTL.
 */
static __noinline int fp_egress_v6(struct __sk_buff *skb, const struct node_config *cfg,
				const struct pod_info *pod)
{
	struct nat6_entry *fwd;
	struct uplink_info *up;
	const struct pod_l2 *l2;
	struct fp_route r = {};
	struct in6_addr nh;
	struct flow6 *f;
	__u32 wire_len;
	__be16 payload_len;
	__u64 now;
	__u8 hl;

	l2 = fp_pod_l2(pod);
	f = bpf_map_lookup_elem(&fp_flow6, &nat_zero_key);
	if (!l2 || !f)
		goto fallback;
	if (parse_flow6(skb, ETH_HLEN, f) || f->l4 != L4_OK || f->frag != FRAG_NONE ||
	    f->l4_off != ETH_HLEN + sizeof(struct ipv6hdr))
		goto fallback;
	if (f->proto == IPPROTO_ICMPV6 ? f->icmp_type != ICMPV6_ECHO_REQUEST
				      : (f->proto != IPPROTO_TCP && f->proto != IPPROTO_UDP))
		goto fallback;
	if (load_hdr(skb, ETH_HLEN + offsetof(struct ipv6hdr, hop_limit), &hl, 1) || hl <= 1 ||
	    load_hdr(skb, ETH_HLEN + offsetof(struct ipv6hdr, payload_len), &payload_len, 2))
		goto fallback;
	fwd = fp_lookup_v6(f);
	if (fwd && !(fwd->flags & NAT_F_FAST))
		goto fallback; /* began on the normal path: stays there */
	if (!fwd && fp_is_service_v6(f))
		goto fallback; /* a new flow to a ClusterIP */
	wire_len = fp_wire_len(skb, f->l3_off, f->l4_off, f->proto, bpf_ntohs(payload_len) + sizeof(struct ipv6hdr));
	if (!wire_len || wire_len > 0xffff)
		goto fallback;
	r.ifindex = l2->l3_ifindex;
	r.tot_len = wire_len;
	if (fp_route_v6(skb, f, &r, &nh))
		goto fallback;
	up = uplink_get(r.ifindex);
	if (!up)
		goto fallback;

	now = bpf_ktime_get_coarse_ns();
	if (fwd) {
		int sync = snat_refresh_v6(skb, f, fwd, now);

		if (sync == NAT_SYNC_BUSY)
			return drop_with(skb, DROP_NAT_INSERT); /* its pair is changing hands this instant */
		if (sync != NAT_SYNC_OK) {
			fp_forget_v6(f);
			fwd = NULL;
		}
	}
	if (!fwd) {
		__u32 reason;

		fwd = fp_new_flow_v6(skb, f, up, r.ifindex, &reason);
		if (!fwd) {
			if (reason)
				return drop_with(skb, reason);
			goto fallback;
		}
	}
	if (nat6_rewrite(skb, f, true, &fwd->addr, fwd->port) || fp_hop_dec6(skb, hl))
		return drop_with(skb, DROP_CSUM);
	count_add(CNT_SNAT_PKTS_V6, 1);
	count_add(CNT_SNAT_BYTES_V6, f->len);
	count_add(CNT_FP_EGRESS, 1);
	if (fwd->policy)
		policy_account(fwd->policy, f->len);
	{
		struct bpf_redir_neigh n = { .nh_family = AF_INET6 };

		__builtin_memcpy(n.ipv6_nh, &nh, sizeof(n.ipv6_nh));
		skb->cb[0] = FP_CB_MARK;
		return bpf_redirect_neigh(r.ifindex, &n, sizeof(n), 0);
	}

fallback:
	count_add(CNT_FP_FALLBACK, 1);
	return MASQ_PASS;
}

#endif /* MASQ_FASTPATH_EGRESS_H */
