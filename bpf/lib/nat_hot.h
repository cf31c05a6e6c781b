/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The ports towards busy remote endpoints, for both families (masq_abi.h
 * nat_hot): the bitmap's bits, a port's offset in the range and back, and the
 * sweep's removal of records no search used for NAT_HOT_IDLE_S. The searches
 * that read and keep the bits are per family: nat_port_tmpl.h (hot_get,
 * hot_scan_port, hot_probe) and nat_pair_tmpl.h (hot_release).
 */
#ifndef MASQ_NAT_HOT_H
#define MASQ_NAT_HOT_H

#include "maps.h"
#include "nat_port.h"

/* Ports a search probes through the bitmap before it gives up (each a map lookup or two). */
#define NAT_HOT_PROBES 256
/* A bitmap whose search found nothing is made again from the tables at most this often. */
#define NAT_HOT_RESCAN_NS NSEC_PER_SEC
#define NAT_OFF_NONE 0xffffffffU

/* nat_hot_on - has a nat_hot record been made on this node (so its bits must be kept)? */
static __always_inline bool nat_hot_on(void)
{
	__u32 zero = 0;
	struct nat_gc *gc = bpf_map_lookup_elem(&nat_gc, &zero);

	return gc && gc->hot;
}

/* A record was made: from now on the bits are kept (nat_hot_on). */
static __always_inline void nat_hot_note(void)
{
	__u32 zero = 0;
	struct nat_gc *gc = bpf_map_lookup_elem(&nat_gc, &zero);

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
 * nat_hot_mark - set (@held) or clear the bit of offset @off. A global function,
 * as nat_hot_next: the verifier checks it once, and the bitmap searches' loops
 * carry no bit index it would have to track exactly (their states converge).
 */
__attribute__((noinline)) int nat_hot_mark(struct nat_hot *h, __u32 off, int held)
{
	__u64 bit = 1ULL << (off & 63);
	__u64 *w;

	if (!h)
		return 0;
	w = &h->held[(off >> 6) & (NAT_HOT_WORDS - 1)];
	if (held) {
		if (!(*w & bit))
			__sync_fetch_and_or(w, bit);
	} else if (*w & bit) {
		__sync_fetch_and_and(w, ~bit);
	}
	return 0;
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
	word = h->held[w] | ((1ULL << (off & 63)) - 1); /* the offsets before @off: behind us */
	if (range - base < 64)
		word |= ~0ULL << ((range - base) & 63); /* past the range's end: not ports */
	if (word == ~0ULL)
		return NAT_HOT_SKIP | (base + 64);
	return base + u64_lowest_zero(word);
}

/*
 * nat_port_off - @port's (host order) offset among the ports a pair may take
 * (portRange less nodePortRange, in order), or NAT_OFF_NONE: the inverse of the
 * port search's offset -> port (nat_port_tmpl.h nat_off_port).
 */
static __always_inline __u32 nat_port_off(const struct masq_config *cfg, __u16 port)
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
