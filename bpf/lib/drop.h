/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Dropping a packet: counted by reason in `drops`, told to a reader (events.h
 * event_drop) and answered with the verdict that drops it.
 */
#ifndef MASQ_DROP_H
#define MASQ_DROP_H

#include "maps.h"
#include "events.h"

/* Count the drop (and tell a reader, events.h: @in, the packet came from
 * outside) and return the TC verdict that drops the packet. */
static __always_inline int drop_pkt(struct __sk_buff *skb, __u32 reason, __u32 in)
{
	__u64 *c = bpf_map_lookup_elem(&drops, &reason);

	if (c)
		*c += 1;
	if (events_on())
		event_drop(skb, reason, in);
	return MASQ_DROP;
}

/* drop_with - drop a packet on its way from a pod (the veth, the uplink's egress) */
#define drop_with(skb, reason) drop_pkt(skb, reason, 0)
/* drop_inbound - drop a packet that came from outside (the uplink's ingress) */
#define drop_inbound(skb, reason) drop_pkt(skb, reason, 1)

#endif /* MASQ_DROP_H */
