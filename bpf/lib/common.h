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
#define NEXTHDR_NONE 59
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
#define MASQ_DROP TC_ACT_SHOT

#define NSEC_PER_SEC 1000000000ULL

#ifndef IP_MF
#define IP_MF 0x2000
#endif
#ifndef IP_OFFSET
#define IP_OFFSET 0x1fff
#endif

static __always_inline bool ipv6_addr_equal(const struct in6_addr *a, const struct in6_addr *b)
{
	return !((a->in6_u.u6_addr32[0] ^ b->in6_u.u6_addr32[0]) |
		 (a->in6_u.u6_addr32[1] ^ b->in6_u.u6_addr32[1]) |
		 (a->in6_u.u6_addr32[2] ^ b->in6_u.u6_addr32[2]) |
		 (a->in6_u.u6_addr32[3] ^ b->in6_u.u6_addr32[3]));
}

#endif /* MASQ_COMMON_H */
