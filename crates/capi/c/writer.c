/* The kill -9 test's writer: puts key-000000, key-000001, … (each value
 * names its key) into POOL, one durable put at a time, or a batch of two
 * (key and its twin "twin-…") every tenth, and prints each index to stdout
 * only after ferrite_store_put / ferrite_store_batch returned FERRITE_OK:
 * a printed index is an acknowledged write. Starts at the index argv[2]. It
 * runs until killed (or argv[3] writes). */
#include <ferrite.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    long first = atol(argv[2]), limit = argc > 3 ? atol(argv[3]) : -1;
    ferrite_store *s = NULL;
    int rc = ferrite_store_open(argv[1], getenv("FERRITE_OPTIONS"), &s);
    if (rc < 0) {
        fprintf(stderr, "writer: open: %s\n", ferrite_last_error());
        return 1;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    for (long i = first; limit < 0 || i < first + limit; i++) {
        char key[32], twin[32], val[64];
        int kl = snprintf(key, sizeof key, "key-%06ld", i);
        int tl = snprintf(twin, sizeof twin, "twin-%06ld", i);
        int vl = snprintf(val, sizeof val, "value of key %06ld", i);
        if (i % 10 == 0) {
            ferrite_op ops[2] = {
                {FERRITE_OP_PUT, key, (size_t)kl, val, (size_t)vl},
                {FERRITE_OP_PUT, twin, (size_t)tl, val, (size_t)vl},
            };
            rc = ferrite_store_batch(s, ops, 2);
        } else {
            rc = ferrite_store_put(s, key, (size_t)kl, val, (size_t)vl);
        }
        if (rc != FERRITE_OK) {
            fprintf(stderr, "writer: write %ld: %s\n", i, ferrite_last_error());
            return 1;
        }
        printf("%ld\n", i);
    }
    ferrite_store_close(s);
    ferrite_store_free(s);
    return 0;
}
