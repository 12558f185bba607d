/*
 * txbytemap.c -- a byte-keyed hash map on libpmemobj transactions: the
 * PMDK peer of ferrite-ds's bytemap (the map under the server's tx-undo,
 * tx-redo and tx-clobber stores), behind the server store `pmdk-undo`, so
 * P1's memcached comparison [P1 §3.4.6, Fig. 3.10] -- clobber logging
 * against PMDK's undo transactions -- runs against the real peer.
 *
 * Written as a PMDK user ports memcached's item table (as P1's PMDK
 * memcached did): a hash table of chained entries; a set allocates a fresh
 * entry with pmemobj_tx_alloc, links it where the old one was and frees
 * the old one with pmemobj_tx_free (memcached's item_replace); whatever
 * already existed and is changed in place -- a link, a count, a sub-map
 * header -- is snapshotted first with pmemobj_tx_add_range_direct, so
 * PMDK's own undo log makes every batch all-or-nothing. Fresh entries are
 * not snapshotted: libpmemobj flushes them at commit and frees them on
 * abort. Same structure as Ferrite's map: 256 sub-maps (each under its own
 * reader-writer lock, taken in Rust), doubling past two entries per
 * bucket, keys hashed identically.
 *
 * On-media format (little-endian; "offset" is a PMEMoid's `off`, bytes
 * from the pool's base -- the map lives in one pool, so the uuid half of a
 * PMEMoid would be the same everywhere, and 8-byte links keep entries the
 * size of Ferrite's):
 *
 *   root object (pmemobj_root, 64 + 8*256 = 2112 bytes):
 *     0..8     magic "FERRPBYT"
 *     8..16    version, 1
 *     16..24   subs: sub-maps, a power of two, 1..=256
 *     24..64   reserved, zero
 *     64..     sub[256]: offset of sub-map i's header (i < subs)
 *
 *   sub-map header (an object of 32 bytes):
 *     0..8     count: entries reachable from the table
 *     8..16    nbuckets: a power of two
 *     16..24   table: offset of nbuckets u64 bucket heads (entry offsets,
 *              0 = empty), an object of its own
 *     24..32   reserved, zero
 *
 *   entry (an object of 24 + K + V bytes):
 *     0..8       hash: ferrite_pmdk_bmap_hash of the key
 *     8..16      next: offset of the bucket's next entry, 0 = last
 *     16..20     K: key length, u32, 1..=BMAP_MAX_KEY
 *     20..24     V: value length, u32, 0..=BMAP_MAX_VALUE
 *     24..24+K   key bytes
 *     24+K..     value bytes
 *
 * mix64(hash) picks the sub-map (top 8 bits) and the bucket (low bits),
 * as in ferrite-ds. Two keys may share a hash; they are told apart by
 * their bytes.
 *
 * Nothing read from the pool is trusted further than a bounds check: every
 * offset followed is checked to lie inside the pool with its lengths, and
 * a chain longer than its sub-map's count is corrupt, so a damaged pool
 * gives an error (EUCLEAN, or -1 from the readers), never a wild read or
 * an endless loop.
 */

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <libpmemobj.h>

#include "ferrite_pmdk.h"

#define BMAP_MAX_SUBS 256
#define BMAP_MAX_KEY 251
#define BMAP_MAX_VALUE (16u << 20)
#define BMAP_VERSION 1
#define BMAP_ENTRY_HDR 24
/* Largest table: 2^40 buckets is far past any pool. */
#define BMAP_MAX_BUCKETS (1ULL << 40)

static const char BMAP_MAGIC[8] = { 'F', 'E', 'R', 'R', 'P', 'B', 'Y', 'T' };

struct bmap_root {
	uint8_t magic[8];
	uint64_t version;
	uint64_t subs;
	uint64_t reserved[5];
	uint64_t sub[BMAP_MAX_SUBS];
};

struct bmap_sub {
	uint64_t count;
	uint64_t nbuckets;
	uint64_t table;
	uint64_t reserved;
};

struct bmap_entry {
	uint64_t hash;
	uint64_t next;
	uint32_t klen;
	uint32_t vlen;
	uint8_t bytes[];
};

/* One operation of a batch, as Rust passes it (put != 0: a put). */
struct ferrite_pmdk_bmap_op {
	const uint8_t *key;
	uint64_t klen;
	const uint8_t *value;
	uint64_t vlen;
	uint64_t put;
};

typedef void (*ferrite_pmdk_bmap_visit)(void *arg, const uint8_t *key,
	uint64_t klen, const uint8_t *value, uint64_t vlen);

uint64_t
ferrite_pmdk_bmap_max_key(void)
{
	return BMAP_MAX_KEY;
}

uint64_t
ferrite_pmdk_bmap_max_value(void)
{
	return BMAP_MAX_VALUE;
}

uint64_t
ferrite_pmdk_bmap_max_subs(void)
{
	return BMAP_MAX_SUBS;
}

/*
 * ferrite_pmdk_bmap_hash -- 64-bit FNV-1a of the key, then a finaliser:
 * ferrite-ds's bytemap::hash_bytes bit for bit, so both maps spread keys
 * over the same sub-maps and buckets.
 */
uint64_t
ferrite_pmdk_bmap_hash(const uint8_t *key, uint64_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (uint64_t i = 0; i < len; i++) {
		h ^= key[i];
		h *= 0x00000100000001b3ULL;
	}
	return h ^ (h >> 29);
}

/* The sub-map of a key's hash (the top 8 bits of mix64). */
uint64_t
ferrite_pmdk_bmap_sub_index(uint64_t hash, uint64_t subs)
{
	return (ferrite_mix64(hash) >> 56) & (subs - 1);
}

static inline uint64_t
bucket_of(uint64_t hash, uint64_t nbuckets)
{
	return ferrite_mix64(hash) & (nbuckets - 1);
}

static inline void *
at(PMEMobjpool *pop, uint64_t off)
{
	return (char *)pop + off;
}

/* Whether off..off+len lies inside a pool of `size` bytes (off != 0). */
static inline int
inside(uint64_t size, uint64_t off, uint64_t len)
{
	return off != 0 && off % 8 == 0 && off <= size && len <= size - off;
}

static int
pow2(uint64_t x)
{
	return x != 0 && (x & (x - 1)) == 0;
}

/*
 * The root object, or NULL when the pool has none of the right size
 * (pmemobj_root_size is asked first, so a foreign pool is not given one).
 */
static struct bmap_root *
bmap_root(PMEMobjpool *pop)
{
	if (pmemobj_root_size(pop) < sizeof(struct bmap_root))
		return NULL;
	return pmemobj_direct(pmemobj_root(pop, sizeof(struct bmap_root)));
}

/* Sub-map `i`'s header if it and its table lie inside the pool. */
static struct bmap_sub *
sub_at(PMEMobjpool *pop, uint64_t size, const struct bmap_root *r, uint64_t i)
{
	if (i >= r->subs || !inside(size, r->sub[i], sizeof(struct bmap_sub)))
		return NULL;
	struct bmap_sub *s = at(pop, r->sub[i]);
	if (!pow2(s->nbuckets) || s->nbuckets > BMAP_MAX_BUCKETS ||
	    !inside(size, s->table, s->nbuckets * 8))
		return NULL;
	return s;
}

/* Entry at `off` if its header and bytes lie inside the pool. */
static struct bmap_entry *
entry_at(PMEMobjpool *pop, uint64_t size, uint64_t off)
{
	if (!inside(size, off, BMAP_ENTRY_HDR))
		return NULL;
	struct bmap_entry *e = at(pop, off);
	if (e->klen == 0 || e->klen > BMAP_MAX_KEY || e->vlen > BMAP_MAX_VALUE ||
	    !inside(size, off, BMAP_ENTRY_HDR + (uint64_t)e->klen + e->vlen))
		return NULL;
	return e;
}

static int
key_is(const struct bmap_entry *e, uint64_t hash, const uint8_t *key,
	uint64_t klen)
{
	return e->hash == hash && e->klen == klen &&
		memcmp(e->bytes, key, klen) == 0;
}

/*
 * ferrite_pmdk_bmap_create -- formats the root object of a fresh pool as
 * an empty map of `subs` sub-maps of `buckets` buckets, in one
 * transaction. Returns 0 or an error number.
 */
int
ferrite_pmdk_bmap_create(PMEMobjpool *pop, uint64_t subs, uint64_t buckets)
{
	volatile int err = 0;

	if (!pow2(subs) || subs > BMAP_MAX_SUBS || !pow2(buckets) ||
	    buckets > BMAP_MAX_BUCKETS)
		return EINVAL;
	PMEMoid ro = pmemobj_root(pop, sizeof(struct bmap_root));
	if (OID_IS_NULL(ro))
		return ENOMEM;
	struct bmap_root *r = pmemobj_direct(ro);

	TX_BEGIN(pop) {
		pmemobj_tx_add_range(ro, 0, sizeof(struct bmap_root));
		memset(r, 0, sizeof(*r));
		for (uint64_t i = 0; i < subs; i++) {
			PMEMoid so = pmemobj_tx_zalloc(sizeof(struct bmap_sub),
				FERRITE_PMDK_TYPE_NUM);
			struct bmap_sub *s = pmemobj_direct(so);
			s->nbuckets = buckets;
			s->table = pmemobj_tx_zalloc(buckets * 8,
				FERRITE_PMDK_TYPE_NUM).off;
			r->sub[i] = so.off;
		}
		r->subs = subs;
		r->version = BMAP_VERSION;
		/* The magic last: a pool is a map only once all of it is. */
		memcpy(r->magic, BMAP_MAGIC, sizeof(r->magic));
	} TX_ONABORT {
		err = pmemobj_tx_errno();
		if (err == 0)
			err = ECANCELED;
	} TX_END

	return err;
}

/*
 * ferrite_pmdk_bmap_open -- checks that an opened pool of `size` bytes
 * holds a map: magic, version, sub-map count, and every sub-map header and
 * table inside the pool. Sets *subs. Returns 0, EINVAL when the pool holds
 * no map (no root object, another magic), EPROTO for another version, or
 * EUCLEAN when the map is damaged.
 */
int
ferrite_pmdk_bmap_open(PMEMobjpool *pop, uint64_t size, uint64_t *subs)
{
	struct bmap_root *r = bmap_root(pop);

	if (r == NULL || memcmp(r->magic, BMAP_MAGIC, sizeof(r->magic)) != 0)
		return EINVAL;
	if (r->version != BMAP_VERSION)
		return EPROTO;
	if (!pow2(r->subs) || r->subs > BMAP_MAX_SUBS)
		return EUCLEAN;
	for (uint64_t i = 0; i < r->subs; i++)
		if (sub_at(pop, size, r, i) == NULL)
			return EUCLEAN;
	*subs = r->subs;
	return 0;
}

/*
 * ferrite_pmdk_bmap_find -- looks `key` up. Returns 1 and sets *value and
 * *vlen to the value's bytes in the pool (valid until the entry is
 * replaced or deleted: the caller holds the sub-map's lock while it copies
 * them), 0 when absent, -1 when the map is damaged.
 */
int
ferrite_pmdk_bmap_find(PMEMobjpool *pop, uint64_t size, const uint8_t *key,
	uint64_t klen, const uint8_t **value, uint64_t *vlen)
{
	struct bmap_root *r = bmap_root(pop);

	if (r == NULL || !pow2(r->subs) || r->subs > BMAP_MAX_SUBS)
		return -1;
	uint64_t h = ferrite_pmdk_bmap_hash(key, klen);
	struct bmap_sub *s =
		sub_at(pop, size, r, ferrite_pmdk_bmap_sub_index(h, r->subs));
	if (s == NULL)
		return -1;
	const uint64_t *tab = at(pop, s->table);
	uint64_t hops = 0;
	for (uint64_t e = tab[bucket_of(h, s->nbuckets)]; e != 0;) {
		struct bmap_entry *en = entry_at(pop, size, e);
		if (en == NULL || ++hops > s->count)
			return -1;
		if (key_is(en, h, key, klen)) {
			*value = en->bytes + en->klen;
			*vlen = en->vlen;
			return 1;
		}
		e = en->next;
	}
	return 0;
}

/*
 * bmap_apply -- applies `n` operations in order in one transaction (later
 * operations on a key see and win over earlier ones). *present gets how
 * many operations found their key. With `abort_at_end`, the transaction
 * aborts (ECANCELED) after its last write: the tests' planted abort.
 * Returns 0, or the error number the transaction aborted with (ENOMEM: the
 * pool is full; EUCLEAN: the map is damaged; EINVAL: bad arguments,
 * refused before the transaction begins); after an abort nothing changed.
 */
static int
bmap_apply(PMEMobjpool *pop, uint64_t size,
	const struct ferrite_pmdk_bmap_op *ops, uint64_t n, uint64_t *present,
	int abort_at_end)
{
	volatile int err = 0;
	volatile uint64_t found = 0;
	struct bmap_root *r = bmap_root(pop);

	if (r == NULL || !pow2(r->subs) || r->subs > BMAP_MAX_SUBS)
		return EUCLEAN;
	for (uint64_t i = 0; i < n; i++)
		if (ops[i].klen == 0 || ops[i].klen > BMAP_MAX_KEY ||
		    (ops[i].put && ops[i].vlen > BMAP_MAX_VALUE))
			return EINVAL;

	TX_BEGIN(pop) {
		for (uint64_t i = 0; i < n; i++) {
			const struct ferrite_pmdk_bmap_op *op = &ops[i];
			uint64_t h = ferrite_pmdk_bmap_hash(op->key, op->klen);
			struct bmap_sub *s = sub_at(pop, size, r,
				ferrite_pmdk_bmap_sub_index(h, r->subs));
			if (s == NULL)
				pmemobj_tx_abort(EUCLEAN);
			uint64_t *tab = at(pop, s->table);
			uint64_t *link = &tab[bucket_of(h, s->nbuckets)];
			struct bmap_entry *hit = NULL;
			uint64_t hops = 0;
			while (*link != 0) {
				struct bmap_entry *en = entry_at(pop, size,
					*link);
				if (en == NULL || ++hops > s->count)
					pmemobj_tx_abort(EUCLEAN);
				if (key_is(en, h, op->key, op->klen)) {
					hit = en;
					break;
				}
				link = &en->next;
			}
			if (hit != NULL)
				found = found + 1;
			else
				/* A new key goes to the head of its bucket. */
				link = &tab[bucket_of(h, s->nbuckets)];
			if (op->put) {
				/* memcached's item_alloc + item_replace. */
				PMEMoid no = pmemobj_tx_alloc(BMAP_ENTRY_HDR +
					op->klen + op->vlen,
					FERRITE_PMDK_TYPE_NUM);
				struct bmap_entry *ne = pmemobj_direct(no);
				ne->hash = h;
				ne->next = hit != NULL ? hit->next : *link;
				ne->klen = (uint32_t)op->klen;
				ne->vlen = (uint32_t)op->vlen;
				memcpy(ne->bytes, op->key, op->klen);
				if (op->vlen > 0)
					memcpy(ne->bytes + op->klen, op->value,
						op->vlen);
				pmemobj_tx_add_range_direct(link, 8);
				*link = no.off;
				if (hit != NULL) {
					pmemobj_tx_free(pmemobj_oid(hit));
				} else {
					pmemobj_tx_add_range_direct(&s->count,
						8);
					s->count++;
				}
			} else if (hit != NULL) {
				pmemobj_tx_add_range_direct(link, 8);
				*link = hit->next;
				pmemobj_tx_free(pmemobj_oid(hit));
				pmemobj_tx_add_range_direct(&s->count, 8);
				s->count--;
			}
		}
		if (abort_at_end)
			pmemobj_tx_abort(ECANCELED);
	} TX_ONABORT {
		err = pmemobj_tx_errno();
		if (err == 0)
			err = ECANCELED;
	} TX_END

	if (err == 0 && present != NULL)
		*present = found;
	return err;
}

int
ferrite_pmdk_bmap_apply(PMEMobjpool *pop, uint64_t size,
	const struct ferrite_pmdk_bmap_op *ops, uint64_t n, uint64_t *present)
{
	return bmap_apply(pop, size, ops, n, present, 0);
}

/*
 * ferrite_pmdk_bmap_apply_aborted -- the same batch, aborted with
 * ECANCELED after its last write: for tests that hold PMDK's undo log to
 * restoring every byte (after it the map must be as before).
 */
int
ferrite_pmdk_bmap_apply_aborted(PMEMobjpool *pop, uint64_t size,
	const struct ferrite_pmdk_bmap_op *ops, uint64_t n)
{
	return bmap_apply(pop, size, ops, n, NULL, 1);
}

/*
 * ferrite_pmdk_bmap_rehash -- doubles sub-map `i` in its own transaction
 * if it holds more than two entries per bucket (hashmap_tx's rebuild:
 * every entry relinked into a fresh table, each link snapshotted first).
 * Returns 0 (done or not needed) or the transaction's error number (the
 * map is then unchanged and still correct, its chains just longer).
 */
int
ferrite_pmdk_bmap_rehash(PMEMobjpool *pop, uint64_t size, uint64_t i)
{
	volatile int err = 0;
	struct bmap_root *r = bmap_root(pop);

	if (r == NULL || !pow2(r->subs) || r->subs > BMAP_MAX_SUBS)
		return EUCLEAN;
	struct bmap_sub *s = sub_at(pop, size, r, i);
	if (s == NULL)
		return EUCLEAN;
	if (s->count <= 2 * s->nbuckets || 2 * s->nbuckets > BMAP_MAX_BUCKETS)
		return 0;

	TX_BEGIN(pop) {
		uint64_t nb = s->nbuckets;
		uint64_t nb2 = 2 * nb;
		PMEMoid t2 = pmemobj_tx_zalloc(nb2 * 8, FERRITE_PMDK_TYPE_NUM);
		uint64_t *nt = pmemobj_direct(t2);
		uint64_t *ot = at(pop, s->table);
		uint64_t moved = 0;
		for (uint64_t b = 0; b < nb; b++) {
			uint64_t e = ot[b];
			while (e != 0) {
				struct bmap_entry *en = entry_at(pop, size, e);
				if (en == NULL || ++moved > s->count)
					pmemobj_tx_abort(EUCLEAN);
				uint64_t next = en->next;
				uint64_t nbk = bucket_of(en->hash, nb2);
				pmemobj_tx_add_range_direct(&en->next, 8);
				en->next = nt[nbk];
				nt[nbk] = e;
				e = next;
			}
		}
		PMEMoid old = pmemobj_oid(ot);
		pmemobj_tx_add_range_direct(&s->nbuckets, 16);
		s->nbuckets = nb2;
		s->table = t2.off;
		pmemobj_tx_free(old);
	} TX_ONABORT {
		err = pmemobj_tx_errno();
		if (err == 0)
			err = ECANCELED;
	} TX_END

	return err;
}

/*
 * ferrite_pmdk_bmap_scan_sub -- calls `visit` on every entry of sub-map
 * `i` whose key starts with the `plen` bytes of `prefix`. Returns 0, or -1
 * when the sub-map is damaged (entries before the damage were visited).
 */
int
ferrite_pmdk_bmap_scan_sub(PMEMobjpool *pop, uint64_t size, uint64_t i,
	const uint8_t *prefix, uint64_t plen, ferrite_pmdk_bmap_visit visit,
	void *arg)
{
	struct bmap_root *r = bmap_root(pop);

	if (r == NULL || !pow2(r->subs) || r->subs > BMAP_MAX_SUBS)
		return -1;
	struct bmap_sub *s = sub_at(pop, size, r, i);
	if (s == NULL)
		return -1;
	const uint64_t *tab = at(pop, s->table);
	uint64_t seen = 0;
	for (uint64_t b = 0; b < s->nbuckets; b++) {
		for (uint64_t e = tab[b]; e != 0;) {
			struct bmap_entry *en = entry_at(pop, size, e);
			if (en == NULL || ++seen > s->count)
				return -1;
			if (en->klen >= plen &&
			    (plen == 0 || memcmp(en->bytes, prefix, plen) == 0))
				visit(arg, en->bytes, en->klen,
					en->bytes + en->klen, en->vlen);
			e = en->next;
		}
	}
	return 0;
}

/* ferrite_pmdk_bmap_count_sub -- the entries of sub-map `i`. */
uint64_t
ferrite_pmdk_bmap_count_sub(PMEMobjpool *pop, uint64_t size, uint64_t i)
{
	struct bmap_root *r = bmap_root(pop);

	if (r == NULL || !pow2(r->subs) || r->subs > BMAP_MAX_SUBS)
		return 0;
	struct bmap_sub *s = sub_at(pop, size, r, i);
	return s == NULL ? 0 : s->count;
}

/*
 * ferrite_pmdk_bmap_sub_offset -- the offset of sub-map `i`'s header, for
 * tests that damage a pool on purpose (0 when there is none).
 */
uint64_t
ferrite_pmdk_bmap_sub_offset(PMEMobjpool *pop, uint64_t i)
{
	struct bmap_root *r = bmap_root(pop);

	if (r == NULL || i >= BMAP_MAX_SUBS || i >= r->subs)
		return 0;
	return r->sub[i];
}
