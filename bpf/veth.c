// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Pod veth program, on the host-side veth's ingress (packets from the pod):
 * the source must be one of the pod's registered addresses (else drop, counted),
 * and every accepted packet is counted per pod. With fastPath on, accepted IPv4
 * and IPv6 packets then try the fast path (lib/fastpath_egress.h).
 */
#include "lib/common.h"
#include "lib/maps.h"
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

/* Does the packet's source belong to the pod behind @ifindex (non-IP passes)?
 * SOURCE_OK with an IP packet: *podp is the source address's pod entry. */
static __always_inline int veth_source_check(struct __sk_buff *skb, __u32 ifindex, const struct pod_info **podp)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct pod_info *pod;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + ETH_HLEN;

		if ((void *)(ip + 1) > data_end)
			return SOURCE_TRUNCATED;
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
	struct pod_stats *st = bpf_map_lookup_elem(&pod_stats, &ifindex);
	const struct pod_info *pod = NULL;
	const struct masq_config *cfg;
	__u32 zero = 0;

	int check = veth_source_check(skb, ifindex, &pod);

	switch (check) {
	case SOURCE_TRUNCATED:
		return drop_with(DROP_MALFORMED);
	case SOURCE_SPOOFED:
		if (st)
			st->spoofed += 1;
		return drop_with(DROP_SPOOFED_SOURCE);
	}
	if (st) {
		st->packets += 1;
		st->bytes += skb->len;
	}
	if (check == SOURCE_LOCAL)
		return MASQ_PASS;
	cfg = bpf_map_lookup_elem(&masq_config, &zero);
	if (!cfg || !(cfg->flags & MASQ_F_FAST_PATH) || !pod)
		return MASQ_PASS;
	if (skb->protocol == bpf_htons(ETH_P_IP))
		return fp_egress_v4(skb, cfg, pod);
	if (skb->protocol == bpf_htons(ETH_P_IPV6))
		return fp_egress_v6(skb, cfg, pod);
	return MASQ_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";
