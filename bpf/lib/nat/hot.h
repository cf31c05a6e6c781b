/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The ports towards busy remote endpoints, for both families (masq_abi.h
 * nat_hot): the bitmap's bits, a port's offset in the range and back, and the
 * sweep's removal of records no search used for NAT_HOT_IDLE_S. The searches
 * that read and keep the bits are per family: hot_tmpl.h (hot_get,
 * hot_scan_port, hot_probe) and pair_tmpl.h (hot_release).
 */
#ifndef MASQ_NAT_HOT_H
#define MASQ_NAT_HOT_H

#include "../maps.h"
#include "port.h"

/* Ports a search probes through the bitmap before it gives up (each a map lookup or two). */
#define NAT_HOT_PROBES 256
/* A bitmap search's tries from random offsets before its walk (hot_tmpl.h hot_jump). */
#define NAT_HOT_JUMPS 8
/* A bitmap whose search found nothing is made again from the tables at most this often. */
#define NAT_HOT_RESCAN_NS NSEC_PER_SEC
#define NAT_OFF_NONE 0xffffffffU
/* A new flow to an endpoint with no bitmap looks at up to this many random ports
 * first; all held: the endpoint is busy (a range 3/4 held: 1 flow in 10). */
#define NAT_BUSY_SAMPLES 8

/* nat_hot_on - has a nat_hot record been made on this node (so its bits must be kept)? */
static __always_inline bool nat_hot_on(void)
{
	struct nat_gc *gc = bpf_map_lookup_elem(&nat_gc, &nat_zero_key);

	return gc && gc->hot;
}

/* A record was made: from now on the bits are kept (nat_hot_on). */
static __always_inline void nat_hot_note(void)
{
	struct nat_gc *gc = bpf_map_lookup_elem(&nat_gc, &nat_zero_key);

	if (gc && !gc->hot)
		__sync_fetch_and_or(&gc->hot, 1);
}

/* The index of the lowest clear bit of @w (which has one): six steps, no loop. */
static __always_inline __u32 u64_lowest_zero(__u64 w)
{
	__u64 x = ~w & (w + 1);
	__u32 n = 0;

	if (!(x & 0xffffffffULL)) { n += 32; x >>= 32; }
	if (!(x & 0xffffULL)) { n += 16; x >>= 16; }
	if (!(x & 0xffULL)) { n += 8; x >>= 8; }
	if (!(x & 0xfULL)) { n += 4; x >>= 4; }
	if (!(x & 0x3ULL)) { n += 2; x >>= 2; }
	if (!(x & 0x1ULL))
		n += 1;
	return n;
}

/*
 * hot_slot - the slot counting source @id in @h (taken for it when @make and it
 * has none); NULL when it has none (or its NAT_HOT_SLOT_PROBES places are taken).
 * Open addressing; slots are freed only by a scan (nat_hot_reset).
 */
#define NAT_HOT_SLOT_PROBES 8
static __always_inline struct nat_hot_src *hot_slot(struct nat_hot *h, __u32 id, bool make)
{
	__u32 i = (id * 2654435761U) >> 26; /* 64 slots: the hash's top six bits */
	int n;

#pragma unroll
	for (n = 0; n < NAT_HOT_SLOT_PROBES; n++) {
		struct nat_hot_src *s = &h->src[(i + n) & (NAT_HOT_SLOTS - 1)];

		if (s->id == id)
			return s;
		if (!s->id) {
			if (!make)
				return NULL;
			s->id = id; /* a race with another source may lose it one count: a hint */
			return s;
		}
	}
	return NULL;
}

/* hot_count - one more (@up) or one fewer port held by source @id. */
static __always_inline void hot_count(struct nat_hot *h, __u32 id, bool up)
{
	struct nat_hot_src *s = hot_slot(h, id, up);

	if (up) {
		__sync_fetch_and_add(&h->held, 1);
		if (s)
			__sync_fetch_and_add(&s->held, 1);
		return;
	}
	if (h->held)
		__sync_fetch_and_add(&h->held, -1);
	if (s && s->held)
		__sync_fetch_and_add(&s->held, -1);
}

/* nat_hot_mark's @op */
#define NAT_HOT_CLEAR 0   /* clear the bit; its source holds one port fewer if it was set */
#define NAT_HOT_SET   1   /* set the bit; its source holds one more if it was clear */

/*
 * nat_hot_mark - set or clear the bit of offset @off for source @id (@op), and
 * keep the held counts in step with it (masq_abi.h nat_hot: fair shares). A
 * global function, as nat_hot_next: the verifier checks it once, and the bitmap
 * searches' loops carry no bit index it would have to track exactly (their
 * states converge). A test and then an atomic: two CPUs setting one bit at once
 * may count it twice (a hint until the next scan, as the bit is).
 */
__attribute__((noinline)) int nat_hot_mark(struct nat_hot *h, __u32 off, __u32 op, __u32 id)
{
	__u64 bit = 1ULL << (off & 63);
	__u64 *w;

	if (!h || off == NAT_OFF_NONE)
		return 0; /* not a port of the range */
	w = &h->bits[(off >> 6) & (NAT_HOT_WORDS - 1)];
	if (op == NAT_HOT_SET) {
		if (!(*w & bit)) {
			__sync_fetch_and_or(w, bit);
			hot_count(h, id, true);
		}
	} else if (*w & bit) {
		__sync_fetch_and_and(w, ~bit);
		hot_count(h, id, false);
	}
	return 0;
}

/*
 * nat_hot_reset - a scan starts: no bit set, no port counted, no source known.
 * The scan then sets the bits of held ports as a claim does (NAT_HOT_SET): a
 * port claimed meanwhile by another CPU is counted once, whoever sets it first.
 */
__attribute__((noinline)) int nat_hot_reset(struct nat_hot *h)
{
	volatile __u64 *bits; /* volatile: not a memset, which BPF has none of */
	int i;

	if (!h)
		return 0;
	bits = h->bits;
	for (i = 0; i < NAT_HOT_WORDS; i++)
		bits[i] = 0;
	h->held = 0;
#pragma unroll
	for (i = 0; i < NAT_HOT_SLOTS; i++) {
		h->src[i].id = 0;
		h->src[i].held = 0;
	}
	return 0;
}

/*
 * nat_hot_over_share - is source @id over its share of the busy endpoint's ports
 * (masq_abi.h nat_hot): some but fewer than @range / NAT_SHARE_RESERVE of them
 * free, and it holds at least @range / (the sources holding ports + 1)? Every
 * new flow to a busy endpoint asks, so this also marks the record in use at @now.
 */
__attribute__((noinline)) int nat_hot_over_share(struct nat_hot *h, __u32 id, __u32 range, __u64 now)
{
	struct nat_hot_src *s;
	__u32 held, sources = 0;
	int i;

	if (!h)
		return 0;
	if (now > h->used_ns + NSEC_PER_SEC)
		h->used_ns = now; /* in use: the sweep keeps it (written once a second at most) */
	held = h->held;
	if (held >= range || (range - held) * NAT_SHARE_RESERVE >= range)
		return false; /* none free (no port for anyone: DROP_NO_PORT), or not short */
	s = hot_slot(h, id, false);
	if (!s || !s->held)
		return false;
	/* Counted here, not kept: a count kept beside the slots drifts from them when a
	 * scan's reset races a claim (one source then never seen as over its share). */
#pragma clang loop unroll(disable) /* unrolled, clang spills 400 bytes of stack */
	for (i = 0; i < NAT_HOT_SLOTS; i++)
		sources += h->src[i].held != 0;
	return (__u64)s->held * (sources + 1) >= range;
}

#define NAT_HOT_SKIP 0x80000000U /* nat_hot_next: no clear bit in the word; the rest is where to go on */

/*
 * nat_hot_next - the first clear bit at or after offset @off (< @range) in its
 * word: its offset, or NAT_HOT_SKIP | the next word's first offset.
 */
__attribute__((noinline)) __u32 nat_hot_next(const struct nat_hot *h, __u32 off, __u32 range)
{
	__u32 w = (off >> 6) & (NAT_HOT_WORDS - 1), base = w << 6;
	__u64 word;

	if (!h || off >= range)
		return NAT_HOT_SKIP | (range + 64);
	word = h->bits[w] | ((1ULL << (off & 63)) - 1); /* the offsets before @off: behind us */
	if (range - base < 64)
		word |= ~0ULL << ((range - base) & 63); /* past the range's end: not ports */
	if (word == ~0ULL)
		return NAT_HOT_SKIP | (base + 64);
	return base + u64_lowest_zero(word);
}

/*
 * nat_port_off - @port's (host order) offset among the ports a pair may take
 * (portRange less nodePortRange, in order), or NAT_OFF_NONE: the inverse of the
 * port search's offset -> port (port_tmpl.h nat_off_port).
 */
static __always_inline __u32 nat_port_off(const struct node_config *cfg, __u16 port)
{
	__u32 off;

	if (!nat_port_ok(cfg, port))
		return NAT_OFF_NONE;
	off = port - cfg->port_min;
	if (cfg->skip_max && cfg->skip_max >= cfg->port_min && cfg->skip_min <= cfg->port_max &&
	    port > cfg->skip_max) {
		__u32 lo = cfg->skip_min > cfg->port_min ? cfg->skip_min : cfg->port_min;

		off -= cfg->skip_max - lo + 1;
	}
	return off;
}

/* The sweep's visit to one record: gone once no search used it for NAT_HOT_IDLE_S. */
static long nat_hot_expire(void *map, const struct nat_hot_key *key, struct nat_hot *h, __u64 *now)
{
	if (h->used_ns + NAT_HOT_IDLE_S * NSEC_PER_SEC < *now)
		bpf_map_delete_elem(map, key);
	return 0;
}

#endif /* MASQ_NAT_HOT_H */
