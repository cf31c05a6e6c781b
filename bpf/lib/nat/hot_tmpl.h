/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NAT engine, part 3 of 6 (engine_tmpl.h includes it, once per family): the
 * port search towards a busy remote endpoint, by its bitmap (nat_hot; the
 * family-independent bit arithmetic is hot.h): hot_get finds or makes the
 * bitmap, hot_probe and hot_jump search it, busy_sample and over_share keep a
 * source to its share. Its probes claim ports as part 2's do (try_port).
 */

/*
 * hot_get - the bitmap of the remote endpoint p->rk points at (nat_hot), made
 * (zeroed: every port worth a probe, scanned_ns 0) when @make and it has none.
 * NULL when it has none, or none can be made (nat_hot holds NAT_HOT_MAX). A call
 * of its own: the key lives on a frame that is gone before the search runs.
 */
/* hot_get_v4, hot_get_v6 */
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
/* hot_maybe_reusable_v4, hot_maybe_reusable_v6 */
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
/* hot_scan_port_v4, hot_scan_port_v6 */
static long NAT_FN(hot_scan_port)(__u32 i, void *ctx)
{
	struct NAT_FN(probe) *p = ctx;
	const struct node_config *cfg = bpf_map_lookup_elem(&node_config, &nat_zero_key);
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
/* hot_probe_v4, hot_probe_v6 */
static long NAT_FN(hot_probe)(__u32 i, void *ctx)
{
	struct NAT_FN(probe) *p = ctx;
	const struct node_config *cfg = bpf_map_lookup_elem(&node_config, &nat_zero_key);
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
	/* A port found held gets its bit (try_port); the one claimed too (snat_make_pair). */
	r = NAT_FN(try_port)(p, NAT_PREFERRED + NAT_PROBES + i, cfg);
	return r == TRY_CLAIMED || r == TRY_FULL;
}

/*
 * busy_sample - one look (bpf_loop) at a random port towards p->rk's endpoint:
 * held (any pair, whatever its state) counts one in p->start and goes on; free
 * stops the sampling. A lookup, never a claim.
 */
/* busy_sample_v4, busy_sample_v6 */
static long NAT_FN(busy_sample)(__u32 i, void *ctx)
{
	struct NAT_FN(probe) *p = ctx;
	const struct node_config *cfg = bpf_map_lookup_elem(&node_config, &nat_zero_key);

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
 * source's id is made on a frame of its own (snat_make_pair's is on the deepest chain).
 */
/* over_share_v4, over_share_v6 */
static __noinline int NAT_FN(over_share)(struct nat_hot *h, const ADDR_T *src, __u32 range, __u64 now)
{
	return src ? nat_hot_over_share(h, NAT_FN(src_id)(src), range, now) : 0;
}

/*
 * hot_ready - the endpoint's bitmap, scanned if it never was: its bits and its
 * sources' counts made from the reverse map (nat_hot_reset, hot_scan_port).
 */
/* hot_ready_v4, hot_ready_v6 */
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
/* hot_jump_v4, hot_jump_v6 */
static long NAT_FN(hot_jump)(__u32 i, void *ctx)
{
	struct NAT_FN(probe) *p = ctx;
	const struct node_config *cfg = bpf_map_lookup_elem(&node_config, &nat_zero_key);
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
/* hot_search_v4, hot_search_v6 */
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
