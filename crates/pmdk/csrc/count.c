/*
 * count.c -- counts the flushes and fences libpmemobj asks libpmem for
 * (feature `count` of ferrite-pmdk only).
 *
 * Ferrite counts every flush and fence it issues itself (ferrite_pmem's
 * counters); PMDK's are issued inside libpmem and invisible to those. To
 * compare the two, this file defines libpmem's persistence entry points
 * that libpmemobj imports (pmem_persist, pmem_flush, pmem_drain,
 * pmem_memcpy/memmove/memset, pmem_msync, pmem_deep_flush) in the
 * executable. The dynamic linker resolves libpmemobj's references to them
 * to the executable's definitions (the executable comes first in the
 * lookup scope, and ld exports a symbol that a linked shared library
 * references), so every call libpmemobj makes lands here first; each
 * wrapper counts, then calls libpmem's own function, found with
 * dlsym(RTLD_NEXT). Behaviour is unchanged.
 *
 * What is counted, per thread:
 *  - fences: pmem_drain, and pmem_msync (the fence of the msync path, when
 *    the pool is not pmem). libpmem 1.12 itself calls pmem_drain,
 *    pmem_flush and pmem_msync through its PLT (objdump shows pmem_persist
 *    = pmem_flush@plt + pmem_drain@plt, and pmem_mem* drain with
 *    pmem_drain@plt), so those calls land in these wrappers too and each
 *    fence is counted exactly once, at the leaf.
 *  - flush_calls / lines: each pmem_flush (and pmem_deep_flush) and the
 *    64-byte lines its range overlaps; pmem_mem* flush through an internal
 *    function pointer instead, so their wrappers count their lines (unless
 *    PMEM_F_MEM_NOFLUSH). pmem_persist counts nothing itself.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

#include <libpmem.h>

struct ferrite_pmdk_counts {
	uint64_t fences;
	uint64_t flush_calls;
	uint64_t lines;
	uint64_t msyncs;
};

static __thread struct ferrite_pmdk_counts counts;

/* Copies the calling thread's counts to *out. */
void
ferrite_pmdk_counts_get(struct ferrite_pmdk_counts *out)
{
	*out = counts;
}

static uint64_t
lines_of(const void *addr, size_t len)
{
	if (len == 0)
		return 0;
	uintptr_t a = (uintptr_t)addr & ~(uintptr_t)63;
	uintptr_t e = ((uintptr_t)addr + len + 63) & ~(uintptr_t)63;
	return (e - a) / 64;
}

/*
 * real(name) -- libpmem's own definition of `name`, looked up once. The
 * lookup may race between threads; each finds the same address, and the
 * atomic load/store keep the race well defined.
 */
static void *
real(void **slot, const char *name)
{
	void *f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (f == NULL) {
		f = dlsym(RTLD_NEXT, name);
		__atomic_store_n(slot, f, __ATOMIC_RELEASE);
	}
	return f;
}

typedef void (*void_fn)(void);
typedef void (*range_fn)(const void *, size_t);
typedef int (*msync_fn)(const void *, size_t);
typedef void *(*copy_fn)(void *, const void *, size_t, unsigned);
typedef void *(*set_fn)(void *, int, size_t, unsigned);

/* Declares `fn`, libpmem's `name` of pointer type `type`. */
#define REAL(name, type) \
	static void *real_##name; \
	type fn = (type)real(&real_##name, #name)

static void
count_flush(const void *addr, size_t len)
{
	counts.flush_calls++;
	counts.lines += lines_of(addr, len);
}

/* pmem_mem*: lines only; their drain is a counted pmem_drain@plt. */
static void
count_mem(void *dest, size_t len, unsigned flags)
{
	if (!(flags & PMEM_F_MEM_NOFLUSH))
		count_flush(dest, len);
}

void
pmem_drain(void)
{
	REAL(pmem_drain, void_fn);
	counts.fences++;
	fn();
}

void
pmem_flush(const void *addr, size_t len)
{
	REAL(pmem_flush, range_fn);
	count_flush(addr, len);
	fn(addr, len);
}

void
pmem_persist(const void *addr, size_t len)
{
	REAL(pmem_persist, range_fn);
	/* Counted by the pmem_flush and pmem_drain it calls. */
	fn(addr, len);
}

void
pmem_deep_flush(const void *addr, size_t len)
{
	REAL(pmem_deep_flush, range_fn);
	count_flush(addr, len);
	fn(addr, len);
}

int
pmem_msync(const void *addr, size_t len)
{
	REAL(pmem_msync, msync_fn);
	counts.msyncs++;
	counts.fences++;
	counts.lines += lines_of(addr, len);
	return fn(addr, len);
}

void *
pmem_memcpy(void *dest, const void *src, size_t len, unsigned flags)
{
	REAL(pmem_memcpy, copy_fn);
	count_mem(dest, len, flags);
	return fn(dest, src, len, flags);
}

void *
pmem_memmove(void *dest, const void *src, size_t len, unsigned flags)
{
	REAL(pmem_memmove, copy_fn);
	count_mem(dest, len, flags);
	return fn(dest, src, len, flags);
}

void *
pmem_memset(void *dest, int c, size_t len, unsigned flags)
{
	REAL(pmem_memset, set_fn);
	count_mem(dest, len, flags);
	return fn(dest, c, len, flags);
}
