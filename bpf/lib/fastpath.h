/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Fast path (fastPath: true), reply half: a reply of a flow the fast path
 * started (NAT_F_FAST), already translated back by rnat_ingress, goes straight
 * to the pod with bpf_redirect_peer() instead of through the host stack.
 * The egress half (pod -> uplink) is in fastpath_egress.h.
 *
 * Whatever the fast path cannot prove safe is left to the stack (MASQ_PASS),
 * which then does exactly what it does without the fast path. IPv4 and IPv6.
 */
#ifndef MASQ_FASTPATH_H
#define MASQ_FASTPATH_H

#include "maps.h"
#include "drop.h"
#include "parse.h"
#include "csum.h"
#include "rewrite.h"

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

/*
 * What a router does to a forwarded IPv4 packet: TTL - 1, header checksum fixed
 * (folded here, written straight into the packet). The fast path only handles
 * Ethernet frames: the IPv4 header is at ETH_HLEN.
 */
static __always_inline int fp_ttl_dec4(struct __sk_buff *skb, __u8 ttl, __u8 proto)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct iphdr *ip = data + ETH_HLEN;
	__be16 old = bpf_htons(((__u16)ttl << 8) | proto);
	__be16 new = bpf_htons(((__u16)(ttl - 1) << 8) | proto);
	__u8 nt = ttl - 1;
	__sum16 check;

	if ((void *)(ip + 1) <= data_end) {
		ip->check = csum2_replace(ip->check, old, new);
		ip->ttl = nt;
		return 0;
	}
	if (bpf_skb_load_bytes(skb, ETH_HLEN + offsetof(struct iphdr, check), &check, sizeof(check)))
		return -1;
	check = csum2_replace(check, old, new);
	if (bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct iphdr, check), &check, sizeof(check), 0))
		return -1;
	return bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct iphdr, ttl), &nt, sizeof(nt), 0);
}

static __always_inline bool fp_enabled(void)
{
	__u32 zero = 0;
	const struct node_config *cfg = bpf_map_lookup_elem(&node_config, &zero);

	return cfg && (cfg->flags & MASQ_F_FAST_PATH);
}

/* An IPv6 router's part: hop limit - 1 (no header checksum in IPv6). */
static __always_inline int fp_hop_dec6(struct __sk_buff *skb, __u8 hl)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ipv6hdr *ip6 = data + ETH_HLEN;
	__u8 nh = hl - 1;

	if ((void *)(ip6 + 1) <= data_end) {
		ip6->hop_limit = nh;
		return 0;
	}
	return bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct ipv6hdr, hop_limit), &nh, sizeof(nh), 0);
}

/* The pod's L2 facts when a reply may be redirected to it: MACs known, the packet
 * fits the pod link's MTU (GSO: every segment). NULL: the stack delivers it. */
static __always_inline const struct pod_l2 *fp_pod_ready(struct __sk_buff *skb, const struct pod_info *pod)
{
	__u32 mtu_len = 0;

	if (!(pod->l2.flags & POD_L2_F_HAS_MAC))
		return NULL;
	/* skb->len counts the Ethernet header, as the check's device length does. */
	if (bpf_check_mtu(skb, pod->ifindex, &mtu_len, 0, BPF_MTU_CHK_SEGS))
		return NULL;
	return &pod->l2;
}

/* The end of every reply redirect: the pod's MACs, counted, into the pod's netns. */
static __always_inline int fp_to_pod(struct __sk_buff *skb, __u32 ifindex, const struct pod_l2 *l2)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u8 macs[12];

	__builtin_memcpy(macs, l2->pod_mac, 6);
	__builtin_memcpy(macs + 6, l2->gw_mac, 6);
	if (data + sizeof(macs) <= data_end)
		__builtin_memcpy(data, macs, sizeof(macs));
	else if (bpf_skb_store_bytes(skb, 0, macs, sizeof(macs), 0))
		return drop_inbound(skb, DROP_CSUM);
	count_add(CNT_FP_INGRESS, 1);
	return bpf_redirect_peer(ifindex, 0);
}

/*
 * fp_reply_v4 - @f was translated back to @pod_addr (rnat_ingress). Redirect it
 * into the pod's netns when the fast path is on and nothing needs the stack:
 * Ethernet uplink, not a fragment, TTL > 1 (else the stack's time exceeded),
 * fits the pod link's MTU (GSO: every segment), pod MACs known.
 * MASQ_PASS otherwise: the stack routes it to the pod as before.
 */
static __noinline int fp_reply_v4(struct __sk_buff *skb, const struct uplink_info *up, const struct flow4 *f,
				  __be32 pod_addr)
{
	struct pod_info *pod;
	const struct pod_l2 *l2;
	__u32 ifindex;
	__u8 ttl;

	if (!fp_enabled() || (up->flags & UPLINK_F_L3) || f->frag != FRAG_NONE)
		return MASQ_PASS;
	pod = bpf_map_lookup_elem(&pods4, &pod_addr);
	if (!pod)
		return MASQ_PASS;
	ifindex = pod->ifindex;
	if (load_hdr(skb, ETH_HLEN + offsetof(struct iphdr, ttl), &ttl, 1) || ttl <= 1)
		return MASQ_PASS;
	l2 = fp_pod_ready(skb, pod);
	if (!l2)
		return MASQ_PASS;
	if (fp_ttl_dec4(skb, ttl, f->proto))
		return drop_inbound(skb, DROP_CSUM);
	return fp_to_pod(skb, ifindex, l2);
}

/* fp_reply_v6 - the same for IPv6: hop limit > 1, no extension headers. */
static __noinline int fp_reply_v6(struct __sk_buff *skb, const struct uplink_info *up, const struct flow6 *f,
				  const struct in6_addr *pod_addr)
{
	struct pod_info *pod;
	const struct pod_l2 *l2;
	__u32 ifindex;
	__u8 hl;

	if (!fp_enabled() || (up->flags & UPLINK_F_L3) || f->frag != FRAG_NONE ||
	    f->l4_off != ETH_HLEN + sizeof(struct ipv6hdr))
		return MASQ_PASS;
	pod = bpf_map_lookup_elem(&pods6, pod_addr);
	if (!pod)
		return MASQ_PASS;
	ifindex = pod->ifindex;
	if (load_hdr(skb, ETH_HLEN + offsetof(struct ipv6hdr, hop_limit), &hl, 1) || hl <= 1)
		return MASQ_PASS;
	l2 = fp_pod_ready(skb, pod);
	if (!l2)
		return MASQ_PASS;
	if (fp_hop_dec6(skb, hl))
		return drop_inbound(skb, DROP_CSUM);
	return fp_to_pod(skb, ifindex, l2);
}

#endif /* MASQ_FASTPATH_H */
