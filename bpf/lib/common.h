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
#define ICMP_ECHO 8
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

/* Let the packet continue: the next tc filter (if any) or the stack. */
#define MASQ_PASS TC_ACT_UNSPEC
#define MASQ_DROP TC_ACT_SHOT

#define NSEC_PER_SEC 1000000000ULL

#ifndef IP_MF
#define IP_MF 0x2000
#endif
#ifndef IP_OFFSET
#define IP_OFFSET 0x1fff
#endif

/* ABI size checks: the Rust mirror asserts the same numbers. */
_Static_assert(sizeof(struct masq_config) == 24, "masq_config size");
_Static_assert(sizeof(struct pod_info) == 8, "pod_info size");
_Static_assert(sizeof(struct uplink_info) == 24, "uplink_info size");
_Static_assert(sizeof(struct lpm4_key) == 8, "lpm4_key size");
_Static_assert(sizeof(struct lpm6_key) == 20, "lpm6_key size");
_Static_assert(sizeof(struct excl_info) == 8, "excl_info size");
_Static_assert(sizeof(struct rule4_key) == 12, "rule4_key size");
_Static_assert(sizeof(struct rule_info) == 16, "rule_info size");
_Static_assert(sizeof(struct rule_except4_key) == 12, "rule_except4_key size");
_Static_assert(sizeof(struct rule_stats) == 16, "rule_stats size");
_Static_assert(sizeof(struct nat4_key) == 16, "nat4_key size");
_Static_assert(sizeof(struct nat4_entry) == 48, "nat4_entry size");
_Static_assert(sizeof(struct pod_stats) == 24, "pod_stats size");
_Static_assert(sizeof(struct attachment_key) == 80, "attachment_key size");
_Static_assert(sizeof(struct attachment_info) == 120, "attachment_info size");

#endif /* MASQ_COMMON_H */
