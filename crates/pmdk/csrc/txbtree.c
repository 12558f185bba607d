/*
 * txbtree.c -- the transactional B+tree of the `tx` benchmark: the PMDK
 * peer of ferrite-tx's ds::bptree [P1 §3.4.2], same format and algorithm,
 * written as a libpmemobj user would write it.
 *
 * Keys are given as uint64_t and widened to 32 bytes exactly as Ferrite's
 * key32 does (the big-endian key, then three big-endian words of its
 * splitmix64 chain), compared with memcmp, so every comparison looks at
 * 32 bytes in both libraries and the order is the uint64_t order.
 *
 * On-media format (little-endian; "offset" means a PMEMoid's `off`, i.e.
 * bytes from the pool's base):
 *
 *   root object (64 bytes): magic "FERRBPTR", fanout F, value_len, root
 *   (offset of the root node), height (1: the root is a leaf), 24 reserved
 *   bytes -- Ferrite's header block.
 *
 *   node (32 + 32*F + 8*(F+1) bytes, 680 for F = 16): leaf (1 leaf,
 *   0 internal), n (keys), next (leaves: offset of the next leaf, 0 =
 *   last), reserved, keys[F] (32 bytes each, the first n strictly
 *   increasing), ptrs[F+1]: a leaf's ptrs[i] is the offset of keys[i]'s
 *   value block (value_len bytes, an object of its own); an internal
 *   node's ptrs[i] is the child holding the keys k with
 *   keys[i-1] <= k < keys[i].
 *
 * Child pointers are bare offsets rather than 16-byte PMEMoids: the tree
 * lives in one pool, so the pool uuid half would be the same everywhere,
 * and 8-byte pointers keep nodes the size of Ferrite's, so both libraries
 * shift, log and flush the same bytes. Turning an offset into an address is
 * what pmemobj_direct does for an open pool: base + off.
 *
 * Insert-or-update runs in one transaction. Every write to an object that
 * existed before the transaction is preceded by pmemobj_tx_add_range_direct
 * of exactly the bytes it changes (the shifted tail of keys and of ptrs, n,
 * a leaf's next, the root's root+height) -- the ranges Ferrite's undo
 * strategy snapshots. (PMDK's examples/libpmemobj/tree_map/btree_map.c
 * snapshots whole nodes instead; the narrower ranges are what a careful user
 * writes and are never more expensive.) New objects -- the value block, the
 * right half of a split, a new root -- come from pmemobj_tx_alloc and are
 * not snapshotted: libpmemobj flushes them at commit and frees them on
 * abort.
 *
 * Deletion is not implemented: the benchmark only inserts.
 *
 * Concurrency is the caller's (one reader-writer lock per node plus one for
 * the root object, in Rust, as Ferrite does). Nothing here trusts the pool
 * less than PMDK's examples do: the insert and get paths follow offsets
 * without checking them; ferrite_pmdk_txbtree_check verifies everything.
 */

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <libpmemobj.h>

#include "ferrite_pmdk.h"

#define KEY 32
#define MIN_FANOUT 3
#define MAX_FANOUT 64
#define MAX_VALUE 4096
/* Deeper than any tree of MIN_FANOUT that fits in a 64-bit address space. */
#define MAX_HEIGHT 64

static const char MAGIC[] = "FERRBPTR";

struct txbtree_root {
	uint8_t magic[8];
	uint64_t fanout;
	uint64_t value_len;
	uint64_t root;
	uint64_t height;
	uint64_t reserved[3];
};

struct txbtree_node {
	uint64_t leaf;
	uint64_t n;
	uint64_t next;
	uint64_t reserved;
	uint8_t keys[][KEY]; /* F keys, then F+1 uint64_t ptrs */
};

static inline size_t
node_bytes(uint64_t f)
{
	return 32 + KEY * f + 8 * (f + 1);
}

static inline uint64_t *
node_ptrs(struct txbtree_node *x, uint64_t f)
{
	return (uint64_t *)x->keys[f];
}

static inline void *
at(PMEMobjpool *pop, uint64_t off)
{
	return (char *)pop + off;
}

static void
put_be64(uint8_t *b, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint64_t
get_be64(const uint8_t *b)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = (v << 8) | b[i];
	return v;
}

/*
 * ferrite_pmdk_txbtree_key32 -- Ferrite's key32: `k` big-endian, then three
 * rounds of mix64 chained from `k`, each big-endian.
 */
void
ferrite_pmdk_txbtree_key32(uint64_t k, uint8_t out[KEY])
{
	uint64_t h = k;

	put_be64(out, k);
	for (int i = 1; i < 4; i++) {
		h = ferrite_mix64(h);
		put_be64(out + 8 * i, h);
	}
}

/* First index whose key is >= k (where k goes in a leaf). */
static uint64_t
lower_bound(const struct txbtree_node *x, const uint8_t *k)
{
	uint64_t lo = 0, hi = x->n;

	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (memcmp(x->keys[mid], k, KEY) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* First index whose key is > k (the child of an internal node covering k). */
static uint64_t
upper_bound(const struct txbtree_node *x, const uint8_t *k)
{
	uint64_t lo = 0, hi = x->n;

	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (memcmp(x->keys[mid], k, KEY) <= 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * The root object, or NULL when the pool has none of the right size (only
 * pmemobj_root_size is asked first, so that a foreign pool is not given
 * one).
 */
static struct txbtree_root *
tree_root(PMEMobjpool *pop)
{
	if (pmemobj_root_size(pop) < sizeof(struct txbtree_root))
		return NULL;
	return pmemobj_direct(
		pmemobj_root(pop, sizeof(struct txbtree_root)));
}

static int
params_ok(uint64_t f, uint64_t value_len)
{
	return f >= MIN_FANOUT && f <= MAX_FANOUT && value_len >= 1 &&
		value_len <= MAX_VALUE;
}

/*
 * ferrite_pmdk_txbtree_create -- formats the root object of a fresh pool as
 * an empty tree (one empty leaf). Returns 0 or an error number.
 */
int
ferrite_pmdk_txbtree_create(PMEMobjpool *pop, uint64_t fanout,
	uint64_t value_len)
{
	volatile int err = 0;

	if (!params_ok(fanout, value_len))
		return EINVAL;
	PMEMoid ro = pmemobj_root(pop, sizeof(struct txbtree_root));
	if (OID_IS_NULL(ro))
		return ENOMEM;
	struct txbtree_root *r = pmemobj_direct(ro);

	TX_BEGIN(pop) {
		PMEMoid lo = pmemobj_tx_alloc(node_bytes(fanout),
			FERRITE_PMDK_TYPE_NUM);
		struct txbtree_node *leaf = pmemobj_direct(lo);
		leaf->leaf = 1;
		leaf->n = 0;
		leaf->next = 0;
		leaf->reserved = 0;
		pmemobj_tx_add_range(ro, 0, sizeof(struct txbtree_root));
		memcpy(r->magic, MAGIC, sizeof(r->magic));
		r->fanout = fanout;
		r->value_len = value_len;
		r->root = lo.off;
		r->height = 1;
		memset(r->reserved, 0, sizeof(r->reserved));
	} TX_ONABORT {
		err = pmemobj_tx_errno();
		if (err == 0)
			err = ECANCELED;
	} TX_END

	return err;
}

/*
 * ferrite_pmdk_txbtree_params -- the fanout and value length of the tree
 * in an opened pool. Returns 0, or EINVAL when the root object is not a
 * tree's.
 */
int
ferrite_pmdk_txbtree_params(PMEMobjpool *pop, uint64_t *fanout,
	uint64_t *value_len)
{
	struct txbtree_root *r = tree_root(pop);

	if (r == NULL || memcmp(r->magic, MAGIC, sizeof(r->magic)) != 0 ||
	    !params_ok(r->fanout, r->value_len) || r->height == 0 ||
	    r->height > MAX_HEIGHT)
		return EINVAL;
	*fanout = r->fanout;
	*value_len = r->value_len;
	return 0;
}

/*
 * ferrite_pmdk_txbtree_root -- the root node's offset; *height gets the
 * height. For the caller's lock descent.
 */
uint64_t
ferrite_pmdk_txbtree_root(PMEMobjpool *pop, uint64_t *height)
{
	struct txbtree_root *r = tree_root(pop);

	*height = r->height;
	return r->root;
}

/*
 * ferrite_pmdk_txbtree_child -- the child of internal node `node` that
 * covers the 32-byte key `k`.
 */
uint64_t
ferrite_pmdk_txbtree_child(PMEMobjpool *pop, uint64_t node, const uint8_t *k)
{
	struct txbtree_root *r = tree_root(pop);
	struct txbtree_node *x = at(pop, node);

	return node_ptrs(x, r->fanout)[upper_bound(x, k)];
}

/*
 * ferrite_pmdk_txbtree_node_n -- the number of keys in node `node`.
 */
uint64_t
ferrite_pmdk_txbtree_node_n(PMEMobjpool *pop, uint64_t node)
{
	return ((struct txbtree_node *)at(pop, node))->n;
}

/*
 * The combined view of a node's keys (or ptrs) with one more inserted at
 * `pos`: entry j of the node as it would be with room for it.
 */
static const uint8_t *
combined_key(const struct txbtree_node *x, uint64_t pos, const uint8_t *k,
	uint64_t j)
{
	return j < pos ? x->keys[j] : j == pos ? k : x->keys[j - 1];
}

static uint64_t
combined_ptr(const uint64_t *ptrs, uint64_t pos, uint64_t p, uint64_t j)
{
	return j < pos ? ptrs[j] : j == pos ? p : ptrs[j - 1];
}

/*
 * node_put -- inside the running transaction, puts key `k` at `kpos` of
 * node `x` and `p` next to it (a leaf: ptrs[kpos], the value; internal:
 * ptrs[kpos+1], the right half of a split child).
 *
 * With room, shifts the tails up and returns 0. A full node splits: the
 * combined F+1 keys are cut at mid = (F+1)/2; the left half stays in `x`,
 * the rest goes to a new node whose offset is returned, and `up` gets the
 * separator for the parent -- a leaf's right half keeps it as its first
 * key, an internal node's middle key moves up and into neither half.
 * `k` and `up` may be the same buffer.
 *
 * The right half is written from the unchanged `x` first; only then are
 * the changing ranges of `x` snapshotted and overwritten.
 */
static uint64_t
node_put(uint64_t f, struct txbtree_node *x, uint64_t kpos, const uint8_t *k,
	uint64_t p, uint8_t *up)
{
	int leaf = x->leaf == 1;
	uint64_t n = x->n;
	uint64_t *ptrs = node_ptrs(x, f);
	uint64_t ppos = leaf ? kpos : kpos + 1;
	uint64_t lk, lp; /* keys and ptrs the node keeps */
	uint64_t right = 0;
	uint8_t sep[KEY];

	if (n < f) {
		lk = n + 1;
		lp = (leaf ? n : n + 1) + 1;
	} else {
		uint64_t total = n + 1;
		uint64_t mid = total / 2;
		uint64_t k0 = leaf ? mid : mid + 1;
		uint64_t ptotal = leaf ? total : total + 1;
		PMEMoid ro = pmemobj_tx_alloc(node_bytes(f),
			FERRITE_PMDK_TYPE_NUM);
		struct txbtree_node *r = pmemobj_direct(ro);
		uint64_t *rp = node_ptrs(r, f);

		r->leaf = (uint64_t)leaf;
		r->n = total - k0;
		r->reserved = 0;
		for (uint64_t j = k0; j < total; j++)
			memcpy(r->keys[j - k0], combined_key(x, kpos, k, j), KEY);
		for (uint64_t j = k0; j < ptotal; j++)
			rp[j - k0] = combined_ptr(ptrs, ppos, p, j);
		memcpy(sep, combined_key(x, kpos, k, mid), KEY);
		if (leaf) {
			r->next = x->next;
			pmemobj_tx_add_range_direct(&x->next, sizeof(x->next));
			x->next = ro.off;
		} else {
			r->next = 0;
		}
		lk = mid;
		lp = leaf ? mid : mid + 1;
		right = ro.off;
	}

	uint64_t kfrom = kpos < lk ? kpos : lk;
	uint64_t pfrom = ppos < lp ? ppos : lp;
	if (lk > kfrom)
		pmemobj_tx_add_range_direct(x->keys[kfrom],
			(lk - kfrom) * KEY);
	if (lp > pfrom)
		pmemobj_tx_add_range_direct(&ptrs[pfrom],
			(lp - pfrom) * sizeof(uint64_t));
	pmemobj_tx_add_range_direct(&x->n, sizeof(x->n));

	if (kpos < lk) {
		memmove(x->keys[kpos + 1], x->keys[kpos],
			(lk - 1 - kpos) * KEY);
		memcpy(x->keys[kpos], k, KEY);
	}
	if (ppos < lp) {
		memmove(&ptrs[ppos + 1], &ptrs[ppos],
			(lp - 1 - ppos) * sizeof(uint64_t));
		ptrs[ppos] = p;
	}
	x->n = lk;
	if (right != 0)
		memcpy(up, sep, KEY);
	return right;
}

/*
 * descend -- the leaf covering `k`, and where `k` goes in it (*pos). With
 * `path` and `idx`, records the internal nodes passed (root first) and the
 * child index taken in each.
 *
 * Not inlined so that its loop variables are not live across the setjmp
 * of the caller's TX_BEGIN.
 */
static __attribute__((noinline)) uint64_t
descend(PMEMobjpool *pop, const struct txbtree_root *r, const uint8_t *k,
	uint64_t *path, uint64_t *idx, uint64_t *pos)
{
	uint64_t x = r->root;

	for (uint64_t d = 0; d + 1 < r->height; d++) {
		struct txbtree_node *nd = at(pop, x);
		uint64_t i = upper_bound(nd, k);
		if (path != NULL) {
			path[d] = x;
			idx[d] = i;
		}
		x = node_ptrs(nd, r->fanout)[i];
	}
	*pos = lower_bound(at(pop, x), k);
	return x;
}

/*
 * ferrite_pmdk_txbtree_insert -- inserts `key` with `len` bytes of `value`,
 * or overwrites its value, in one transaction. Sets *inserted to 1 for a
 * new key. Returns 0 or an error number (EINVAL for a wrong length or a
 * pool without a tree; the transaction's error number when it aborted, in
 * which case nothing changed).
 *
 * The descent happens before TX_BEGIN: it only reads, and its results stay
 * fixed in the transaction (no local set before the setjmp changes after
 * it, so none needs to be volatile).
 */
static int
txbtree_insert(PMEMobjpool *pop, uint64_t key, const void *value, size_t len,
	int *inserted, int abort_at_end)
{
	volatile int err = 0;
	volatile int fresh = 0;
	struct txbtree_root *r = tree_root(pop);
	uint64_t path[MAX_HEIGHT];
	uint64_t idx[MAX_HEIGHT];
	uint8_t k[KEY];

	if (r == NULL || len != r->value_len || r->height == 0 ||
	    r->height > MAX_HEIGHT)
		return EINVAL;
	const uint64_t f = r->fanout;
	const uint64_t height = r->height;
	ferrite_pmdk_txbtree_key32(key, k);
	uint64_t pos;
	const uint64_t x = descend(pop, r, k, path, idx, &pos);
	struct txbtree_node *const leaf = at(pop, x);
	const int hit = pos < leaf->n &&
		memcmp(leaf->keys[pos], k, KEY) == 0;

	TX_BEGIN(pop) {
		if (hit) {
			void *v = at(pop, node_ptrs(leaf, f)[pos]);
			pmemobj_tx_add_range_direct(v, len);
			memcpy(v, value, len);
		} else {
			PMEMoid vo = pmemobj_tx_alloc(len,
				FERRITE_PMDK_TYPE_NUM);
			memcpy(pmemobj_direct(vo), value, len);
			/* Climb while nodes split; `sep` is what goes up. */
			uint8_t sep[KEY];
			memcpy(sep, k, KEY);
			uint64_t node = x, kpos = pos, p = vo.off;
			uint64_t d = height - 1;
			for (;;) {
				p = node_put(f, at(pop, node), kpos, sep, p,
					sep);
				if (p == 0)
					break;
				if (d == 0) {
					/* The root split: a new root above. */
					PMEMoid no = pmemobj_tx_alloc(
						node_bytes(f),
						FERRITE_PMDK_TYPE_NUM);
					struct txbtree_node *nr =
						pmemobj_direct(no);
					nr->leaf = 0;
					nr->n = 1;
					nr->next = 0;
					nr->reserved = 0;
					memcpy(nr->keys[0], sep, KEY);
					node_ptrs(nr, f)[0] = r->root;
					node_ptrs(nr, f)[1] = p;
					pmemobj_tx_add_range_direct(&r->root,
						2 * sizeof(uint64_t));
					r->root = no.off;
					r->height = height + 1;
					break;
				}
				d--;
				node = path[d];
				kpos = idx[d];
			}
			fresh = 1;
		}
		if (abort_at_end)
			pmemobj_tx_abort(ECANCELED);
	} TX_ONABORT {
		err = pmemobj_tx_errno();
		if (err == 0)
			err = ECANCELED;
	} TX_END

	if (err == 0 && inserted != NULL)
		*inserted = fresh;
	return err;
}

int
ferrite_pmdk_txbtree_insert(PMEMobjpool *pop, uint64_t key,
	const void *value, size_t len, int *inserted)
{
	return txbtree_insert(pop, key, value, len, inserted, 0);
}

/*
 * ferrite_pmdk_txbtree_insert_aborted -- the same insert, aborted with
 * ECANCELED after its last write: for tests that hold every write to its
 * snapshot (after the abort the tree must be as before).
 */
int
ferrite_pmdk_txbtree_insert_aborted(PMEMobjpool *pop, uint64_t key,
	const void *value, size_t len)
{
	return txbtree_insert(pop, key, value, len, NULL, 1);
}

/*
 * ferrite_pmdk_txbtree_get -- copies `key`'s value (`len` bytes) to `out`.
 * Returns 1 when found, 0 when not, -1 for a length mismatch or a pool
 * without a tree.
 */
int
ferrite_pmdk_txbtree_get(PMEMobjpool *pop, uint64_t key, void *out,
	size_t len)
{
	struct txbtree_root *r = tree_root(pop);
	uint8_t k[KEY];

	if (r == NULL || len != r->value_len)
		return -1;
	ferrite_pmdk_txbtree_key32(key, k);
	uint64_t pos;
	struct txbtree_node *leaf = at(pop, descend(pop, r, k, NULL, NULL,
		&pos));
	if (pos < leaf->n && memcmp(leaf->keys[pos], k, KEY) == 0) {
		memcpy(out, at(pop, node_ptrs(leaf, r->fanout)[pos]), len);
		return 1;
	}
	return 0;
}

/* Failures ferrite_pmdk_txbtree_check reports (txbtree.rs names them). */
enum txbtree_check_error {
	CHECK_HEADER = -1,    /* no tree, or bad fanout/value_len/height */
	CHECK_BLOCK = -2,     /* a node or value outside the pool or too small */
	CHECK_DEPTH = -3,     /* a leaf flag disagrees with the depth */
	CHECK_COUNT = -4,     /* n > F, or an internal node without keys */
	CHECK_ORDER = -5,     /* keys not increasing or outside their bounds */
	CHECK_KEY32 = -6,     /* a key that is not key32 of its first word */
	CHECK_NEXT = -7,      /* the leaf chain skips, repeats or reorders */
};

struct check {
	PMEMobjpool *pop;
	uint64_t uuid_lo;
	uint64_t pool_size;
	uint64_t f;
	uint64_t value_len;
	uint64_t height;
	uint64_t prev_leaf; /* the leaf before the next one in key order */
	uint64_t entries;
};

/*
 * An allocated object of at least `need` bytes at `off`: inside the pool,
 * and libpmemobj's header for it says it is big enough.
 */
static int
block_ok(const struct check *c, uint64_t off, size_t need)
{
	if (off == 0 || off >= c->pool_size || c->pool_size - off < need)
		return 0;
	PMEMoid oid = { c->uuid_lo, off };
	return pmemobj_alloc_usable_size(oid) >= need;
}

/*
 * Checks the subtree at `x` (depth 1 = root) against the bounds its parent
 * gives (lo <= k < hi; NULL = unbounded), and that the leaves, met left to
 * right, are chained by `next` in that order.
 */
static int
check_node(struct check *c, uint64_t x, uint64_t depth, const uint8_t *lo,
	const uint8_t *hi)
{
	if (!block_ok(c, x, node_bytes(c->f)))
		return CHECK_BLOCK;
	struct txbtree_node *nd = at(c->pop, x);
	uint64_t *ptrs = node_ptrs(nd, c->f);
	int leaf = depth == c->height;
	if (nd->leaf != (uint64_t)leaf)
		return CHECK_DEPTH;
	if (nd->n > c->f || (!leaf && nd->n == 0))
		return CHECK_COUNT;
	for (uint64_t i = 0; i < nd->n; i++) {
		if ((i > 0 && memcmp(nd->keys[i - 1], nd->keys[i], KEY) >= 0) ||
		    (lo != NULL && memcmp(nd->keys[i], lo, KEY) < 0) ||
		    (hi != NULL && memcmp(nd->keys[i], hi, KEY) >= 0))
			return CHECK_ORDER;
	}
	if (leaf) {
		for (uint64_t i = 0; i < nd->n; i++) {
			uint8_t k[KEY];
			ferrite_pmdk_txbtree_key32(get_be64(nd->keys[i]), k);
			if (memcmp(k, nd->keys[i], KEY) != 0)
				return CHECK_KEY32;
			if (!block_ok(c, ptrs[i], c->value_len))
				return CHECK_BLOCK;
		}
		if (c->prev_leaf != 0 &&
		    ((struct txbtree_node *)at(c->pop, c->prev_leaf))->next !=
		    x)
			return CHECK_NEXT;
		c->prev_leaf = x;
		c->entries += nd->n;
		return 0;
	}
	for (uint64_t i = 0; i <= nd->n; i++) {
		int e = check_node(c, ptrs[i], depth + 1,
			i == 0 ? lo : nd->keys[i - 1],
			i == nd->n ? hi : nd->keys[i]);
		if (e != 0)
			return e;
	}
	return 0;
}

/*
 * ferrite_pmdk_txbtree_check -- verifies the whole tree in a pool of
 * `pool_size` bytes: every node and value block allocated and large enough,
 * every leaf at depth `height`, n <= F (internal nodes >= 1), keys strictly
 * increasing within the bounds the parent gives, every key a key32, and
 * the leaves chained by `next` left to right, the last one's next 0.
 *
 * Then walks the leaf chain from the leftmost leaf, as a range scan would,
 * storing the first `cap` keys in `keys` in the order met. *count gets
 * the number of entries. Returns 0, or a negative CHECK_* code.
 *
 * Needs the tree quiescent (the caller locks it).
 */
int
ferrite_pmdk_txbtree_check(PMEMobjpool *pop, uint64_t pool_size,
	uint64_t *keys, size_t cap, uint64_t *count)
{
	struct txbtree_root *r = tree_root(pop);
	struct check c;

	*count = 0;
	if (r == NULL || memcmp(r->magic, MAGIC, sizeof(r->magic)) != 0 ||
	    !params_ok(r->fanout, r->value_len) || r->height == 0 ||
	    r->height > MAX_HEIGHT)
		return CHECK_HEADER;
	c.pop = pop;
	c.uuid_lo = pmemobj_oid(r).pool_uuid_lo;
	c.pool_size = pool_size;
	c.f = r->fanout;
	c.value_len = r->value_len;
	c.height = r->height;
	c.prev_leaf = 0;
	c.entries = 0;
	int e = check_node(&c, r->root, 1, NULL, NULL);
	if (e != 0)
		return e;
	if (((struct txbtree_node *)at(pop, c.prev_leaf))->next != 0)
		return CHECK_NEXT;

	/* The leftmost leaf, then along `next`. */
	uint64_t x = r->root;
	for (uint64_t d = 1; d < r->height; d++)
		x = node_ptrs(at(pop, x), c.f)[0];
	uint64_t seen = 0;
	const uint8_t *prev = NULL;
	while (x != 0) {
		struct txbtree_node *nd = at(pop, x);
		for (uint64_t i = 0; i < nd->n; i++, seen++) {
			if (prev != NULL && memcmp(prev, nd->keys[i], KEY) >= 0)
				return CHECK_ORDER;
			prev = nd->keys[i];
			if (seen < cap)
				keys[seen] = get_be64(nd->keys[i]);
		}
		x = nd->next;
	}
	if (seen != c.entries)
		return CHECK_NEXT;
	*count = seen;
	return 0;
}
