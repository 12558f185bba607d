/*
 * shim.c -- the part of the PMDK baseline that has to be written in C.
 *
 * libpmemobj's TX_BEGIN / TX_END macros are built on setjmp/longjmp: an
 * aborting transaction jumps back into the frame that opened it. Rust frames
 * must never sit between a setjmp and its longjmp, so every transaction the
 * benchmarks time lives here, entirely inside one C function, and Rust calls
 * that function through FFI. Everything that needs no setjmp (pmemlog,
 * pmemblk, the atomic pmemobj API, libpmem) is called from Rust directly.
 *
 * The size getters hand the header constants to Rust so that the Rust side
 * never repeats a number that PMDK defines.
 */

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <libpmemblk.h>
#include <libpmemlog.h>
#include <libpmemobj.h>

#include "ferrite_pmdk.h"

size_t
ferrite_pmdk_log_min_pool(void)
{
	return PMEMLOG_MIN_POOL;
}

size_t
ferrite_pmdk_blk_min_pool(void)
{
	return PMEMBLK_MIN_POOL;
}

size_t
ferrite_pmdk_blk_min_block(void)
{
	return PMEMBLK_MIN_BLK;
}

size_t
ferrite_pmdk_obj_min_pool(void)
{
	return PMEMOBJ_MIN_POOL;
}

size_t
ferrite_pmdk_obj_max_layout(void)
{
	return PMEMOBJ_MAX_LAYOUT;
}

uint64_t
ferrite_pmdk_type_num(void)
{
	return FERRITE_PMDK_TYPE_NUM;
}

/*
 * The reserve/publish ("action") API is called from Rust directly; these
 * getters only hand it the layout facts that the header defines, so Rust
 * never hard-codes them.
 */

/* sizeof(struct pobj_action): Rust checks its mirror of the struct. */
size_t
ferrite_pmdk_action_size(void)
{
	return sizeof(struct pobj_action);
}

/* Largest object pmemobj_reserve accepts. */
size_t
ferrite_pmdk_max_alloc_size(void)
{
	return PMEMOBJ_MAX_ALLOC_SIZE;
}

/* Type number PMDK gives the root object (never a user type). */
uint64_t
ferrite_pmdk_root_type_num(void)
{
	return POBJ_ROOT_TYPE_NUM;
}

/* Pool offset of the block a heap action (reserve, defer_free) is about. */
uint64_t
ferrite_pmdk_action_offset(const struct pobj_action *act)
{
	return act->type == POBJ_ACTION_TYPE_HEAP ? act->heap.offset : 0;
}

/* Usable bytes of the block a reserve action reserved. */
uint64_t
ferrite_pmdk_action_usable_size(const struct pobj_action *act)
{
	return act->type == POBJ_ACTION_TYPE_HEAP ? act->heap.usable_size : 0;
}

/*
 * ferrite_pmdk_tx_alloc_free -- allocate `size` bytes and free them again in
 * one transaction.
 *
 * Returns 0 when the transaction committed, otherwise the transaction's error
 * number (pmemobj_errormsg() then describes it). Nothing is left allocated in
 * either case: on commit the free cancels the alloc, on abort PMDK rolls the
 * alloc back.
 *
 * `err` is volatile because it lives across the setjmp inside TX_BEGIN and is
 * written in the ONABORT stage, after a possible longjmp.
 */
int
ferrite_pmdk_tx_alloc_free(PMEMobjpool *pop, size_t size)
{
	volatile int err = 0;

	TX_BEGIN(pop) {
		PMEMoid oid = pmemobj_tx_alloc(size, FERRITE_PMDK_TYPE_NUM);
		pmemobj_tx_free(oid);
	} TX_ONABORT {
		err = pmemobj_tx_errno();
		if (err == 0)
			err = ECANCELED;
	} TX_END

	return err;
}

/*
 * The transactional hash map of the `tx` benchmark [P1 ch3]: the same
 * structure and algorithm as ferrite-tx's ds::hashmap, written the way
 * PMDK's own examples/libpmemobj/hashmap/hashmap_tx.c is.
 *
 * `subs` sub-maps (a power of two, at most 256), each a chained table of
 * `nbuckets` PMEMoid heads that doubles, relinking every entry, when it
 * holds more than two entries per bucket. A key's hash (splitmix64, as in
 * Ferrite) picks the sub-map by its top bits and the bucket by its low
 * bits. Entries hold the key, the next entry and the value inline.
 *
 * Locking is the caller's (one reader-writer lock per sub-map, in Rust);
 * every write is undo-logged with pmemobj_tx_add_range_direct before it is
 * made, as PMDK requires, and the new entry comes from pmemobj_tx_alloc.
 */

#define FERRITE_TXMAP_MAX_SUBS 256

struct ferrite_txmap_root {
	uint64_t subs;
	uint64_t buckets;
	uint64_t value_len;
	uint64_t reserved;
	PMEMoid sub[FERRITE_TXMAP_MAX_SUBS];
};

struct ferrite_txmap_sub {
	uint64_t count;
	uint64_t nbuckets;
	PMEMoid table;
	uint64_t reserved[4];
};

struct ferrite_txmap_entry {
	uint64_t key;
	PMEMoid next;
	unsigned char value[];
};

static struct ferrite_txmap_root *
ferrite_txmap_root(PMEMobjpool *pop)
{
	return pmemobj_direct(
		pmemobj_root(pop, sizeof(struct ferrite_txmap_root)));
}

/*
 * ferrite_pmdk_txmap_create -- formats the root object as an empty map.
 * Returns 0 or the transaction's error number.
 */
int
ferrite_pmdk_txmap_create(PMEMobjpool *pop, uint64_t subs, uint64_t buckets,
	uint64_t value_len)
{
	volatile int err = 0;
	PMEMoid root = pmemobj_root(pop, sizeof(struct ferrite_txmap_root));
	struct ferrite_txmap_root *r = pmemobj_direct(root);

	if (OID_IS_NULL(root))
		return ENOMEM;
	if (subs == 0 || subs > FERRITE_TXMAP_MAX_SUBS || (subs & (subs - 1)) ||
	    buckets == 0 || (buckets & (buckets - 1)))
		return EINVAL;

	TX_BEGIN(pop) {
		pmemobj_tx_add_range(root, 0, sizeof(struct ferrite_txmap_root));
		r->subs = subs;
		r->buckets = buckets;
		r->value_len = value_len;
		for (uint64_t i = 0; i < subs; i++) {
			PMEMoid so = pmemobj_tx_zalloc(
				sizeof(struct ferrite_txmap_sub),
				FERRITE_PMDK_TYPE_NUM);
			struct ferrite_txmap_sub *s = pmemobj_direct(so);
			s->nbuckets = buckets;
			s->table = pmemobj_tx_zalloc(buckets * sizeof(PMEMoid),
				FERRITE_PMDK_TYPE_NUM);
			r->sub[i] = so;
		}
	} TX_ONABORT {
		err = pmemobj_tx_errno();
		if (err == 0)
			err = ECANCELED;
	} TX_END

	return err;
}

/*
 * ferrite_txmap_rehash -- doubles a sub-map's table inside the running
 * transaction (hashmap_tx's hm_tx_rebuild).
 */
static void
ferrite_txmap_rehash(struct ferrite_txmap_sub *s)
{
	uint64_t nb = s->nbuckets;
	uint64_t nb2 = 2 * nb;
	PMEMoid t2 = pmemobj_tx_zalloc(nb2 * sizeof(PMEMoid),
		FERRITE_PMDK_TYPE_NUM);
	PMEMoid *nt = pmemobj_direct(t2);
	PMEMoid *ot = pmemobj_direct(s->table);

	for (uint64_t i = 0; i < nb; i++) {
		PMEMoid e = ot[i];
		while (!OID_IS_NULL(e)) {
			struct ferrite_txmap_entry *en = pmemobj_direct(e);
			PMEMoid next = en->next;
			uint64_t b = ferrite_mix64(en->key) & (nb2 - 1);
			pmemobj_tx_add_range_direct(&en->next, sizeof(PMEMoid));
			en->next = nt[b];
			nt[b] = e;
			e = next;
		}
	}
	PMEMoid old = s->table;
	pmemobj_tx_add_range_direct(&s->nbuckets,
		sizeof(uint64_t) + sizeof(PMEMoid));
	s->nbuckets = nb2;
	s->table = t2;
	pmemobj_tx_free(old);
}

/*
 * ferrite_pmdk_txmap_insert -- inserts `key` with `len` bytes of `value`
 * (or overwrites its value) in one transaction. Sets *inserted to 1 for a
 * new key. Returns 0 or the transaction's error number.
 */
int
ferrite_pmdk_txmap_insert(PMEMobjpool *pop, uint64_t key, const void *value,
	size_t len, int *inserted)
{
	volatile int err = 0;
	volatile int fresh = 0;
	struct ferrite_txmap_root *r = ferrite_txmap_root(pop);
	uint64_t h = ferrite_mix64(key);

	if (r == NULL || r->subs == 0 || len != r->value_len)
		return EINVAL;
	struct ferrite_txmap_sub *s =
		pmemobj_direct(r->sub[(h >> 56) & (r->subs - 1)]);

	TX_BEGIN(pop) {
		PMEMoid *tab = pmemobj_direct(s->table);
		uint64_t b = h & (s->nbuckets - 1);
		struct ferrite_txmap_entry *hit = NULL;
		for (PMEMoid e = tab[b]; !OID_IS_NULL(e);) {
			struct ferrite_txmap_entry *en = pmemobj_direct(e);
			if (en->key == key) {
				hit = en;
				break;
			}
			e = en->next;
		}
		if (hit != NULL) {
			pmemobj_tx_add_range_direct(hit->value, len);
			memcpy(hit->value, value, len);
		} else {
			PMEMoid n = pmemobj_tx_alloc(
				sizeof(struct ferrite_txmap_entry) + len,
				FERRITE_PMDK_TYPE_NUM);
			struct ferrite_txmap_entry *en = pmemobj_direct(n);
			en->key = key;
			en->next = tab[b];
			memcpy(en->value, value, len);
			pmemobj_tx_add_range_direct(&tab[b], sizeof(PMEMoid));
			tab[b] = n;
			pmemobj_tx_add_range_direct(&s->count, sizeof(uint64_t));
			s->count++;
			if (s->count > 2 * s->nbuckets)
				ferrite_txmap_rehash(s);
			fresh = 1;
		}
	} TX_ONABORT {
		err = pmemobj_tx_errno();
		if (err == 0)
			err = ECANCELED;
	} TX_END

	if (err == 0 && inserted != NULL)
		*inserted = fresh;
	return err;
}

/*
 * ferrite_pmdk_txmap_get -- copies `key`'s value (`len` bytes) to `out`.
 * Returns 1 when found, 0 when not, -1 for a length mismatch.
 */
int
ferrite_pmdk_txmap_get(PMEMobjpool *pop, uint64_t key, void *out, size_t len)
{
	struct ferrite_txmap_root *r = ferrite_txmap_root(pop);
	uint64_t h = ferrite_mix64(key);

	if (r == NULL || r->subs == 0 || len != r->value_len)
		return -1;
	struct ferrite_txmap_sub *s =
		pmemobj_direct(r->sub[(h >> 56) & (r->subs - 1)]);
	PMEMoid *tab = pmemobj_direct(s->table);
	for (PMEMoid e = tab[h & (s->nbuckets - 1)]; !OID_IS_NULL(e);) {
		struct ferrite_txmap_entry *en = pmemobj_direct(e);
		if (en->key == key) {
			memcpy(out, en->value, len);
			return 1;
		}
		e = en->next;
	}
	return 0;
}

/*
 * ferrite_pmdk_txmap_count -- entries in the map (the sub-maps' counts).
 */
uint64_t
ferrite_pmdk_txmap_count(PMEMobjpool *pop)
{
	struct ferrite_txmap_root *r = ferrite_txmap_root(pop);
	uint64_t n = 0;

	for (uint64_t i = 0; r != NULL && i < r->subs; i++) {
		struct ferrite_txmap_sub *s = pmemobj_direct(r->sub[i]);
		n += s->count;
	}
	return n;
}
