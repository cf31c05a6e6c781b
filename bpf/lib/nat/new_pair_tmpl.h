/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NAT engine, part 4 of 6 (engine_tmpl.h includes it, once per family): a new
 * flow's pair. The ports it prefers (map_prefer), the port limit (limit_*),
 * snat_make_pair (the port search of parts 2 and 3, then the forward half), and the
 * records a pair leaves: the mapping hint (MAP_BIND), natFiltering's open
 * mappings and permits (MAP_OPEN, MAP_PERMIT), refusals. Never touches the packet.
 */

/*
 * map_prefer - the ports a new flow from @f tries first: the mapping its pod
 * endpoint already has towards @nat_addr (endpoint-independent mapping), then the
 * endpoint's own port when it lies in portRange (port preservation, RFC 4787
 * REQ-3: a port below it is not preserved). True when the endpoint has a binding
 * to @nat_addr (it is then kept as it is, whatever port this flow gets).
 */
/* map_prefer_v4, map_prefer_v6 */
static __noinline bool NAT_FN(map_prefer)(const FLOW_T *f, const struct node_config *cfg,
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

/* bind_update - update @f's endpoint's bind record: its mapping (nat_addr, port), for its next flows. */
/* bind_update_v4, bind_update_v6 */
static __noinline void NAT_FN(bind_update)(const FLOW_T *f, const ADDR_T *nat_addr, __be16 port)
{
	EP_T bk = { .addr = f->saddr, .port = f->sport, .proto = f->proto };
	BIND_T b = { .addr = *nat_addr, .port = port };

	bpf_map_update_elem(&MAP_BIND, &bk, &b, BPF_ANY);
}

/* open_put - @f's endpoint, mapped to (@nat_addr, @port), lets others in (natFiltering). */
/* open_put_v4, open_put_v6 */
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
/* permit_put_v4, permit_put_v6 */
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
/* refused_v4, refused_v6 */
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

/*
 * event_made - tell a reader the pair of forward key @fk, forward half @fwd and
 * reverse key @rk was made, when one holds a lease; first the end of the pair
 * whose port it took over, if it did (event_taken noted it, tagged with this
 * pair's created_ns). A global function, called on every new pair (its caller
 * branches on nothing: the verifier's states of snat_make_pair stay as they were).
 * Returns 0.
 */
/* event_made_v4, event_made_v6 */
__attribute__((noinline)) int NAT_FN(event_made)(const KEY_T *fk, const ENTRY_T *fwd, const KEY_T *rk,
						 __u32 policy)
{
	struct masq_event *s;

	if (!fwd || !events_on())
		return 0;
	s = bpf_map_lookup_elem(&events_scratch, &events_zero_key);
	if (s && s->kind == EV_PAIR_ENDED && s->ktime_ns == fwd->created_ns) {
		event_copy(s);
		s->kind = 0;
	}
	return NAT_FN(event_pair)(EV_WHAT(EV_PAIR_MADE, 0, policy), fk, fwd, NULL, rk);
}

/* count_key - @p's new flow's port_counts key: its pod and its remote endpoint. */
/* count_key_v4, count_key_v6 */
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
/* limit_reached_v4, limit_reached_v6 */
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
/* limit_exact_v4, limit_exact_v6 */
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
/* limit_count_v4, limit_count_v6 */
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
 * fwd_insert - the forward half of the pair whose reverse half @p has just claimed,
 * to (@nat_addr, the claimed port): 0, or what the new flow gets instead, the port
 * given back: NAT_PAIR_MADE (another CPU created this flow meanwhile: its pair is
 * used), DROP_NAT_FULL, DROP_NAT_INSERT (the insert failed for real).
 */
/* fwd_insert_v4, fwd_insert_v6 */
static __always_inline long NAT_FN(fwd_insert)(struct NAT_FN(probe) *p, const ADDR_T *nat_addr)
{
	void *shard;
	long err;

	p->e.addr = *nat_addr;
	p->e.port = p->rk.dport;
	p->e.fin_end = 0;
	shard = NAT_FWD_SHARD(&MAP_FWD, &p->fk, SHARD_FN);
	err = shard ? bpf_map_update_elem(shard, &p->fk, &p->e, BPF_NOEXIST) : -ENOENT;
	if (!err)
		return 0;
	bpf_map_delete_elem(&MAP_REV, &p->rk);
	if (err == -EEXIST)
		return NAT_PAIR_MADE;
	return err == -E2BIG ? DROP_NAT_FULL : DROP_NAT_INSERT;
}

/* no_port - a new flow refused for want of a port (or of its one pair): counted, told. */
/* no_port_v4, no_port_v6 */
static __always_inline int NAT_FN(no_port)(const struct NAT_FN(probe) *p, const DEC_T *d)
{
	count_add(CNT_ALLOC_FAIL, 1);
	NAT_FN(refused)(&p->fk.saddr, REFUSED_NO_PORT);
	NAT_FN(event_pair)(EV_WHAT(EV_REFUSED_NO_PORT, 0, d->policy), &p->fk, NULL, NULL, &p->rk);
	return DROP_NO_PORT;
}

/*
 * probe_init - a new pair's search state from @f's flow and decision @d: the
 * forward key, the first candidate reverse key (the flow's own port), the entry
 * both halves get. Field by field: a compound literal would be a second copy on
 * the stack. @open: the pair's mapping may be opened (natFiltering).
 */
/* probe_init_v4, probe_init_v6 */
static __always_inline void NAT_FN(probe_init)(struct NAT_FN(probe) *p, struct __sk_buff *skb, const FLOW_T *f,
					       const DEC_T *d, __u64 now, bool open)
{
	p->fk.saddr = f->saddr;
	p->fk.daddr = f->daddr;
	p->fk.sport = f->sport;
	p->fk.dport = f->dport;
	p->fk.proto = f->proto;
	p->rk.saddr = f->daddr;
	p->rk.daddr = d->nat_addr;
	p->rk.sport = f->dport;
	p->rk.proto = f->proto;
	p->e.addr = f->saddr;
	p->e.port = f->sport;
	p->e.flags = (d->verdict == VERDICT_RULE ? NAT_F_BY_RULE : 0) | d->nat_flags | (open ? NAT_F_OPEN : 0);
	p->e.ifindex = d->ifindex;
	p->e.rule_id = d->rule_id;
	p->e.policy = d->policy;
	p->e.created_ns = bpf_ktime_get_ns(); /* the fine clock: created_ns tells a pair from a later one */
	/* Read back from there, not kept in @now: one spill slot less (6.1 rounds each frame up to 32 bytes). */
	p->e.last_seen_ns = now;
	p->skb = skb;
}

/*
 * snat_make_pair - claim a port for a new flow from @f with decision @d and insert
 * both halves. Returns NAT_PAIR_MADE (the pair exists: made now, or by another CPU
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
/* snat_make_pair_v4, snat_make_pair_v6 */
__attribute__((noinline)) int NAT_FN(snat_make_pair)(struct __sk_buff *skb, const FLOW_T *f, const DEC_T *d,
					       __u64 now)
{
	/* Looked up here (an array lookup the verifier inlines): a BPF call has five arguments. */
	const struct node_config *cfg = bpf_map_lookup_elem(&node_config, &nat_zero_key);
	struct NAT_FN(probe) p = {};
	long err;
	bool bound;

	if (!skb || !f || !d)
		return DROP_NAT_INSERT;
	NAT_FN(probe_init)(&p, skb, f, d, now, d->filter);
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
		NAT_FN(hot_ready)(&p, p.e.last_seen_ns);
		if (NAT_FN(limit_exact)(&p, d->port_limit, p.e.last_seen_ns))
			goto over_limit;
	}
	p.start = bpf_get_prandom_u32() % p.range;
	if (p.hot) {
		NAT_FN(hot_ready)(&p, p.e.last_seen_ns);
		if (NAT_FN(over_share)(p.hot, &f->saddr, p.range, p.e.last_seen_ns))
			goto over_share;
	}
	/* A busy endpoint's port comes from its bitmap: no random tries. */
	bpf_loop(NAT_PREFERRED + (p.hot ? 0 : NAT_PROBES), NAT_FN(probe_port), &p, 0);
	if (!p.claimed && !p.full && !p.hot)
		p.hot = NAT_FN(hot_get)(&p.rk, true); /* the cheap tries failed: the endpoint is busy */
	if (!p.claimed && !p.full && p.hot) {
		if (!p.hot->scanned_ns) {
			NAT_FN(hot_ready)(&p, p.e.last_seen_ns);
			if (NAT_FN(over_share)(p.hot, &f->saddr, p.range, p.e.last_seen_ns))
				goto over_share;
		}
		p.hot->used_ns = p.e.last_seen_ns;
		NAT_FN(hot_search)(&p);
		if (!p.claimed && !p.full && p.e.last_seen_ns > p.hot->scanned_ns + NAT_HOT_RESCAN_NS) {
			/* Found nothing: the bits are made again from the tables (what the
			 * plugin's own removals and time left set), and searched once more. */
			p.hot->scanned_ns = p.e.last_seen_ns;
			nat_hot_reset(p.hot);
			bpf_loop(p.range, NAT_FN(hot_scan_port), &p, 0);
			count_add(CNT_NAT_HOT_SCANS, 1);
			if (NAT_FN(over_share)(p.hot, &f->saddr, p.range, p.e.last_seen_ns))
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
	if (!p.claimed)
		return NAT_FN(no_port)(&p, d);

	err = NAT_FN(fwd_insert)(&p, &d->nat_addr);
	if (err)
		return err;
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
		NAT_FN(bind_update)(f, &d->nat_addr, p.rk.dport);
	if (d->filter && f->proto != ICMP_PROTO) {
		/* Only the endpoint's mapping is opened (not a port it got towards one
		 * remote because its mapping was taken there). */
		if (!bound || p.claimed == 1)
			NAT_FN(open_put)(f, d, p.rk.dport, p.e.last_seen_ns);
		if (d->filter & NAT_FILTER_AD)
			NAT_FN(permit_put)(f, d, p.rk.dport, p.e.last_seen_ns);
	}
	count_add(CNT_NAT_CREATED, 1);
	NAT_FN(event_made)(&p.fk, &p.e, &p.rk, d->policy);
	policy_count_flow(d->policy);
	nat_gc_ensure(NAT_IS_V6, d->nat_flags & NAT_F_HOST);
	return NAT_PAIR_MADE;
over_share:
	if (p.tried)
		count_add(CNT_PORT_PROBES, p.tried);
	NAT_FN(refused)(&f->saddr, REFUSED_OVER_SHARE);
	NAT_FN(event_pair)(EV_WHAT(EV_REFUSED_SHARE, 0, d->policy), &p.fk, NULL, NULL, &p.rk);
	return DROP_OVER_SHARE;
over_limit:
	NAT_FN(refused)(&f->saddr, REFUSED_OVER_LIMIT);
	NAT_FN(event_pair)(EV_WHAT(EV_REFUSED_LIMIT, 0, d->policy), &p.fk, NULL, NULL, &p.rk);
	return DROP_OVER_LIMIT;
}

/*
 * claim_by_address - the claim of a pair translated by address alone: its one
 * reverse key {remote, nat address, protocol}, ports 0, claimed as try_port claims
 * a port (free, or its pair expired: the stale pair goes).
 */
/* claim_by_address_v4, claim_by_address_v6 */
static __noinline void NAT_FN(claim_by_address)(struct NAT_FN(probe) *p)
{
	const struct node_config *cfg = bpf_map_lookup_elem(&node_config, &nat_zero_key);

	if (cfg)
		NAT_FN(try_port)(p, 0, cfg);
}

/*
 * addr_make_pair - snat_make_pair for a protocol without ports (GRE, ESP...),
 * masqueraded by address alone as netfilter's generic handling does: the pair is
 * the one reverse key {remote, nat address, protocol}, or there is none. Another
 * source's live pair there refuses the flow (DROP_NO_PORT, counted as a refusal
 * for want of a port) until it expires, as netfilter drops the clash at conntrack
 * confirm. No port search, binding, port limit, share or open mapping: none of
 * them means anything without ports. A global function of its own, so
 * snat_make_pair's frame, on the deepest call chains, stays as it is.
 */
/* addr_make_pair_v4, addr_make_pair_v6 */
__attribute__((noinline)) int NAT_FN(addr_make_pair)(struct __sk_buff *skb, const FLOW_T *f, const DEC_T *d,
					       __u64 now)
{
	struct NAT_FN(probe) p = {};
	long err;

	if (!skb || !f || !d)
		return DROP_NAT_INSERT;
	NAT_FN(probe_init)(&p, skb, f, d, now, false); /* ports 0 but SCTP's: the parser's */
	p.rk.dport = f->sport; /* kept */
	NAT_FN(claim_by_address)(&p);
	if (p.full)
		return DROP_NAT_FULL;
	if (!p.claimed)
		return NAT_FN(no_port)(&p, d);
	err = NAT_FN(fwd_insert)(&p, &d->nat_addr);
	if (err)
		return err;
	count_add(CNT_NAT_CREATED, 1);
	NAT_FN(event_made)(&p.fk, &p.e, &p.rk, d->policy);
	policy_count_flow(d->policy);
	nat_gc_ensure(NAT_IS_V6, false);
	return NAT_PAIR_MADE;
}

/*
 * The forward half of @f's flow. A call of its own: the key lives in a frame
 * that is gone before snat_make_pair's port search, the deepest chain, runs.
 */
/* fwd_of_v4, fwd_of_v6 */
static __noinline ENTRY_T *NAT_FN(fwd_of)(const FLOW_T *f)
{
	KEY_T fk = {
		.saddr = f->saddr, .daddr = f->daddr,
		.sport = f->sport, .dport = f->dport, .proto = f->proto,
	};

	return NAT_FN(fwd_get)(&fk);
}

/*
 * snat_flow_entry - snat_make_pair, then the new flow's forward half: NULL with *reason
 * set when there is none.
 */
/* snat_flow_entry_v4, snat_flow_entry_v6 */
static __always_inline ENTRY_T *NAT_FN(snat_flow_entry)(struct __sk_buff *skb, const FLOW_T *f, const DEC_T *d,
						    __u64 now, __u32 *reason)
{
	int r = l4_has_ports(f->proto) ? NAT_FN(snat_make_pair)(skb, f, d, now) : NAT_FN(addr_make_pair)(skb, f, d, now);
	ENTRY_T *fwd;

	if (r != NAT_PAIR_MADE) {
		*reason = r;
		return NULL;
	}
	fwd = NAT_FN(fwd_of)(f);
	*reason = DROP_NAT_INSERT;
	return fwd;
}
