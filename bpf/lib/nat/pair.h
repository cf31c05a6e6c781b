/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * A pair's lifetime, for both families (the per-family code: pair_tmpl.h):
 * its protocol's idle timeout, a one-shot UDP flow told from a stream, the
 * flags the two halves share, and what refreshing a pair can find (NAT_SYNC_*).
 * Pure functions of the config and the flags.
 */
#ifndef MASQ_NAT_PAIR_H
#define MASQ_NAT_PAIR_H

#include "../maps.h"
#include "../parse.h"

/*
 * A UDP pair with a packet this long after its first is a stream (natTimeouts.udp);
 * before, a one-shot flow (natTimeouts.udpOneShot), as netfilter tells them apart.
 */
#define NAT_UDP_STREAM_NS (2 * NSEC_PER_SEC)

/*
 * The idle timeout of a protocol translated by address alone (GRE, ESP...):
 * netfilter's generic one (nf_conntrack_generic_timeout, 600 s).
 */
#define NAT_GENERIC_TIMEOUT_S 600

static __always_inline __u64 nat_timeout_ns(const struct node_config *cfg, __u8 proto, __u8 flags)
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
		s = l4_has_ports(proto) ? cfg->icmp_timeout_s : NAT_GENERIC_TIMEOUT_S;
		break;
	}
	return (__u64)s * NSEC_PER_SEC;
}

/*
 * The flags a half takes from its other half (@from) when the two are brought in
 * step: the pair's state (closing) comes across; how each direction ended
 * (NAT_F_ENDS) stays with its own half, and is forgotten once the pair is open
 * again (a new connection on the same tuple).
 */
static __always_inline __u8 nat_flags_synced(__u8 from, __u8 to)
{
	return (from & ~NAT_F_ENDS) | ((from & NAT_F_TCP_CLOSING) ? (to & NAT_F_ENDS) : 0);
}

/* What refreshing a flow's pair found (pair_tmpl.h snat_refresh, snat_sync_rev). */
#define NAT_SYNC_OK   0 /* the pair is the flow's: translate the packet */
#define NAT_SYNC_GONE 1 /* its reverse half is gone or another pair's: start the flow afresh */
#define NAT_SYNC_BUSY 2 /* another CPU is taking its port over or removing it this instant
			 * (masq_abi_nat.h NAT_GEN_TAKEN): drop the packet, which must neither
			 * leave on that port nor start a pair while the old one is still there */

#endif /* MASQ_NAT_PAIR_H */
