/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NAT pairs for both families: the engine in nat_tmpl.h, instantiated once
 * with IPv4's types and once with IPv6's.
 */
#ifndef MASQ_NAT_H
#define MASQ_NAT_H

#include "maps.h"
#include "parse.h"
#include "inner.h"
#include "rewrite.h"
#include "policy.h"
#include "fastpath.h"

/*
 * Random ports tried for one new flow. Expected probes stay O(1) (1/(1-use)),
 * and with bpf_loop() the budget costs the verifier nothing: 128 misses a free
 * port with probability use^128 (1e-12 at 80 % of the range in use for one
 * remote endpoint, 1e-6 at 90 %).
 */
#define NAT_PROBES 128
/*
 * Then up to NAT_SWEEP ports in sequence from a random start: a range of at most
 * this many ports is never reported full while a port is free. Bounded, because
 * every probe is a map operation on the packet's CPU.
 */
#define NAT_SWEEP 1024

static __always_inline __u64 nat_timeout_ns(const struct masq_config *cfg, __u8 proto, __u8 flags)
{
	__u32 s;

	switch (proto) {
	case IPPROTO_TCP:
		s = (flags & NAT_F_TCP_CLOSING) ? cfg->tcp_closing_timeout_s : cfg->tcp_timeout_s;
		break;
	case IPPROTO_UDP:
		s = cfg->udp_timeout_s;
		break;
	default:
		s = cfg->icmp_timeout_s;
		break;
	}
	return (__u64)s * NSEC_PER_SEC;
}

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
	masq_decide_v6(ifindex, up, &f->saddr, &f->daddr, d);
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
#define MAP_REV nat4_rev
#define MAP_FRAG frag4
#define ADDR_EQ(a, b) (*(a) == *(b))
#define UPLINK_HAS(up) ((up)->flags & UPLINK_F_HAS_V4)
#define UPLINK_ADDR(up) (&(up)->masq_v4)
#define PARSE parse_flow4
#define PARSE_INNER parse_inner4
#define DECIDE decide4
#define REWRITE nat4_rewrite
#define REWRITE_ADDR nat4_rewrite_addr
#define ICMP_ERR_REWRITE icmp4_err_rewrite
#define QUOTES_POD inner4_quotes_pod
#define ECHO_REPLY ICMP_ECHOREPLY
#define ICMP_PROTO IPPROTO_ICMP
#define CNT_SNAT_PKTS CNT_SNAT_PKTS_V4
#define CNT_SNAT_BYTES CNT_SNAT_BYTES_V4
#define CNT_RNAT_PKTS CNT_RNAT_PKTS_V4
#define CNT_RNAT_BYTES CNT_RNAT_BYTES_V4
#define FP_REPLY fp_reply_v4
#include "nat_tmpl.h"

/* ---- IPv6 ---- */
#define NAT_FN(x) x##_v6
#define FLOW_T struct flow6
#define INNER_T struct inner6
#define KEY_T struct nat6_key
#define ENTRY_T struct nat6_entry
#define FRAGKEY_T struct frag6_key
#define DEC_T struct masq_decision6
#define MAP_FWD nat6_fwd
#define MAP_REV nat6_rev
#define MAP_FRAG frag6
#define ADDR_EQ(a, b) ipv6_addr_equal((a), (b))
#define UPLINK_HAS(up) ((up)->flags & UPLINK_F_HAS_V6)
#define UPLINK_ADDR(up) ((const struct in6_addr *)(up)->masq_v6)
#define PARSE parse_flow6
#define PARSE_INNER parse_inner6
#define DECIDE decide6
#define REWRITE nat6_rewrite
#define REWRITE_ADDR nat6_rewrite_addr
#define ICMP_ERR_REWRITE icmp6_err_rewrite
#define QUOTES_POD inner6_quotes_pod
#define ECHO_REPLY ICMPV6_ECHO_REPLY
#define ICMP_PROTO IPPROTO_ICMPV6
#define CNT_SNAT_PKTS CNT_SNAT_PKTS_V6
#define CNT_SNAT_BYTES CNT_SNAT_BYTES_V6
#define CNT_RNAT_PKTS CNT_RNAT_PKTS_V6
#define CNT_RNAT_BYTES CNT_RNAT_BYTES_V6
#include "nat_tmpl.h"

#endif /* MASQ_NAT_H */
