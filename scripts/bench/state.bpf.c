// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The bench's "state-floor" anchor (--floor): the least any NAT that keeps
 * per-flow state in two hash halves (a forward half found by the pod's tuple,
 * a reverse half found by the reply's) can cost on this machine. Attached where
 * the empty-hooks anchor is (pod veth ingress, uplink egress and ingress), on a
 * no-NAT node; no rewrite, no port search, no counters, no expiry:
 *
 *   uplink egress   a TCP/UDP packet from the pod subnet looks its forward half
 *                   up and stamps it; on a miss it inserts the forward half and
 *                   the reverse half (the swapped tuple) - a new flow's two writes
 *   uplink ingress  a packet to the pod subnet looks its reverse half up and stamps it
 *   pod veth ingress nothing (the test `ingress_ifindex == ifindex` with a pod
 *                   source): ebpf-masq's veth program keeps no flow state either
 *
 * The halves are plain hash maps as ebpf-masq's are (BPF_F_NO_PREALLOC, its
 * 16-byte key, a 56-byte value; the forward half one shard's size, 65,536, the
 * reverse half the default natMaxEntries, 1 << 20: its bucket array is the
 * same 16 MiB), entries never removed. With connect+close traffic through one
 * pod the client's ports cycle, so each connection's SYN meets its forward
 * half again and its SYN-ACK its reverse half: two lookups of entries last
 * touched one port cycle ago, the two a stateful NAT cannot avoid. ebpf/state
 * is what ebpf-masq costs above that floor, state/hooks what the floor costs.
 * The function keeps the empty program's name so the hooks' checks line up.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

struct key { __u32 saddr, daddr; __u16 sport, dport; __u8 proto, pad[3]; };
struct entry { __u64 used_ns; __u32 addr; __u16 port; __u16 flags; __u64 pad[5]; }; /* 56 bytes, as nat4_entry */

struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 65536); __type(key, struct key);
	 __type(value, struct entry); __uint(map_flags, BPF_F_NO_PREALLOC); } st_fwd SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 1 << 20); __type(key, struct key);
	 __type(value, struct entry); __uint(map_flags, BPF_F_NO_PREALLOC); } st_rev SEC(".maps");

#define POD_NET 0x0af40100 /* 10.244.1.0/24, the bench's pod subnet */

__attribute__((section("classifier"), used)) int masq_state(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct tcphdr *th;
	struct key k = {};
	struct entry *e, n = {};

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 ||
	    (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP))
		return TC_ACT_UNSPEC;
	th = (void *)(ip + 1);
	if ((void *)th + 4 > end)
		return TC_ACT_UNSPEC;
	k.saddr = ip->saddr; k.daddr = ip->daddr; k.sport = th->source; k.dport = th->dest; k.proto = ip->protocol;
	if ((bpf_ntohl(ip->saddr) & 0xffffff00) == POD_NET) {
		if (skb->ingress_ifindex == skb->ifindex)   /* the pod veth's ingress: nothing to do */
			return TC_ACT_UNSPEC;
		e = bpf_map_lookup_elem(&st_fwd, &k);
		if (e) {
			e->used_ns = bpf_ktime_get_ns();
			return TC_ACT_UNSPEC;
		}
		n.used_ns = bpf_ktime_get_ns();
		n.addr = ip->saddr; n.port = th->source;
		bpf_map_update_elem(&st_fwd, &k, &n, BPF_ANY);
		k.saddr = ip->daddr; k.daddr = ip->saddr; k.sport = th->dest; k.dport = th->source;
		bpf_map_update_elem(&st_rev, &k, &n, BPF_ANY);
	} else if ((bpf_ntohl(ip->daddr) & 0xffffff00) == POD_NET) {
		e = bpf_map_lookup_elem(&st_rev, &k);
		if (e)
			e->used_ns = bpf_ktime_get_ns();
	}
	return TC_ACT_UNSPEC;
}

char _license[] __attribute__((section("license"), used)) = "Dual BSD/GPL";
