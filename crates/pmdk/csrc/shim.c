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

#include <libpmemblk.h>
#include <libpmemlog.h>
#include <libpmemobj.h>

/* Type number given to every object the baseline allocates. */
#define FERRITE_PMDK_TYPE_NUM 1

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
