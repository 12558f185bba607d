/* The C half of the C-overhead benchmark (bench/overhead.sh): N durable
 * puts, then N gets, of 16-byte keys and 100-byte values, through the C
 * API; prints "c put_ns=X get_ns=Y" (mean nanoseconds per operation).
 * examples/overhead.rs does the same through the Rust API.
 * Usage: bench POOL N OPTIONS */
#define _POSIX_C_SOURCE 199309L
#include <ferrite.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* The same key sequence as examples/overhead.rs: a multiplicative scramble. */
static void key_of(unsigned long i, char *k) {
    snprintf(k, 17, "%016lx", (i * 0x9E3779B97F4A7C15UL) >> 8);
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    unsigned long n = strtoul(argv[2], NULL, 10);
    remove(argv[1]);
    ferrite_store *s = NULL;
    if (ferrite_store_open(argv[1], argv[3], &s) != FERRITE_OK) {
        fprintf(stderr, "bench: %s\n", ferrite_last_error());
        return 1;
    }
    char key[17], val[100];
    memset(val, 'v', sizeof val);
    double t0 = now();
    for (unsigned long i = 0; i < n; i++) {
        key_of(i, key);
        if (ferrite_store_put(s, key, 16, val, sizeof val) != FERRITE_OK) return 1;
    }
    double t1 = now();
    size_t total = 0;
    for (unsigned long i = 0; i < n; i++) {
        key_of(i, key);
        void *v;
        size_t vl;
        if (ferrite_store_get(s, key, 16, &v, &vl) != FERRITE_OK) return 1;
        total += vl;
        ferrite_free(v);
    }
    double t2 = now();
    if (total != n * sizeof val) return 1;
    printf("c put_ns=%.1f get_ns=%.1f\n", (t1 - t0) / n, (t2 - t1) / n);
    ferrite_store_close(s);
    ferrite_store_free(s);
    remove(argv[1]);
    return 0;
}
