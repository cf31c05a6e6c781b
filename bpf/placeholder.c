// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Holds an uplink's TCX hook while a node's first load verifies the real
 * programs: a new TCX link waits for an RCU grace period, replacing the program
 * of an existing link does not, so the plugin makes the links early with this
 * and swaps the real programs in once they are verified. Passes everything on
 * ("next"): until then there are no pods and no NAT state on the node.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>

__attribute__((section("classifier/placeholder"), used)) int masq_placeholder(struct __sk_buff *skb)
{
	return TC_ACT_UNSPEC;
}

char _license[] __attribute__((section("license"), used)) = "Dual BSD/GPL";
