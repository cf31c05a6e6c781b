/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The NAT engine, written once for both address families. nat.h includes this
 * file twice, with the family's types, maps and helpers bound to these names:
 *
 *   NAT_FN(x)        x##_v4 / x##_v6
 *   FLOW_T INNER_T   struct flow4 / flow6, struct inner4 / inner6
 *   KEY_T ENTRY_T    struct nat4_key / nat6_key, struct nat4_entry / nat6_entry
 *   FRAGKEY_T DEC_T  struct frag4_key / frag6_key, struct masq_decision4 / 6
 *   MAP_FWD MAP_REV MAP_FRAG SHARD_FN (the forward map's shard function)
 *   MAP_BIND EP_T BIND_T ADDR_T  the mapping hints (nat4_bind / nat6_bind), the address type
 *   MAP_OPEN OPEN_T MAP_PERMIT PERMITKEY_T PERMIT_T  natFiltering's open mappings and permits
 *   ADDR_EQ(a, b)    address equality (pointers)
 *   UPLINK_HAS(up) UPLINK_ADDR(up)   the uplink's address of this family
 *   PARSE PARSE_INNER DECIDE DECIDE_REPLY REWRITE REWRITE_ADDR ICMP_ERR_REWRITE QUOTES_POD
 *   ECHO_REPLY ECHO_REQUEST ICMP_PROTO CNT_SNAT_PKTS CNT_SNAT_BYTES CNT_RNAT_PKTS CNT_RNAT_BYTES
 *   FP_REPLY         the fast path's reply redirect (fastpath.h)
 *
 * Mapping is endpoint-independent (RFC 4787 REQ-1, RFC 5382 REQ-1): a new flow
 * tries its pod endpoint's existing mapping first (MAP_BIND), then the pod's own
 * port (preservation), then random ones (snat_create). Filtering is address-and-
 * port-dependent by default: only the remote a pair was made for reaches it back;
 * a pod or rule with natFiltering address-dependent or endpoint-independent has its
 * mappings in MAP_OPEN, and a packet from another remote to one (open_ingress) gets
 * a pair of its own on the mapping's port.
 *
 * Every masqueraded flow is a pair of entries that exist together:
 *   fwd[{pod, remote, pod port, remote port}]    -> {nat addr, nat port}
 *   rev[{remote, nat addr, remote port, nat port}] -> {pod, pod port}
 * The reverse half is inserted first with BPF_NOEXIST (that is the port claim);
 * if the forward half then fails, the reverse half is removed again. Both halves
 * carry the pair's created_ns, which tells a pair from a later one with the same key.
 *
 * Expiry: entries carry last_seen_ns, refreshed in both halves together at most
 * once a second from whichever direction has traffic, so a one-way flow never
 * loses its reply path. The expiry sweep (nat.h: one bpf_timer for the node)
 * removes pairs idle longer than their protocol's timeout, both halves; before it
 * comes round, a new flow may take over an idle pair's port (probe_port). The maps
 * are plain hash maps: nothing evicts one half alone, and a full table refuses
 * new flows (DROP_NAT_FULL).
 *
 * Direction: a flow whose first packet comes in on an uplink, addressed to a
 * source the egress program would masquerade (a registered pod, a rule's source),
 * began outside (a routed pod CIDR: a load balancer, a BGP peer, a tunnel
 * client's peer). It gets a forward half alone, NAT_F_INBOUND, whose value is
 * the pod's own address and port: the pod's replies find it and leave untouched,
 * as netfilter leaves the replies of a connection it saw begin outside.
 * Such a half lives and expires like a pair (the sweep finds no reverse half).
 */

#define NAT_NOT_OURS (-100)
#define NAT_HOST_NEW (-101) /* host_egress: the host flow needs a pair */

/* The forward half of a pair, in its key's shard of MAP_FWD. */
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
static __always_inline ENTRY_T *NAT_FN(fwd_get_hot)(const KEY_T *k)
{
	__u32 i = nat_shard((const __u32 *)k, sizeof(*k) / 4, nat_seed);
	void *m = bpf_map_lookup_elem(&MAP_FWD, &i);

	return m ? bpf_map_lookup_elem(m, k) : NULL;
}

static __always_inline void NAT_FN(fwd_del)(const KEY_T *k)
{
	void *m = NAT_FWD_SHARD(&MAP_FWD, k, SHARD_FN);

	if (m)
		bpf_map_delete_elem(m, k);
}

static __always_inline bool NAT_FN(nat_expired)(const ENTRY_T *e, const struct masq_config *cfg,
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
 * Account one packet on the half of its direction; true when last_seen was
 * refreshed (once a second at most, and at once when the TCP state changes: the
 * caller then brings the other half in step, nat_flags_synced).
 */
static __always_inline bool NAT_FN(nat_touch)(ENTRY_T *e, const FLOW_T *f, __u64 now)
{
	/* Plain adds, not atomics: a flow's packets come in on one CPU at a time
	 * (RSS, one socket), and a rare lost update costs a statistic, not a byte. */
	e->packets += 1;
	e->bytes += f->len;
	if (f->proto == IPPROTO_TCP) {
		__u8 end = (f->tcp_flags & TCP_FLAG_RST) ? NAT_F_RST : (f->tcp_flags & TCP_FLAG_FIN) ? NAT_F_FIN : 0;

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
 * reverse half too (carrying the TCP closing state). Returns false if the
 * reverse half is gone (the pair is being removed) or belongs to another flow:
 * the caller starts this flow afresh.
 */
static __noinline bool NAT_FN(snat_sync_rev)(const FLOW_T *f, const ENTRY_T *fwd, __u64 now)
{
	KEY_T rk = {
		.saddr = f->daddr, .daddr = fwd->addr,
		.sport = f->dport, .dport = fwd->port, .proto = f->proto,
	};
	ENTRY_T *rev = bpf_map_lookup_elem(&MAP_REV, &rk);

	if (!rev || rev->created_ns != fwd->created_ns)
		return false;
	rev->last_seen_ns = now;
	rev->flags = nat_flags_synced(fwd->flags, rev->flags);
	if (fwd->flags & NAT_F_OPEN)
		NAT_FN(open_refresh)(f, fwd, now);
	return true;
}

/*
 * snat_refresh - account a pod packet on its flow's forward half and keep the
 * reverse half in step. False when the pair is gone from under it: the caller
 * deletes the forward half and starts the flow afresh.
 */
static __always_inline bool NAT_FN(snat_refresh)(const FLOW_T *f, ENTRY_T *fwd, __u64 now)
{
	return !NAT_FN(nat_touch)(fwd, f, now) || NAT_FN(snat_sync_rev)(f, fwd, now);
}

/*
 * The mirror of snat_sync_rev, from a reply that hit the reverse half. A
 * forward half that is gone or belongs to a newer pair is left alone: a reply
 * never recreates state.
 */
static __noinline void NAT_FN(rnat_sync_fwd)(const FLOW_T *f, const ENTRY_T *rev, __u64 now)
{
	KEY_T fk = {
		.saddr = rev->addr, .daddr = f->saddr,
		.sport = rev->port, .dport = f->sport, .proto = f->proto,
	};
	ENTRY_T *fwd = NAT_FN(fwd_get)(&fk);

	if (fwd && fwd->created_ns == rev->created_ns) {
		fwd->last_seen_ns = now;
		fwd->flags = nat_flags_synced(rev->flags, fwd->flags);
	}
}

/*
 * gc_pair - the expiry sweep's visit to one forward half (bpf_for_each_map_elem
 * callback): a pair idle past its timeout goes, reverse half first, then the
 * forward half the walk stands on; each only if it is still this pair's.
 */
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
	if (rev && rev->created_ns == gen)
		bpf_map_delete_elem(&MAP_REV, &rk);
	/* A packet of the flow may have found its reverse half gone just now and
	 * made a new pair under the same key: that one stays. */
	cur = bpf_map_lookup_elem(map, &fk); /* @map: the shard being walked, the key's own */
	if (cur && cur->created_ns == gen)
		bpf_map_delete_elem(map, &fk);
	count_add(CNT_NAT_EXPIRED, 1);
	return 0;
}

/* State of one port search, shared with the bpf_loop() callback. */
struct NAT_FN(probe) {
	KEY_T fk;           /* the new flow's forward key */
	KEY_T rk;           /* the candidate reverse key (its dport is the candidate port) */
	ENTRY_T e;          /* one entry serves both halves: the reverse one first */
	struct __sk_buff *skb; /* for the host socket lookups (host_holds) */
	__u64 now;
	__u32 start;        /* first port of the sequential sweep, as an offset in the range */
	__u32 claimed;      /* 0, or 1 + the probe that claimed its port */
	__u32 tried;        /* ports tried (the preferred slots left empty are not) */
	/* 16-bit fields, and no config pointer (the callback looks it up): the IPv6
	 * fast path's call chain down to host_holds must fit the 512-byte stack. */
	__u16 range;        /* ports that may be handed out: portRange less the skipped ones */
	__u16 skip_lo;      /* first skipped port inside portRange (host order) */
	__u16 skip_len;     /* skipped ports inside portRange; 0: none */
	__u16 full;         /* the reverse map holds natMaxEntries entries */
	__be16 want[NAT_PREFERRED]; /* ports tried first: the endpoint's binding, its own port; 0: none */
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
	/* The key starts like the socket tuple (common.h asserts it): no copy, no
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
 * take_over - give the port of the pair whose reverse half is @old to the new
 * flow: when the pair expired (@cnt CNT_NAT_RECLAIMED), or when it is a TCP flow
 * that is over, FIN both ways or a RST either way, and quiet for
 * NAT_FINISHED_GRACE_NS since (CNT_NAT_FINISHED_REUSED: the forward half, which
 * holds the pod's side of it, is checked). The stale forward
 * half goes, then the claim is overwritten. Returns 1 (stop) once claimed.
 *
 * p->fk doubles as the stale pair's forward key for a moment. The forward half
 * under that key is the stale pair's own: a pod tuple gets a new pair only after
 * its old forward half is gone, and a reverse half whose pair lost its forward
 * half does not outlive it (gc_pair and flush remove the reverse half first;
 * snat_create removes a claim it could not complete).
 */
static __always_inline long NAT_FN(take_over)(struct NAT_FN(probe) *p, __u32 i, ENTRY_T *old, __u32 cnt)
{
	KEY_T mine = p->fk;
	ENTRY_T *fwd;
	long ret = 0;

	p->fk.saddr = old->addr;
	p->fk.sport = old->port;
	if (cnt == CNT_NAT_FINISHED_REUSED) {
		__u8 ends;

		fwd = NAT_FN(fwd_get)(&p->fk);
		if (!fwd || fwd->created_ns != old->created_ns)
			goto out; /* not one pair (being removed): leave it */
		ends = (old->flags & NAT_F_ENDS) | (fwd->flags & NAT_F_ENDS);
		if (!(ends & NAT_F_RST) && !((old->flags & NAT_F_FIN) && (fwd->flags & NAT_F_FIN)))
			goto out; /* one direction still open */
		/* The last FIN's ACK (and its retransmissions) must still find the pair:
		 * taken over under it, the peer would sit in LAST_ACK and answer the new
		 * flow's SYN with a challenge ACK, a 1 s stall. */
		if (p->now < old->last_seen_ns + NAT_FINISHED_GRACE_NS ||
		    p->now < fwd->last_seen_ns + NAT_FINISHED_GRACE_NS)
			goto out;
	}
	NAT_FN(fwd_del)(&p->fk);
	if (bpf_map_update_elem(&MAP_REV, &p->rk, &p->e, BPF_ANY) == 0) {
		p->fk = mine;
		ret = NAT_FN(claim_checked)(p, i);
		if (ret)
			count_add(cnt, 1);
		return ret;
	}
out:
	p->fk = mine;
	return ret;
}

/*
 * One probe: the preferred ports first (want[]), then random ports from the
 * range, then a sweep; claim the port if free, or if its pair expired (the stale
 * forward half goes). Returns 1 (stop) once claimed.
 * Run through bpf_loop() so the verifier checks it once, not once per probe.
 */
static long NAT_FN(probe_port)(__u32 i, void *ctx)
{
	struct NAT_FN(probe) *p = ctx;
	const struct masq_config *cfg = bpf_map_lookup_elem(&masq_config, &nat_zero_key);
	ENTRY_T *old;
	long err;

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
		__u32 port = cfg->port_min + off % p->range;

		if (p->skip_len && port >= p->skip_lo)
			port += p->skip_len; /* over the skipped ports */
		p->rk.dport = bpf_htons(port);
	}
	p->tried++;
	err = bpf_map_update_elem(&MAP_REV, &p->rk, &p->e, BPF_NOEXIST);
	if (err == 0)
		return NAT_FN(claim_checked)(p, i);
	if (err == -E2BIG) {
		/* The port was free but the table is full: other ports will not help. */
		p->full = 1;
		return 1;
	}
	old = bpf_map_lookup_elem(&MAP_REV, &p->rk);
	if (!old)
		return 0;
	if (NAT_FN(nat_expired)(old, cfg, p->fk.proto, p->now))
		return NAT_FN(take_over)(p, i, old, CNT_NAT_RECLAIMED);
	if (old->flags & NAT_F_TCP_CLOSING)
		return NAT_FN(take_over)(p, i, old, CNT_NAT_FINISHED_REUSED);
	return 0;
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
 * snat_new - claim a port for a new flow from @f with decision @d and insert
 * both halves. Returns NAT_NEW_OK (the pair exists: made now, or by another CPU
 * meanwhile) or a drop reason: DROP_NO_PORT when no port was free within the
 * probe budget (also counted as CNT_ALLOC_FAIL), DROP_NAT_FULL when the table
 * holds natMaxEntries pairs, DROP_NAT_INSERT when the forward half could not
 * be inserted for another reason. A global function: the verifier checks it,
 * and its port search, once, whoever calls it (the uplink's pod and host
 * paths, the fast path); its pointers may be NULL as far as it knows.
 */
__attribute__((noinline)) int NAT_FN(snat_new)(struct __sk_buff *skb, const FLOW_T *f, const DEC_T *d,
					       __u64 now)
{
	__u32 zero = 0;
	/* Looked up here (an array lookup the verifier inlines): a BPF call has five arguments. */
	const struct masq_config *cfg = bpf_map_lookup_elem(&masq_config, &zero);
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
	p.e.created_ns = bpf_ktime_get_ns(); /* the fine clock: created_ns tells a pair from a later one */
	p.e.last_seen_ns = now;
	p.skb = skb;
	p.now = now;
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
	bound = NAT_FN(map_prefer)(f, cfg, d, p.want);
	p.start = bpf_get_prandom_u32();
	bpf_loop(NAT_PREFERRED + NAT_PROBES + (p.range < NAT_SWEEP ? p.range : NAT_SWEEP), NAT_FN(probe_port), &p, 0);
	if (p.tried)
		count_add(CNT_PORT_PROBES, p.tried); /* per new flow: ~1/(1 - share of the range in use) */
	if (p.full)
		return DROP_NAT_FULL;
	if (!p.claimed) {
		count_add(CNT_ALLOC_FAIL, 1);
		return DROP_NO_PORT;
	}

	p.e.addr = d->nat_addr;
	p.e.port = p.rk.dport;
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
	nat_gc_ensure(NAT_IS_V6, d->nat_flags & NAT_F_HOST);
	return NAT_NEW_OK;
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


static __always_inline void NAT_FN(rule_account)(__u32 rule_id, __u32 len)
{
	struct rule_stats *rs = bpf_map_lookup_elem(&rule_stats, &rule_id);

	if (rs) {
		rs->packets += 1;
		rs->bytes += len;
	}
}

/* Remember a first fragment's ports for the fragments that follow it. */
static __noinline void NAT_FN(frag_remember)(const FLOW_T *f)
{
	FRAGKEY_T k = { .saddr = f->saddr, .daddr = f->daddr, .id = f->frag_id, .proto = f->frag_proto };
	struct frag_ports p = { .sport = f->sport, .dport = f->dport, .proto = f->proto };

	bpf_map_update_elem(&MAP_FRAG, &k, &p, BPF_ANY);
}

static __always_inline struct frag_ports *NAT_FN(frag_lookup)(const FLOW_T *f)
{
	FRAGKEY_T k = { .saddr = f->saddr, .daddr = f->daddr, .id = f->frag_id, .proto = f->frag_proto };

	return bpf_map_lookup_elem(&MAP_FRAG, &k);
}

/* Egress, a later fragment: translate its address like its first fragment's. */
static __noinline int NAT_FN(snat_fragment)(struct __sk_buff *skb, const struct uplink_info *up,
						 const FLOW_T *f)
{
	struct frag_ports *p = NAT_FN(frag_lookup)(f);
	DEC_T d = {};

	if (p) {
		KEY_T fk = {
			.saddr = f->saddr, .daddr = f->daddr,
			.sport = p->sport, .dport = p->dport, .proto = p->proto,
		};
		ENTRY_T *fwd = NAT_FN(fwd_get)(&fk);

		if (fwd && (fwd->flags & NAT_F_INBOUND)) {
			count_add(CNT_INBOUND_PKTS, 1);
			return MASQ_PASS;
		}
		if (fwd) {
			if (REWRITE_ADDR(skb, f, true, &fwd->addr))
				return drop_with(DROP_CSUM);
			if (fwd->flags & NAT_F_BY_RULE)
				NAT_FN(rule_account)(fwd->rule_id, f->len);
			count_add(CNT_FRAGS, 1);
			count_add(CNT_SNAT_PKTS, 1);
			count_add(CNT_SNAT_BYTES, f->len);
			return MASQ_PASS;
		}
	}
	/* Unknown datagram: never let it leave with an address we would have masqueraded. */
	DECIDE(skb->ifindex, up, f, &d);
	if (d.verdict == VERDICT_NONE)
		return MASQ_PASS;
	return drop_with(DROP_FRAG_NO_STATE);
}

/* Ingress, a later fragment of a reply: follow its first fragment, or leave it to the host. */
static __noinline int NAT_FN(rnat_fragment)(struct __sk_buff *skb, const FLOW_T *f)
{
	struct frag_ports *p = NAT_FN(frag_lookup)(f);
	ENTRY_T *rev;

	if (!p)
		return MASQ_PASS;
	KEY_T rk = {
		.saddr = f->saddr, .daddr = f->daddr,
		.sport = p->sport, .dport = p->dport, .proto = p->proto,
	};
	rev = bpf_map_lookup_elem(&MAP_REV, &rk);
	if (!rev)
		return MASQ_PASS;
	if (REWRITE_ADDR(skb, f, false, &rev->addr))
		return drop_with(DROP_CSUM);
	count_add(CNT_FRAGS, 1);
	count_add(CNT_RNAT_PKTS, 1);
	count_add(CNT_RNAT_BYTES, f->len);
	return MASQ_PASS;
}

/*
 * An ICMP error leaving about a reply we translated towards a pod: sent by the
 * pod itself (port unreachable...) or by the node while forwarding the reply
 * (fragmentation needed towards a smaller-MTU pod or tunnel link, TTL...). The
 * quoted packet is the reply as the pod would see it, so its reversed tuple is
 * the flow's forward key; the remote must see its own packet quoted back.
 * The outer source is translated only when it is the pod's.
 * NAT_NOT_OURS when it is about no masqueraded flow.
 */
static __noinline int NAT_FN(icmp_err_egress)(struct __sk_buff *skb, const FLOW_T *f)
{
	INNER_T in;
	ENTRY_T *fwd;

	if (PARSE_INNER(skb, f, &in))
		return NAT_NOT_OURS;
	KEY_T fk = {
		.saddr = in.daddr, .daddr = in.saddr,
		.sport = in.dport, .dport = in.sport, .proto = in.proto,
	};
	fwd = NAT_FN(fwd_get)(&fk);
	if (!fwd)
		return NAT_NOT_OURS;
	if (fwd->flags & NAT_F_INBOUND)
		return MASQ_PASS; /* about a flow begun outside: nothing was translated */
	if (ICMP_ERR_REWRITE(skb, f, &in, true, ADDR_EQ(&in.daddr, &f->saddr), &fwd->addr, fwd->port))
		return drop_with(DROP_CSUM);
	count_add(CNT_ICMP_ERR_OUT, 1);
	return MASQ_PASS;
}

/*
 * An ICMP error about a packet we masqueraded (fragmentation needed / packet too
 * big, TTL exceeded, unreachable...), from the remote or a router on the way:
 * the quoted packet is ours as it left, so its reversed tuple is the reverse key.
 */
static __noinline int NAT_FN(icmp_err_ingress)(struct __sk_buff *skb, const FLOW_T *f)
{
	INNER_T in;
	ENTRY_T *rev;

	if (PARSE_INNER(skb, f, &in) || !ADDR_EQ(&in.saddr, &f->daddr))
		return MASQ_PASS;
	KEY_T rk = {
		.saddr = in.daddr, .daddr = in.saddr,
		.sport = in.dport, .dport = in.sport, .proto = in.proto,
	};
	rev = bpf_map_lookup_elem(&MAP_REV, &rk);
	if (!rev)
		return MASQ_PASS; /* about the host's own traffic */
	if (ICMP_ERR_REWRITE(skb, f, &in, false, true, &rev->addr, rev->port))
		return drop_with(DROP_CSUM);
	count_add(CNT_ICMP_ERR_IN, 1);
	return MASQ_PASS;
}

/*
 * host_egress - the host's own packet, leaving with the masquerade address. The
 * port space is the host's too, so its flows are tracked where needed, as
 * netfilter's null binding does: a host flow whose tuple is already a pod's pair
 * (a pod took it first; the host's connect() cannot know) gets a pair of its own
 * on another port (NAT_F_HOST), and its replies are translated back
 * (rnat_ingress), so nobody's replies are misdelivered. A host socket that
 * exists first is seen by the pod's claim instead (host_holds). Echo requests
 * always get a pair (their own id when free): no socket lookup finds a ping id.
 * Everything else passes untouched, at the cost of one reverse lookup for a
 * UDP datagram or a TCP SYN, and one forward lookup while host pairs exist.
 * NAT_HOST_NEW: the flow needs a pair (snat_egress makes it, at the one call of
 * snat_create, so the deepest call chain stays within the BPF stack).
 */
static __noinline int NAT_FN(host_egress)(struct __sk_buff *skb, const FLOW_T *f)
{
	ENTRY_T *fwd;
	__u64 now;

	const struct nat_gc *gc = bpf_map_lookup_elem(&nat_gc, &nat_zero_key);

	if (f->l4 != L4_OK)
		return MASQ_PASS; /* a later fragment: the address, all a host pair could change, stays */
	KEY_T fk = {
		.saddr = f->saddr, .daddr = f->daddr,
		.sport = f->sport, .dport = f->dport, .proto = f->proto,
	};
	/* Its own pair, if host pairs may exist at all (nat_gc.hosts). */
	fwd = !gc || gc->hosts ? NAT_FN(fwd_get)(&fk) : NULL;
	if (fwd) {
		now = bpf_ktime_get_coarse_ns();
		if (NAT_FN(snat_refresh)(f, fwd, now)) {
			if (fwd->port == f->sport)
				return MASQ_PASS;
			return REWRITE(skb, f, true, &fwd->addr, fwd->port) ? drop_with(DROP_CSUM) : MASQ_PASS;
		}
		NAT_FN(fwd_del)(&fk); /* its pair is going: as a new flow */
	}
	if (f->proto == ICMP_PROTO)
		return f->icmp_type == ECHO_REQUEST ? NAT_HOST_NEW : MASQ_PASS;
	/* A host TCP connection can only meet a pod's tuple with its first segment:
	 * from connect() on, its socket is hashed, and a pod's claim sees it. */
	if (f->proto == IPPROTO_TCP && (f->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) != TCP_FLAG_SYN)
		return MASQ_PASS;
	KEY_T rk = {
		.saddr = f->daddr, .daddr = f->saddr,
		.sport = f->dport, .dport = f->sport, .proto = f->proto,
	};
	/* Nobody's: untracked, as it leaves. */
	return bpf_map_lookup_elem(&MAP_REV, &rk) ? NAT_HOST_NEW : MASQ_PASS;
}

static __noinline int NAT_FN(snat_egress)(struct __sk_buff *skb, const struct uplink_info *up)
{
	ENTRY_T *fwd = NULL;
	__u32 reason;
	DEC_T d = {};
	FLOW_T f;
	__u64 now;
	int ret;

	if (PARSE(skb, uplink_l3_off(up), &f))
		return MASQ_PASS;
	/* The host's own traffic: by far the most common non-NAT case. Its ICMP
	 * errors may quote a reply we translated, though. */
	if (UPLINK_HAS(up) && ADDR_EQ(&f.saddr, UPLINK_ADDR(up))) {
		if (f.l4 != L4_ICMP_ERROR) {
			ret = NAT_FN(host_egress)(skb, &f);
			if (ret != NAT_HOST_NEW)
				return ret;
			d.nat_addr = f.saddr;
			d.nat_flags = NAT_F_HOST;
			now = bpf_ktime_get_coarse_ns();
			goto create;
		}
		ret = NAT_FN(icmp_err_egress)(skb, &f);
		if (ret != NAT_NOT_OURS)
			return ret;
		/* Untranslatable (e.g. it quotes a later fragment): never show a pod's address. */
		return QUOTES_POD(skb, &f) ? drop_with(DROP_UNSUPPORTED_PROTO) : MASQ_PASS;
	}

	now = bpf_ktime_get_coarse_ns(); /* last_seen needs seconds, not ns: the cheap clock */
	switch (f.l4) {
	case L4_OK: {
		KEY_T fk = {
			.saddr = f.saddr, .daddr = f.daddr,
			.sport = f.sport, .dport = f.dport, .proto = f.proto,
		};
		fwd = NAT_FN(fwd_get_hot)(&fk);
		if (fwd) {
			if (fwd->flags & NAT_F_INBOUND) {
				/* A reply of a flow begun outside: it leaves as it is
				 * (its later fragments too: snat_fragment). */
				NAT_FN(nat_touch)(fwd, &f, now);
				if (f.frag == FRAG_FIRST)
					NAT_FN(frag_remember)(&f);
				count_add(CNT_INBOUND_PKTS, 1);
				return MASQ_PASS;
			}
			if (!NAT_FN(snat_refresh)(&f, fwd, now)) {
				/* Our pair is going, or its reply slot was taken over: start afresh. */
				NAT_FN(fwd_del)(&fk);
				fwd = NULL;
			} else {
				goto rewrite;
			}
		}
		break;
	}
	case L4_FRAGMENT:
		return NAT_FN(snat_fragment)(skb, up, &f);
	case L4_ICMP_ERROR:
		ret = NAT_FN(icmp_err_egress)(skb, &f);
		if (ret != NAT_NOT_OURS)
			return ret;
		break;
	}

	DECIDE(skb->ifindex, up, &f, &d);
	if (d.verdict == VERDICT_NONE)
		return MASQ_PASS;

	/*
	 * From here on the packet must leave masqueraded or not at all. An echo
	 * reply answers a ping that reached the pod directly: no flow of ours to map
	 * it to, and it must not leave with the pod's address either.
	 */
	if (f.l4 == L4_OK && f.proto == ICMP_PROTO && f.icmp_type == ECHO_REPLY)
		return drop_with(DROP_UNSUPPORTED_PROTO);
	switch (f.l4) {
	case L4_TRUNCATED:
		return drop_with(DROP_MALFORMED);
	case L4_UNSUPPORTED:
	case L4_ICMP_ERROR:
		return drop_with(DROP_UNSUPPORTED_PROTO);
	}

create:
	d.ifindex = skb->ifindex;
	fwd = NAT_FN(snat_create)(skb, &f, &d, now, &reason);
	if (!fwd) {
		/* A host echo request goes as it is (its id is likely free); any
		 * other flow must not leave: its replies would reach somebody else. */
		if ((d.nat_flags & NAT_F_HOST) && f.proto == ICMP_PROTO)
			return MASQ_PASS;
		return drop_with(reason);
	}
	NAT_FN(nat_touch)(fwd, &f, now);
	if (fwd->flags & NAT_F_HOST) {
		if (fwd->port == f.sport)
			return MASQ_PASS;
		return REWRITE(skb, &f, true, &fwd->addr, fwd->port) ? drop_with(DROP_CSUM) : MASQ_PASS;
	}

rewrite:
	if (f.frag == FRAG_FIRST)
		NAT_FN(frag_remember)(&f);
	if (fwd->flags & NAT_F_BY_RULE)
		NAT_FN(rule_account)(fwd->rule_id, f.len);
	if (REWRITE(skb, &f, true, &fwd->addr, fwd->port))
		return drop_with(DROP_CSUM);
	count_add(CNT_SNAT_PKTS, 1);
	count_add(CNT_SNAT_BYTES, f.len);
	return MASQ_PASS;
}

/*
 * inbound_track - a packet that came in on an uplink and answers no pair of
 * ours, addressed to someone else than the node: if its reply would be
 * masqueraded (its destination is a registered pod with natOutgoing, or a rule's
 * source, towards its source), it belongs to a flow begun outside. Its state (a
 * NAT_F_INBOUND forward half) is made on the first packet and refreshed by every
 * later one. Only packets that may open a flow make one: TCP (any segment, as
 * netfilter's loose tracking picks up a connection in the middle), UDP, echo
 * requests. The packet itself always goes on untouched.
 */
static __noinline void NAT_FN(inbound_track)(struct __sk_buff *skb, const struct uplink_info *up,
					     const FLOW_T *f, __u64 now)
{
	KEY_T fk = {
		.saddr = f->daddr, .daddr = f->saddr,
		.sport = f->dport, .dport = f->sport, .proto = f->proto,
	};
	ENTRY_T *e = NAT_FN(fwd_get)(&fk);
	DEC_T d = {};
	void *shard;
	long err;

	if (e) {
		if (e->flags & NAT_F_INBOUND)
			NAT_FN(nat_touch)(e, f, now);
		return;
	}
	if (f->proto == ICMP_PROTO && f->icmp_type != ECHO_REQUEST)
		return;
	DECIDE_REPLY(skb->ifindex, up, f, &d);
	if (d.verdict == VERDICT_NONE)
		return;
	ENTRY_T n = {
		.addr = f->daddr, .port = f->dport,
		.flags = NAT_F_INBOUND | (d.verdict == VERDICT_RULE ? NAT_F_BY_RULE : 0),
		.ifindex = skb->ifindex, .rule_id = d.rule_id,
		.created_ns = bpf_ktime_get_ns(), .last_seen_ns = now,
	};
	shard = NAT_FWD_SHARD(&MAP_FWD, &fk, SHARD_FN);
	if (!shard)
		return;
	err = bpf_map_update_elem(shard, &fk, &n, BPF_NOEXIST);
	if (err) {
		/* EEXIST: another CPU made it (or the pod's own flow) meanwhile; E2BIG: full,
		 * and the reply, needing a pair of its own, is refused (DROP_NAT_FULL). */
		if (err == -E2BIG)
			count_add(CNT_INBOUND_UNTRACKED, 1);
		return;
	}
	count_add(CNT_INBOUND_CREATED, 1);
	nat_gc_ensure(NAT_IS_V6, false);
	e = bpf_map_lookup_elem(shard, &fk);
	if (e)
		NAT_FN(nat_touch)(e, f, now);
}

/*
 * open_ingress - a packet that answers no pair, to a mapping whose natFiltering
 * lets it in (nat*_open: endpoint-independent, or address-dependent with a permit
 * for its source), while the mapping is active: a pair of its own on the
 * mapping's port (reverse half first, BPF_NOEXIST, as every pair), then it is
 * translated to the pod endpoint. NAT_NOT_OURS when no open mapping admits it.
 * TCP and UDP only: ICMP echo ids are not opened.
 */
static __noinline int NAT_FN(open_ingress)(struct __sk_buff *skb, const FLOW_T *f,
					   const struct masq_config *cfg, __u64 now)
{
	EP_T k = { .addr = f->daddr, .port = f->dport, .proto = f->proto };
	__u64 timeout = nat_timeout_ns(cfg, f->proto, 0);
	OPEN_T *o;
	ENTRY_T *rev;
	void *shard;

	if (f->proto != IPPROTO_TCP && f->proto != IPPROTO_UDP)
		return NAT_NOT_OURS;
	o = bpf_map_lookup_elem(&MAP_OPEN, &k);
	if (!o || (now > o->last_seen_ns && now - o->last_seen_ns > timeout))
		return NAT_NOT_OURS;
	if (!(o->filter & NAT_FILTER_EI)) {
		PERMITKEY_T pk = { .remote = f->saddr, .addr = f->daddr, .port = f->dport, .proto = f->proto };
		PERMIT_T *pv = bpf_map_lookup_elem(&MAP_PERMIT, &pk);

		if (!pv || !ADDR_EQ(&pv->pod, &o->addr) ||
		    (now > pv->last_seen_ns && now - pv->last_seen_ns > timeout))
			return NAT_NOT_OURS;
	}
	ENTRY_T e = {
		.addr = o->addr, .port = o->port, .flags = NAT_F_OPEN | o->flags,
		.ifindex = o->ifindex, .rule_id = o->rule_id,
		.created_ns = bpf_ktime_get_ns(), .last_seen_ns = now,
	};
	KEY_T rk = {
		.saddr = f->saddr, .daddr = f->daddr,
		.sport = f->sport, .dport = f->dport, .proto = f->proto,
	};
	if (bpf_map_update_elem(&MAP_REV, &rk, &e, BPF_NOEXIST))
		return NAT_NOT_OURS; /* full, or made meanwhile by another CPU */
	/* The forward half: {pod, remote, pod port, remote port} -> the mapping. */
	KEY_T fk = {
		.saddr = o->addr, .daddr = f->saddr,
		.sport = o->port, .dport = f->sport, .proto = f->proto,
	};
	e.addr = f->daddr;
	e.port = f->dport;
	shard = NAT_FWD_SHARD(&MAP_FWD, &fk, SHARD_FN);
	if (!shard || bpf_map_update_elem(shard, &fk, &e, BPF_NOEXIST)) {
		/* The pod endpoint has a flow to this remote endpoint already (on another port). */
		bpf_map_delete_elem(&MAP_REV, &rk);
		return NAT_NOT_OURS;
	}
	count_add(CNT_NAT_CREATED, 1);
	count_add(CNT_FILTER_ADMITTED, 1);
	nat_gc_ensure(NAT_IS_V6, false);
	rev = bpf_map_lookup_elem(&MAP_REV, &rk);
	if (!rev)
		return MASQ_PASS;
	NAT_FN(nat_touch)(rev, f, now);
	if (f->frag == FRAG_FIRST)
		NAT_FN(frag_remember)(f);
	if (REWRITE(skb, f, false, &rev->addr, rev->port))
		return drop_with(DROP_CSUM);
	count_add(CNT_RNAT_PKTS, 1);
	count_add(CNT_RNAT_BYTES, f->len);
	return MASQ_PASS;
}

static __noinline int NAT_FN(rnat_ingress)(struct __sk_buff *skb, const struct uplink_info *up)
{
	ENTRY_T *rev;
	FLOW_T f;
	__u64 now;

	if (PARSE(skb, uplink_l3_off(up), &f))
		return MASQ_PASS;
	if (f.l4 == L4_FRAGMENT)
		return NAT_FN(rnat_fragment)(skb, &f);
	if (f.l4 == L4_ICMP_ERROR)
		return NAT_FN(icmp_err_ingress)(skb, &f);
	if (f.l4 != L4_OK)
		return MASQ_PASS;

	KEY_T rk = {
		.saddr = f.saddr, .daddr = f.daddr,
		.sport = f.sport, .dport = f.dport, .proto = f.proto,
	};
	/* No entry: the host's own traffic, unsolicited, or a flow begun outside
	 * (towards a pod: tracked, never translated). */
	rev = bpf_map_lookup_elem(&MAP_REV, &rk);
	if (!rev) {
		/* The host's own traffic (the common case) reads neither clock nor more maps
		 * unless some mapping is open (natFiltering). */
		__u32 zero = 0;
		const struct masq_config *cfg = bpf_map_lookup_elem(&masq_config, &zero);

		if (cfg && (cfg->flags & MASQ_F_OPEN_MAPPINGS)) {
			int ret = NAT_FN(open_ingress)(skb, &f, cfg, bpf_ktime_get_coarse_ns());

			if (ret != NAT_NOT_OURS)
				return ret;
		}
		if (!(UPLINK_HAS(up) && ADDR_EQ(&f.daddr, UPLINK_ADDR(up))))
			NAT_FN(inbound_track)(skb, up, &f, bpf_ktime_get_coarse_ns());
		return MASQ_PASS;
	}
	now = bpf_ktime_get_coarse_ns(); /* last_seen needs seconds, not ns: the cheap clock */

	if (NAT_FN(nat_touch)(rev, &f, now))
		NAT_FN(rnat_sync_fwd)(&f, rev, now);
	if ((rev->flags & NAT_F_HOST) && rev->port == f.dport)
		return MASQ_PASS; /* a host flow on its own port (an echo id): nothing to translate */
	if (f.frag == FRAG_FIRST)
		NAT_FN(frag_remember)(&f);
	if (REWRITE(skb, &f, false, &rev->addr, rev->port))
		return drop_with(DROP_CSUM);
	count_add(CNT_RNAT_PKTS, 1);
	count_add(CNT_RNAT_BYTES, f.len);
#ifdef FP_REPLY
	/* A flow the fast path started: its replies may skip the stack too. */
	if (rev->flags & NAT_F_FAST)
		return FP_REPLY(skb, up, &f, rev->addr);
#endif
	return MASQ_PASS;
}

/* The template releases its parameters, so it can be instantiated again. */
#undef NAT_FN
#undef FLOW_T
#undef INNER_T
#undef KEY_T
#undef ENTRY_T
#undef FRAGKEY_T
#undef DEC_T
#undef MAP_FWD
#undef SHARD_FN
#undef MAP_REV
#undef MAP_BIND
#undef EP_T
#undef BIND_T
#undef MAP_OPEN
#undef OPEN_T
#undef MAP_PERMIT
#undef PERMITKEY_T
#undef PERMIT_T
#undef ADDR_T
#undef MAP_FRAG
#undef ADDR_EQ
#undef UPLINK_HAS
#undef UPLINK_ADDR
#undef PARSE
#undef PARSE_INNER
#undef DECIDE
#undef DECIDE_REPLY
#undef REWRITE
#undef REWRITE_ADDR
#undef ICMP_ERR_REWRITE
#undef QUOTES_POD
#undef ECHO_REPLY
#undef ECHO_REQUEST
#undef ICMP_PROTO
#undef CNT_SNAT_PKTS
#undef CNT_SNAT_BYTES
#undef CNT_RNAT_PKTS
#undef CNT_RNAT_BYTES
#undef NAT_NOT_OURS
#undef NAT_HOST_NEW
#undef FP_REPLY
#undef SK_TUPLE_LEN
#undef NAT_IS_V6
