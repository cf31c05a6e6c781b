// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The bench's "empty-hooks" anchor: attached where ebpf-masq attaches (pod veth
 * ingress, uplink egress and ingress) on a no-NAT node, it shows what running
 * any program at those hooks costs, and under bpf_stats the stats' own floor.
 * Returns "next" (TC_ACT_UNSPEC), as ebpf-masq's programs pass packets on.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>

__attribute__((section("classifier"), used)) int masq_empty(struct __sk_buff *skb)
{
	return TC_ACT_UNSPEC;
}

char _license[] __attribute__((section("license"), used)) = "Dual BSD/GPL";
