/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NAT engine, part 2 of 6 (engine_tmpl.h includes it, once per family): the port
 * search of a new flow's pair. Its state (struct probe), the host socket check
 * (host_holds), a port's claim (try_port: a free port, or a finished or expired
 * pair taken over) and the bpf_loop() probes: preferred ports, random ones, a
 * sweep (probe_port). The bitmap search of a busy endpoint is part 3
 * (hot_tmpl.h); snat_make_pair, which runs the search, part 4 (new_pair_tmpl.h).
 * Never touches the packet.
 */

/* State of one port search, shared with the bpf_loop() callback. */
/* struct probe_v4, struct probe_v6 */
struct NAT_FN(probe) {
	KEY_T fk;           /* the new flow's forward key */
	KEY_T rk;           /* the candidate reverse key (its dport is the candidate port) */
	ENTRY_T e;          /* one entry serves both halves: the reverse one first; during the
			     * search its fin_end holds the new flow's SYN's sequence number
			     * (with syn: no room on the stack for another field, and a new
			     * pair's fin_end means nothing until its FIN sets it) */
	struct __sk_buff *skb; /* for the host socket lookups (host_holds) */
	struct nat_hot *hot;   /* the remote endpoint's bitmap, when it is busy (nat_hot) */
	/* now: e.last_seen_ns (the stack has no room for a copy) */
	__u32 start;        /* first port of the sequential sweep, or the bitmap search's
			     * next offset, as an offset in the range */
	__u32 claimed;      /* 0, or 1 + the probe that claimed its port */
	__u32 tried;        /* ports tried (the preferred slots left empty are not) */
	/* 16-bit fields, and no config pointer (the callback looks it up): the IPv6
	 * fast path's call chain down to host_holds must fit the 512-byte stack. */
	__u16 range;        /* ports that may be handed out: portRange less the skipped ones */
	__u16 skip_lo;      /* first skipped port inside portRange (host order) */
	__u16 skip_len;     /* skipped ports inside portRange; 0: none */
	__u8 full;          /* the reverse map holds natMaxEntries entries */
	__u8 syn;           /* the new flow begins with a SYN (e.fin_end holds its number) */
	union {
		__be16 want[NAT_PREFERRED]; /* ports tried first: the endpoint's binding, its own port; 0: none */
		__u32 left;         /* then: the tries the bitmap search has left (hot_probe) */
	};
};

/*
 * host_holds - would the reply of a pair claimed as @rk (remote -> nat address,
 * candidate port) reach a host socket instead? A listener on the port (kubelet,
 * a hostNetwork server), a bound UDP socket (WireGuard, VXLAN, DNS), or a host
 * connection on that very tuple; or is the port a pod's hostPort (host_ports)? The port space is the host's too (1024-65535 by
 * default): this keeps a pod from taking a tuple the host already uses; a host
 * flow that starts after a pod took its tuple is remapped (host_egress).
 * TIME_WAIT sockets are not full sockets: not found, and their tuple may be
 * reused (as netfilter's does). ICMP ids have no socket lookup (host echo
 * requests get a pair instead).
 */
/* host_holds_v4, host_holds_v6 */
__attribute__((noinline)) int NAT_FN(host_holds)(struct __sk_buff *skb, const KEY_T *rk)
{
	/* The key starts like the socket tuple (masq_abi.h asserts it): no copy, no
	 * stack, which the IPv6 fast path's call chain has none of to spare. */
	struct bpf_sock_tuple *t = (struct bpf_sock_tuple *)rk;
	struct bpf_sock *sk;

	/* A global function: the verifier checks it once, on its own, not inside
	 * every state of the port search's loop (and a key pointer may be NULL). */
	if (!skb || !rk)
		return false;
	if (rk->proto != ICMP_PROTO) {
		struct host_port hp = { .port = bpf_ntohs(rk->dport), .proto = rk->proto };

		if (bpf_map_lookup_elem(&host_ports, &hp))
			return true; /* a pod's hostPort: portmap DNATs new connections to it */
	}
	if (rk->proto == IPPROTO_TCP)
		sk = bpf_sk_lookup_tcp(skb, t, SK_TUPLE_LEN, BPF_F_CURRENT_NETNS, 0);
	else if (rk->proto == IPPROTO_UDP)
		sk = bpf_sk_lookup_udp(skb, t, SK_TUPLE_LEN, BPF_F_CURRENT_NETNS, 0);
	else
		return false;
	if (!sk)
		return false;
	bpf_sk_release(sk);
	return true;
}

/*
 * claim_checked - the port of @p->rk was just claimed (its reverse half written):
 * keep it unless a host socket would get its replies; then give it back. The
 * check comes after the claim, so a host socket hashed meanwhile is either seen
 * here or its first packet finds the claim (host_egress remaps it).
 */
/* claim_checked_v4, claim_checked_v6 */
static __always_inline long NAT_FN(claim_checked)(struct NAT_FN(probe) *p, __u32 i)
{
	if (NAT_FN(host_holds)(p->skb, &p->rk)) {
		bpf_map_delete_elem(&MAP_REV, &p->rk);
		count_add(CNT_HOST_SOCKET_AVOIDED, 1);
		return 0;
	}
	p->claimed = i + 1;
	return 1;
}

/*
 * tcp_reusable - may a new flow take the port of the TCP pair @old (its reverse
 * half) / @fwd (its forward half)? @now: the clock; @syn: the new flow begins with
 * a SYN whose sequence number is @seq. Returns the counter to account it under, or 0.
 * When its close completed, each FIN acknowledged by the other side (netfilter's
 * TIME_WAIT): once the last ACK settled (NAT_SETTLE_NS), as nf_nat_used_tuple_harder
 * evicts such an entry. If the
 * remote closed first, it holds the old connection's TIME_WAIT on this very
 * tuple, and accepts a new SYN there only past the old flow's sequence numbers
 * (RFC 1122 4.2.2.13; Linux tcp_timewait_state_process): so the port goes only to
 * a SYN whose number is past the pod's FIN (netfilter's nf_seq_has_advanced),
 * else the search goes on. When a RST ended it (either way), or the remote never
 * sent a packet (the reverse half carried none): once quiet for NAT_QUIET_NS. An open or half-closed pair
 * that both directions used: never (its timeout frees it).
 */
/* tcp_reusable_v4, tcp_reusable_v6 */
static __always_inline __u32 NAT_FN(tcp_reusable)(const ENTRY_T *old, const ENTRY_T *fwd, __u64 now, bool syn,
						  __u32 seq)
{
	if ((old->close & NAT_C_ACKED_PEER) && (fwd->close & NAT_C_ACKED_PEER) &&
	    (old->flags & NAT_F_FIN) && (fwd->flags & NAT_F_FIN)) {
		if (now < old->last_seen_ns + NAT_SETTLE_NS || now < fwd->last_seen_ns + NAT_SETTLE_NS)
			return 0; /* its last ACK may still be on its way to the remote */
		if (!(old->close & NAT_C_FIN_FIRST))
			return CNT_NAT_FINISHED_REUSED; /* the pod closed first: the remote keeps no state */
		return syn && (__s32)(seq - fwd->fin_end) > 0 ? CNT_NAT_FINISHED_REUSED : 0;
	}
	if (now < old->last_seen_ns + NAT_QUIET_NS || now < fwd->last_seen_ns + NAT_QUIET_NS)
		return 0;
	if ((old->flags | fwd->flags) & NAT_F_RST)
		return CNT_NAT_FINISHED_REUSED;
	return !old->packets ? CNT_NAT_UNANSWERED_REUSED : 0; /* the remote never sent a packet */
}

/*
 * event_taken - note the end of the pair whose reverse half @old (forward half
 * @fwd, or NULL) is being taken over, towards @rk, by a new flow whose pair will
 * be made at @tag (its created_ns), for the event that pair tells
 * (new_pair_tmpl.h event_made): in events_scratch, only while a reader holds a
 * lease (the gate, events_on: one lookup, no clock read when none does). A global
 * function with no stack of its own: no branch here doubles the port search's
 * states for the verifier, and the search's call chain (the deepest) grows no
 * deeper. A note left from a lease since ended is never told: event_made matches
 * it by its new pair's created_ns. Returns 0.
 */
/* event_taken_v4, event_taken_v6 */
__attribute__((noinline)) int NAT_FN(event_taken)(const KEY_T *rk, const ENTRY_T *old, const ENTRY_T *fwd,
						  __u64 tag)
{
	struct masq_event *s;

	if (!rk || !old || !events_on())
		return 0;
	s = bpf_map_lookup_elem(&events_scratch, &events_zero_key);
	if (!s)
		return 0;
	__builtin_memset(&s->pod, 0, 3 * sizeof(s->pod));
	__builtin_memcpy(&s->pod, &old->addr, sizeof(ADDR_T));
	__builtin_memcpy(&s->node, &rk->daddr, sizeof(ADDR_T));
	__builtin_memcpy(&s->remote, &rk->saddr, sizeof(ADDR_T));
	s->ktime_ns = tag;
	s->start_ns = old->created_ns & ~NAT_GEN_TAKEN; /* claimed by now (pair_take) */
	s->pod_port = old->port;
	s->node_port = rk->dport;
	s->remote_port = rk->sport;
	s->kind = EV_PAIR_ENDED;
	s->proto = rk->proto;
	s->v6 = NAT_IS_V6;
	s->policy = old->policy;
	s->reason = EV_END_TAKEN_OVER;
	s->nat_flags = old->flags;
	s->ifindex = old->ifindex;
	s->packets_in = old->packets;
	s->bytes_in = old->bytes;
	s->packets_out = fwd ? fwd->packets : 0;
	s->bytes_out = fwd ? fwd->bytes : 0;
	return 0;
}

/*
 * pair_take - judge and win the pair whose reverse half is @old for a new flow
 * whose reverse half @e is being made. @how: TAKE_EXPIRED (it expired: any pair
 * may go), else it must be a TCP pair that is over or was never answered
 * (tcp_reusable, which asks its forward half @fwd too, which the caller looked up);
 * TAKE_SYN: the new flow begins with a SYN. Returns the counter to account the
 * take-over under, 0 when the pair stays.
 *
 * What was judged may be stale by the time it is acted on: another CPU may be
 * giving the same port to another new flow, the pod opening its tuple again
 * (snat_sync_rev) or the sweep removing the pair, and a CPU can be held up between
 * its look and its write for as long as a new connection takes to be made on the
 * port meanwhile. So the pair is won: a compare-and-swap of the generation that
 * was judged to generation | NAT_GEN_TAKEN (masq_abi_nat.h), which one CPU alone
 * gets through, and only it goes on (take_over).
 * A global function that calls nothing: the verifier checks it once, not in every
 * state of the port search's loops, and the search's call chain, the deepest,
 * grows no deeper.
 */
/* pair_take_v4, pair_take_v6 */
__attribute__((noinline)) int NAT_FN(pair_take)(ENTRY_T *old, const ENTRY_T *fwd, const ENTRY_T *e, __u32 how)
{
	__u32 cnt;
	__u64 gen;

	if (!old || !e)
		return 0;
	/* The generation is read before the pair is judged (and after the lookup). */
	gen = old->created_ns;
	if (gen & NAT_GEN_TAKEN)
		return 0; /* another CPU is taking it over, or the sweep removing it */
	if (how & TAKE_EXPIRED) {
		cnt = CNT_NAT_RECLAIMED;
	} else {
		if (!fwd || fwd->created_ns != gen)
			return 0; /* not one pair (being removed): leave it */
		cnt = NAT_FN(tcp_reusable)(old, fwd, e->last_seen_ns, how & TAKE_SYN, e->fin_end);
		if (!cnt)
			return 0;
	}
	return __sync_val_compare_and_swap(&old->created_ns, gen, gen | NAT_GEN_TAKEN) == gen ? cnt : 0;
}

/*
 * take_over - give the port of the pair whose reverse half is @old to the new
 * flow when pair_take judges and wins it (@how as there, a constant at each call):
 * the pair's end is noted (event_taken), its forward half goes (while the claim
 * holds, nothing else removes or replaces it), and its reverse half is overwritten
 * with the new flow's (p->e), which is then checked as any claim is
 * (claim_checked). Returns 1 (stop) once claimed.
 *
 * p->fk doubles as the stale pair's forward key for a moment (filled in here; its
 * own source comes back from p->e, the reverse half being made, which holds it).
 */
/* take_over_v4, take_over_v6 */
static __always_inline long NAT_FN(take_over)(struct NAT_FN(probe) *p, __u32 i, ENTRY_T *old, __u32 how)
{
	ENTRY_T *fwd = NULL;
	long ret = 0;
	__u32 cnt;

	p->fk.saddr = old->addr;
	p->fk.sport = old->port;
	/* Looked up here, not in pair_take: 6.1 takes no map key from a global function's pointer argument. */
	if (!(how & TAKE_EXPIRED))
		fwd = NAT_FN(fwd_get)(&p->fk);
	cnt = NAT_FN(pair_take)(old, fwd, &p->e, how | (p->syn ? TAKE_SYN : 0));
	if (!cnt)
		goto out;
	fwd = NAT_FN(fwd_get)(&p->fk);
	if (fwd && fwd->created_ns != (old->created_ns & ~NAT_GEN_TAKEN))
		fwd = NULL; /* a later pair of the pod's tuple */
	NAT_FN(event_taken)(&p->rk, old, (how & TAKE_EXPIRED) ? NULL : fwd, p->e.created_ns);
	if (fwd)
		NAT_FN(fwd_del)(&p->fk);
	if (p->hot) { /* the stale pair's source holds this port no more (snat_make_pair sets it for ours) */
		const struct node_config *cfg = bpf_map_lookup_elem(&node_config, &nat_zero_key);

		if (cfg)
			nat_hot_mark(p->hot, nat_port_off(cfg, bpf_ntohs(p->rk.dport)), NAT_HOT_CLEAR,
				     NAT_FN(src_id)(&old->addr));
	}
	if (bpf_map_update_elem(&MAP_REV, &p->rk, &p->e, BPF_ANY)) {
		/* Not overwritten (no memory): the claimed pair goes all the same, its port free. */
		bpf_map_delete_elem(&MAP_REV, &p->rk);
		goto out;
	}
	p->fk.saddr = p->e.addr;
	p->fk.sport = p->e.port;
	ret = NAT_FN(claim_checked)(p, i);
	if (ret)
		count_add(cnt, 1);
	return ret;
out:
	/* The new flow's own source again: the reverse half being made holds it (no copy on the stack). */
	p->fk.saddr = p->e.addr;
	p->fk.sport = p->e.port;
	return ret;
}

/* nat_off_port - the port (host order) at offset @off of the ports a pair may take. */
/* nat_off_port_v4, nat_off_port_v6 */
static __always_inline __u32 NAT_FN(nat_off_port)(const struct NAT_FN(probe) *p,
						  const struct node_config *cfg, __u32 off)
{
	__u32 port = cfg->port_min + off;

	if (p->skip_len && port >= p->skip_lo)
		port += p->skip_len; /* over the skipped ports */
	return port;
}

/*
 * try_port - try to claim p->rk's port: free, or its pair expired (the stale
 * forward half goes), or its TCP pair over or never answered (take_over).
 */
/* try_port_v4, try_port_v6 */
static __always_inline int NAT_FN(try_port)(struct NAT_FN(probe) *p, __u32 i, const struct node_config *cfg)
{
	ENTRY_T *old;
	long err;

	p->tried++;
	err = bpf_map_update_elem(&MAP_REV, &p->rk, &p->e, BPF_NOEXIST);
	if (err == 0)
		/* A host socket's port stays clear in a bitmap: nothing would clear it when the socket goes. */
		return NAT_FN(claim_checked)(p, i) ? TRY_CLAIMED : TRY_SOFT;
	if (err == -E2BIG) {
		/* The port was free but the table is full: other ports will not help. */
		p->full = 1;
		return TRY_FULL;
	}
	old = bpf_map_lookup_elem(&MAP_REV, &p->rk);
	if (!old)
		return TRY_SOFT;
	if (NAT_FN(nat_expired)(old, cfg, p->fk.proto, p->e.last_seen_ns))
		return NAT_FN(take_over)(p, i, old, TAKE_EXPIRED) ? TRY_CLAIMED : TRY_SOFT;
	/* Closing, or never answered: perhaps reusable (tcp_reusable decides, with the
	 * forward half). An open pair that was answered is not: no second lookup. */
	if (p->fk.proto == IPPROTO_TCP && ((old->flags & NAT_F_TCP_CLOSING) || !old->packets))
		return NAT_FN(take_over)(p, i, old, 0) ? TRY_CLAIMED : TRY_SOFT;
	if (p->hot) /* a busy endpoint's bitmap: this port is held, by @old's source */
		nat_hot_mark(p->hot, nat_port_off(cfg, bpf_ntohs(p->rk.dport)), NAT_HOT_SET,
			     NAT_FN(src_id)(&old->addr));
	return TRY_HELD;
}

/*
 * One probe: the preferred ports first (want[]), then random ports from the
 * range, then (when the endpoint has no bitmap: nat_hot full) a sweep. Returns
 * 1 (stop) once claimed. Run through bpf_loop() so the verifier checks it once,
 * not once per probe. Inline in probe_sweep: 6.1's stack check counts each frame
 * of a call chain as 32 bytes at least.
 */
/* probe_port_v4, probe_port_v6 */
static __always_inline long NAT_FN(probe_port)(__u32 i, void *ctx)
{
	struct NAT_FN(probe) *p = ctx;
	const struct node_config *cfg = bpf_map_lookup_elem(&node_config, &nat_zero_key);
	int r;

	if (!cfg)
		return 1;

	if (i < NAT_PREFERRED) {
		__be16 want = p->want[i & (NAT_PREFERRED - 1)];

		if (!want)
			return 0;
		p->rk.dport = want;
	} else {
		/* Random probes first; then a sweep, so a nearly full range still finds its last ports. */
		__u32 j = i - NAT_PREFERRED;
		__u32 off = j < NAT_PROBES ? bpf_get_prandom_u32() : p->start + (j - NAT_PROBES);

		p->rk.dport = bpf_htons(NAT_FN(nat_off_port)(p, cfg, off % p->range));
	}
	r = NAT_FN(try_port)(p, i, cfg);
	return r == TRY_CLAIMED || r == TRY_FULL;
}

/* The sweep's probes (after the random ones failed, with no bitmap to be had). */
/* probe_sweep_v4, probe_sweep_v6 */
static long NAT_FN(probe_sweep)(__u32 i, void *ctx)
{
	return NAT_FN(probe_port)(NAT_PREFERRED + NAT_PROBES + i, ctx);
}
