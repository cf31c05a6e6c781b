// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Uplink programs: SNAT on egress, reverse NAT on ingress, IPv4 and IPv6.
 * Attached (tc clsact) to every uplink in the `uplinks` map; an interface whose
 * entry is missing is passed through untouched.
 */
#include "lib/common.h"
#include "lib/maps.h"
#include "lib/nat/nat.h"

SEC("classifier/uplink_egress")
int masq_up_egress(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct uplink_info *up;

	if (skb->cb[0] == FP_CB_MARK)
		return MASQ_PASS; /* translated by the fast path already */
	up = uplink_get(ifindex);
	if (!up) {
		if (skb->cb[0] == NAT_GC_PRIME_MARK)
			return nat_gc_prime(); /* the loader's run (masq_abi.h) */
		return MASQ_PASS;
	}
	if (skb->protocol == bpf_htons(ETH_P_IP))
		return snat_egress_v4(skb, up);
	if (skb->protocol == bpf_htons(ETH_P_IPV6))
		return snat_egress_v6(skb, up);
	return MASQ_PASS;
}

SEC("classifier/uplink_ingress")
int masq_up_ingress(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct uplink_info *up = uplink_get(ifindex);

	if (!up)
		return MASQ_PASS;
	if (skb->protocol == bpf_htons(ETH_P_IP))
		return rnat_ingress_v4(skb, up);
	if (skb->protocol == bpf_htons(ETH_P_IPV6))
		return rnat_ingress_v6(skb, up);
	return MASQ_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";
