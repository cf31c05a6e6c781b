/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ebpf-masq data-plane ABI, the events (included by masq_abi_nat.h): what the
 * programs tell a reader about NAT pairs made and ended, flows refused and
 * packets dropped, through two ring buffers, and the leases that turn them on.
 * A change here bumps MASQ_LAYOUT_VERSION as anywhere in masq_abi.h.
 *
 * events_log, events_live (RINGBUF, EVENTS_LOG_RING_BYTES / EVENTS_LIVE_RING_BYTES): the NAT session
 * log's exporter reads events_log, `ebpf-masq monitor` reads events_live, so a
 * person watching never takes an event from the log (or the other way round).
 * events_ctl (ARRAY, 1 entry, struct events_ctl, BPF_F_MMAPABLE): each ring's
 * lease, the bpf_ktime_get_ns() time until which the programs write into it, and
 * who holds it; readers map it and renew, clear or count with atomic stores to
 * their own fields only, so two readers never undo each other. A reader
 * renews its lease every second or so (EVENTS_LEASE_NS ahead); a reader that
 * dies, however, stops renewing it, and the events are off again when it runs
 * out. With no lease the programs pay one array lookup and a compare where an
 * event would be made: a new pair, a pair's end, a refusal, a drop; never on an
 * established flow's packets. A full ring loses the event and counts it
 * (CNT_EVENTS_LOST): the programs never wait for a reader.
 */
#ifndef MASQ_ABI_EVENTS_H
#define MASQ_ABI_EVENTS_H

#include <linux/types.h>
#include <linux/in6.h>

#define EVENTS_LOG_RING_BYTES (8 << 20)  /* events_log: 8 MiB, 69,905 events of 112 bytes (+8 header) */
#define EVENTS_LIVE_RING_BYTES (1 << 20) /* events_live: 1 MiB, 8,738 events */
#define EVENTS_LEASE_NS 3000000000ULL /* how far ahead a reader renews its lease (every ~1 s) */

/* struct masq_event.kind */
#define EV_PAIR_MADE        1  /* a NAT pair was made (a new flow from inside) */
#define EV_PAIR_ENDED       2  /* a NAT pair was removed: end_reason says why */
#define EV_DROP             3  /* a packet was dropped: reason is its enum masq_drop_reason */
#define EV_REFUSED_NO_PORT  4  /* a new flow was refused: no port free towards its remote endpoint */
#define EV_REFUSED_SHARE    5  /* ... over its source's share of a busy endpoint's ports */
#define EV_REFUSED_LIMIT    6  /* ... its pod holds its port limit towards the remote endpoint */

/* struct masq_event.nat_flags for EV_DROP */
#define EV_DROP_F_IN        1  /* the packet came from outside: remote -> node (or pod, translated back) */

/* struct masq_event.reason for EV_PAIR_ENDED */
#define EV_END_CLOSED       1  /* removed by the expiry sweep after its TCP close (FIN or RST) */
#define EV_END_EXPIRED      2  /* removed by the expiry sweep, idle past its timeout */
#define EV_END_TAKEN_OVER   3  /* its port taken over by a new flow (expired, finished or unanswered) */
#define EV_END_POD_DELETED  4  /* removed by the plugin with its pod (CNI DEL; not sent by the programs) */

/* ---- events_log / events_live records ----
 * One struct for both families: addresses are 16 bytes, an IPv4 one in the first
 * 4 (v6 0). Ports in network byte order (an ICMP echo's id as the pod's and the
 * node's port, 0 as the remote's). What a kind leaves unknown is 0: a refusal has
 * no node port. A drop has its reason, the hook's interface and the packet as it
 * was dropped: from a pod, its source in pod and destination in remote; from
 * outside (EV_DROP_F_IN), its source in remote and destination in node. */
struct masq_event {
	__u64 ktime_ns;            /* bpf_ktime_get_ns() when it happened */
	__u64 start_ns;            /* pair made / ended: the pair's created_ns */
	__u64 packets_out;         /* pair ended: the pod's packets and bytes (the forward half's) */
	__u64 bytes_out;
	__u64 packets_in;          /* ... the remote's (the reverse half's) */
	__u64 bytes_in;
	struct in6_addr pod;       /* the pod's (or a rule's source's) address, before NAT */
	struct in6_addr node;      /* the node address it is translated to */
	struct in6_addr remote;    /* the remote endpoint's address */
	__be16 pod_port;
	__be16 node_port;
	__be16 remote_port;
	__u8 kind;                 /* EV_* */
	__u8 proto;                /* IPPROTO_TCP, _UDP, _ICMP, _ICMPV6 */
	__u8 v6;                   /* 1: IPv6 addresses */
	__u8 policy;               /* 0, or 1 + the egressPolicies index whose address the pair took */
	__u8 reason;               /* EV_PAIR_ENDED: EV_END_*; EV_DROP: enum masq_drop_reason */
	__u8 nat_flags;            /* the pair's NAT_F_*; EV_DROP: EV_DROP_F_* */
	__u32 ifindex;             /* the uplink the pair's flow left by; EV_DROP: the hook's interface */
};

/* ---- events_ctl (ARRAY, 1 entry, mmapable): the rings' leases, and the log's counts ---- */
struct events_ctl {
	__u64 log_until;           /* bpf_ktime_get_ns() until which events go to events_log */
	__u64 live_until;          /* ... to events_live */
	__u32 log_pid;             /* the process holding the log's lease (0: none); the programs never read it */
	__u32 live_pid;            /* ... the live ring's */
	__u64 log_records;         /* session log records the log's reader wrote since it started */
	__u64 log_ipfix_unsent;    /* ... of them, those its IPFIX collector did not get (refused, no route) */
};

_Static_assert(sizeof(struct masq_event) == 112, "masq_event size");
_Static_assert(sizeof(struct events_ctl) == 40, "events_ctl size");

#endif /* MASQ_ABI_EVENTS_H */
