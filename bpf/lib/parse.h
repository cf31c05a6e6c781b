/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Header parsing into a flow tuple, with the offsets the rewrite needs. */
#ifndef MASQ_PARSE_H
#define MASQ_PARSE_H

#include "common.h"

enum l4_state {
	L4_OK = 0,          /* ports (or ICMP echo id) parsed */
	L4_FRAGMENT,        /* non-first fragment: no L4 header in this packet */
	L4_TRUNCATED,       /* header claims more than the packet holds */
	L4_UNSUPPORTED,     /* a protocol or ICMP type we do not translate */
};

/*
 * One IPv4 packet's tuple. For ICMP echo the identifier plays the role of the
 * pod-side port: a request carries it in sport (dport 0), a reply in dport
 * (sport 0), so requests and replies produce the fwd and rev keys directly.
 */
struct flow4 {
	__u32 l3_off;
	__u32 l4_off;
	__u32 len;          /* skb->len, for byte counters */
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 tcp_flags;     /* byte 13 of the TCP header */
	__u8 l4;            /* enum l4_state */
	__u8 icmp_type;
};

#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_RST 0x04
#define TCP_FLAG_ACK 0x10

/*
 * parse_flow4 - fill @f from the IPv4 header at @l3_off.
 * Returns 0 when an IPv4 header was parsed (f->l4 says how far L4 got), or -1
 * when there is no valid IPv4 header at all. Pulls non-linear headers into the
 * linear area once (GSO packets from the stack usually have them linear already).
 */
static __always_inline int parse_flow4(struct __sk_buff *skb, __u32 l3_off, struct flow4 *f)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct iphdr *ip = data + l3_off;
	__u32 ihl_len, need;
	__u8 *l4;

	if ((void *)(ip + 1) > data_end) {
		if (bpf_skb_pull_data(skb, l3_off + sizeof(*ip)))
			return -1;
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		ip = data + l3_off;
		if ((void *)(ip + 1) > data_end)
			return -1;
	}
	if (ip->version != 4 || ip->ihl < 5)
		return -1;

	ihl_len = ip->ihl * 4;
	f->l3_off = l3_off;
	f->l4_off = l3_off + ihl_len;
	f->len = skb->len;
	f->saddr = ip->saddr;
	f->daddr = ip->daddr;
	f->proto = ip->protocol;
	f->sport = 0;
	f->dport = 0;
	f->tcp_flags = 0;
	f->icmp_type = 0;

	if (ip->frag_off & bpf_htons(IP_OFFSET)) {
		f->l4 = L4_FRAGMENT;
		return 0;
	}

	switch (f->proto) {
	case IPPROTO_TCP:
		need = sizeof(struct tcphdr);
		break;
	case IPPROTO_UDP:
		need = sizeof(struct udphdr);
		break;
	case IPPROTO_ICMP:
		need = 8; /* type, code, checksum, id, sequence */
		break;
	default:
		f->l4 = L4_UNSUPPORTED;
		return 0;
	}

	if (data + f->l4_off + need > data_end) {
		if (bpf_skb_pull_data(skb, f->l4_off + need)) {
			f->l4 = L4_TRUNCATED;
			return 0;
		}
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
	}
	/* Re-derive from the (possibly new) data pointer; bound the offset for the verifier. */
	if (f->l4_off > l3_off + 60) {
		f->l4 = L4_TRUNCATED;
		return 0;
	}
	l4 = data + f->l4_off;
	if ((void *)(l4 + 20) > data_end && f->proto == IPPROTO_TCP) {
		f->l4 = L4_TRUNCATED;
		return 0;
	}
	if ((void *)(l4 + 8) > data_end) {
		f->l4 = L4_TRUNCATED;
		return 0;
	}

	if (f->proto == IPPROTO_ICMP) {
		struct icmphdr *icmp = (void *)l4;

		f->icmp_type = icmp->type;
		if (icmp->type == ICMP_ECHO) {
			f->sport = icmp->un.echo.id;
		} else if (icmp->type == ICMP_ECHOREPLY) {
			f->dport = icmp->un.echo.id;
		} else {
			f->l4 = L4_UNSUPPORTED;
			return 0;
		}
	} else {
		f->sport = *(__be16 *)l4;
		f->dport = *(__be16 *)(l4 + 2);
		if (f->proto == IPPROTO_TCP)
			f->tcp_flags = l4[13];
	}
	f->l4 = L4_OK;
	return 0;
}

#endif /* MASQ_PARSE_H */
