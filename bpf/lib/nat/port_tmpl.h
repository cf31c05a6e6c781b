/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NAT engine, part 2 of 4 (engine_tmpl.h includes it, once per family): a new
 * flow's pair. snat_new's port search (bpf_loop over probe_port: preferred ports,
 * random ones, a sweep; host sockets checked by host_holds; finished or expired
 * pairs taken over), then the forward half, the mapping hint (MAP_BIND) and
 * natFiltering's records (MAP_OPEN, MAP_PERMIT). Never touches the packet.
 */

/* State of one port search, shared with the bpf_loop() callback. */
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
 * half) / @fwd (its forward half)? Returns the counter to account it under, or 0.
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
static __always_inline __u32 NAT_FN(tcp_reusable)(const struct NAT_FN(probe) *p, const ENTRY_T *old,
						  const ENTRY_T *fwd)
{
	__u64 now = p->e.last_seen_ns;

	if ((old->close & NAT_C_ACKED_PEER) && (fwd->close & NAT_C_ACKED_PEER) &&
	    (old->flags & NAT_F_FIN) && (fwd->flags & NAT_F_FIN)) {
		if (now < old->last_seen_ns + NAT_SETTLE_NS || now < fwd->last_seen_ns + NAT_SETTLE_NS)
			return 0; /* its last ACK may still be on its way to the remote */
		if (!(old->close & NAT_C_FIN_FIRST))
			return CNT_NAT_FINISHED_REUSED; /* the pod closed first: the remote keeps no state */
		return p->syn && (__s32)(p->e.fin_end - fwd->fin_end) > 0 ? CNT_NAT_FINISHED_REUSED : 0;
	}
	if (now < old->last_seen_ns + NAT_QUIET_NS || now < fwd->last_seen_ns + NAT_QUIET_NS)
		return 0;
	if ((old->flags | fwd->flags) & NAT_F_RST)
		return CNT_NAT_FINISHED_REUSED;
	return !old->packets ? CNT_NAT_UNANSWERED_REUSED : 0; /* the remote never sent a packet */
}

/*
 * take_over - give the port of the pair whose reverse half is @old to the new
 * flow: when the pair expired (@cnt CNT_NAT_RECLAIMED), or (@cnt 0) when it is a
 * TCP flow that is over or was never answered (tcp_reusable, which names the
 * counter: the forward half, which holds the pod's side of it, is checked too). The stale forward half goes, then
 * the claim is overwritten. Returns 1 (stop) once claimed.
 *
 * p->fk doubles as the stale pair's forward key for a moment (its own source comes
 * back from p->e, the reverse half being made, which holds it). The forward half
 * under that key is the stale pair's own: a pod tuple gets a new pair only after
 * its old forward half is gone, and a reverse half whose pair lost its forward
 * half does not outlive it (gc_pair and flush remove the reverse half first;
 * snat_create removes a claim it could not complete).
 */
static __always_inline long NAT_FN(take_over)(struct NAT_FN(probe) *p, __u32 i, ENTRY_T *old, __u32 cnt)
{
	ENTRY_T *fwd;
	long ret = 0;

	p->fk.saddr = old->addr;
	p->fk.sport = old->port;
	if (cnt != CNT_NAT_RECLAIMED) {
		fwd = NAT_FN(fwd_get)(&p->fk);
		if (!fwd || fwd->created_ns != old->created_ns)
			goto out; /* not one pair (being removed): leave it */
		cnt = NAT_FN(tcp_reusable)(p, old, fwd);
		if (!cnt)
			goto out;
	}
	if (p->hot) { /* the stale pair's source holds this port no more (snat_new sets it for ours) */
		const struct masq_config *cfg = bpf_map_lookup_elem(&masq_config, &nat_zero_key);

		if (cfg)
			nat_hot_mark(p->hot, nat_port_off(cfg, bpf_ntohs(p->rk.dport)), NAT_HOT_CLEAR,
				     NAT_FN(src_id)(&old->addr));
	}
	NAT_FN(fwd_del)(&p->fk);
	if (bpf_map_update_elem(&MAP_REV, &p->rk, &p->e, BPF_ANY) == 0) {
		p->fk.saddr = p->e.addr;
		p->fk.sport = p->e.port;
		ret = NAT_FN(claim_checked)(p, i);
		if (ret)
			count_add(cnt, 1);
		return ret;
	}
out:
	/* The new flow's own source again: the reverse half being made holds it (no copy on the stack). */
	p->fk.saddr = p->e.addr;
	p->fk.sport = p->e.port;
	return ret;
}

/* nat_off_port - the port (host order) at offset @off of the ports a pair may take. */
static __always_inline __u32 NAT_FN(nat_off_port)(const struct NAT_FN(probe) *p,
						  const struct masq_config *cfg, __u32 off)
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
static __always_inline int NAT_FN(try_port)(struct NAT_FN(probe) *p, __u32 i, const struct masq_config *cfg)
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
		return NAT_FN(take_over)(p, i, old, CNT_NAT_RECLAIMED) ? TRY_CLAIMED : TRY_SOFT;
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
 * not once per probe.
 */
static long NAT_FN(probe_port)(__u32 i, void *ctx)
{
	struct NAT_FN(probe) *p = ctx;
	const struct masq_config *cfg = bpf_map_lookup_elem(&masq_config, &nat_zero_key);
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
static long NAT_FN(probe_sweep)(__u32 i, void *ctx)
{
	return NAT_FN(probe_port)(NAT_PREFERRED + NAT_PROBES + i, ctx);
}

/*
 * hot_get - the bitmap of the remote endpoint p->rk points at (nat_hot), made
 * (zeroed: every port worth a probe, scanned_ns 0) when @make and it has none.
 * NULL when it has none, or none can be made (nat_hot holds NAT_HOT_MAX). A call
 * of its own: the key lives on a frame that is gone before the search runs.
 */
static __noinline struct nat_hot *NAT_FN(hot_get)(const KEY_T *rk, bool make)
{
	struct nat_hot_key k = { .rport = rk->sport, .proto = rk->proto, .v6 = NAT_IS_V6 };
	const struct nat_hot *zero;
	struct nat_hot *h;

	__builtin_memcpy(k.nat_addr, &rk->daddr, sizeof(rk->daddr));
	__builtin_memcpy(k.remote, &rk->saddr, sizeof(rk->saddr));
	h = bpf_map_lookup_elem(&nat_hot, &k);
	if (h || !make)
		return h;
	zero = bpf_map_lookup_elem(&nat_hot_zero, &nat_zero_key);
	if (!zero || bpf_map_update_elem(&nat_hot, &k, zero, BPF_NOEXIST) == -E2BIG)
		return NULL;
	nat_hot_note();
	return bpf_map_lookup_elem(&nat_hot, &k);
}

/*
 * hot_maybe_reusable - may the TCP pair whose reverse half is @e be taken over
 * now, as far as that half tells (tcp_reusable decides, with both)? A FIN each
 * way (the last ACK may be on its way), or a RST or no answer and quiet for
 * NAT_QUIET_NS (a RST may show on the other half only: closing and quiet is
 * enough here). An open pair, or one closing, reset or unanswered just now: no.
 */
static __always_inline bool NAT_FN(hot_maybe_reusable)(const ENTRY_T *e, __u64 now)
{
	if ((e->flags & NAT_F_FIN) && (e->close & NAT_C_PEER_FIN))
		return true;
	/* Closing and quiet: a RST may be on the other half only (the pod's RST
	 * reaches this half as "closing"): tcp_reusable reads both. */
	return ((e->flags & (NAT_F_RST | NAT_F_TCP_CLOSING)) || !e->packets) && now >= e->last_seen_ns + NAT_QUIET_NS;
}

/*
 * hot_scan_port - the full scan's visit to offset @i (bpf_loop), after
 * nat_hot_reset cleared every bit and count: its bit set, and counted for the
 * pair's source, when a pair holds the port and is neither expired nor (TCP)
 * maybe reusable now (hot_maybe_reusable). Lookups only.
 */
static long NAT_FN(hot_scan_port)(__u32 i, void *ctx)
{
	struct NAT_FN(probe) *p = ctx;
	const struct masq_config *cfg = bpf_map_lookup_elem(&masq_config, &nat_zero_key);
	ENTRY_T *e;

	if (!cfg || !p->hot || i >= p->range)
		return 1;
	p->rk.dport = bpf_htons(NAT_FN(nat_off_port)(p, cfg, i));
	e = bpf_map_lookup_elem(&MAP_REV, &p->rk);
	if (e && !NAT_FN(nat_expired)(e, cfg, p->fk.proto, p->e.last_seen_ns) &&
	    !(p->fk.proto == IPPROTO_TCP && NAT_FN(hot_maybe_reusable)(e, p->e.last_seen_ns)))
		nat_hot_mark(p->hot, i, NAT_HOT_SET, NAT_FN(src_id)(&e->addr));
	return 0;
}

/*
 * hot_probe - one step of the bitmap search (bpf_loop): from offset p->start,
 * the next clear bit of the range (a word with none is one step, skipped), and
 * a try of its port. A port found held by an open pair gets its bit set
 * (try_port); one that is closing or unanswered keeps it clear (it may be
 * reusable soon, or for another SYN). Stops once claimed, or after NAT_HOT_PROBES
 * tries.
 */
static long NAT_FN(hot_probe)(__u32 i, void *ctx)
{
	struct NAT_FN(probe) *p = ctx;
	const struct masq_config *cfg = bpf_map_lookup_elem(&masq_config, &nat_zero_key);
	/* p->start runs from the search's origin (p->left's upper half) once round the
	 * range: each port is looked at once a search, however many it probes. */
	__u32 pos = p->start, origin = p->left >> 16, off, next;
	int r;

	if (!cfg || !p->hot || !(p->left & 0xffff) || pos >= origin + p->range)
		return 1;
	off = pos >= p->range ? pos - p->range : pos;
	next = nat_hot_next(p->hot, off, p->range);
	if (next & NAT_HOT_SKIP) {
		next &= ~NAT_HOT_SKIP;
		p->start = pos + ((next < p->range ? next : p->range) - off);
		return 0;
	}
	p->start = pos + (next - off) + 1;
	p->left--;
	p->rk.dport = bpf_htons(NAT_FN(nat_off_port)(p, cfg, next));
	/* A port found held gets its bit (try_port); the one claimed too (snat_new). */
	r = NAT_FN(try_port)(p, NAT_PREFERRED + NAT_PROBES + i, cfg);
	return r == TRY_CLAIMED || r == TRY_FULL;
}

/*
 * busy_sample - one look (bpf_loop) at a random port towards p->rk's endpoint:
 * held (any pair, whatever its state) counts one in p->start and goes on; free
 * stops the sampling. A lookup, never a claim.
 */
static long NAT_FN(busy_sample)(__u32 i, void *ctx)
{
	struct NAT_FN(probe) *p = ctx;
	const struct masq_config *cfg = bpf_map_lookup_elem(&masq_config, &nat_zero_key);

	if (!cfg || !p->range)
		return 1;
	p->rk.dport = bpf_htons(NAT_FN(nat_off_port)(p, cfg, bpf_get_prandom_u32() % p->range));
	if (!bpf_map_lookup_elem(&MAP_REV, &p->rk))
		return 1;
	p->start++;
	return 0;
}

/*
 * over_share - nat_hot_over_share for source @src: a call of its own, so the
 * source's id is made on a frame of its own (snat_new's is on the deepest chain).
 */
static __noinline int NAT_FN(over_share)(struct nat_hot *h, const ADDR_T *src, __u32 range, __u64 now)
{
	return src ? nat_hot_over_share(h, NAT_FN(src_id)(src), range, now) : 0;
}

/*
 * hot_ready - the endpoint's bitmap, scanned if it never was: its bits and its
 * sources' counts made from the reverse map (nat_hot_reset, hot_scan_port).
 */
static __always_inline void NAT_FN(hot_ready)(struct NAT_FN(probe) *p, __u64 now)
{
	if (!p->hot || p->hot->scanned_ns)
		return;
	nat_hot_reset(p->hot);
	bpf_loop(p->range, NAT_FN(hot_scan_port), p, 0);
	p->hot->scanned_ns = now;
	count_add(CNT_NAT_HOT_SCANS, 1);
}

/*
 * hot_jump - one of a bitmap search's first tries (bpf_loop): the first clear bit
 * at or after a random offset, within its word, tried; a word of held ports is a
 * try lost. Independent starts, because a walk alone takes ports in runs: the
 * first clear bit after a long run of set ones is where most walks stop, so those
 * ports are taken again and again, finish together, and the next walk meets them
 * all still settling (NAT_SETTLE_NS). The walk (hot_probe) follows, so a port
 * free anywhere is still found.
 */
static long NAT_FN(hot_jump)(__u32 i, void *ctx)
{
	struct NAT_FN(probe) *p = ctx;
	const struct masq_config *cfg = bpf_map_lookup_elem(&masq_config, &nat_zero_key);
	__u32 next;
	int r;

	if (!cfg || !p->hot || !p->range)
		return 1;
	next = nat_hot_next(p->hot, bpf_get_prandom_u32() % p->range, p->range);
	if (next & NAT_HOT_SKIP)
		return 0;
	p->rk.dport = bpf_htons(NAT_FN(nat_off_port)(p, cfg, next));
	r = NAT_FN(try_port)(p, NAT_PREFERRED + i, cfg);
	return r == TRY_CLAIMED || r == TRY_FULL;
}

/* hot_search - one bitmap search: NAT_HOT_JUMPS random tries, then a walk from
 * p->start round the range once. */
static __always_inline void NAT_FN(hot_search)(struct NAT_FN(probe) *p)
{
	bpf_loop(NAT_HOT_JUMPS, NAT_FN(hot_jump), p, 0);
	if (p->claimed || p->full)
		return;
	if (p->start >= p->range)
		p->start -= p->range;
	p->left = NAT_HOT_PROBES | (p->start << 16);
	bpf_loop(NAT_HOT_WORDS + 1 + NAT_HOT_PROBES, NAT_FN(hot_probe), p, 0);
}

/*
 * map_prefer - the ports a new flow from @f tries first: the mapping its pod
 * endpoint already has towards @nat_addr (endpoint-independent mapping), then the
 * endpoint's own port when it lies in portRange (port preservation, RFC 4787
 * REQ-3: a port below it is not preserved). True when the endpoint has a binding
 * to @nat_addr (it is then kept as it is, whatever port this flow gets).
 */
static __noinline bool NAT_FN(map_prefer)(const FLOW_T *f, const struct masq_config *cfg,
					  const DEC_T *d, __be16 *want)
{
	EP_T bk = { .addr = f->saddr, .port = f->sport, .proto = f->proto };
	BIND_T *b;
	bool bound;

	if (d->nat_flags & NAT_F_HOST) {
		/* The host's own flow: its own port (an echo id kept), else any. */
		want[0] = 0;
		want[1] = f->sport;
		return true; /* no binding: the host's mappings are its sockets' */
	}
	b = bpf_map_lookup_elem(&MAP_BIND, &bk);
	bound = b && ADDR_EQ(&b->addr, &d->nat_addr);
	want[0] = bound && nat_port_ok(cfg, bpf_ntohs(b->port)) ? b->port : 0;
	want[1] = nat_port_ok(cfg, bpf_ntohs(f->sport)) && f->sport != want[0] ? f->sport : 0;
	return bound;
}

/* map_bind - record @f's endpoint's mapping (nat_addr, port) for its next flows. */
static __noinline void NAT_FN(map_bind)(const FLOW_T *f, const ADDR_T *nat_addr, __be16 port)
{
	EP_T bk = { .addr = f->saddr, .port = f->sport, .proto = f->proto };
	BIND_T b = { .addr = *nat_addr, .port = port };

	bpf_map_update_elem(&MAP_BIND, &bk, &b, BPF_ANY);
}

/* open_put - @f's endpoint, mapped to (@nat_addr, @port), lets others in (natFiltering). */
static __noinline void NAT_FN(open_put)(const FLOW_T *f, const DEC_T *d, __be16 port, __u64 now)
{
	EP_T k = { .addr = d->nat_addr, .port = port, .proto = f->proto };
	OPEN_T o = {
		.addr = f->saddr, .port = f->sport, .filter = d->filter,
		.flags = d->verdict == VERDICT_RULE ? NAT_F_BY_RULE : 0,
		.ifindex = d->ifindex, .rule_id = d->rule_id, .last_seen_ns = now,
	};

	bpf_map_update_elem(&MAP_OPEN, &k, &o, BPF_ANY);
}

/* permit_put - address-dependent filtering: the remote @f goes to may answer from any port. */
static __noinline void NAT_FN(permit_put)(const FLOW_T *f, const DEC_T *d, __be16 port, __u64 now)
{
	PERMITKEY_T pk = { .remote = f->daddr, .addr = d->nat_addr, .port = port, .proto = f->proto };
	PERMIT_T pv = { .pod = f->saddr, .last_seen_ns = now };

	bpf_map_update_elem(&MAP_PERMIT, &pk, &pv, BPF_ANY);
}

/*
 * refused - count a new flow from @a refused, per source address (refusals):
 * no port free (REFUSED_NO_PORT), over its share of a busy endpoint's ports
 * (REFUSED_OVER_SHARE), or at its pod's port limit (REFUSED_OVER_LIMIT).
 */
static __noinline void NAT_FN(refused)(const ADDR_T *a, int why)
{
	struct refusal_key k = { .v6 = NAT_IS_V6 };
	struct refusals one = {}, *r;

	if (!a)
		return;
	__builtin_memcpy(k.addr, a, sizeof(*a));
	r = bpf_map_lookup_elem(&refusals, &k);
	if (!r) {
		if (why == REFUSED_OVER_SHARE)
			one.over_share = 1;
		else if (why == REFUSED_OVER_LIMIT)
			one.over_limit = 1;
		else
			one.no_port = 1;
		if (bpf_map_update_elem(&refusals, &k, &one, BPF_NOEXIST) == 0)
			return;
		r = bpf_map_lookup_elem(&refusals, &k);
		if (!r)
			return;
	}
	if (why == REFUSED_OVER_SHARE)
		__sync_fetch_and_add(&r->over_share, 1);
	else if (why == REFUSED_OVER_LIMIT)
		__sync_fetch_and_add(&r->over_limit, 1);
	else
		__sync_fetch_and_add(&r->no_port, 1);
}

/* count_key - @p's new flow's port_counts key: its pod and its remote endpoint. */
static __always_inline void NAT_FN(count_key)(const struct NAT_FN(probe) *p, struct port_count_key *k)
{
	__builtin_memcpy(k->src, &p->fk.saddr, sizeof(ADDR_T));
	__builtin_memcpy(k->nat_addr, &p->rk.daddr, sizeof(ADDR_T));
	__builtin_memcpy(k->remote, &p->rk.saddr, sizeof(ADDR_T));
	k->rport = p->rk.sport;
	k->proto = p->rk.proto;
	k->v6 = NAT_IS_V6;
}

/*
 * limit_reached - has @p's pod, whose port limit is @limit, its bound towards the
 * flow's remote endpoint at the limit (masq_abi.h port_counts)? No (the usual
 * answer): it holds fewer, one lookup. Yes: the endpoint's record tells
 * (limit_exact). Leaves only, here and in limit_exact: the IPv6 fast path's
 * call chain leaves no stack for a frame that calls on.
 */
static __noinline int NAT_FN(limit_reached)(const struct NAT_FN(probe) *p, __u32 limit)
{
	struct port_count_key k = {};
	__u32 *c;

	if (!p || !limit || limit >= p->range)
		return 0;
	NAT_FN(count_key)(p, &k);
	c = bpf_map_lookup_elem(&port_counts, &k);
	return c && *c >= limit;
}

/*
 * limit_exact - does @p's pod hold @limit ports towards the flow's remote endpoint,
 * as its scanned record p->hot counts them? Its bound is set to that count. No
 * slot of its own in the record: it holds none there (or the record counts over
 * NAT_HOT_SLOTS sources: not enforced this time).
 */
static __noinline int NAT_FN(limit_exact)(struct NAT_FN(probe) *p, __u32 limit, __u64 now)
{
	struct port_count_key k = {};
	struct nat_hot_src *s;
	__u32 *c, held;

	if (!p || !p->hot)
		return 0;
	if (now > p->hot->used_ns + NSEC_PER_SEC)
		p->hot->used_ns = now; /* in use: the sweep keeps it */
	s = hot_slot(p->hot, NAT_FN(src_id)(&p->fk.saddr), false);
	held = s ? s->held : 0;
	NAT_FN(count_key)(p, &k);
	c = bpf_map_lookup_elem(&port_counts, &k);
	if (c)
		*c = held;
	return held >= limit;
}

/*
 * limit_count - @p's pod (with a port limit) claimed a port towards the flow's
 * endpoint: its bound there grows by one; a first bound starts from the
 * endpoint's record when it has one (its count already has this port).
 */
static __noinline void NAT_FN(limit_count)(struct NAT_FN(probe) *p)
{
	struct port_count_key k = {};
	struct nat_hot_src *s;
	__u32 *c, one = 1;

	if (!p)
		return;
	NAT_FN(count_key)(p, &k);
	c = bpf_map_lookup_elem(&port_counts, &k);
	if (!c) {
		if (p->hot) {
			s = hot_slot(p->hot, NAT_FN(src_id)(&p->fk.saddr), false);
			if (s && s->held)
				one = s->held;
		}
		if (bpf_map_update_elem(&port_counts, &k, &one, BPF_NOEXIST) == 0)
			return;
		c = bpf_map_lookup_elem(&port_counts, &k);
		if (!c)
			return;
	}
	__sync_fetch_and_add(c, 1);
}

/*
 * snat_new - claim a port for a new flow from @f with decision @d and insert
 * both halves. Returns NAT_NEW_OK (the pair exists: made now, or by another CPU
 * meanwhile) or a drop reason: DROP_NO_PORT when no port was free within the
 * probe budget (also counted as CNT_ALLOC_FAIL), DROP_OVER_SHARE when the
 * remote endpoint is busy and the flow's source holds over its share of its
 * ports (masq_abi.h nat_hot), DROP_OVER_LIMIT when the source is a pod holding its
 * port limit towards the remote endpoint (port_counts; the three counted per source in
 * refusals), DROP_NAT_FULL when the table
 * holds natMaxEntries pairs, DROP_NAT_INSERT when the forward half could not
 * be inserted for another reason. A global function: the verifier checks it,
 * and its port search, once, whoever calls it (the uplink's pod and host
 * paths, the fast path); its pointers may be NULL as far as it knows.
 */
__attribute__((noinline)) int NAT_FN(snat_new)(struct __sk_buff *skb, const FLOW_T *f, const DEC_T *d,
					       __u64 now)
{
	/* Looked up here (an array lookup the verifier inlines): a BPF call has five arguments. */
	const struct masq_config *cfg = bpf_map_lookup_elem(&masq_config, &nat_zero_key);
	struct NAT_FN(probe) p = {};
	void *shard;
	long err;
	bool bound;

	if (!skb || !f || !d)
		return DROP_NAT_INSERT;
	/* Field by field: a compound literal would be a second copy on the stack. */
	p.fk.saddr = f->saddr;
	p.fk.daddr = f->daddr;
	p.fk.sport = f->sport;
	p.fk.dport = f->dport;
	p.fk.proto = f->proto;
	p.rk.saddr = f->daddr;
	p.rk.daddr = d->nat_addr;
	p.rk.sport = f->dport;
	p.rk.proto = f->proto;
	p.e.addr = f->saddr;
	p.e.port = f->sport;
	p.e.flags = (d->verdict == VERDICT_RULE ? NAT_F_BY_RULE : 0) | d->nat_flags | (d->filter ? NAT_F_OPEN : 0);
	p.e.ifindex = d->ifindex;
	p.e.rule_id = d->rule_id;
	p.e.policy = d->policy;
	p.e.created_ns = bpf_ktime_get_ns(); /* the fine clock: created_ns tells a pair from a later one */
	p.e.last_seen_ns = now;
	p.skb = skb;
	if (!cfg || cfg->port_min == 0 || cfg->port_max < cfg->port_min)
		return DROP_NO_PORT;
	p.range = cfg->port_max - cfg->port_min + 1; /* port_min >= 1: at most 65535 */
	if (cfg->skip_max && cfg->skip_max >= cfg->port_min && cfg->skip_min <= cfg->port_max) {
		__u32 lo = cfg->skip_min > cfg->port_min ? cfg->skip_min : cfg->port_min;
		__u32 hi = cfg->skip_max < cfg->port_max ? cfg->skip_max : cfg->port_max;

		p.skip_lo = lo;
		p.skip_len = hi - lo + 1;
		if (p.skip_len >= p.range)
			return DROP_NO_PORT; /* the config refuses this; never expected */
		p.range -= p.skip_len;
	}
	if (f->proto == IPPROTO_TCP && (f->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN &&
	    bpf_skb_load_bytes(skb, f->l4_off + 4, &p.e.fin_end, sizeof(p.e.fin_end)) == 0) {
		p.e.fin_end = bpf_ntohl(p.e.fin_end);
		p.syn = 1;
	}
	bound = NAT_FN(map_prefer)(f, cfg, d, p.want);
	if (nat_hot_on())
		p.hot = NAT_FN(hot_get)(&p.rk, false);
	if (!p.hot) {
		/* Is the endpoint busy (its ports mostly held), though this flow's own
		 * port may be free (port preservation would never look further)?
		 * NAT_BUSY_SAMPLES random ports all held: make its bitmap, so its
		 * shares count (one lookup a new flow while ports are mostly free). */
		p.start = 0;
		bpf_loop(NAT_BUSY_SAMPLES, NAT_FN(busy_sample), &p, 0);
		if (p.start >= NAT_BUSY_SAMPLES)
			p.hot = NAT_FN(hot_get)(&p.rk, true);
	}
	if (d->port_limit && NAT_FN(limit_reached)(&p, d->port_limit)) {
		/* At the pod's limit as far as its bound tells: the endpoint's record
		 * counts exactly (made and scanned if it has none; the search uses it too). */
		if (!p.hot)
			p.hot = NAT_FN(hot_get)(&p.rk, true);
		NAT_FN(hot_ready)(&p, now);
		if (NAT_FN(limit_exact)(&p, d->port_limit, now))
			goto over_limit;
	}
	p.start = bpf_get_prandom_u32() % p.range;
	if (p.hot) {
		NAT_FN(hot_ready)(&p, now);
		if (NAT_FN(over_share)(p.hot, &f->saddr, p.range, now))
			goto over_share;
	}
	/* A busy endpoint's port comes from its bitmap: no random tries. */
	bpf_loop(NAT_PREFERRED + (p.hot ? 0 : NAT_PROBES), NAT_FN(probe_port), &p, 0);
	if (!p.claimed && !p.full && !p.hot)
		p.hot = NAT_FN(hot_get)(&p.rk, true); /* the cheap tries failed: the endpoint is busy */
	if (!p.claimed && !p.full && p.hot) {
		if (!p.hot->scanned_ns) {
			NAT_FN(hot_ready)(&p, now);
			if (NAT_FN(over_share)(p.hot, &f->saddr, p.range, now))
				goto over_share;
		}
		p.hot->used_ns = now;
		NAT_FN(hot_search)(&p);
		if (!p.claimed && !p.full && now > p.hot->scanned_ns + NAT_HOT_RESCAN_NS) {
			/* Found nothing: the bits are made again from the tables (what the
			 * plugin's own removals and time left set), and searched once more. */
			p.hot->scanned_ns = now;
			nat_hot_reset(p.hot);
			bpf_loop(p.range, NAT_FN(hot_scan_port), &p, 0);
			count_add(CNT_NAT_HOT_SCANS, 1);
			if (NAT_FN(over_share)(p.hot, &f->saddr, p.range, now))
				goto over_share;
			NAT_FN(hot_search)(&p);
		}
		if (p.claimed)
			count_add(CNT_NAT_HOT_FOUND, 1);
	} else if (!p.claimed && !p.full) {
		/* No bitmap to be had (nat_hot is full): a sweep from a random start. */
		bpf_loop(p.range < NAT_SWEEP ? p.range : NAT_SWEEP, NAT_FN(probe_sweep), &p, 0);
	}
	if (p.claimed && p.hot) {
		__u32 off = nat_port_off(cfg, bpf_ntohs(p.rk.dport));

		nat_hot_mark(p.hot, off, NAT_HOT_SET, NAT_FN(src_id)(&f->saddr));
	}
	if (p.claimed && d->port_limit)
		NAT_FN(limit_count)(&p);
	if (p.tried)
		count_add(CNT_PORT_PROBES, p.tried); /* per new flow: ~1/(1 - share of the range in use) */
	if (p.full)
		return DROP_NAT_FULL;
	if (!p.claimed) {
		count_add(CNT_ALLOC_FAIL, 1);
		NAT_FN(refused)(&f->saddr, REFUSED_NO_PORT);
		return DROP_NO_PORT;
	}

	p.e.addr = d->nat_addr;
	p.e.port = p.rk.dport;
	p.e.fin_end = 0;
	shard = NAT_FWD_SHARD(&MAP_FWD, &p.fk, SHARD_FN);
	err = shard ? bpf_map_update_elem(shard, &p.fk, &p.e, BPF_NOEXIST) : -ENOENT;
	if (err) {
		/* Give the port back. If another CPU created this flow meanwhile
		 * (EEXIST), use its pair; otherwise the insert failed for real. */
		bpf_map_delete_elem(&MAP_REV, &p.rk);
		if (err == -EEXIST)
			return NAT_NEW_OK;
		return err == -E2BIG ? DROP_NAT_FULL : DROP_NAT_INSERT;
	}
	if (d->nat_flags & NAT_F_HOST) {
		count_add(CNT_HOST_TRACKED, 1);
		if (p.claimed != 2)
			count_add(CNT_HOST_REMAPPED, 1);
	} else if (p.claimed == 1) {
		count_add(CNT_MAP_REUSED, 1);
	} else if (p.claimed == 2) {
		count_add(CNT_MAP_PRESERVED, 1);
	}
	if (!bound)
		NAT_FN(map_bind)(f, &d->nat_addr, p.rk.dport);
	if (d->filter && f->proto != ICMP_PROTO) {
		/* Only the endpoint's mapping is opened (not a port it got towards one
		 * remote because its mapping was taken there). */
		if (!bound || p.claimed == 1)
			NAT_FN(open_put)(f, d, p.rk.dport, now);
		if (d->filter & NAT_FILTER_AD)
			NAT_FN(permit_put)(f, d, p.rk.dport, now);
	}
	count_add(CNT_NAT_CREATED, 1);
	egress_flow(d->policy);
	nat_gc_ensure(NAT_IS_V6, d->nat_flags & NAT_F_HOST);
	return NAT_NEW_OK;
over_share:
	if (p.tried)
		count_add(CNT_PORT_PROBES, p.tried);
	NAT_FN(refused)(&f->saddr, REFUSED_OVER_SHARE);
	return DROP_OVER_SHARE;
over_limit:
	NAT_FN(refused)(&f->saddr, REFUSED_OVER_LIMIT);
	return DROP_OVER_LIMIT;
}

/*
 * The forward half of @f's flow. A call of its own: the key lives in a frame
 * that is gone before snat_new's port search, the deepest chain, runs.
 */
static __noinline ENTRY_T *NAT_FN(fwd_of)(const FLOW_T *f)
{
	KEY_T fk = {
		.saddr = f->saddr, .daddr = f->daddr,
		.sport = f->sport, .dport = f->dport, .proto = f->proto,
	};

	return NAT_FN(fwd_get)(&fk);
}

/*
 * snat_create - snat_new, then the new flow's forward half: NULL with *reason
 * set when there is none.
 */
static __always_inline ENTRY_T *NAT_FN(snat_create)(struct __sk_buff *skb, const FLOW_T *f, const DEC_T *d,
						    __u64 now, __u32 *reason)
{
	int r = NAT_FN(snat_new)(skb, f, d, now);
	ENTRY_T *fwd;

	if (r != NAT_NEW_OK) {
		*reason = r;
		return NULL;
	}
	fwd = NAT_FN(fwd_of)(f);
	*reason = DROP_NAT_INSERT;
	return fwd;
}
