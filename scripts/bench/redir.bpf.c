// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The bench's "redirect-only" anchor: the ceiling of any fast path on this
 * topology. A no-NAT node whose pod traffic skips the node's stack the way
 * ebpf-masq's fast path does, with none of its work (no source check, no NAT
 * state, no rewrite, no counters but one): what is left is what the bypass
 * itself costs and saves.
 *
 *   masq_veth_in     pod veth ingress (tc clsact): an IPv4 packet from the pod
 *                    is routed with bpf_fib_lookup() from the bridge (MTU-checked,
 *                    no neighbour lookup), its TTL decremented and sent with
 *                    bpf_redirect_neigh() to the next hop, as fastpath_egress.h does
 *   masq_up_ingress  uplink ingress (TCX): an IPv4 packet for the pod gets the
 *                    pod's MACs, TTL - 1 and bpf_redirect_peer() into the pod's
 *                    netns (after bpf_check_mtu), as fastpath.h does
 *
 * Anything else (fragments, IP options, TTL <= 1, not the pod) goes to the
 * stack. The names are ebpf-masq's, so the bench's bpf_stats rows line up.
 * The pod's facts come from the bench, in the one-entry array `redir_pod`.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define AF_INET 2
#define IP_MF_OFFSET 0x3fff

struct redir_pod {
	__u32 addr;        /* the pod's IPv4 address, network order */
	__u32 veth;        /* the host-side veth's ifindex */
	__u32 l3_ifindex;  /* the bridge: where the pod's packets enter L3 */
	__u8 pod_mac[6];
	__u8 gw_mac[6];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct redir_pod);
} redir_pod SEC(".maps");

/* [0] packets redirected to the uplink, [1] into the pod (the bench checks they move). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} redir_count SEC(".maps");

static __always_inline void count(__u32 i)
{
	__u64 *c = bpf_map_lookup_elem(&redir_count, &i);

	if (c)
		*c += 1;
}

/* TTL - 1 with the header checksum fixed incrementally (RFC 1624), as a router does. */
static __always_inline void ttl_dec(struct iphdr *ip)
{
	__u32 s = (__u16)~ip->check;

	s += (__u16)~bpf_htons((__u16)ip->ttl << 8) + bpf_htons((__u16)(ip->ttl - 1) << 8);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	ip->check = (__u16)~s;
	ip->ttl--;
}

/* The IPv4 header when the packet is one the bypass may take, else NULL. */
static __always_inline struct iphdr *plain_ipv4(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct iphdr *ip = data + ETH_HLEN;

	if (skb->protocol != bpf_htons(ETH_P_IP) || (void *)(ip + 1) > data_end)
		return NULL;
	if (ip->ihl != 5 || ip->ttl <= 1 || (ip->frag_off & bpf_htons(IP_MF_OFFSET)))
		return NULL;
	return ip;
}

SEC("classifier")
int masq_veth_in(struct __sk_buff *skb)
{
	struct bpf_fib_lookup p = {};
	struct redir_pod *pod;
	struct iphdr *ip;
	__u32 zero = 0;
	long rc;

	ip = plain_ipv4(skb);
	pod = bpf_map_lookup_elem(&redir_pod, &zero);
	if (!ip || !pod)
		return TC_ACT_UNSPEC;
	p.family = AF_INET;
	p.tos = ip->tos;
	p.l4_protocol = ip->protocol;
	/* GSO: one segment's length is what must fit (bench: MSS-sized segments fit) */
	p.tot_len = skb->gso_size ? 0 : bpf_ntohs(ip->tot_len);
	p.ipv4_src = ip->saddr;
	p.ipv4_dst = ip->daddr;
	p.ifindex = pod->l3_ifindex;
	rc = bpf_fib_lookup(skb, &p, sizeof(p), BPF_FIB_LOOKUP_SKIP_NEIGH);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return TC_ACT_UNSPEC;
	ttl_dec(ip);
	count(0);
	{
		struct bpf_redir_neigh nh = { .nh_family = AF_INET, .ipv4_nh = p.ipv4_dst };

		return bpf_redirect_neigh(p.ifindex, &nh, sizeof(nh), 0);
	}
}

SEC("classifier")
int masq_up_ingress(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	struct redir_pod *pod;
	struct iphdr *ip;
	__u32 zero = 0, mtu_len = 0;

	ip = plain_ipv4(skb);
	pod = bpf_map_lookup_elem(&redir_pod, &zero);
	if (!ip || !pod || ip->daddr != pod->addr)
		return TC_ACT_UNSPEC;
	if (bpf_check_mtu(skb, pod->veth, &mtu_len, 0, BPF_MTU_CHK_SEGS))
		return TC_ACT_UNSPEC;
	ttl_dec(ip);
	__builtin_memcpy(data, pod->pod_mac, 6);
	__builtin_memcpy(data + 6, pod->gw_mac, 6);
	count(1);
	return bpf_redirect_peer(pod->veth, 0);
}

char _license[] SEC("license") = "Dual BSD/GPL";
