/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The port search's rules, for both families (its code: port_tmpl.h,
 * hot_tmpl.h, new_pair_tmpl.h): which ports a new pair may take, how many it
 * tries, when a finished pair's port may go to a new flow, and snat_make_pair's
 * answers. Constants and config reads only.
 */
#ifndef MASQ_NAT_PORT_H
#define MASQ_NAT_PORT_H

#include "../maps.h"

/*
 * Random ports tried for one new flow towards an endpoint that is not busy (has
 * no nat_hot bitmap). Expected probes stay O(1) (1/(1-use)); 32 misses a free port
 * with probability use^32 (8e-4 at 80 % of the range in use towards one remote
 * endpoint): then the endpoint is busy, and its ports are searched through a
 * bitmap from then on (hot.h, hot_tmpl.h hot_probe), which finds a free
 * or reusable port whenever the range has one.
 */
#define NAT_PROBES 32
/*
 * Only when no bitmap can be had (nat_hot holds NAT_HOT_MAX endpoints): up to
 * NAT_SWEEP ports in sequence from a random start. Bounded, because every probe
 * is a map operation on the packet's CPU.
 */
#define NAT_SWEEP 1024
/*
 * Before either, the ports a new flow prefers (new_pair_tmpl.h map_prefer): its pod
 * endpoint's existing mapping, then the pod's own port. A power of two.
 */
#define NAT_PREFERRED 2
/*
 * A TCP pair a RST ended, or one a direction of which never sent a packet (a SYN
 * never answered), gives its port to a new flow once it has been quiet this long
 * (its last packet refreshed last_seen). Nothing checks a RST against the flow's
 * window, so a stray one must not hand a live flow's port away at once: a flow
 * still sending is never quiet this long. A client still trying an unanswered
 * SYN loses nothing but the port: its next retransmission gets a new pair. A pair
 * whose close completed (both FINs acknowledged, masq_abi.h NAT_C_*) needs no
 * such wait, only NAT_SETTLE_NS.
 */
#define NAT_QUIET_NS (2 * NSEC_PER_SEC)
/*
 * A TCP pair whose close completed gives its port once its last packet (the ACK
 * of the last FIN, seen here before the remote sees it) is this old: a new flow's
 * SYN sent on another CPU could otherwise overtake that ACK on its way to the
 * remote and meet the old connection still in LAST_ACK there (a challenge ACK or
 * a PAWS drop: the new connection waits for its SYN's retransmission, 1 s).
 */
#define NAT_SETTLE_NS (10 * NSEC_PER_SEC / 1000)

/* port_tmpl.h pair_take's @how */
#define TAKE_EXPIRED 1 /* the pair expired: any pair may go */
#define TAKE_SYN     2 /* the new flow begins with a SYN, whose number the new reverse half's fin_end holds */

/* The map helpers' errors (a BPF build has no errno.h). */
#ifndef E2BIG
#define E2BIG 7               /* a hash map at max_entries refuses a new key */
#endif
#ifndef ENOENT
#define ENOENT 2
#endif
#ifndef EEXIST
#define EEXIST 17
#endif
#define NAT_PAIR_MADE (-1)       /* snat_make_pair: the flow's pair exists */

/* What trying one port found (port_tmpl.h try_port). */
enum {
	TRY_SOFT = 0,   /* held, but by a pair that is closing or was never answered, or a host socket: not now */
	TRY_CLAIMED,    /* claimed: stop */
	TRY_FULL,       /* the table is full: stop, no port will help */
	TRY_HELD,       /* held by a pair that is open or half-closed */
};

/*
 * nat_port_ok - may a new pair take @port (host order)? Inside portRange and
 * outside the ports never handed out (nodePortRange: NodePorts have no socket
 * that host_holds could find).
 */
static __always_inline bool nat_port_ok(const struct node_config *cfg, __u16 port)
{
	return port >= cfg->port_min && port <= cfg->port_max &&
	       !(cfg->skip_max && port >= cfg->skip_min && port <= cfg->skip_max);
}

/* new_pair_tmpl.h refused's @why: the refusals field a refused new flow counts in */
#define REFUSED_NO_PORT    0
#define REFUSED_OVER_SHARE 1
#define REFUSED_OVER_LIMIT 2

#endif /* MASQ_NAT_PORT_H */
