/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ebpf-masq data-plane ABI: every map name, key/value struct, counter index and
 * drop reason, flag and limit shared between the BPF programs and the Rust plugin,
 * and the size checks of every struct (below, at the end). What only the C side
 * uses lives in bpf/lib/; the NAT tables' part is in masq_abi_nat.h, included below.
 * Rust's view of both is generated from them at build time (bindgen in plugin/build.rs,
 * plugin/src/bpf/abi/generated.rs), and its tests compare each struct's size and member
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

#define MASQ_LAYOUT_VERSION 19

/* ---- config (ARRAY, 1 entry): node-wide knobs written by the plugin ---- */
struct node_config {
	__u16 port_min;            /* host byte order, inclusive */
	__u16 port_max;            /* host byte order, inclusive */
	__u32 flags;               /* MASQ_F_* */
	__u32 tcp_timeout_s;       /* idle timeout, established TCP */
	__u32 tcp_closing_timeout_s; /* after FIN or RST was seen */
	__u32 udp_timeout_s;
	__u32 icmp_timeout_s;
	__u32 nat_seed;            /* the NAT shard hash's key (nat/shard.h): random per node,
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

/*
 * The loader's one run of the uplink egress program (BPF_PROG_TEST_RUN, right
 * after a load, on the loopback device, which is never an uplink) carries
 * NAT_GC_PRIME_MARK in cb[0]: the program gives the expiry sweep's bpf_timer its
 * memory and its callback, without starting it, and returns NAT_GC_PRIME_RET +
 * errno (0: primed; a value no tc action means, so a packet would pass).
 * bpf_timer_init allocates without waiting (it may fail for a moment); the loader
 * can try again, a packet could not. A new pair then only starts the timer.
 */
#define NAT_GC_PRIME_MARK 0x6d61fa58
#define NAT_GC_PRIME_RET 0x1000

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
	__u32 policies;              /* the egressPolicies that select the pod: bit i = policy i (0: none) */
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
 * per destination. A pod's pod_info.policies is the mask of the policies selecting it; the
 * plugin flattens each mask's policies into policy_dst4/policy_dst6 (LPM_TRIE, key: the mask, then
 * the destination), each destination labelled with the first policy of the mask that holds
 * it, so one longest-prefix lookup gives the first match. A policy's addresses are its
 * masq_pool slot (1 + index).
 */
#define EGRESS_POLICIES_MAX 32
#define POLICY_DSTS_MAX 4096
#define POLICY_F_NO_NAT 0x1        /* natOutgoing: false: not masqueraded */
struct policy_dst4_key {
	__u32 prefixlen;           /* 32 (the mask) + destination prefix length */
	__u32 set;                 /* a pod_info.policies mask */
	__be32 daddr;
};
struct policy_dst6_key {
	__u32 prefixlen;
	__u32 set;
	struct in6_addr daddr;
};
struct policy_hit {
	__u32 policy;              /* index into egressPolicies */
	__u32 flags;               /* POLICY_F_* */
};
/* egress_policies (ARRAY, EGRESS_POLICIES_MAX entries), plugin-written, read by status,
 * nat list, explain and metrics (the programs never read it): what policy i is. */
#define EGRESS_NAME_LEN 64
#define POLICY_SPEC_LEN 1976
struct egress_policy {
	__u32 used;                /* 1: slot i holds policy i */
	__u32 flags;               /* POLICY_F_* */
	char name[EGRESS_NAME_LEN];  /* NUL-terminated */
	char spec[POLICY_SPEC_LEN];  /* the policy as compact JSON (selector, destinations, action) */
};
/* policy_stats (PERCPU_ARRAY, EGRESS_POLICIES_MAX entries): per policy */
struct policy_stats {
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

/* ---- pod_nets4 / pod_nets6 (LPM_TRIE, keys lpm4_key / lpm6_key): the node's pod
 * address ranges: podCIDRs, and the subnet of every registered pod's address (its
 * prevResult prefix, when shorter than a host route). A packet from inside them that
 * no registered pod owns, to a destination a pod's packet would be masqueraded to, is
 * dropped (DROP_UNREGISTERED_POD): a pod whose ADD never reached ebpf-masq never
 * leaves with its own address, and is let out once the agent has registered it. */
#define POD_NETS_MAX 1024
enum pod_net_origin {
	POD_NET_CONFIGURED = 1,    /* podCIDRs; index: its position in the list */
	POD_NET_LEARNED = 2,       /* a registered pod's subnet */
};
struct pod_net_info {
	__u32 origin;              /* enum pod_net_origin */
	__u32 index;
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

#include "masq_abi_nat.h"  /* the NAT tables: pair keys and entries, mapping hints, open
                            * mappings and permits, the expiry sweep, busy endpoints */

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
#define ATT_F_FOUND 0x8            /* registered by the agent from a runtime's CNI cache, not by an ADD */
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
	CNT_EVENTS_LOST,           /* events not written: their ring was full (masq_abi_events.h) */
	CNT_MAX
};

/* ---- drops (PERCPU_ARRAY, index enum masq_drop_reason) ---- */
enum masq_drop_reason {
	DROP_SPOOFED_SOURCE = 0,   /* veth: source is not one of the pod's addresses */
	DROP_NO_PORT,              /* uplink: port allocation failed */
	DROP_NAT_INSERT,           /* uplink: NAT map insert failed (not EEXIST), or the flow's pair
				    * is changing hands this instant (masq_abi_nat.h NAT_GEN_TAKEN) */
	DROP_FRAGMENT,             /* uplink: fragment that cannot be translated (no L4 ports) */
	DROP_MALFORMED,            /* truncated or invalid header on a flow to masquerade */
	DROP_CSUM,                 /* checksum helper failed */
	DROP_UNSUPPORTED_PROTO,    /* protocol we cannot masquerade (not TCP/UDP/ICMP echo) */
	DROP_FRAG_NO_STATE,        /* later fragment seen before its first: ports unknown */
	DROP_NAT_FULL,             /* uplink: NAT table (the flow's shard) full: new flow refused */
	DROP_OVER_SHARE,           /* uplink: the source holds over its share of a busy endpoint's ports */
	DROP_OVER_LIMIT,           /* uplink: the pod holds its port limit towards the remote endpoint */
	DROP_UNREGISTERED_POD,     /* uplink: from the node's pod ranges (pod_nets) but no registered pod's */
	DROP_MAX
};

/* ---- size checks (the NAT tables' in masq_abi_nat.h) ---- */
_Static_assert(sizeof(struct node_config) == 40, "node_config size");
_Static_assert(sizeof(struct masq_pool) == 8 + 4 * MASQ_POOL_MAX + 16 * MASQ_POOL_MAX, "masq_pool size");
_Static_assert(sizeof(struct pod_info) == 32, "pod_info size");
_Static_assert(sizeof(struct policy_dst4_key) == 12, "policy_dst4_key size");
_Static_assert(sizeof(struct policy_dst6_key) == 24, "policy_dst6_key size");
_Static_assert(sizeof(struct policy_hit) == 8, "policy_hit size");
_Static_assert(sizeof(struct policy_stats) == 32, "policy_stats size");
_Static_assert(sizeof(struct egress_policy) == 2048, "egress_policy size");
_Static_assert(EGRESS_POLICIES_MAX <= 32, "a pod's policies are a 32-bit mask");
_Static_assert(sizeof(struct pod_l2) == 20, "pod_l2 size");
_Static_assert(sizeof(struct uplink_info) == 24, "uplink_info size");
_Static_assert(sizeof(struct lpm4_key) == 8, "lpm4_key size");
_Static_assert(sizeof(struct lpm6_key) == 20, "lpm6_key size");
_Static_assert(sizeof(struct excl_info) == 8, "excl_info size");
_Static_assert(sizeof(struct pod_net_info) == 8, "pod_net_info size");
_Static_assert(sizeof(struct rule4_key) == 12, "rule4_key size");
_Static_assert(sizeof(struct rule_info) == 16, "rule_info size");
_Static_assert(sizeof(struct rule_except4_key) == 12, "rule_except4_key size");
_Static_assert(NAT_FILTER_AD != POD_F_NAT_OUTGOING && NAT_FILTER_AD != RULE_F_TO_ADDRESS &&
	       NAT_FILTER_AD != ATT_F_NAT_OUTGOING, "filter bits are free in every flags word");
_Static_assert((ATT_F_FOUND & (ATT_F_NAT_OUTGOING | NAT_FILTER_MASK)) == 0 && ATT_F_FOUND < (1u << PORT_LIMIT_SHIFT),
	       "ATT_F_FOUND is a bit of its own");
_Static_assert(sizeof(struct rule_stats) == 16, "rule_stats size");
_Static_assert(sizeof(struct pod_meta) == 1408, "pod_meta size");
_Static_assert(sizeof(struct host_port) == 4, "host_port size");
_Static_assert(sizeof(struct refusal_key) == 20, "refusal_key size");
_Static_assert(sizeof(struct refusals) == 24, "refusals size");
_Static_assert(sizeof(struct port_count_key) == 52, "port_count_key size");
_Static_assert(sizeof(struct port_range) == 4, "port_range size");
_Static_assert(sizeof(struct pod_stats) == 24, "pod_stats size");
_Static_assert(sizeof(struct veth_info) == 80, "veth_info size");
_Static_assert(sizeof(struct rule6_key) == 24, "rule6_key size");
_Static_assert(sizeof(struct rule6_info) == 24, "rule6_info size");
_Static_assert(sizeof(struct rule_except6_key) == 24, "rule_except6_key size");
_Static_assert(sizeof(struct frag4_key) == 12, "frag4_key size");
_Static_assert(sizeof(struct frag6_key) == 40, "frag6_key size");
_Static_assert(sizeof(struct frag_ports) == 8, "frag_ports size");
_Static_assert(sizeof(struct attachment_key) == 88, "attachment_key size");
_Static_assert(sizeof(struct attachment_info) == 120, "attachment_info size");

#endif /* MASQ_ABI_H */
