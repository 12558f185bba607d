/* Tests of the C API from C: round trips, batches, scans, snapshots, the
 * pool check, and bad input (null pointers, a closed store, a non-pool
 * file, oversized keys, a panic) getting a typed error, never a crash.
 * Usage: test DIR (a scratch directory). Exit 0 when every check passes. */
#include <ferrite.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;
#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (cond) {                                                                  \
            passed++;                                                                \
        } else {                                                                     \
            failed++;                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__,   \
                    __LINE__, #cond, ferrite_last_error());                          \
        }                                                                            \
    } while (0)

static int get_is(ferrite_store *s, const char *k, const char *want) {
    void *v = NULL;
    size_t n = 0;
    int rc = ferrite_store_get(s, k, strlen(k), &v, &n);
    int ok = want ? rc == FERRITE_OK && n == strlen(want) && memcmp(v, want, n) == 0
                  : rc == FERRITE_NOT_FOUND && v == NULL;
    ferrite_free(v);
    return ok;
}

static void engine_suite(const char *dir, const char *engine) {
    char path[512], opts[64];
    snprintf(path, sizeof path, "%s/%s.pool", dir, engine);
    snprintf(opts, sizeof opts, "engine=%s,size=16M", engine);
    remove(path);
    ferrite_store *s = NULL;
    CHECK(ferrite_store_open(path, opts, &s) == FERRITE_OK && s != NULL);
    if (!s) return;

    CHECK(ferrite_store_put(s, "apple", 5, "red", 3) == FERRITE_OK);
    CHECK(ferrite_store_put(s, "empty", 5, NULL, 0) == FERRITE_OK);
    CHECK(get_is(s, "apple", "red"));
    CHECK(get_is(s, "empty", ""));
    CHECK(get_is(s, "pear", NULL));
    CHECK(ferrite_store_delete(s, "pear", 4) == FERRITE_NOT_FOUND);

    /* A batch: all applied together; an invalid one applies nothing. */
    ferrite_op ops[3] = {
        {FERRITE_OP_PUT, "kiwi", 4, "green", 5},
        {FERRITE_OP_PUT, "plum", 4, "purple", 6},
        {FERRITE_OP_DELETE, "empty", 5, NULL, 0},
    };
    CHECK(ferrite_store_batch(s, ops, 3) == FERRITE_OK);
    CHECK(get_is(s, "kiwi", "green") && get_is(s, "plum", "purple") && get_is(s, "empty", NULL));
    ferrite_op bad[2] = {{FERRITE_OP_PUT, "fig", 3, "brown", 5}, {FERRITE_OP_PUT, "", 0, "x", 1}};
    CHECK(ferrite_store_batch(s, bad, 2) == FERRITE_ERR_KEY_SIZE);
    CHECK(get_is(s, "fig", NULL));
    ferrite_op badkind = {7, "fig", 3, "brown", 5};
    CHECK(ferrite_store_batch(s, &badkind, 1) == FERRITE_ERR_INVALID);
    CHECK(get_is(s, "fig", NULL));

    uint64_t n = 0;
    CHECK(ferrite_store_len(s, &n) == FERRITE_OK && n == 3);

    /* Scans: bounds, reverse, prefix. */
    const char *want_fwd[] = {"apple", "kiwi"};
    ferrite_iter *it = NULL;
    CHECK(ferrite_store_scan(s, "a", 1, "l", 1, 0, &it) == FERRITE_OK);
    const void *k, *v;
    size_t kl, vl;
    int i = 0, rc;
    while ((rc = ferrite_iter_next(it, &k, &kl, &v, &vl)) == FERRITE_OK) {
        CHECK(i < 2 && kl == strlen(want_fwd[i]) && memcmp(k, want_fwd[i], kl) == 0);
        i++;
    }
    CHECK(rc == FERRITE_END && i == 2);
    ferrite_iter_free(it);
    CHECK(ferrite_store_scan(s, NULL, 0, "plum", 4, FERRITE_SCAN_REVERSE | FERRITE_SCAN_END_INCLUSIVE, &it) == FERRITE_OK);
    CHECK(ferrite_iter_next(it, &k, &kl, &v, &vl) == FERRITE_OK && kl == 4 && memcmp(k, "plum", 4) == 0);
    CHECK(ferrite_iter_next(it, &k, &kl, &v, &vl) == FERRITE_OK && kl == 4 && memcmp(k, "kiwi", 4) == 0);
    ferrite_iter_free(it);
    CHECK(ferrite_store_scan(s, "pl", 2, NULL, 0, FERRITE_SCAN_PREFIX, &it) == FERRITE_OK);
    CHECK(ferrite_iter_next(it, &k, &kl, &v, &vl) == FERRITE_OK && vl == 6 && memcmp(v, "purple", 6) == 0);
    CHECK(ferrite_iter_next(it, &k, &kl, &v, &vl) == FERRITE_END);
    ferrite_iter_free(it);
    CHECK(ferrite_store_scan(s, NULL, 0, NULL, 0, 0x100, &it) == FERRITE_ERR_INVALID);

    /* A snapshot sees the store as it was. CoW's writers go on; InP's and
     * LSM's would wait for it, so their writes are refused (busy) until it
     * is freed. */
    ferrite_snapshot *snap = NULL;
    CHECK(ferrite_store_snapshot(s, &snap) == FERRITE_OK);
    CHECK(ferrite_snapshot_scan(snap, NULL, 0, NULL, 0, 0, &it) == FERRITE_OK);
    if (strcmp(engine, "cow") != 0) {
        CHECK(ferrite_store_put(s, "apple", 5, "green", 5) == FERRITE_ERR_BUSY);
        CHECK(ferrite_store_delete(s, "apple", 5) == FERRITE_ERR_BUSY);
        CHECK(ferrite_store_batch(s, ops, 1) == FERRITE_ERR_BUSY);
        CHECK(strstr(ferrite_last_error(), "snapshot") != NULL);
        CHECK(get_is(s, "apple", "red")); /* reads go on */
        ferrite_snapshot *two = NULL;     /* two open, one freed: still busy */
        CHECK(ferrite_store_snapshot(s, &two) == FERRITE_OK);
        ferrite_snapshot_free(two);
        CHECK(ferrite_store_put(s, "apple", 5, "green", 5) == FERRITE_ERR_BUSY);
        ferrite_snapshot_free(snap);
        snap = NULL;
    }
    CHECK(ferrite_store_put(s, "apple", 5, "green", 5) == FERRITE_OK);
    if (snap) {
        void *val = NULL;
        size_t len = 0;
        CHECK(ferrite_snapshot_get(snap, "apple", 5, &val, &len) == FERRITE_OK && len == 3 && memcmp(val, "red", 3) == 0);
        ferrite_free(val);
        CHECK(ferrite_snapshot_len(snap, &n) == FERRITE_OK && n == 3);
        ferrite_snapshot_free(snap);
    }
    /* The snapshot's scan was read when it started: still the old value. */
    CHECK(ferrite_iter_next(it, &k, &kl, &v, &vl) == FERRITE_OK && kl == 5 && vl == 3 && memcmp(v, "red", 3) == 0);
    ferrite_iter_free(it);
    CHECK(get_is(s, "apple", "green"));

    /* Bad input: typed errors. */
    char big[1025];
    memset(big, 'k', sizeof big);
    void *val = NULL;
    size_t len = 0;
    CHECK(ferrite_store_put(s, big, sizeof big, "v", 1) == FERRITE_ERR_KEY_SIZE);
    CHECK(strstr(ferrite_last_error(), "1025") != NULL);
    CHECK(ferrite_store_put(s, "", 0, "v", 1) == FERRITE_ERR_KEY_SIZE);
    char *huge = calloc(1, (1 << 20) + 1);
    CHECK(ferrite_store_put(s, "huge", 4, huge, (1 << 20) + 1) == FERRITE_ERR_VALUE_SIZE);
    free(huge);
    CHECK(ferrite_store_put(s, NULL, 3, "v", 1) == FERRITE_ERR_INVALID);
    CHECK(ferrite_store_put(s, "k", 1, NULL, 3) == FERRITE_ERR_INVALID);
    CHECK(ferrite_store_get(s, "k", 1, NULL, &len) == FERRITE_ERR_INVALID);
    CHECK(ferrite_store_get(s, "k", 1, &val, NULL) == FERRITE_ERR_INVALID);
    CHECK(ferrite_store_put(NULL, "k", 1, "v", 1) == FERRITE_ERR_INVALID);
    CHECK(strstr(ferrite_last_error(), "null") != NULL);
    CHECK(ferrite_store_batch(s, NULL, 2) == FERRITE_ERR_INVALID);
    CHECK(ferrite_iter_next(NULL, &k, &kl, &v, &vl) == FERRITE_ERR_INVALID);
    CHECK(ferrite_snapshot_get(NULL, "k", 1, &val, &len) == FERRITE_ERR_INVALID);

    /* A second open of the same pool in this process: busy, not a crash. */
    ferrite_store *again = NULL;
    CHECK(ferrite_store_open(path, NULL, &again) == FERRITE_ERR_BUSY && again == NULL);

    /* Close: the handle answers FERRITE_ERR_CLOSED until freed. */
    CHECK(ferrite_store_close(s) == FERRITE_OK);
    CHECK(ferrite_store_put(s, "k", 1, "v", 1) == FERRITE_ERR_CLOSED);
    CHECK(ferrite_store_get(s, "apple", 5, &val, &len) == FERRITE_ERR_CLOSED);
    CHECK(ferrite_store_scan(s, NULL, 0, NULL, 0, 0, &it) == FERRITE_ERR_CLOSED);
    CHECK(ferrite_store_close(s) == FERRITE_ERR_CLOSED);
    CHECK(strstr(ferrite_last_error(), "closed") != NULL);
    ferrite_store_free(s);

    /* Reopen (recovery): the writes are there; the pool checks clean. */
    char *report = NULL;
    size_t findings = 99;
    CHECK(ferrite_pool_check(path, &report, &findings) == FERRITE_OK && findings == 0);
    CHECK(report && strstr(report, "clean") != NULL);
    ferrite_free(report);
    CHECK(ferrite_store_open(path, "create=no", &s) == FERRITE_OK);
    CHECK(get_is(s, "apple", "green") && get_is(s, "kiwi", "green"));
    ferrite_store_free(s); /* free closes an open store */
    s = NULL;
    /* Opening it as another engine is refused. */
    const char *other = strcmp(engine, "cow") == 0 ? "engine=lsm" : "engine=cow";
    CHECK(ferrite_store_open(path, other, &s) == FERRITE_ERR_INVALID && s == NULL);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    CHECK(strlen(ferrite_version()) > 0);
    engine_suite(dir, "inp");
    engine_suite(dir, "cow");
    engine_suite(dir, "lsm");

    /* A file that is not a pool: typed errors from open and from the check. */
    char path[512];
    snprintf(path, sizeof path, "%s/not-a-pool", dir);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < 10000; i++) fputs("hello, world\n", f);
    fclose(f);
    ferrite_store *s = NULL;
    int rc = ferrite_store_open(path, NULL, &s);
    CHECK(rc == FERRITE_ERR_NOT_A_STORE && s == NULL);
    size_t findings = 0;
    char *report = NULL;
    CHECK(ferrite_pool_check(path, &report, &findings) == FERRITE_OK && findings == 1);
    CHECK(report && strstr(report, "pool-header") != NULL);
    ferrite_free(report);
    snprintf(path, sizeof path, "%s/missing/none.pool", dir);
    CHECK(ferrite_pool_check(path, NULL, &findings) == FERRITE_ERR_IO);
    CHECK(ferrite_store_open(path, "create=no", &s) < 0 && s == NULL);
    CHECK(ferrite_store_open(path, "engine=btree", &s) == FERRITE_ERR_INVALID);
    CHECK(strstr(ferrite_last_error(), "btree") != NULL);
    CHECK(ferrite_store_open(NULL, NULL, &s) == FERRITE_ERR_INVALID);
    CHECK(ferrite_store_open(path, NULL, NULL) == FERRITE_ERR_INVALID);
    CHECK(ferrite_pool_check(NULL, NULL, &findings) == FERRITE_ERR_INVALID);

    /* A full pool: typed errors (its size is fixed at create). */
    snprintf(path, sizeof path, "%s/tiny.pool", dir);
    CHECK(ferrite_store_open(path, "engine=lsm,size=1M", &s) == FERRITE_ERR_FULL && s == NULL);
    CHECK(fopen(path, "r") == NULL); /* a failed create leaves no file */
    CHECK(ferrite_store_open(path, "engine=cow,size=1M", &s) == FERRITE_OK);
    char *chunk = calloc(1, 1 << 18);
    int full = 0, stored = 0;
    for (int i = 0; i < 100 && !full; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        rc = ferrite_store_put(s, k, strlen(k), chunk, 1 << 18);
        if (rc == FERRITE_ERR_FULL) full = 1;
        else if (rc == FERRITE_OK) stored++;
        else break;
    }
    free(chunk);
    CHECK(full && stored > 0);
    CHECK(ferrite_store_put(s, "small", 5, "1", 1) == FERRITE_OK || ferrite_store_delete(s, "k0", 2) == FERRITE_OK);
    ferrite_store_free(s);

    /* A panic inside the library comes back as an error code. */
    CHECK(ferrite_selftest_panic() == FERRITE_ERR_PANIC);
    CHECK(strstr(ferrite_last_error(), "deliberate panic") != NULL);

    /* NULLs to the free functions are ignored. */
    ferrite_free(NULL);
    ferrite_store_free(NULL);
    ferrite_iter_free(NULL);
    ferrite_snapshot_free(NULL);

    printf("c api: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
