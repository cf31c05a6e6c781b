/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NAT pairs for both families: the engine in engine_tmpl.h, instantiated once
 * with IPv4's types and once with IPv6's. This header holds the two binding
 * sets and the family glue they name (decide*, uplink_l3_off); the engine's
 * family-independent rules are in port.h, pair.h, shard.h, gc.h.
 */
#ifndef MASQ_NAT_H
#define MASQ_NAT_H

#include "../maps.h"
#include "../events.h"
#include "../drop.h"
#include "../parse.h"
#include "../inner.h"
#include "../rewrite.h"
#include "../icmp_err.h"
#include "../decide.h"
#include "../fastpath.h"
#include "port.h"
#include "pair.h"
#include "shard.h"
#include "gc.h"

static __always_inline __u32 uplink_l3_off(const struct uplink_info *up)
{
	return (up->flags & UPLINK_F_L3) ? 0 : ETH_HLEN;
}

static __noinline void decide4(__u32 ifindex, const struct uplink_info *up, const struct flow4 *f,
				    struct masq_decision4 *d)
{
	masq_decide_v4(ifindex, up, f->saddr, f->daddr, d, true);
}

static __noinline void decide6(__u32 ifindex, const struct uplink_info *up, const struct flow6 *f,
				    struct masq_decision6 *d)
{
	masq_decide_v6(ifindex, up, &f->saddr, &f->daddr, d, true);
}

/*
 * The decision for the reply of a packet that came in on @ifindex: would a
 * packet from its destination to its source leave masqueraded? Asked quietly
 * (no "skipped" counters): it is about a packet that does not exist yet.
 */
static __noinline void decide4_reply(__u32 ifindex, const struct uplink_info *up, const struct flow4 *f,
				     struct masq_decision4 *d)
{
	masq_decide_v4(ifindex, up, f->daddr, f->saddr, d, false);
}

static __noinline void decide6_reply(__u32 ifindex, const struct uplink_info *up, const struct flow6 *f,
				     struct masq_decision6 *d)
{
	masq_decide_v6(ifindex, up, &f->daddr, &f->saddr, d, false);
}

/* ---- IPv4 ---- */
#define NAT_FN(x) x##_v4
#define FLOW_T struct flow4
#define INNER_T struct inner4
#define KEY_T struct nat4_key
#define ENTRY_T struct nat4_entry
#define FRAGKEY_T struct frag4_key
#define DEC_T struct masq_decision4
#define MAP_FWD nat4_fwd
#define SHARD_FN nat_shard4
#define MAP_REV nat4_rev
#define MAP_BIND nat4_bind
#define EP_T struct nat4_ep
#define BIND_T struct nat4_bind
#define MAP_OPEN nat4_open
#define OPEN_T struct nat4_open
#define MAP_PERMIT nat4_permit
#define PERMITKEY_T struct nat4_permit_key
#define PERMIT_T struct nat4_permit
#define ADDR_T __be32
#define MAP_FRAG frag4
#define ADDR_EQ(a, b) (*(a) == *(b))
#define UPLINK_HAS(up) ((up)->flags & UPLINK_F_HAS_V4)
#define UPLINK_ADDR(up) (&(up)->masq_v4)
#define PARSE parse_flow4
#define PARSE_INNER parse_inner4
#define DECIDE decide4
#define DECIDE_REPLY decide4_reply
#define REWRITE nat4_rewrite
#define REWRITE_ADDR nat4_rewrite_addr
#define ICMP_ERR_REWRITE icmp4_err_rewrite
#define QUOTES_POD inner4_quotes_pod
#define ECHO_REPLY ICMP_ECHOREPLY
#define ECHO_REQUEST ICMP_ECHO
#define ICMP_PROTO IPPROTO_ICMP
#define CNT_SNAT_PKTS CNT_SNAT_PKTS_V4
#define CNT_SNAT_BYTES CNT_SNAT_BYTES_V4
#define CNT_RNAT_PKTS CNT_RNAT_PKTS_V4
#define CNT_RNAT_BYTES CNT_RNAT_BYTES_V4
#define FP_REPLY fp_reply_v4
#define SK_TUPLE_LEN sizeof(((struct bpf_sock_tuple *)0)->ipv4)
#define NAT_IS_V6 false
#include "engine_tmpl.h"

/* ---- IPv6 ---- */
#define NAT_FN(x) x##_v6
#define FLOW_T struct flow6
#define INNER_T struct inner6
#define KEY_T struct nat6_key
#define ENTRY_T struct nat6_entry
#define FRAGKEY_T struct frag6_key
#define DEC_T struct masq_decision6
#define MAP_FWD nat6_fwd
#define SHARD_FN nat_shard6
#define MAP_REV nat6_rev
#define MAP_BIND nat6_bind
#define EP_T struct nat6_ep
#define BIND_T struct nat6_bind
#define MAP_OPEN nat6_open
#define OPEN_T struct nat6_open
#define MAP_PERMIT nat6_permit
#define PERMITKEY_T struct nat6_permit_key
#define PERMIT_T struct nat6_permit
#define ADDR_T struct in6_addr
#define MAP_FRAG frag6
#define ADDR_EQ(a, b) ipv6_addr_equal((a), (b))
#define UPLINK_HAS(up) ((up)->flags & UPLINK_F_HAS_V6)
#define UPLINK_ADDR(up) ((const struct in6_addr *)(up)->masq_v6)
#define PARSE parse_flow6
#define PARSE_INNER parse_inner6
#define DECIDE decide6
#define DECIDE_REPLY decide6_reply
#define REWRITE nat6_rewrite
#define REWRITE_ADDR nat6_rewrite_addr
#define ICMP_ERR_REWRITE icmp6_err_rewrite
#define QUOTES_POD inner6_quotes_pod
#define ECHO_REPLY ICMPV6_ECHO_REPLY
#define ECHO_REQUEST ICMPV6_ECHO_REQUEST
#define ICMP_PROTO IPPROTO_ICMPV6
#define CNT_SNAT_PKTS CNT_SNAT_PKTS_V6
#define CNT_SNAT_BYTES CNT_SNAT_BYTES_V6
#define CNT_RNAT_PKTS CNT_RNAT_PKTS_V6
#define CNT_RNAT_BYTES CNT_RNAT_BYTES_V6
#define FP_REPLY(skb, up, f, addr) fp_reply_v6(skb, up, f, &(addr))
#define SK_TUPLE_LEN sizeof(((struct bpf_sock_tuple *)0)->ipv6)
#define NAT_IS_V6 true
#include "engine_tmpl.h"

#endif /* MASQ_NAT_H */
