/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NAT engine, part 1 of 6 (engine_tmpl.h includes it, once per family): the state
 * both directions share. A pair's two halves (lookup, expiry, refresh, keeping
 * them in step, the expiry sweep's visit gc_pair) and a first fragment's ports
 * (MAP_FRAG). Touches MAP_FWD, MAP_REV, MAP_OPEN, MAP_PERMIT, MAP_FRAG; never
 * the packet.
 */

/* The forward half of a pair, in its key's shard of MAP_FWD. */
/* fwd_get_v4, fwd_get_v6 */
static __always_inline ENTRY_T *NAT_FN(fwd_get)(const KEY_T *k)
{
	void *m = NAT_FWD_SHARD(&MAP_FWD, k, SHARD_FN);

	return m ? bpf_map_lookup_elem(m, k) : NULL;
}

/*
 * fwd_get with the shard hash inline instead of a call: for the per-packet
 * lookup of an established flow only (every other lookup calls the global
 * function, which the verifier checks once).
 */
/* fwd_get_inline_v4, fwd_get_inline_v6 */
static __always_inline ENTRY_T *NAT_FN(fwd_get_inline)(const KEY_T *k)
{
	__u32 i = nat_shard((const __u32 *)k, sizeof(*k) / 4, nat_seed);
	void *m = bpf_map_lookup_elem(&MAP_FWD, &i);

	return m ? bpf_map_lookup_elem(m, k) : NULL;
}

/* fwd_del_v4, fwd_del_v6 */
static __always_inline void NAT_FN(fwd_del)(const KEY_T *k)
{
	void *m = NAT_FWD_SHARD(&MAP_FWD, k, SHARD_FN);

	if (m)
		bpf_map_delete_elem(m, k);
}

/* nat_expired_v4, nat_expired_v6 */
static __always_inline bool NAT_FN(nat_expired)(const ENTRY_T *e, const struct node_config *cfg,
						__u8 proto, __u64 now)
{
	__u64 seen = e->last_seen_ns;

	/* Another CPU may have refreshed it after we read the clock: alive. */
	if (seen >= now)
		return false;
	/* A UDP pair that never lasted (a DNS query and its answer) waits the
	 * one-shot timeout (RFC 4787 REQ-5's exception; netfilter's 2 s rule). */
	if (proto == IPPROTO_UDP && seen <= e->created_ns + NAT_UDP_STREAM_NS)
		return now - seen > (__u64)cfg->udp_one_shot_timeout_s * NSEC_PER_SEC;
	return now - seen > nat_timeout_ns(cfg, proto, e->flags);
}

/*
 * src_id - source @a (a pod's address, the node's, a tunnel client's) folded to
 * the 32 bits a busy endpoint's share counts key (masq_abi.h nat_hot); never 0.
 * IPv6: the words XORed (pods of one node differ in the low ones).
 */
/* src_id_v4, src_id_v6 */
static __always_inline __u32 NAT_FN(src_id)(const ADDR_T *a)
{
	const __u32 *w = (const __u32 *)a;
	__u32 id = w[0];

	if (sizeof(*a) == 16)
		id ^= w[1] ^ w[2] ^ w[3];
	return id ? id : 1;
}

/* Where the FIN of @f ends (the ack number that acknowledges it); a call of its own: no header copy on the caller's stack. */
/* fin_end_of_v4, fin_end_of_v6 */
static __noinline __u32 NAT_FN(fin_end_of)(struct __sk_buff *skb, const FLOW_T *f)
{
	__u32 fin_end = 0;

	if (skb && f)
		tcp_fin_end(skb, f->l3_off, f->l4_off, NAT_IS_V6, &fin_end);
	return fin_end;
}

/*
 * hot_release - the TCP pair (remote @r, node @n; @ports: the remote port << 16 |
 * the node port, network order each) of source @id ended (its close completed, or
 * a RST) or was removed: its port's bit in the remote endpoint's bitmap
 * (nat_hot), if it has one, is cleared (and the source holds one port fewer
 * there), so the endpoint's next port search tries it. Callers ask only once a
 * bitmap was ever made (nat_hot_on).
 */
/* hot_release_v4, hot_release_v6 */
static __noinline void NAT_FN(hot_release)(const ADDR_T *r, const ADDR_T *n, __u32 ports, __u8 proto, __u32 id)
{
	struct nat_hot_key k = { .rport = (__be16)(ports >> 16), .proto = proto, .v6 = NAT_IS_V6 };
	__be16 nport = (__be16)ports;
	const struct node_config *cfg;
	struct nat_hot *h;
	__u32 off;

	if (!r || !n)
		return;
	__builtin_memcpy(k.nat_addr, n, sizeof(*n));
	__builtin_memcpy(k.remote, r, sizeof(*r));
	h = bpf_map_lookup_elem(&nat_hot, &k);
	cfg = bpf_map_lookup_elem(&node_config, &nat_zero_key);
	if (!h || !cfg)
		return;
	off = nat_port_off(cfg, bpf_ntohs(nport));
	if (off != NAT_OFF_NONE)
		nat_hot_mark(h, off, NAT_HOT_CLEAR, id);
}

/*
 * tcp_close_sync - the close's bookkeeping when @e, the half of the packet @f's
 * direction, and @o, the other half of its pair, are brought in step (the sync
 * functions below, after nat_touch said so): a FIN of @e's direction (nat_touch
 * recorded where it ends) makes @o wait for its ACK (NAT_C_PEER_FIN) and says
 * whose FIN was first; an ACK of @e's direction that reaches the other
 * direction's FIN (@o's fin_end) completes that FIN (NAT_C_ACKED_PEER). An ACK
 * short of it (earlier data, a duplicate) completes nothing. No lookup of its
 * own: the sync has found @o already. True when the pair just ended (its close
 * completed, or a RST): its port's bit in a busy endpoint's bitmap goes.
 */
/* tcp_close_sync_v4, tcp_close_sync_v6 */
static __always_inline bool NAT_FN(tcp_close_sync)(struct __sk_buff *skb, const FLOW_T *f, ENTRY_T *e, ENTRY_T *o)
{
	__be32 ack;

	if (f->proto != IPPROTO_TCP)
		return false;
	if (e->flags & NAT_F_FIN) {
		if (!(o->flags & NAT_F_FIN))
			e->close |= NAT_C_FIN_FIRST;
		o->close |= NAT_C_PEER_FIN;
	}
	if ((f->tcp_flags & TCP_FLAG_ACK) && (o->flags & NAT_F_FIN) && !(e->close & NAT_C_ACKED_PEER) &&
	    bpf_skb_load_bytes(skb, f->l4_off + 8, &ack, sizeof(ack)) == 0 &&
	    (__s32)(bpf_ntohl(ack) - o->fin_end) >= 0) {
		e->close |= NAT_C_ACKED_PEER;
		if ((o->close & NAT_C_ACKED_PEER) && (e->flags & NAT_F_FIN))
			return true; /* the close completed just now */
	}
	return (e->flags | o->flags) & NAT_F_RST;
}

/*
 * Account one packet on the half of its direction; true when last_seen was
 * refreshed (once a second at most, and at once when the TCP state changes: the
 * caller then brings the other half in step, nat_flags_synced and
 * tcp_close_sync). A TCP close's segments are such changes: the direction's
 * first FIN (where it ends is recorded here), and an ACK while the other
 * direction's FIN waits for one; a handful a connection, none of an open flow's.
 */
/* nat_touch_v4, nat_touch_v6 */
static __always_inline bool NAT_FN(nat_touch)(struct __sk_buff *skb, ENTRY_T *e, const FLOW_T *f, __u64 now)
{
	/* Plain adds, not atomics: a flow's packets come in on one CPU at a time
	 * (RSS, one socket), and a rare lost update costs a statistic, not a byte. */
	e->packets += 1;
	e->bytes += f->len;
	if (f->proto == IPPROTO_TCP) {
		__u8 end = (f->tcp_flags & TCP_FLAG_RST) ? NAT_F_RST : (f->tcp_flags & TCP_FLAG_FIN) ? NAT_F_FIN : 0;

		if ((f->tcp_flags & TCP_FLAG_FIN) && !(e->flags & NAT_F_FIN))
			e->fin_end = NAT_FN(fin_end_of)(skb, f);
		if (end) {
			if ((e->flags & (end | NAT_F_TCP_CLOSING)) != (end | NAT_F_TCP_CLOSING)) {
				e->flags |= end | NAT_F_TCP_CLOSING;
				e->last_seen_ns = now;
				return true;
			}
		} else if ((f->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN &&
			   (e->flags & NAT_F_TCP_CLOSING)) {
			/* The pod reuses the tuple for a new connection. */
			e->flags &= ~(NAT_F_TCP_CLOSING | NAT_F_ENDS);
			e->close = 0;
			e->last_seen_ns = now;
			return true;
		}
		/* Perhaps the ACK of the other direction's FIN (a pure ACK, or a FIN of
		 * this direction sent again with it): tcp_close_sync tells. */
		if ((f->tcp_flags & TCP_FLAG_ACK) && (e->close & (NAT_C_PEER_FIN | NAT_C_ACKED_PEER)) == NAT_C_PEER_FIN) {
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
 * open_refresh - a pair of an endpoint with natFiltering (NAT_F_OPEN) was refreshed
 * by a pod packet @f: its mapping's open entry, and for address-dependent
 * filtering the remote's permit, stay active (outbound refresh, RFC 4787 REQ-6).
 */
/* open_refresh_v4, open_refresh_v6 */
static __noinline void NAT_FN(open_refresh)(const FLOW_T *f, const ENTRY_T *fwd, __u64 now)
{
	EP_T k = { .addr = fwd->addr, .port = fwd->port, .proto = f->proto };
	OPEN_T *o = bpf_map_lookup_elem(&MAP_OPEN, &k);
	PERMIT_T *pv;

	if (!o || !ADDR_EQ(&o->addr, &f->saddr) || o->port != f->sport)
		return;
	o->last_seen_ns = now;
	if (!(o->filter & NAT_FILTER_AD))
		return;
	PERMITKEY_T pk = { .remote = f->daddr, .addr = fwd->addr, .port = fwd->port, .proto = f->proto };
	pv = bpf_map_lookup_elem(&MAP_PERMIT, &pk);
	if (pv && ADDR_EQ(&pv->pod, &f->saddr))
		pv->last_seen_ns = now;
}

/*
 * snat_sync_rev - after the forward half of a flow was refreshed, refresh its
 * reverse half too (carrying the TCP closing state). NAT_SYNC_GONE when the
 * reverse half is gone or belongs to another flow (the caller starts this flow
 * afresh), NAT_SYNC_BUSY when another CPU has claimed the pair to give its port
 * to a new flow or to remove it (masq_abi_nat.h NAT_GEN_TAKEN: it removes the
 * forward half itself). A pod opening a new connection on its own finished tuple
 * (nat_touch opened the forward half again, tcp_tw_reuse) keeps the pair only by
 * winning it: the generation moves on with a compare-and-swap, so a new flow that
 * judged the pair finished a moment before cannot take its port after all.
 */
/* snat_sync_rev_v4, snat_sync_rev_v6 */
static __noinline int NAT_FN(snat_sync_rev)(struct __sk_buff *skb, const FLOW_T *f, ENTRY_T *fwd, __u64 now)
{
	KEY_T rk = {
		.saddr = f->daddr, .daddr = fwd->addr,
		.sport = f->dport, .dport = fwd->port, .proto = f->proto,
	};
	ENTRY_T *rev = bpf_map_lookup_elem(&MAP_REV, &rk);
	__u64 gen, was;

	if (!skb || !rev)
		return NAT_SYNC_GONE;
	gen = fwd->created_ns;
	was = rev->created_ns;
	if (was == gen && (rev->flags & NAT_F_TCP_CLOSING) && !(fwd->flags & NAT_F_TCP_CLOSING)) {
		/* Opened again: the pair is this connection's now, or another flow's. */
		was = __sync_val_compare_and_swap(&rev->created_ns, gen, gen + 1);
		if (was == gen)
			fwd->created_ns = was = gen + 1;
	}
	if (was != fwd->created_ns)
		return was == (gen | NAT_GEN_TAKEN) ? NAT_SYNC_BUSY : NAT_SYNC_GONE;
	rev->last_seen_ns = now;
	rev->flags = nat_flags_synced(fwd->flags, rev->flags);
	if (!(fwd->flags & NAT_F_TCP_CLOSING))
		rev->close = 0; /* open again: the close starts over */
	else if (NAT_FN(tcp_close_sync)(skb, f, fwd, rev) && nat_hot_on())
		NAT_FN(hot_release)(&f->daddr, &fwd->addr, (__u32)f->dport << 16 | fwd->port, f->proto,
				    NAT_FN(src_id)(&f->saddr));
	if (fwd->flags & NAT_F_OPEN)
		NAT_FN(open_refresh)(f, fwd, now);
	return NAT_SYNC_OK;
}

/*
 * snat_refresh - account a pod packet on its flow's forward half and keep the
 * reverse half in step: snat_sync_rev's answer (NAT_SYNC_OK when nothing needed
 * bringing in step). NAT_SYNC_GONE: the caller deletes the forward half and
 * starts the flow afresh; NAT_SYNC_BUSY: it drops the packet.
 */
/* snat_refresh_v4, snat_refresh_v6 */
static __always_inline int NAT_FN(snat_refresh)(struct __sk_buff *skb, const FLOW_T *f, ENTRY_T *fwd, __u64 now)
{
	return NAT_FN(nat_touch)(skb, fwd, f, now) ? NAT_FN(snat_sync_rev)(skb, f, fwd, now) : NAT_SYNC_OK;
}

/*
 * The mirror of snat_sync_rev, from a reply that hit the reverse half. A
 * forward half that is gone or belongs to a newer pair is left alone: a reply
 * never recreates state.
 */
/* rnat_sync_fwd_v4, rnat_sync_fwd_v6 */
static __noinline void NAT_FN(rnat_sync_fwd)(struct __sk_buff *skb, const FLOW_T *f, ENTRY_T *rev, __u64 now)
{
	KEY_T fk = {
		.saddr = rev->addr, .daddr = f->saddr,
		.sport = rev->port, .dport = f->sport, .proto = f->proto,
	};
	ENTRY_T *fwd = NAT_FN(fwd_get)(&fk);

	if (skb && fwd && fwd->created_ns == rev->created_ns) {
		fwd->last_seen_ns = now;
		fwd->flags = nat_flags_synced(rev->flags, fwd->flags);
		if (!(rev->flags & NAT_F_TCP_CLOSING))
			fwd->close = 0;
		else if (NAT_FN(tcp_close_sync)(skb, f, rev, fwd) && nat_hot_on())
			NAT_FN(hot_release)(&f->saddr, &f->daddr, (__u32)f->sport << 16 | f->dport, f->proto,
					    NAT_FN(src_id)(&rev->addr));
	}
}

/*
 * gc_pair - the expiry sweep's visit to one forward half (bpf_for_each_map_elem
 * callback): a pair idle past its timeout goes, each half only if it is still this
 * pair's. Its reverse half is claimed first (masq_abi_nat.h NAT_GEN_TAKEN), as a
 * new flow taking its port over claims it: a pair taken over or opened again since
 * stays, and while the claim holds, the flow's own packets wait instead of starting
 * a pair under a key still in use. Then the forward half goes, then the reverse half.
 */
/* gc_pair_v4, gc_pair_v6 */
static long NAT_FN(gc_pair)(void *map, const KEY_T *key, ENTRY_T *fwd, struct nat_gc_walk *w)
{
	KEY_T fk = *key;
	ENTRY_T *rev, *cur;
	__u64 gen;

	/* Counted in the map value, not on the stack: a constant count would keep
	 * the verifier from ever seeing the walk's states converge. */
	w->gc->last_checked++;
	if (!NAT_FN(nat_expired)(fwd, w->cfg, fk.proto, w->now)) {
		if (fwd->flags & NAT_F_HOST)
			w->gc->seen |= NAT_GC_SEEN_HOST;
		return 0;
	}
	KEY_T rk = {
		.saddr = fk.daddr, .daddr = fwd->addr,
		.sport = fk.dport, .dport = fwd->port, .proto = fk.proto,
	};
	gen = fwd->created_ns;
	rev = bpf_map_lookup_elem(&MAP_REV, &rk);
	if (rev) {
		if (rev->created_ns == (gen | NAT_GEN_TAKEN))
			return 0; /* a new flow is taking its port over: it removes the pair */
		if (rev->created_ns != gen)
			rev = NULL; /* a later pair's */
		else if (__sync_val_compare_and_swap(&rev->created_ns, gen, gen | NAT_GEN_TAKEN) != gen)
			return 0; /* taken over or opened again since it was looked at */
	}
	if (!(fwd->flags & NAT_F_INBOUND) && events_on())
		NAT_FN(event_pair)(EV_WHAT(EV_PAIR_ENDED, (fwd->flags & NAT_F_TCP_CLOSING) ?
					   EV_END_CLOSED : EV_END_EXPIRED, fwd->policy),
				   &fk, fwd, rev, &rk);
	/* Nothing replaces a forward half without removing it first, and its flow does
	 * not while its reverse half is claimed: this is still the one the walk stands on
	 * (@map: the shard being walked, the key's own) when its generation says so. */
	cur = bpf_map_lookup_elem(map, &fk);
	if (cur && cur->created_ns == gen)
		bpf_map_delete_elem(map, &fk);
	if (rev) {
		bpf_map_delete_elem(&MAP_REV, &rk);
		if (w->gc->hot)
			NAT_FN(hot_release)(&rk.saddr, &rk.daddr, (__u32)rk.sport << 16 | rk.dport, rk.proto,
					    NAT_FN(src_id)(&fk.saddr));
	}
	count_add(CNT_NAT_EXPIRED, 1);
	return 0;
}

/* Remember a first fragment's ports for the fragments that follow it. */
/* frag_remember_v4, frag_remember_v6 */
static __noinline void NAT_FN(frag_remember)(const FLOW_T *f)
{
	FRAGKEY_T k = { .saddr = f->saddr, .daddr = f->daddr, .id = f->frag_id, .proto = f->frag_proto };
	struct frag_ports p = { .sport = f->sport, .dport = f->dport, .proto = f->proto };

	bpf_map_update_elem(&MAP_FRAG, &k, &p, BPF_ANY);
}

/* frag_lookup_v4, frag_lookup_v6 */
static __always_inline struct frag_ports *NAT_FN(frag_lookup)(const FLOW_T *f)
{
	FRAGKEY_T k = { .saddr = f->saddr, .daddr = f->daddr, .id = f->frag_id, .proto = f->frag_proto };

	return bpf_map_lookup_elem(&MAP_FRAG, &k);
}
