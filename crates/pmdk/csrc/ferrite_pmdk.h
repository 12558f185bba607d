/*
 * ferrite_pmdk.h -- what shim.c and txbtree.c share.
 */
#ifndef FERRITE_PMDK_H
#define FERRITE_PMDK_H

#include <stdint.h>

/* Type number given to every object the baseline allocates. */
#define FERRITE_PMDK_TYPE_NUM 1

/*
 * ferrite_mix64 -- splitmix64's finaliser, bit for bit the `mix64` of
 * ferrite-tx, so keys hash (and the B+tree's keys widen) identically.
 */
static inline uint64_t
ferrite_mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

#endif
