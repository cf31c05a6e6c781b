// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Pod veth program, on the host-side veth's ingress (packets from the pod):
 * the source must be one of the pod's registered addresses (else drop, counted),
 * and every accepted packet is counted per pod. With fastPath on, accepted IPv4
 * and IPv6 packets then try the fast path (lib/fastpath_egress.h).
 *
 * One hash lookup per packet in the common case: the veth's `veths` entry holds
 * the counters, the pod facts and the pod's first address of each family. A
 * source that is not that address (a pod with several addresses of a family)
 * is looked up in pods4/pods6, which hold every registered address.
 */
#include "lib/common.h"
#include "lib/maps.h"
#include "lib/drop.h"
/* The NAT engine comes whole; this object uses only the parts the fast path needs. */
#pragma clang diagnostic ignored "-Wunused-function"
#include "lib/fastpath_egress.h"

static __always_inline bool v6_is_link_local_or_unspec(const struct in6_addr *a)
{
	__u32 w0 = bpf_ntohl(a->in6_u.u6_addr32[0]);

	if ((w0 & 0xffc00000) == 0xfe800000)
		return true; /* fe80::/10: neighbour discovery, router solicitation */
	return !(a->in6_u.u6_addr32[0] | a->in6_u.u6_addr32[1] |
		 a->in6_u.u6_addr32[2] | a->in6_u.u6_addr32[3]); /* :: (DAD) */
}

enum source_check {
	SOURCE_OK = 0,
	SOURCE_SPOOFED,
	SOURCE_TRUNCATED,   /* an IP frame too short to hold its header */
	SOURCE_LOCAL,       /* IPv6 link-local or unspecified: the link's own business */
};

static __always_inline bool in6_eq(const struct in6_addr *a, const struct in6_addr *b)
{
	return !((a->in6_u.u6_addr32[0] ^ b->in6_u.u6_addr32[0]) | (a->in6_u.u6_addr32[1] ^ b->in6_u.u6_addr32[1]) |
		 (a->in6_u.u6_addr32[2] ^ b->in6_u.u6_addr32[2]) | (a->in6_u.u6_addr32[3] ^ b->in6_u.u6_addr32[3]));
}

/* Does the packet's source belong to the pod behind @ifindex (@vi: its veths
 * entry, or NULL)? Non-IP passes. SOURCE_OK with an IP packet: *podp is the
 * pod's facts. */
static __always_inline int veth_source_check(struct __sk_buff *skb, __u32 ifindex, struct veth_info *vi,
					     const struct pod_info **podp)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct pod_info *pod;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + ETH_HLEN;

		if ((void *)(ip + 1) > data_end)
			return SOURCE_TRUNCATED;
		if (vi && (vi->flags & VETH_F_ADDR4) && vi->addr4 == ip->saddr) {
			*podp = &vi->pod;
			return SOURCE_OK;
		}
		pod = bpf_map_lookup_elem(&pods4, &ip->saddr);
		if (!pod || pod->ifindex != ifindex)
			return SOURCE_SPOOFED;
		*podp = pod;
		return SOURCE_OK;
	}
	if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + ETH_HLEN;
		struct in6_addr saddr;

		if ((void *)(ip6 + 1) > data_end)
			return SOURCE_TRUNCATED;
		saddr = ip6->saddr;
		if (vi && (vi->flags & VETH_F_ADDR6) && in6_eq(&vi->addr6, &saddr)) {
			*podp = &vi->pod;
			return SOURCE_OK;
		}
		if (v6_is_link_local_or_unspec(&saddr))
			return SOURCE_LOCAL;
		pod = bpf_map_lookup_elem(&pods6, &saddr);
		if (!pod || pod->ifindex != ifindex)
			return SOURCE_SPOOFED;
		*podp = pod;
		return SOURCE_OK;
	}
	return SOURCE_OK; /* ARP and the rest are not routed by us */
}

SEC("classifier/veth_ingress")
int masq_veth_in(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct veth_info *vi = bpf_map_lookup_elem(&veths, &ifindex);
	const struct pod_info *pod = NULL;
	const struct node_config *cfg;
	__u32 zero = 0;

	int check = veth_source_check(skb, ifindex, vi, &pod);

	switch (check) {
	case SOURCE_TRUNCATED:
		return drop_with(skb, DROP_MALFORMED);
	case SOURCE_SPOOFED:
		if (vi)
			vi->stats.spoofed += 1;
		return drop_with(skb, DROP_SPOOFED_SOURCE);
	}
	if (vi) {
		vi->stats.packets += 1;
		vi->stats.bytes += skb->len;
	}
	if (check == SOURCE_LOCAL)
		return MASQ_PASS;
	cfg = bpf_map_lookup_elem(&node_config, &zero);
	if (!cfg || !(cfg->flags & MASQ_F_FAST_PATH) || !pod)
		return MASQ_PASS;
	if (skb->protocol == bpf_htons(ETH_P_IP))
		return fp_egress_v4(skb, cfg, pod);
	if (skb->protocol == bpf_htons(ETH_P_IPV6))
		return fp_egress_v6(skb, cfg, pod);
	return MASQ_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";
