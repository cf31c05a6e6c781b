/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ebpf-masq data-plane ABI, the NAT tables (included by masq_abi.h): the pair
 * maps' keys and entries with their flags, the mapping hints (nat*_bind), the open
 * mappings and permits of natFiltering (nat*_open, nat*_permit), the expiry sweep's
 * state (nat_gc) and the busy endpoints' port bitmaps (nat_hot), each struct's
 * size checked at the end. A change here bumps MASQ_LAYOUT_VERSION as anywhere in
 * masq_abi.h.
 */
#ifndef MASQ_ABI_NAT_H
#define MASQ_ABI_NAT_H

#include <linux/types.h>
#include <linux/in6.h>
#include <linux/bpf.h>   /* struct bpf_timer, struct bpf_sock_tuple, BPF_F_NO_PREALLOC */
#include <stddef.h>      /* offsetof */

/* ---- nat4_fwd / nat4_rev: the two halves of every NAT pair ----
 * nat4_rev is one HASH map (not preallocated) of natMaxEntries entries.
 * nat4_fwd is an ARRAY_OF_MAPS of up to NAT_SHARDS_MAX such hash maps: the
 * loader picks the largest power of two that leaves every shard at least
 * NAT_SHARD_ENTRIES pairs (node_config.nat_shards: one shard below 2,048
 * natMaxEntries, 64 shards of 16,384 at the default); a forward key lives in the shard its
 * keyed hash picks (nat_shard). The expiry sweep walks one shard per run, so a
 * run holds its CPU for the walk of one shard, never of a whole table.
 * A pair is inserted and removed as one: the expiry sweep (nat_gc) removes both
 * halves of a pair idle for its timeout, and nothing evicts a half on its own.
 * A full shard (or reverse map) refuses new flows (DROP_NAT_FULL). Both halves
 * carry the pair's created_ns, which tells a pair from a later one with the same key.
 * fwd key: the pod's tuple as it leaves   {pod, remote, pod port, remote port}
 * rev key: the reply's tuple as it enters {remote, nat addr, remote port, nat port}
 * ICMP echo uses the identifier as the pod/nat "port" and 0 as the remote port.
 * A flow begun outside (NAT_F_INBOUND) is a forward half alone, keyed like a pod
 * flow's ({pod, remote, pod port, remote port}, as the pod's replies leave), whose
 * value is the pod's own address and port: found by the pod's packets, it tells the
 * egress program to leave them untranslated; it expires like a pair.
 */
#define NAT_SHARDS_MAX 64
#define NAT_SHARD_ENTRIES 1024   /* a shard holds at least this many pairs */
/*
 * The NAT halves: plain hash maps, never LRU, so no half is ever evicted without
 * its partner; the expiry sweep removes both (nat/gc.h). Not
 * preallocated: memory follows the flows in use, and creating a map of a million
 * entries costs nothing at the first ADD.
 */
#define NAT_MAP_FLAGS BPF_F_NO_PREALLOC
struct nat4_key {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};
#define NAT_F_TCP_CLOSING 0x1      /* FIN or RST seen: short timeout */
#define NAT_F_BY_RULE     0x2      /* made by a masqueradeRules entry, not a pod registration */
#define NAT_F_FAST        0x4      /* made by the fast path: replies may be redirected to the pod */
#define NAT_F_INBOUND     0x8      /* a flow begun outside (its first packet came in on an uplink,
				    * addressed to a pod or a rule's source): a forward half alone,
				    * addr/port the pod's own, whose packets leave untranslated */
#define NAT_F_FIN         0x10     /* this half's direction sent a FIN (fwd: the pod, rev: the remote) */
#define NAT_F_RST         0x20     /* this half's direction sent a RST */
#define NAT_F_ENDS        (NAT_F_FIN | NAT_F_RST) /* per half: never copied to the other half */
#define NAT_F_OPEN        0x40     /* the pod endpoint's natFiltering lets others in: its refresh keeps
				    * the endpoint's nat*_open entry (and nat*_permit entry) alive */
#define NAT_F_HOST        0x80     /* the host's own flow on the masquerade address: a pair whose addr is
				    * the node's (rev: the host socket's port), made when the host's tuple
				    * was a pod's pair (port remapped, as netfilter's null binding does) or
				    * for an echo request (no socket lookup finds a ping id) */
/*
 * How a TCP pair closes, per half (nat4_entry.close / nat6_entry.close; its own
 * direction: fwd the pod, rev the remote). With the half's NAT_F_FIN, fin_end is
 * the ack number that acknowledges that FIN (its sequence number + 1, host order).
 * A pair is finished when each direction's FIN was acknowledged by the other (the
 * close complete: netfilter's TIME_WAIT), and a new flow that needs its port takes
 * it over at once (CNT_NAT_FINISHED_REUSED); or when either direction sent a RST
 * and the pair has been quiet for NAT_QUIET_NS since (no window tracking vouches
 * for a RST, so a stray one must not hand a live flow's port away). A TCP pair
 * whose remote never sent a packet (a SYN never answered: lost, or its remote
 * silent, and its client gone) is taken over once quiet as long
 * (CNT_NAT_UNANSWERED_REUSED).
 */
#define NAT_C_FIN_FIRST   0x1      /* this direction's FIN was the pair's first (its end closed actively) */
#define NAT_C_PEER_FIN    0x2      /* the other direction sent a FIN (carried across when it was seen) */
#define NAT_C_ACKED_PEER  0x4      /* this direction acknowledged the other direction's FIN */
/*
 * A pair changes hands only through its reverse half's created_ns (the pair's
 * generation, which both halves carry), with an atomic compare-and-swap: a new
 * flow taking its port over, or the expiry sweep removing it, first swaps it to
 * created_ns | NAT_GEN_TAKEN (then the forward half goes, then the reverse half
 * is overwritten or removed); a pod reopening its own finished tuple swaps it to
 * created_ns + 1, and its forward half follows. Exactly one of them wins, so two
 * flows never hold one port towards one remote endpoint, and a look at a pair
 * that is stale by the time it acts (another CPU took it, or it opened again)
 * changes nothing. A reverse half marked taken is never taken over again, and
 * its own flow's packets wait (they are dropped) until it is gone.
 */
#define NAT_GEN_TAKEN     (1ULL << 63)
struct nat4_entry {
	__be32 addr;               /* fwd: nat address; rev: pod address */
	__be16 port;               /* fwd: nat port;    rev: pod port */
	__u8 flags;                /* NAT_F_* */
	__u8 policy;               /* 0, or 1 + the egressPolicies index whose address the pair took */
	__u32 ifindex;             /* uplink the flow left by */
	__u32 rule_id;             /* valid with NAT_F_BY_RULE */
	__u32 fin_end;             /* TCP, with NAT_F_FIN: the ack number that acknowledges this direction's FIN */
	__u8 close;                /* NAT_C_*: this direction's part in the TCP close */
	__u8 pad[3];
	__u64 created_ns;          /* bpf_ktime_get_ns() */
	__u64 last_seen_ns;        /* refreshed at most once per second */
	__u64 packets;
	__u64 bytes;
};

/* ---- nat6_fwd (ARRAY_OF_MAPS of HASH) / nat6_rev (HASH): IPv6 NAT pairs, same scheme as IPv4 ---- */
struct nat6_key {
	struct in6_addr saddr;
	struct in6_addr daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};
struct nat6_entry {
	struct in6_addr addr;      /* fwd: nat address; rev: pod address */
	__be16 port;
	__u8 flags;
	__u8 policy;               /* as in nat4_entry */
	__u32 ifindex;
	__u32 rule_id;
	__u32 fin_end;             /* as in nat4_entry */
	__u8 close;                /* as in nat4_entry */
	__u8 pad[7];
	__u64 created_ns;
	__u64 last_seen_ns;
	__u64 packets;
	__u64 bytes;
};

/* ---- nat4_bind / nat6_bind (LRU_HASH, natMaxEntries entries): endpoint-independent
 * mapping (RFC 4787 REQ-1, RFC 5382 REQ-1, RFC 5508 REQ-1 for echo ids). The node
 * address and port a pod endpoint (address, port, protocol) was first mapped to; a
 * new flow from that endpoint, to any remote, tries that port first, then the pod's
 * own port (port preservation, when it is inside portRange), then random ones. A
 * hint, not state: the port is claimed through nat*_rev as for any flow (BPF_NOEXIST),
 * so a stale or evicted binding costs one probe and never misdelivers a packet.
 * Written when a flow of an endpoint without a (usable) binding gets its port.
 */
struct nat4_ep {
	__be32 addr;               /* the pod endpoint */
	__be16 port;
	__u8 proto;
	__u8 pad;
};
struct nat4_bind {
	__be32 addr;               /* its mapping */
	__be16 port;
	__u16 pad;
};
struct nat6_ep {
	struct in6_addr addr;
	__be16 port;
	__u8 proto;
	__u8 pad;
};
struct nat6_bind {
	struct in6_addr addr;
	__be16 port;
	__u16 pad;
};

/* ---- nat4_open / nat6_open (LRU_HASH, natMaxEntries, key nat4_ep / nat6_ep: the
 * node address, port and protocol of a mapping): the mappings of pod endpoints whose
 * natFiltering lets packets from others in. A packet in on an uplink that answers no
 * pair, to such a mapping, from a remote the filter admits (endpoint-independent: any;
 * address-dependent: one with a nat*_permit entry), while the mapping is active
 * (last_seen within the protocol's timeout, refreshed with its pairs), gets a pair of
 * its own on the mapping's port and is translated to the pod endpoint. LRU: a mapping
 * no flow uses any more may be evicted, which only closes it. */
struct nat4_open {
	__be32 addr;               /* the pod endpoint */
	__be16 port;
	__u8 filter;               /* NAT_FILTER_AD or NAT_FILTER_EI */
	__u8 flags;                /* NAT_F_BY_RULE for the pairs made from it */
	__u32 ifindex;
	__u32 rule_id;
	__u64 last_seen_ns;
};
struct nat6_open {
	struct in6_addr addr;
	__be16 port;
	__u8 filter;
	__u8 flags;
	__u32 ifindex;
	__u32 rule_id;
	__u32 pad;
	__u64 last_seen_ns;
};
/* ---- nat4_permit / nat6_permit (LRU_HASH, natMaxEntries): for address-dependent
 * filtering, the remote addresses a mapping has sent to: {remote, nat addr, nat port,
 * proto} -> the pod endpoint's address and when it last did. */
struct nat4_permit_key {
	__be32 remote;
	__be32 addr;
	__be16 port;
	__u8 proto;
	__u8 pad;
};
struct nat4_permit {
	__be32 pod;
	__u32 pad;
	__u64 last_seen_ns;
};
struct nat6_permit_key {
	struct in6_addr remote;
	struct in6_addr addr;
	__be16 port;
	__u8 proto;
	__u8 pad;
};
struct nat6_permit {
	struct in6_addr pod;
	__u64 last_seen_ns;
};

/* ---- nat_gc (ARRAY, 1 entry): the expiry sweep's timer and its progress ----
 * One bpf_timer for the node, armed by the first NAT pair created. Every run
 * walks one forward shard: a cycle is nat4_fwd's shards, then
 * nat6_fwd's while IPv6 pairs may exist. A cycle that found no pair, with no
 * pair created meanwhile, stops the timer; the next new pair restarts it.
 */
#define NAT_GC_ARMED 1ULL   /* armed: the timer is running */
#define NAT_GC_NEW4  2ULL   /* armed: an IPv4 pair was created since the last run */
#define NAT_GC_NEW6  4ULL   /* armed: an IPv6 pair was created since the last run */
#define NAT_GC_NEW_HOST  8ULL  /* armed: a host pair (NAT_F_HOST) was created since the last run */
#define NAT_GC_SEEN_HOST 16ULL /* seen: this cycle found a live host pair */
#define NAT_GC_WALK6 1U     /* walk: this cycle walks nat6_fwd's shards too */
struct nat_gc {
	struct bpf_timer timer;
	__u64 armed;               /* NAT_GC_*: set by new pairs, taken by each run */
	__u64 last_run_ns;         /* bpf_ktime_get_ns() of the last run */
	__u64 last_checked;        /* pairs the last (or running) run looked at (one shard) */
	__u64 runs;
	__u64 cycle_checked;       /* pairs looked at so far in this cycle (both families) */
	__u64 cycle6_checked;      /* ... of them IPv6 */
	__u64 last_cycle_checked;  /* pairs the last whole cycle looked at */
	__u64 cycles;              /* whole cycles completed */
	__u32 pos;                 /* next shard: below nat_shards nat4_fwd's, then nat6_fwd's */
	__u32 walk;                /* NAT_GC_WALK6 */
	__u64 seen;                /* NAT_GC_NEW* taken during this cycle */
	__u64 last_run_took_ns;    /* how long the last run held its CPU (softirq) */
	__u64 max_run_took_ns;     /* the longest run since the maps were created */
	__u64 hosts;               /* 1: host pairs may exist, so the host's own packets look theirs up
				    * (set by a new one; each cycle sets or clears it by what it found) */
	__u64 hot;                 /* 1: nat_hot has held a record (its bits are kept up to date) */
};

/* ---- nat_hot (HASH, no preallocation, NAT_HOT_MAX entries): the ports towards one
 * busy remote endpoint. Made by a new flow whose cheap tries (its preferred ports and
 * NAT_PROBES random ones) all found their port held: from then on a port search towards
 * that endpoint (protocol, node address, remote address and port) looks for its port
 * in the bitmap instead of at random, so it finds a free or reusable port whenever one
 * exists (nat/hot_tmpl.h hot_probe). A bit per port of portRange (less
 * nodePortRange), by offset: set = held by a pair that is open or half-closed (its
 * close, or its removal by the sweep, clears it); clear = free, or held by a closing
 * or never-answered pair that may be reusable, or not known yet. A hint: a clear bit
 * costs a probe of the port (which sets it if the port turns out held), and the port
 * is claimed through nat*_rev as always. Built by a full scan of the range (rev
 * lookups) when made, and made again from the tables, at most once a second, when a
 * search finds nothing (what the pairs removed by the plugin itself, a host socket
 * gone or a pair turned reusable by time left set). Removed by the sweep once unused
 * for NAT_HOT_IDLE_S seconds.
 *
 * Fair shares (RFC 6888 REQ-4): the record also counts, per source (a pod address,
 * the node's own, a rule-matched tunnel client), the ports whose bits are set on its
 * behalf (the scan tallies them; a bit set or cleared moves its source's count). While
 * some but fewer than range / NAT_SHARE_RESERVE of the endpoint's ports are free, a source
 * holding at least range / (sources holding ports + 1) of them is refused
 * (DROP_OVER_SHARE): the last ports go to sources holding less, and one newcomer always
 * finds room. Counts are hints as the bits are (made again by each scan).
 */
#define NAT_HOT_MAX    1024
#define NAT_HOT_WORDS  1024        /* 65,536 port offsets */
#define NAT_HOT_IDLE_S 60
#define NAT_HOT_SLOTS  64          /* sources counted per busy endpoint (open addressing) */
#define NAT_SHARE_RESERVE 16       /* "short": fewer than range / 16 ports free */
struct nat_hot_key {
	__u32 nat_addr[4];         /* the node address (IPv4: [0], the rest 0) */
	__u32 remote[4];           /* the remote endpoint's address (IPv4: [0]) */
	__be16 rport;              /* its port (ICMP: the echo id is the pair's port: 0 here) */
	__u8 proto;
	__u8 v6;                   /* 1: IPv6 addresses */
};
struct nat_hot_src {
	__u32 id;                  /* the source: its address folded to 32 bits (nat_src_id); 0: free */
	__u32 held;                /* set bits on its behalf */
};
struct nat_hot {
	__u64 scanned_ns;          /* bpf_ktime_get_ns() of the last full scan */
	__u64 used_ns;             /* of the last search that used it */
	__u32 held;                /* set bits (ports held) */
	__u32 pad;
	struct nat_hot_src src[NAT_HOT_SLOTS];
	__u64 bits[NAT_HOT_WORDS]; /* bit (offset & 63) of word (offset >> 6): set = held */
};
/* ---- size checks ---- */
/* host_holds passes a reverse key as the socket lookup's tuple: same layout. */
#define TUPLE_LIKE(key, fam)                                                                       \
	(offsetof(struct key, saddr) == offsetof(struct bpf_sock_tuple, fam.saddr) &&                \
	 offsetof(struct key, daddr) == offsetof(struct bpf_sock_tuple, fam.daddr) &&                \
	 offsetof(struct key, sport) == offsetof(struct bpf_sock_tuple, fam.sport) &&                \
	 offsetof(struct key, dport) == offsetof(struct bpf_sock_tuple, fam.dport))
_Static_assert(TUPLE_LIKE(nat4_key, ipv4), "nat4_key starts like bpf_sock_tuple.ipv4");
_Static_assert(TUPLE_LIKE(nat6_key, ipv6), "nat6_key starts like bpf_sock_tuple.ipv6");
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
_Static_assert(sizeof(struct nat4_key) == 16, "nat4_key size");
_Static_assert(sizeof(struct nat4_entry) == 56, "nat4_entry size");
_Static_assert(sizeof(struct nat_gc) == 128, "nat_gc size");
_Static_assert(sizeof(struct nat_hot_key) == 36, "nat_hot_key size");
_Static_assert(sizeof(struct nat_hot) == 24 + 8 * NAT_HOT_SLOTS + 8 * NAT_HOT_WORDS, "nat_hot size");
_Static_assert(sizeof(struct nat6_key) == 40, "nat6_key size");
_Static_assert(sizeof(struct nat6_entry) == 72, "nat6_entry size");

#include "masq_abi_events.h"

#endif /* MASQ_ABI_NAT_H */
