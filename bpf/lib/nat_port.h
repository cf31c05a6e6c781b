/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The port search's rules, for both families (its code: nat_port_tmpl.h): which
 * ports a new pair may take, how many it tries, when a finished pair's port may
 * go to a new flow, and snat_new's answers. Constants and config reads only.
 */
#ifndef MASQ_NAT_PORT_H
#define MASQ_NAT_PORT_H

#include "maps.h"

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
/*
 * Before either, the ports a new flow prefers (nat_port_tmpl.h map_prefer): its pod
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
 * such wait: its port goes at once.
 */
#define NAT_QUIET_NS (2 * NSEC_PER_SEC)

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
#define NAT_NEW_OK (-1)       /* snat_new: the flow's pair exists */

/*
 * nat_port_ok - may a new pair take @port (host order)? Inside portRange and
 * outside the ports never handed out (nodePortRange: NodePorts have no socket
 * that host_holds could find).
 */
static __always_inline bool nat_port_ok(const struct masq_config *cfg, __u16 port)
{
	return port >= cfg->port_min && port <= cfg->port_max &&
	       !(cfg->skip_max && port >= cfg->skip_min && port <= cfg->skip_max);
}

#endif /* MASQ_NAT_PORT_H */
