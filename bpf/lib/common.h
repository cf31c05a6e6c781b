/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Includes and small helpers shared by every ebpf-masq program. */
#ifndef MASQ_COMMON_H
#define MASQ_COMMON_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <stddef.h>
#include <stdbool.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "../include/masq_abi.h"

/*
 * <linux/icmp.h> drags in glibc's socket headers, which do not build for
 * -target bpf; the few ICMP definitions we need are spelled out here.
 */
#define ICMP_ECHOREPLY 0
#define ICMP_DEST_UNREACH 3
#define ICMP_ECHO 8
#define ICMP_TIME_EXCEEDED 11
#define ICMP_PARAMETERPROB 12
#define ICMPV6_DEST_UNREACH 1
#define ICMPV6_PKT_TOOBIG 2
#define ICMPV6_TIME_EXCEED 3
#define ICMPV6_PARAMPROB 4
#define ICMPV6_ECHO_REQUEST 128
#define ICMPV6_ECHO_REPLY 129

#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_AUTH 51
#define NEXTHDR_DEST 60
struct icmphdr {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	union {
		struct {
			__be16 id;
			__be16 sequence;
		} echo;
		__be32 gateway;
	} un;
};

/* Let the packet continue: the next program on the hook (if any) or the stack. */
#define MASQ_PASS TC_ACT_UNSPEC

/*
 * The fast path marks a packet it translated and sent to the uplink in the
 * tc control block (__sk_buff cb[0], carried across bpf_redirect_neigh), so the
 * uplink's egress program passes it on without a lookup. A packet on the normal
 * path cannot carry the mark: the node's IP receive path zeroes that part of
 * the control block (IPCB/IP6CB) before routing it to the uplink.
 */
#define FP_CB_MARK 0x6d61fa57
#define MASQ_DROP TC_ACT_SHOT

#define NSEC_PER_SEC 1000000000ULL

#ifndef IP_MF
#define IP_MF 0x2000
#endif
#ifndef IP_OFFSET
#define IP_OFFSET 0x1fff
#endif

/* ABI size checks: the Rust mirror asserts the same numbers. */
_Static_assert(sizeof(struct masq_config) == 40, "masq_config size");
/* host_holds passes a reverse key as the socket lookup's tuple: same layout. */
#define TUPLE_LIKE(key, fam)                                                                       \
	(offsetof(struct key, saddr) == offsetof(struct bpf_sock_tuple, fam.saddr) &&                \
	 offsetof(struct key, daddr) == offsetof(struct bpf_sock_tuple, fam.daddr) &&                \
	 offsetof(struct key, sport) == offsetof(struct bpf_sock_tuple, fam.sport) &&                \
	 offsetof(struct key, dport) == offsetof(struct bpf_sock_tuple, fam.dport))
_Static_assert(TUPLE_LIKE(nat4_key, ipv4), "nat4_key starts like bpf_sock_tuple.ipv4");
_Static_assert(TUPLE_LIKE(nat6_key, ipv6), "nat6_key starts like bpf_sock_tuple.ipv6");
_Static_assert(sizeof(struct masq_pool) == 8 + 4 * MASQ_POOL_MAX + 16 * MASQ_POOL_MAX, "masq_pool size");
_Static_assert(sizeof(struct pod_info) == 28, "pod_info size");
_Static_assert(sizeof(struct pod_l2) == 20, "pod_l2 size");
_Static_assert(sizeof(struct uplink_info) == 24, "uplink_info size");
_Static_assert(sizeof(struct lpm4_key) == 8, "lpm4_key size");
_Static_assert(sizeof(struct lpm6_key) == 20, "lpm6_key size");
_Static_assert(sizeof(struct excl_info) == 8, "excl_info size");
_Static_assert(sizeof(struct rule4_key) == 12, "rule4_key size");
_Static_assert(sizeof(struct rule_info) == 16, "rule_info size");
_Static_assert(sizeof(struct rule_except4_key) == 12, "rule_except4_key size");
_Static_assert(sizeof(struct nat4_ep) == 8, "nat4_ep size");
_Static_assert(sizeof(struct nat4_bind) == 8, "nat4_bind size");
_Static_assert(sizeof(struct nat6_ep) == 20, "nat6_ep size");
_Static_assert(sizeof(struct nat6_bind) == 20, "nat6_bind size");
_Static_assert(sizeof(struct nat4_open) == 24, "nat4_open size");
_Static_assert(sizeof(struct nat6_open) == 40, "nat6_open size");
_Static_assert(sizeof(struct nat4_permit_key) == 12, "nat4_permit_key size");
_Static_assert(sizeof(struct nat4_permit) == 16, "nat4_permit size");
_Static_assert(sizeof(struct nat6_permit_key) == 36, "nat6_permit_key size");
_Static_assert(sizeof(struct nat6_permit) == 24, "nat6_permit size");
_Static_assert(NAT_FILTER_AD != POD_F_NAT_OUTGOING && NAT_FILTER_AD != RULE_F_TO_ADDRESS &&
	       NAT_FILTER_AD != ATT_F_NAT_OUTGOING, "filter bits are free in every flags word");
_Static_assert(sizeof(struct rule_stats) == 16, "rule_stats size");
_Static_assert(sizeof(struct pod_meta) == 1408, "pod_meta size");
_Static_assert(sizeof(struct host_port) == 4, "host_port size");
_Static_assert(sizeof(struct nat4_key) == 16, "nat4_key size");
_Static_assert(sizeof(struct nat4_entry) == 48, "nat4_entry size");
_Static_assert(sizeof(struct nat_gc) == 120, "nat_gc size");
_Static_assert(sizeof(struct port_range) == 4, "port_range size");
_Static_assert(sizeof(struct pod_stats) == 24, "pod_stats size");
_Static_assert(sizeof(struct veth_info) == 80, "veth_info size");
_Static_assert(sizeof(struct rule6_key) == 24, "rule6_key size");
_Static_assert(sizeof(struct rule6_info) == 24, "rule6_info size");
_Static_assert(sizeof(struct rule_except6_key) == 24, "rule_except6_key size");
_Static_assert(sizeof(struct nat6_key) == 40, "nat6_key size");
_Static_assert(sizeof(struct nat6_entry) == 64, "nat6_entry size");
_Static_assert(sizeof(struct frag4_key) == 12, "frag4_key size");
_Static_assert(sizeof(struct frag6_key) == 40, "frag6_key size");
_Static_assert(sizeof(struct frag_ports) == 8, "frag_ports size");
_Static_assert(sizeof(struct attachment_key) == 88, "attachment_key size");
_Static_assert(sizeof(struct attachment_info) == 120, "attachment_info size");

static __always_inline bool ipv6_addr_equal(const struct in6_addr *a, const struct in6_addr *b)
{
	return !((a->in6_u.u6_addr32[0] ^ b->in6_u.u6_addr32[0]) |
		 (a->in6_u.u6_addr32[1] ^ b->in6_u.u6_addr32[1]) |
		 (a->in6_u.u6_addr32[2] ^ b->in6_u.u6_addr32[2]) |
		 (a->in6_u.u6_addr32[3] ^ b->in6_u.u6_addr32[3]));
}

#endif /* MASQ_COMMON_H */
