// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Uplink programs: SNAT on egress, reverse NAT on ingress.
 * Attached (tc clsact) to every uplink in the `uplinks` map; an interface whose
 * entry is missing is passed through untouched.
 */
#include "lib/common.h"
#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/policy.h"
#include "lib/nat.h"

static __always_inline __u32 uplink_l3_off(const struct uplink_info *up)
{
	return (up->flags & UPLINK_F_L3) ? 0 : ETH_HLEN;
}

static __always_inline void rule_account(__u32 rule_id, __u32 len)
{
	struct rule_stats *rs = bpf_map_lookup_elem(&rule_stats, &rule_id);

	if (rs) {
		rs->packets += 1;
		rs->bytes += len;
	}
}

static __always_inline int snat_v4_egress(struct __sk_buff *skb, const struct uplink_info *up)
{
	struct masq_decision d = {};
	struct nat4_entry *fwd = NULL;
	const struct masq_config *cfg;
	struct flow4 f;
	__u32 zero = 0;
	__u64 now;

	if (parse_flow4(skb, uplink_l3_off(up), &f))
		return MASQ_PASS;
	/* The host's own traffic: by far the most common non-NAT case. */
	if ((up->flags & UPLINK_F_HAS_V4) && f.saddr == up->masq_v4)
		return MASQ_PASS;
	cfg = bpf_map_lookup_elem(&masq_config, &zero);
	if (!cfg)
		return MASQ_PASS;

	now = bpf_ktime_get_ns();
	if (f.l4 == L4_OK) {
		struct nat4_key fk = {
			.saddr = f.saddr, .daddr = f.daddr,
			.sport = f.sport, .dport = f.dport, .proto = f.proto,
		};
		fwd = bpf_map_lookup_elem(&nat4_fwd, &fk);
		if (fwd) {
			if (nat_touch(fwd, &f, now) && !snat_v4_sync_rev(&f, fwd, now)) {
				/* Our reply slot was taken over: start this flow afresh. */
				bpf_map_delete_elem(&nat4_fwd, &fk);
				fwd = NULL;
			} else {
				goto rewrite;
			}
		}
	}

	/*
	 * An echo reply leaving the node answers a ping that reached the pod or
	 * tunnel client directly (routed); there is no flow of ours to map it to,
	 * and masquerading it would only break the remote's matching.
	 */
	if (f.proto == IPPROTO_ICMP && f.icmp_type == ICMP_ECHOREPLY)
		return MASQ_PASS;

	masq_decide_v4(skb->ifindex, up, f.saddr, f.daddr, &d);
	if (d.verdict == VERDICT_NONE)
		return MASQ_PASS;

	/* From here on the packet must leave masqueraded or not at all. */
	switch (f.l4) {
	case L4_FRAGMENT:
		return drop_with(DROP_FRAGMENT);
	case L4_TRUNCATED:
		return drop_with(DROP_MALFORMED);
	case L4_UNSUPPORTED:
		return drop_with(DROP_UNSUPPORTED_PROTO);
	}

	__u32 reason = DROP_NO_PORT;

	fwd = snat_v4_create(&f, cfg, &d, skb->ifindex, now, &reason);
	if (!fwd)
		return drop_with(reason);
	nat_touch(fwd, &f, now);

rewrite:
	if (fwd->flags & NAT_F_BY_RULE)
		rule_account(fwd->rule_id, f.len);
	if (nat4_rewrite(skb, &f, true, fwd->addr, fwd->port))
		return drop_with(DROP_CSUM);
	count_add(CNT_SNAT_PKTS_V4, 1);
	count_add(CNT_SNAT_BYTES_V4, f.len);
	return MASQ_PASS;
}

static __always_inline int rnat_v4_ingress(struct __sk_buff *skb, const struct uplink_info *up)
{
	struct nat4_entry *rev;
	struct flow4 f;
	__u64 now;

	if (parse_flow4(skb, uplink_l3_off(up), &f) || f.l4 != L4_OK)
		return MASQ_PASS;

	struct nat4_key rk = {
		.saddr = f.saddr, .daddr = f.daddr,
		.sport = f.sport, .dport = f.dport, .proto = f.proto,
	};
	/* No entry: the host's own traffic, or unsolicited. Never ours to touch. */
	rev = bpf_map_lookup_elem(&nat4_rev, &rk);
	if (!rev)
		return MASQ_PASS;

	now = bpf_ktime_get_ns();
	if (nat_touch(rev, &f, now))
		rnat_v4_sync_fwd(&f, rev, now);
	if (nat4_rewrite(skb, &f, false, rev->addr, rev->port))
		return drop_with(DROP_CSUM);
	count_add(CNT_RNAT_PKTS_V4, 1);
	count_add(CNT_RNAT_BYTES_V4, f.len);
	return MASQ_PASS;
}

SEC("classifier/uplink_egress")
int masq_up_egress(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct uplink_info *up = bpf_map_lookup_elem(&uplinks, &ifindex);

	if (!up)
		return MASQ_PASS;
	if (skb->protocol == bpf_htons(ETH_P_IP))
		return snat_v4_egress(skb, up);
	return MASQ_PASS;
}

SEC("classifier/uplink_ingress")
int masq_up_ingress(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct uplink_info *up = bpf_map_lookup_elem(&uplinks, &ifindex);

	if (!up)
		return MASQ_PASS;
	if (skb->protocol == bpf_htons(ETH_P_IP))
		return rnat_v4_ingress(skb, up);
	return MASQ_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";
