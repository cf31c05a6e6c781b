/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ebpf-masq data-plane ABI: every map name, key/value struct, counter index and
 * drop reason, flag and limit shared between the BPF programs and the Rust plugin,
 * and the size checks of every struct (below, at the end). What only the C side
 * uses lives in bpf/lib/. The Rust mirror is plugin/src/bpf/abi.rs: its tests
 * demand a Rust constant of equal value for every #define and enum member here
 * (or its name on abi.rs's C-only list) and compare each struct's size and member
 * offsets with the BTF of the compiled objects.
 *
 * Any change to a struct or a map's meaning bumps MASQ_LAYOUT_VERSION, which is
 * part of the pin directory (<pinPath>/v<N>/), so a new binary never reuses an
 * incompatible pinned map.
 */
#ifndef MASQ_ABI_H
#define MASQ_ABI_H

#include <linux/types.h>
#include <linux/in6.h>
#include <linux/bpf.h>   /* struct bpf_timer, struct bpf_sock_tuple, BPF_F_NO_PREALLOC */
#include <stddef.h>      /* offsetof */

#define MASQ_LAYOUT_VERSION 16

/* ---- config (ARRAY, 1 entry): node-wide knobs written by the plugin ---- */
struct masq_config {
	__u16 port_min;            /* host byte order, inclusive */
	__u16 port_max;            /* host byte order, inclusive */
	__u32 flags;               /* MASQ_F_* */
	__u32 tcp_timeout_s;       /* idle timeout, established TCP */
	__u32 tcp_closing_timeout_s; /* after FIN or RST was seen */
	__u32 udp_timeout_s;
	__u32 icmp_timeout_s;
	__u32 nat_seed;            /* the NAT shard hash's key (nat_shard.h): random per node,
				    * chosen by the loader, built into the programs, kept here */
	__u32 nat_shards;          /* forward shards in use (a power of two, at most NAT_SHARDS_MAX),
				    * also built into the programs */
	__u16 skip_min;            /* ports inside [port_min, port_max] never handed out (nodePortRange: */
	__u16 skip_max;            /* no socket holds a NodePort); host order, inclusive; {0, 0}: none */
	__u32 udp_one_shot_timeout_s; /* a UDP pair whose packets all came within NAT_UDP_STREAM_NS
				       * of its first (a DNS query): netfilter's unreplied UDP timeout */
};

#define MASQ_F_FAST_PATH 0x1      /* fastPath: route, translate and redirect pod flows in BPF */
#define MASQ_F_OPEN_MAPPINGS 0x2  /* some pod or rule has natFiltering other than address-and-port-
				   * dependent: uplink ingress looks unanswered packets up in nat*_open */

/*
 * The fast path marks a packet it translated and sent to the uplink in the
 * tc control block (__sk_buff cb[0], carried across bpf_redirect_neigh), so the
 * uplink's egress program passes it on without a lookup. A packet on the normal
 * path cannot carry the mark: the node's IP receive path zeroes that part of
 * the control block (IPCB/IP6CB) before routing it to the uplink.
 */
#define FP_CB_MARK 0x6d61fa57

/* natFiltering (RFC 4787 REQ-8), in pod_info.flags, rule_info/rule6_info.flags and
 * attachment_info.flags alike; neither bit: address-and-port-dependent (the default). */
#define NAT_FILTER_AD 0x2          /* address-dependent: any port of a remote the endpoint sent to */
#define NAT_FILTER_EI 0x4          /* endpoint-independent: any remote ("full cone") */
#define NAT_FILTER_MASK (NAT_FILTER_AD | NAT_FILTER_EI)

/* What the fast path needs to move a pod's packets without the host stack
 * (written at ADD for every pod, in each of its pods4/pods6 entries: the lookup
 * that checks a packet's source, or finds a reply's pod, brings it along). */
#define POD_L2_F_HAS_MAC 0x1       /* pod_mac and gw_mac are known: replies may be redirected */
struct pod_l2 {
	__u8 pod_mac[6];           /* the container interface's MAC (prevResult or its netns) */
	__u8 gw_mac[6];            /* source MAC of redirected replies: bridge (or host veth) MAC */
	__u32 l3_ifindex;          /* where the stack sees the pod's packets: bridge master or the
				    * veth; 0: unknown (the fast path leaves the pod to the stack) */
	__u32 flags;               /* POD_L2_F_* */
};

/* ---- pods4 (HASH, key __be32) / pods6 (HASH, key struct in6 16 bytes) ---- */
#define POD_F_NAT_OUTGOING 0x1
/* pod_info.flags and attachment_info.flags, bits 16-31: the pod's port limit (podPortLimit,
 * or a lower ebpf-masq.io/port-limit), the most ports it may hold towards one remote
 * endpoint (port_counts); 0: none */
#define PORT_LIMIT_SHIFT 16
struct pod_info {
	__u32 ifindex;             /* host-side veth in the node netns */
	__u32 flags;               /* POD_F_*, the NAT_FILTER_* bits, the port limit (PORT_LIMIT_SHIFT) */
	struct pod_l2 l2;
	__u32 egress;              /* the egressPolicies that select the pod: bit i = policy i (0: none) */
};

/* ---- svc4 / svc6 (LPM_TRIE, key lpm4_key / lpm6_key, value __u32 index in serviceCIDRs):
 * destinations the fast path never takes (kube-proxy ClusterIPs: netfilter must DNAT them).
 */

/* ---- uplinks (HASH, key __u32 ifindex) ---- */
#define UPLINK_F_L3      0x1       /* no Ethernet header (link/none: WireGuard, TUN) */
#define UPLINK_F_HAS_V4  0x2
#define UPLINK_F_HAS_V6  0x4
#define UPLINK_F_POOL4   0x8       /* pods and rule sources take their IPv4 address from masq_pool */
#define UPLINK_F_POOL6   0x10      /* the same for IPv6 */
#define UPLINK_F_PRESENT 0x80      /* uplinks_direct only: this slot holds an uplink */
struct uplink_info {
	__be32 masq_v4;            /* address pods are masqueraded to on this uplink */
	__u32 flags;               /* UPLINK_F_* */
	__u8 masq_v6[16];
};

/* ---- masq_pool (ARRAY, 1 + EGRESS_POLICIES_MAX entries): slot 0, masqueradeAddress
 * with more than one address of a family; slot 1 + i, egress policy i's addresses
 * (len 1: a single address; 0: none of that family, the network's is used). Paired pooling (RFC 4787 REQ-2): a source (pod, tunnel client)
 * always takes the same address, v4[low 32 bits of its address % len4] (v6 the
 * same), so sequentially allocated pods go round the pool. v4[0] / v6[0] is also
 * the uplinks' masq address (the host's own traffic is recognised by it). */
#define MASQ_POOL_MAX 64
struct masq_pool {
	__u32 len4;                /* addresses in v4 (the uplinks have UPLINK_F_POOL4 when >= 2) */
	__u32 len6;
	__be32 v4[MASQ_POOL_MAX];
	struct in6_addr v6[MASQ_POOL_MAX];
};

/* ---- egress policies (egressPolicies): which address a selected pod's traffic leaves with,
 * per destination. A pod's pod_info.egress is the mask of the policies selecting it; the
 * plugin flattens each mask's policies into egress4/egress6 (LPM_TRIE, key: the mask, then
 * the destination), each destination labelled with the first policy of the mask that holds
 * it, so one longest-prefix lookup gives the first match. A policy's addresses are its
 * masq_pool slot (1 + index).
 */
#define EGRESS_POLICIES_MAX 32
#define EGRESS_ENTRIES_MAX 4096
#define EGRESS_F_NO_NAT 0x1        /* natOutgoing: false: not masqueraded */
struct egress4_key {
	__u32 prefixlen;           /* 32 (the mask) + destination prefix length */
	__u32 set;                 /* a pod_info.egress mask */
	__be32 daddr;
};
struct egress6_key {
	__u32 prefixlen;
	__u32 set;
	struct in6_addr daddr;
};
struct egress_hit {
	__u32 policy;              /* index into egressPolicies */
	__u32 flags;               /* EGRESS_F_* */
};
/* egress_policies (ARRAY, EGRESS_POLICIES_MAX entries), plugin-written, read by status,
 * nat list, explain and metrics (the programs never read it): what policy i is. */
#define EGRESS_NAME_LEN 64
#define EGRESS_SPEC_LEN 1976
struct egress_policy {
	__u32 used;                /* 1: slot i holds policy i */
	__u32 flags;               /* EGRESS_F_* */
	char name[EGRESS_NAME_LEN];  /* NUL-terminated */
	char spec[EGRESS_SPEC_LEN];  /* the policy as compact JSON (selector, destinations, action) */
};
/* egress_stats (PERCPU_ARRAY, EGRESS_POLICIES_MAX entries): per policy */
struct egress_stats {
	__u64 packets;             /* translated with the policy's address */
	__u64 bytes;
	__u64 flows;               /* pairs made with it */
	__u64 unmasqueraded;       /* packets a natOutgoing:false policy left untouched */
};

/* ---- uplinks_direct (ARRAY, index = ifindex < UPLINKS_DIRECT): the same entries as
 * `uplinks` for the interfaces whose ifindex is that small (the plugin writes both,
 * with UPLINK_F_PRESENT here), so the programs find an uplink by an array lookup,
 * which the kernel inlines, rather than a hash lookup (~10 ns a packet on every
 * uplink hook); a larger ifindex is looked up in `uplinks`. */
#define UPLINKS_DIRECT 4096

/* ---- excl4 / excl6 (LPM_TRIE): destinations never masqueraded for pods ---- */
enum excl_reason {
	EXCL_NATIVE_ROUTING = 1,   /* nativeRoutingCIDR */
	EXCL_NON_MASQ = 2,         /* nonMasqueradeCIDRs */
	EXCL_LINK_LOCAL = 3,       /* 169.254.0.0/16, fe80::/10 unless masqLinkLocal */
};
struct lpm4_key {
	__u32 prefixlen;
	__be32 addr;
};
struct lpm6_key {
	__u32 prefixlen;
	__u8 addr[16];
};
struct excl_info {
	__u32 reason;              /* enum excl_reason */
	__u32 index;               /* position of the CIDR in its config list */
};

/* ---- rules4 (LPM_TRIE): user-defined masquerade rules, keyed by out ifindex + source ---- */
#define MAX_RULES 256
struct rule4_key {
	__u32 prefixlen;           /* 32 (ifindex) + source prefix length */
	__u32 ifindex;             /* stored big-endian so it is a prefix of the key */
	__be32 saddr;
};
#define RULE_F_TO_ADDRESS 0x1
struct rule_info {
	__u32 id;                  /* index into rule_stats and rule_except4 */
	__u32 flags;               /* RULE_F_* */
	__be32 to_v4;              /* toAddress when RULE_F_TO_ADDRESS */
	__u32 pad;
};
/* rule_except4 (LPM_TRIE): key {prefixlen = 32 + dst prefix, rule id (big-endian), daddr} */
struct rule_except4_key {
	__u32 prefixlen;
	__u32 rule_id;
	__be32 daddr;
};
struct rule_stats {
	__u64 packets;
	__u64 bytes;
};

/* ---- nat4_fwd / nat4_rev: the two halves of every NAT pair ----
 * nat4_rev is one HASH map (not preallocated) of natMaxEntries entries.
 * nat4_fwd is an ARRAY_OF_MAPS of up to NAT_SHARDS_MAX such hash maps: the
 * loader picks the largest power of two that leaves every shard at least
 * NAT_SHARD_ENTRIES pairs (masq_config.nat_shards: one shard below 2,048
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
 * its partner; the expiry sweep removes both (nat_gc.h). Not
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

/* ---- IPv6 rules: rules6 (LPM_TRIE) / rule_except6 (LPM_TRIE) ---- */
struct rule6_key {
	__u32 prefixlen;           /* 32 (ifindex) + source prefix length */
	__u32 ifindex;             /* big-endian */
	struct in6_addr saddr;
};
struct rule6_info {
	__u32 id;                  /* shares the id space (and rule_stats) with IPv4 rules */
	__u32 flags;               /* RULE_F_* */
	struct in6_addr to_v6;     /* toAddress when RULE_F_TO_ADDRESS */
};
struct rule_except6_key {
	__u32 prefixlen;
	__u32 rule_id;             /* big-endian */
	struct in6_addr daddr;
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
 * exists (nat_port_tmpl.h hot_probe). A bit per port of portRange (less
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

/* ---- refusals (LRU_HASH, REFUSALS_MAX entries): new flows refused per source address
 * (a pod's, the node's, a tunnel client's), for status, metrics and explain per pod.
 * Counted by the programs; a pod's DEL removes its addresses' entries. */
#define REFUSALS_MAX 4096
struct refusal_key {
	__u32 addr[4];             /* IPv4: [0], the rest 0 */
	__u32 v6;                  /* 1: IPv6 */
};
struct refusals {
	__u64 no_port;             /* DROP_NO_PORT: no port free towards the remote endpoint */
	__u64 over_share;          /* DROP_OVER_SHARE: over its share of a busy endpoint's ports */
	__u64 over_limit;          /* DROP_OVER_LIMIT: at its port limit towards the endpoint */
};

/* ---- port_counts (LRU_HASH, PORT_COUNTS_MAX entries): for pods with a port limit only,
 * an upper bound of the ports a pod holds towards one remote endpoint: one more at each
 * port it claims there, set to the exact count (the endpoint's nat_hot record) each time
 * the bound reaches the limit. The bound below the limit: the pod is under it, no record
 * needed; at the limit: the record decides (made and scanned if the endpoint has none),
 * and a pod holding its limit is refused (DROP_OVER_LIMIT). A pod's DEL removes its
 * entries. */
#define PORT_COUNTS_MAX 65536
struct port_count_key {
	__u32 src[4];              /* the pod's address (IPv4: [0], the rest 0) */
	__u32 nat_addr[4];         /* the node address */
	__u32 remote[4];           /* the remote endpoint's address */
	__be16 rport;              /* its port (ICMP: 0) */
	__u8 proto;
	__u8 v6;
};

/* ---- reserved_ports (ARRAY, RESERVED_PORTS_MAX entries), plugin-only: the port
 * ranges the plugin itself added to net.ipv4.ip_local_reserved_ports (each
 * portRange minus what was reserved already), so uninstall gives back exactly
 * those; {0, 0} is a free slot. Ports in host byte order.
 */
#define RESERVED_PORTS_MAX 64
struct port_range {
	__u16 lo;
	__u16 hi;
};

/* ---- frag4 / frag6 (LRU_HASH): the ports of a fragmented datagram, learned from
 * its first fragment, so the later fragments (no L4 header) find their NAT pair.
 * Keyed by the datagram's addresses as they were before translation, the fragment
 * id and the protocol that follows the IP (IPv6: fragment) header.
 */
struct frag4_key {
	__be32 saddr;
	__be32 daddr;
	__be16 id;
	__u8 proto;
	__u8 pad;
};
struct frag6_key {
	struct in6_addr saddr;
	struct in6_addr daddr;
	__be32 id;
	__u8 proto;
	__u8 pad[3];
};
struct frag_ports {
	__be16 sport;
	__be16 dport;
	__u8 proto;                /* the L4 protocol (IPv6: after any headers behind the fragment header) */
	__u8 pad[3];
};

/* ---- veths (PERCPU_HASH, key __u32 host-side veth ifindex): everything the pod veth
 * program needs about the pod behind a veth, in the one lookup each of its packets makes:
 * the pod's first address of each family (the source check; a pod's other addresses
 * are checked in pods4/pods6), its pod facts (the fast path) and its counters. Per CPU,
 * so the counters need no atomics; the plugin writes the same facts to every CPU's copy
 * and sums the counters. */
struct pod_stats {
	__u64 packets;             /* from the pod, accepted */
	__u64 bytes;
	__u64 spoofed;             /* dropped: source not the pod's */
};
#define VETH_F_ADDR4 0x1           /* addr4 holds one of the pod's IPv4 addresses */
#define VETH_F_ADDR6 0x2           /* addr6 holds one of the pod's IPv6 addresses */
struct veth_info {
	struct pod_stats stats;    /* this CPU's */
	struct pod_info pod;       /* as in the pod's pods4/pods6 entries */
	__be32 addr4;
	struct in6_addr addr6;
	__u32 flags;               /* VETH_F_* */
};

/* ---- attachments (HASH): what each CNI ADD registered, so DEL/CHECK/GC can undo or
 * verify exactly that. Only the plugin reads it; it lives in bpffs with the rest of
 * the state, so it vanishes with the pins (a reboot) like everything it describes.
 * key: container ID (NUL padded; IDs longer than 71 bytes are shortened by the
 * plugin, keeping a hash) and ifname.
 */
#define ATT_ID_LEN 72               /* a 64-hex-digit runtime ID fits whole */
#define ATT_IFNAME_LEN 16
#define ATT_MAX_ADDRS 4
struct attachment_key {
	char container_id[ATT_ID_LEN];
	char ifname[ATT_IFNAME_LEN];
};
#define ATT_F_NAT_OUTGOING 0x1
/* and the pod's NAT_FILTER_* bits, and its port limit (PORT_LIMIT_SHIFT) */
struct attachment_info {
	__u32 veth_ifindex;
	__u32 flags;               /* ATT_F_*, the NAT_FILTER_* bits, the port limit (PORT_LIMIT_SHIFT) */
	__u32 n_v4;
	__u32 n_v6;
	__be32 v4[ATT_MAX_ADDRS];
	__u8 v6[ATT_MAX_ADDRS][16];
	__u64 created_ns;          /* CLOCK_MONOTONIC */
	char veth_name[16];
};

/* ---- pod_meta (HASH): who the pod of an attachment is, for operators and policies.
 * key: struct attachment_key. The Kubernetes namespace and name from CNI_ARGS
 * (K8S_POD_NAMESPACE, K8S_POD_NAME; empty when the runtime gave none) and the pod's
 * ebpf-masq.io/ annotations from runtimeConfig (the io.kubernetes.cri.pod-annotations
 * capability) as one compact JSON object ("" when none). NUL padded. Only the plugin
 * reads it.
 */
#define POD_META_NS_LEN 64          /* a namespace is a DNS label: 63 bytes at most */
#define POD_META_NAME_LEN 256       /* a pod name is a DNS subdomain: 253 at most */
#define POD_META_ANN_LEN 1024
/* A port of the node that portmap DNATs to a pod (a hostPort, from runtimeConfig's
 * portMappings): no socket holds it, so host_holds looks it up in host_ports. */
#define POD_HOST_PORTS_MAX 16
struct host_port {
	__u16 port;                /* host byte order */
	__u8 proto;                /* IPPROTO_TCP / IPPROTO_UDP */
	__u8 pad;
};
struct pod_meta {
	char k8s_namespace[POD_META_NS_LEN];
	char k8s_name[POD_META_NAME_LEN];
	char annotations[POD_META_ANN_LEN];
	struct host_port host_ports[POD_HOST_PORTS_MAX]; /* the pod's hostPorts; {0} ends the list */
};

/* ---- host_ports (HASH, key struct host_port, value __u32 unused), plugin-written:
 * every registered pod's hostPorts (rebuilt from pod_meta at each ADD and DEL). A
 * new pair never takes one (host_holds): portmap would DNAT the remote's new
 * connections to it to the hostPort's pod. */
#define HOST_PORTS_MAX 4096

/* ---- counters (PERCPU_ARRAY, index enum masq_counter) ---- */
enum masq_counter {
	CNT_SNAT_PKTS_V4 = 0,
	CNT_SNAT_BYTES_V4,
	CNT_RNAT_PKTS_V4,
	CNT_RNAT_BYTES_V4,
	CNT_SNAT_PKTS_V6,
	CNT_SNAT_BYTES_V6,
	CNT_RNAT_PKTS_V6,
	CNT_RNAT_BYTES_V6,
	CNT_NAT_CREATED,           /* NAT pairs created */
	CNT_NAT_RECLAIMED,         /* expired pairs whose port was taken over */
	CNT_NAT_EXPIRED,           /* idle pairs removed (both halves) by the expiry sweep */
	CNT_ALLOC_FAIL,            /* no free port within the probe budget */
	CNT_SKIP_EXCLUDED,         /* pod packet not masqueraded: destination excluded */
	CNT_SKIP_NO_NAT_OUTGOING,  /* pod packet not masqueraded: natOutgoing false */
	CNT_ICMP_ERR_IN,           /* ICMP errors about a masqueraded flow, sent back to the pod */
	CNT_ICMP_ERR_OUT,          /* ICMP errors about a translated reply (from the pod or the node), outward */
	CNT_FRAGS,                 /* non-first fragments translated through the frag maps */
	CNT_FP_EGRESS,             /* fast path: pod packets translated and redirected to an uplink */
	CNT_FP_INGRESS,            /* fast path: replies translated and redirected to the pod */
	CNT_FP_FALLBACK,           /* fast path on: pod packets left to the host stack */
	CNT_PORT_PROBES,           /* ports tried by new flows' port searches (the successful one too) */
	CNT_NAT_GC_ARM_FAILED,     /* the expiry sweep's timer could not be armed (the next new pair retries) */
	CNT_INBOUND_CREATED,       /* flows begun outside (towards a pod or a rule's source) tracked */
	CNT_INBOUND_PKTS,          /* packets of such flows leaving by an uplink, left untranslated */
	CNT_INBOUND_UNTRACKED,     /* such flows not tracked: the table (shard) was full */
	CNT_MAP_REUSED,            /* new flows given their endpoint's existing mapping (nat*_bind) */
	CNT_MAP_PRESERVED,         /* new flows given the pod's own port (port preservation) */
	CNT_NAT_FINISHED_REUSED,   /* finished TCP pairs (both FINs acknowledged, or a RST) whose port a new flow took over */
	CNT_FILTER_ADMITTED,       /* packets from a new remote let in to a mapping by natFiltering (a pair made) */
	CNT_HOST_TRACKED,          /* host flows on the masquerade address given a pair (NAT_F_HOST) */
	CNT_HOST_REMAPPED,         /* of those, flows whose own port was held by a pod's pair: another port */
	CNT_HOST_SOCKET_AVOIDED,   /* candidate ports a new pair skipped: a host socket would get its replies */
	CNT_NAT_UNANSWERED_REUSED, /* TCP pairs never answered (the remote sent nothing) whose port a new
				    * flow took over once they were quiet (a SYN lost, its client gone) */
	CNT_NAT_HOT_SCANS,         /* full scans of the range towards a busy remote endpoint (nat_hot made or remade) */
	CNT_NAT_HOT_FOUND,         /* new flows whose port the bitmap of a busy endpoint found */
	CNT_MAX
};

/* ---- drops (PERCPU_ARRAY, index enum masq_drop_reason) ---- */
enum masq_drop_reason {
	DROP_SPOOFED_SOURCE = 0,   /* veth: source is not one of the pod's addresses */
	DROP_NO_PORT,              /* uplink: port allocation failed */
	DROP_NAT_INSERT,           /* uplink: NAT map insert failed (not EEXIST) */
	DROP_FRAGMENT,             /* uplink: fragment that cannot be translated (no L4 ports) */
	DROP_MALFORMED,            /* truncated or invalid header on a flow to masquerade */
	DROP_CSUM,                 /* checksum helper failed */
	DROP_UNSUPPORTED_PROTO,    /* protocol we cannot masquerade (not TCP/UDP/ICMP echo) */
	DROP_FRAG_NO_STATE,        /* later fragment seen before its first: ports unknown */
	DROP_NAT_FULL,             /* uplink: NAT table (the flow's shard) full: new flow refused */
	DROP_OVER_SHARE,           /* uplink: the source holds over its share of a busy endpoint's ports */
	DROP_OVER_LIMIT,           /* uplink: the pod holds its port limit towards the remote endpoint */
	DROP_MAX
};

/* ---- size checks: the Rust mirror asserts the same numbers (and checks the offsets) ---- */
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
_Static_assert(sizeof(struct pod_info) == 32, "pod_info size");
_Static_assert(sizeof(struct egress4_key) == 12, "egress4_key size");
_Static_assert(sizeof(struct egress6_key) == 24, "egress6_key size");
_Static_assert(sizeof(struct egress_hit) == 8, "egress_hit size");
_Static_assert(sizeof(struct egress_stats) == 32, "egress_stats size");
_Static_assert(sizeof(struct egress_policy) == 2048, "egress_policy size");
_Static_assert(EGRESS_POLICIES_MAX <= 32, "a pod's policies are a 32-bit mask");
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
_Static_assert(sizeof(struct nat4_entry) == 56, "nat4_entry size");
_Static_assert(sizeof(struct nat_gc) == 128, "nat_gc size");
_Static_assert(sizeof(struct nat_hot_key) == 36, "nat_hot_key size");
_Static_assert(sizeof(struct nat_hot) == 24 + 8 * NAT_HOT_SLOTS + 8 * NAT_HOT_WORDS, "nat_hot size");
_Static_assert(sizeof(struct refusal_key) == 20, "refusal_key size");
_Static_assert(sizeof(struct refusals) == 24, "refusals size");
_Static_assert(sizeof(struct port_count_key) == 52, "port_count_key size");
_Static_assert(sizeof(struct port_range) == 4, "port_range size");
_Static_assert(sizeof(struct pod_stats) == 24, "pod_stats size");
_Static_assert(sizeof(struct veth_info) == 80, "veth_info size");
_Static_assert(sizeof(struct rule6_key) == 24, "rule6_key size");
_Static_assert(sizeof(struct rule6_info) == 24, "rule6_info size");
_Static_assert(sizeof(struct rule_except6_key) == 24, "rule_except6_key size");
_Static_assert(sizeof(struct nat6_key) == 40, "nat6_key size");
_Static_assert(sizeof(struct nat6_entry) == 72, "nat6_entry size");
_Static_assert(sizeof(struct frag4_key) == 12, "frag4_key size");
_Static_assert(sizeof(struct frag6_key) == 40, "frag6_key size");
_Static_assert(sizeof(struct frag_ports) == 8, "frag_ports size");
_Static_assert(sizeof(struct attachment_key) == 88, "attachment_key size");
_Static_assert(sizeof(struct attachment_info) == 120, "attachment_info size");

#endif /* MASQ_ABI_H */
