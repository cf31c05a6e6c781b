/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The NAT engine, written once for both address families. nat.h includes this
 * file twice, with the family's types, maps and helpers bound to these names:
 *
 *   NAT_FN(x)        x##_v4 / x##_v6
 *   FLOW_T INNER_T   struct flow4 / flow6, struct inner4 / inner6
 *   KEY_T ENTRY_T    struct nat4_key / nat6_key, struct nat4_entry / nat6_entry
 *   FRAGKEY_T DEC_T  struct frag4_key / frag6_key, struct masq_decision4 / 6
 *   MAP_FWD MAP_REV MAP_FRAG SHARD_FN (the forward map's shard function)
 *   MAP_BIND EP_T BIND_T ADDR_T  the mapping hints (nat4_bind / nat6_bind), the address type
 *   MAP_OPEN OPEN_T MAP_PERMIT PERMITKEY_T PERMIT_T  natFiltering's open mappings and permits
 *   ADDR_EQ(a, b)    address equality (pointers)
 *   UPLINK_HAS(up) UPLINK_ADDR(up)   the uplink's address of this family
 *   PARSE PARSE_INNER DECIDE DECIDE_REPLY REWRITE REWRITE_ADDR ICMP_ERR_REWRITE QUOTES_POD
 *   ECHO_REPLY ECHO_REQUEST ICMP_PROTO CNT_SNAT_PKTS CNT_SNAT_BYTES CNT_RNAT_PKTS CNT_RNAT_BYTES
 *   FP_REPLY         the fast path's reply redirect (fastpath.h)
 *
 * Mapping is endpoint-independent (RFC 4787 REQ-1, RFC 5382 REQ-1): a new flow
 * tries its pod endpoint's existing mapping first (MAP_BIND), then the pod's own
 * port (preservation), then random ones (snat_flow_entry). Filtering is address-and-
 * port-dependent by default: only the remote a pair was made for reaches it back;
 * a pod or rule with natFiltering address-dependent or endpoint-independent has its
 * mappings in MAP_OPEN, and a packet from another remote to one (open_ingress) gets
 * a pair of its own on the mapping's port.
 *
 * Every masqueraded flow is a pair of entries that exist together:
 *   fwd[{pod, remote, pod port, remote port}]    -> {nat addr, nat port}
 *   rev[{remote, nat addr, remote port, nat port}] -> {pod, pod port}
 * The reverse half is inserted first with BPF_NOEXIST (that is the port claim);
 * if the forward half then fails, the reverse half is removed again. Both halves
 * carry the pair's created_ns, which tells a pair from a later one with the same key;
 * a pair changes hands (taken over, removed by the sweep, opened again by its pod)
 * only through a compare-and-swap of its reverse half's (masq_abi_nat.h NAT_GEN_TAKEN).
 *
 * Expiry: entries carry last_seen_ns, refreshed in both halves together at most
 * once a second from whichever direction has traffic, so a one-way flow never
 * loses its reply path. The expiry sweep (gc.h: one bpf_timer for the node)
 * removes pairs idle longer than their protocol's timeout, both halves; before it
 * comes round, a new flow may take over an idle pair's port (probe_port). The maps
 * are plain hash maps: nothing evicts one half alone, and a full table refuses
 * new flows (DROP_NAT_FULL).
 *
 * Direction: a flow whose first packet comes in on an uplink, addressed to a
 * source the egress program would masquerade (a registered pod, a rule's source),
 * began outside (a routed pod CIDR: a load balancer, a BGP peer, a tunnel
 * client's peer). It gets a forward half alone, NAT_F_INBOUND, whose value is
 * the pod's own address and port: the pod's replies find it and leave untouched,
 * as netfilter leaves the replies of a connection it saw begin outside.
 * Such a half lives and expires like a pair (the sweep finds no reverse half).
 *
 * The engine's parts, in the order each needs the ones before it:
 *   event_tmpl.h     a pair's event for a reader (made, ended, refused)
 *   pair_tmpl.h      a pair's halves: lookup, expiry, refresh, in-step sync,
 *                    the sweep's visit (gc_pair); a first fragment's ports
 *   port_tmpl.h      the port search: its state, a port's claim, the probes
 *   hot_tmpl.h       the port search towards a busy endpoint, by its bitmap
 *   new_pair_tmpl.h  a new flow's pair (snat_make_pair, snat_flow_entry) and its records
 *   egress_tmpl.h    egress translation (snat_egress)
 *   ingress_tmpl.h   ingress translation (rnat_ingress)
 * README.md in this folder lists every function each part makes per family.
 */

#define NAT_NOT_OURS (-100)
#define NAT_HOST_NEW (-101) /* host_egress: the host flow needs a pair */

#include "event_tmpl.h"
#include "pair_tmpl.h"
#include "port_tmpl.h"
#include "hot_tmpl.h"
#include "new_pair_tmpl.h"
#include "egress_tmpl.h"
#include "ingress_tmpl.h"

/* The template releases its parameters, so it can be instantiated again. */
#undef NAT_FN
#undef FLOW_T
#undef INNER_T
#undef KEY_T
#undef ENTRY_T
#undef FRAGKEY_T
#undef DEC_T
#undef MAP_FWD
#undef SHARD_FN
#undef MAP_REV
#undef MAP_BIND
#undef EP_T
#undef BIND_T
#undef MAP_OPEN
#undef OPEN_T
#undef MAP_PERMIT
#undef PERMITKEY_T
#undef PERMIT_T
#undef ADDR_T
#undef MAP_FRAG
#undef ADDR_EQ
#undef UPLINK_HAS
#undef UPLINK_ADDR
#undef PARSE
#undef PARSE_INNER
#undef DECIDE
#undef DECIDE_REPLY
#undef REWRITE
#undef REWRITE_ADDR
#undef ICMP_ERR_REWRITE
#undef QUOTES_POD
#undef ECHO_REPLY
#undef ECHO_REQUEST
#undef ICMP_PROTO
#undef CNT_SNAT_PKTS
#undef CNT_SNAT_BYTES
#undef CNT_RNAT_PKTS
#undef CNT_RNAT_BYTES
#undef NAT_NOT_OURS
#undef NAT_HOST_NEW
#undef FP_REPLY
#undef SK_TUPLE_LEN
#undef NAT_IS_V6
