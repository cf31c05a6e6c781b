/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NAT pairs: lookup, allocation, expiry, repair and the packet rewrite.
 *
 * Every masqueraded flow is a pair of entries inserted together:
 *   nat4_fwd[{pod, remote, pod port, remote port}]  -> {nat addr, nat port}
 *   nat4_rev[{remote, nat addr, remote port, nat port}] -> {pod, pod port}
 * The reverse half is inserted first with BPF_NOEXIST (that is the port claim);
 * if the forward half then fails, the reverse half is removed again.
 *
 * Expiry: entries carry last_seen_ns; a pair idle longer than its protocol's
 * timeout may have its port taken over by a new flow (the stale forward half is
 * deleted then). Both halves are refreshed together, at most once a second, from
 * whichever direction has traffic, so a one-way flow never loses its reply path.
 * The maps are LRU: if memory pressure evicts one half, the next refresh puts it back.
 */
#ifndef MASQ_NAT_H
#define MASQ_NAT_H

#include "maps.h"
#include "parse.h"

/* Ports tried for one new flow; random probes keep this O(1) expected below ~90% use. */
#define NAT_PROBES 32

static __always_inline __u64 nat_timeout_ns(const struct masq_config *cfg, __u8 proto, __u8 flags)
{
	__u32 s;

	switch (proto) {
	case IPPROTO_TCP:
		s = (flags & NAT_F_TCP_CLOSING) ? cfg->tcp_closing_timeout_s : cfg->tcp_timeout_s;
		break;
	case IPPROTO_UDP:
		s = cfg->udp_timeout_s;
		break;
	default:
		s = cfg->icmp_timeout_s;
		break;
	}
	return (__u64)s * NSEC_PER_SEC;
}

static __always_inline bool nat_expired(const struct nat4_entry *e, const struct masq_config *cfg,
					__u8 proto, __u64 now)
{
	__u64 seen = e->last_seen_ns;

	/* Another CPU may have refreshed it after we read the clock: alive. */
	if (seen >= now)
		return false;
	return now - seen > nat_timeout_ns(cfg, proto, e->flags);
}

/* Account one packet; true when last_seen was refreshed (once a second at most). */
static __always_inline bool nat_touch(struct nat4_entry *e, const struct flow4 *f, __u64 now)
{
	__sync_fetch_and_add(&e->packets, 1);
	__sync_fetch_and_add(&e->bytes, f->len);
	if (f->proto == IPPROTO_TCP) {
		if (f->tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST)) {
			if (!(e->flags & NAT_F_TCP_CLOSING)) {
				e->flags |= NAT_F_TCP_CLOSING;
				e->last_seen_ns = now;
				return true;
			}
		} else if ((f->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN &&
			   (e->flags & NAT_F_TCP_CLOSING)) {
			/* The pod reuses the tuple for a new connection. */
			e->flags &= ~NAT_F_TCP_CLOSING;
			e->last_seen_ns = now;
			return true;
		}
	}
	if (now > e->last_seen_ns + NSEC_PER_SEC) {
		e->last_seen_ns = now;
		return true;
	}
	return false;
}

/*
 * snat_v4_sync_rev - after the forward half of a flow was refreshed, refresh its
 * reverse half too (carrying the TCP closing state), or put it back if the LRU
 * evicted it. Returns false if the reverse slot now belongs to another flow.
 */
static __always_inline bool snat_v4_sync_rev(const struct flow4 *f, const struct nat4_entry *fwd, __u64 now)
{
	struct nat4_key rk = {
		.saddr = f->daddr, .daddr = fwd->addr,
		.sport = f->dport, .dport = fwd->port, .proto = f->proto,
	};
	struct nat4_entry *rev = bpf_map_lookup_elem(&nat4_rev, &rk);

	if (rev) {
		if (rev->addr != f->saddr || rev->port != f->sport)
			return false;
		rev->last_seen_ns = now;
		rev->flags = fwd->flags;
		return true;
	}
	struct nat4_entry nr = {
		.addr = f->saddr, .port = f->sport, .flags = fwd->flags,
		.ifindex = fwd->ifindex, .rule_id = fwd->rule_id,
		.created_ns = fwd->created_ns, .last_seen_ns = now,
	};
	if (bpf_map_update_elem(&nat4_rev, &rk, &nr, BPF_NOEXIST) == 0)
		count_add(CNT_NAT_REPAIRED, 1);
	return true;
}

/* The mirror of snat_v4_sync_rev, from a reply that hit the reverse half. */
static __always_inline void rnat_v4_sync_fwd(const struct flow4 *f, const struct nat4_entry *rev, __u64 now)
{
	struct nat4_key fk = {
		.saddr = rev->addr, .daddr = f->saddr,
		.sport = rev->port, .dport = f->sport, .proto = f->proto,
	};
	struct nat4_entry *fwd = bpf_map_lookup_elem(&nat4_fwd, &fk);

	if (fwd) {
		if (fwd->addr == f->daddr && fwd->port == f->dport) {
			fwd->last_seen_ns = now;
			fwd->flags = rev->flags;
		}
		return;
	}
	struct nat4_entry nf = {
		.addr = f->daddr, .port = f->dport, .flags = rev->flags,
		.ifindex = rev->ifindex, .rule_id = rev->rule_id,
		.created_ns = rev->created_ns, .last_seen_ns = now,
	};
	if (bpf_map_update_elem(&nat4_fwd, &fk, &nf, BPF_NOEXIST) == 0)
		count_add(CNT_NAT_REPAIRED, 1);
}

/*
 * snat_v4_create - claim a port for a new flow and insert both halves.
 * Returns the forward entry, or NULL with *reason set: DROP_NO_PORT when no
 * port was free within NAT_PROBES tries (also counted as CNT_ALLOC_FAIL),
 * DROP_NAT_INSERT when the forward half could not be inserted.
 */
static __always_inline struct nat4_entry *
snat_v4_create(const struct flow4 *f, const struct masq_config *cfg, const struct masq_decision *d,
	       __u32 ifindex, __u64 now, __u32 *reason)
{
	struct nat4_key fk = {
		.saddr = f->saddr, .daddr = f->daddr,
		.sport = f->sport, .dport = f->dport, .proto = f->proto,
	};
	struct nat4_key rk = {
		.saddr = f->daddr, .daddr = d->nat_addr,
		.sport = f->dport, .proto = f->proto,
	};
	__u8 flags = d->verdict == VERDICT_RULE ? NAT_F_BY_RULE : 0;
	struct nat4_entry rev = {
		.addr = f->saddr, .port = f->sport, .flags = flags,
		.ifindex = ifindex, .rule_id = d->rule_id,
		.created_ns = now, .last_seen_ns = now,
	};
	__u32 range = (__u32)cfg->port_max - cfg->port_min + 1;
	struct nat4_entry *old;
	int i;

	*reason = DROP_NO_PORT;
	if (cfg->port_min == 0 || cfg->port_max < cfg->port_min)
		return NULL;

	for (i = 0; i < NAT_PROBES; i++) {
		rk.dport = bpf_htons(cfg->port_min + bpf_get_prandom_u32() % range);
		if (bpf_map_update_elem(&nat4_rev, &rk, &rev, BPF_NOEXIST) == 0)
			goto claimed;
		old = bpf_map_lookup_elem(&nat4_rev, &rk);
		if (old && nat_expired(old, cfg, f->proto, now)) {
			struct nat4_key ofk = {
				.saddr = old->addr, .daddr = f->daddr,
				.sport = old->port, .dport = f->dport, .proto = f->proto,
			};
			bpf_map_delete_elem(&nat4_fwd, &ofk);
			if (bpf_map_update_elem(&nat4_rev, &rk, &rev, BPF_ANY) == 0) {
				count_add(CNT_NAT_RECLAIMED, 1);
				goto claimed;
			}
		}
	}
	count_add(CNT_ALLOC_FAIL, 1);
	return NULL;

claimed:;
	struct nat4_entry fwd = {
		.addr = d->nat_addr, .port = rk.dport, .flags = flags,
		.ifindex = ifindex, .rule_id = d->rule_id,
		.created_ns = now, .last_seen_ns = now,
	};
	if (bpf_map_update_elem(&nat4_fwd, &fk, &fwd, BPF_NOEXIST)) {
		/* Give the port back. If another CPU created this flow meanwhile
		 * (EEXIST), use its pair; otherwise the insert failed for real. */
		bpf_map_delete_elem(&nat4_rev, &rk);
		*reason = DROP_NAT_INSERT;
		return bpf_map_lookup_elem(&nat4_fwd, &fk);
	}
	count_add(CNT_NAT_CREATED, 1);
	return bpf_map_lookup_elem(&nat4_fwd, &fk);
}

/*
 * nat4_rewrite - replace the source (@src) or destination address and port of
 * the packet, fixing the IPv4 header checksum and the L4 checksum incrementally.
 * bpf_l4_csum_replace() with BPF_F_PSEUDO_HDR keeps CHECKSUM_PARTIAL (GSO,
 * offloaded) packets right: only the pseudo-header seed changes for those.
 * UDP with a zero checksum stays zero (BPF_F_MARK_MANGLED_0).
 * ICMP has no pseudo-header: only the echo id counts.
 */
static __always_inline int nat4_rewrite(struct __sk_buff *skb, const struct flow4 *f, bool src,
					__be32 new_addr, __be16 new_port)
{
	__be32 old_addr = src ? f->saddr : f->daddr;
	__be16 old_port = src ? f->sport : f->dport;
	__u32 addr_off = f->l3_off + (src ? offsetof(struct iphdr, saddr) : offsetof(struct iphdr, daddr));
	__u32 port_off, csum_off;
	__u64 l4flags = 0;

	switch (f->proto) {
	case IPPROTO_TCP:
		port_off = f->l4_off + (src ? 0 : 2);
		csum_off = f->l4_off + offsetof(struct tcphdr, check);
		break;
	case IPPROTO_UDP:
		port_off = f->l4_off + (src ? 0 : 2);
		csum_off = f->l4_off + offsetof(struct udphdr, check);
		l4flags = BPF_F_MARK_MANGLED_0;
		break;
	default: /* ICMP echo */
		port_off = f->l4_off + offsetof(struct icmphdr, un.echo.id);
		csum_off = f->l4_off + offsetof(struct icmphdr, checksum);
		break;
	}

	if (f->proto != IPPROTO_ICMP &&
	    bpf_l4_csum_replace(skb, csum_off, old_addr, new_addr, BPF_F_PSEUDO_HDR | l4flags | sizeof(new_addr)))
		return -1;
	if (old_port != new_port) {
		if (bpf_l4_csum_replace(skb, csum_off, old_port, new_port, l4flags | sizeof(new_port)))
			return -1;
		if (bpf_skb_store_bytes(skb, port_off, &new_port, sizeof(new_port), 0))
			return -1;
	}
	if (bpf_l3_csum_replace(skb, f->l3_off + offsetof(struct iphdr, check), old_addr, new_addr,
				sizeof(new_addr)))
		return -1;
	if (bpf_skb_store_bytes(skb, addr_off, &new_addr, sizeof(new_addr), 0))
		return -1;
	return 0;
}

#endif /* MASQ_NAT_H */
