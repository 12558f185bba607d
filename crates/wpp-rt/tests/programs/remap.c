/* Exercises every mapping call the runtime traps, in a loop whose digest
 * must not depend on failures: anonymous mmap, mremap (grow in place, grow
 * by moving, shrink), munmap of a middle part, mprotect, madvise(DONTNEED)
 * reading back zero, and realloc of large blocks (glibc's mremap path).
 * Usage: remap ROUNDS */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static unsigned long digest;

static void mix(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i += 61)
        digest = (digest ^ p[i]) * 1099511628211UL;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 100;
    size_t page = 4096;
    char *big = NULL;
    size_t big_len = 0;
    for (int r = 0; r < rounds; r++) {
        size_t len = (size_t)(16 + r % 16) * page;
        unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return 10;
        for (size_t i = 0; i < len; i++)
            p[i] = (unsigned char)(i * 7 + (size_t)r);
        unsigned char *q = mremap(p, len, 2 * len, MREMAP_MAYMOVE);
        if (q == MAP_FAILED)
            return 11;
        for (size_t i = len; i < 2 * len; i++)
            q[i] = (unsigned char)(i * 13 + (size_t)r);
        /* madvise(DONTNEED) on anonymous memory reads back zero */
        if (madvise(q + page, page, MADV_DONTNEED) != 0)
            return 12;
        for (size_t i = 0; i < page; i++)
            if (q[page + i] != 0)
                return 13;
        /* unmap a middle page, protect one read-only, shrink the tail */
        munmap(q + 4 * page, page);
        mprotect(q + 2 * page, page, PROT_READ);
        mix(q, 4 * page);
        mix(q + 5 * page, 2 * len - 5 * page);
        unsigned char *s = mremap(q + 5 * page, 2 * len - 5 * page, page * 3, 0);
        if (s == MAP_FAILED)
            return 14;
        mix(s, 3 * page);
        munmap(q, 4 * page);
        munmap(s, 3 * page);
        /* realloc of a large block: glibc moves it with mremap */
        size_t nl = (size_t)(r % 7 + 1) << 18;
        char *nb = realloc(big, nl);
        if (!nb)
            return 15;
        for (size_t i = big_len < nl ? big_len : nl; i < nl; i++)
            nb[i] = (char)(i + (size_t)r);
        big = nb;
        big_len = nl;
        mix((unsigned char *)big, big_len);
    }
    printf("remap %d rounds: %lu\n", rounds, digest);
    return 0;
}
