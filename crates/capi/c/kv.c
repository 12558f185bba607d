/* ferrite-kv: a small key-value tool over the Ferrite C API.
 *
 *   ferrite-kv POOL put KEY VALUE      insert or replace (durable on return)
 *   ferrite-kv POOL get KEY            print the value (exit 1 when absent)
 *   ferrite-kv POOL del KEY            delete (exit 1 when absent)
 *   ferrite-kv POOL scan [START [END]] print KEY=VALUE lines, START <= KEY < END
 *   ferrite-kv POOL check              the deep check of the pool (exit 1 on findings)
 *
 * FERRITE_OPTIONS (e.g. "engine=cow,size=16M") is passed to ferrite_store_open.
 * Build: cc kv.c $(pkg-config --cflags --libs ferrite) -o ferrite-kv
 */
#include <ferrite.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, int rc) {
    fprintf(stderr, "ferrite-kv: %s: %s (code %d)\n", what, ferrite_last_error(), rc);
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: ferrite-kv POOL put K V | get K | del K | scan [START [END]] | check\n");
        return 2;
    }
    const char *path = argv[1], *cmd = argv[2];
    if (strcmp(cmd, "check") == 0) {
        char *report = NULL;
        size_t findings = 0;
        int rc = ferrite_pool_check(path, &report, &findings);
        if (rc < 0) return fail("check", rc);
        fputs(report, stdout);
        ferrite_free(report);
        return findings == 0 ? 0 : 1;
    }
    ferrite_store *s = NULL;
    int rc = ferrite_store_open(path, getenv("FERRITE_OPTIONS"), &s);
    if (rc < 0) return fail("open", rc);
    int status = 0;
    if (strcmp(cmd, "put") == 0 && argc == 5) {
        rc = ferrite_store_put(s, argv[3], strlen(argv[3]), argv[4], strlen(argv[4]));
        if (rc < 0) status = fail("put", rc);
    } else if (strcmp(cmd, "get") == 0 && argc == 4) {
        void *val = NULL;
        size_t vlen = 0;
        rc = ferrite_store_get(s, argv[3], strlen(argv[3]), &val, &vlen);
        if (rc == FERRITE_OK) {
            fwrite(val, 1, vlen, stdout);
            putchar('\n');
            ferrite_free(val);
        } else if (rc == FERRITE_NOT_FOUND) {
            status = 1;
        } else {
            status = fail("get", rc);
        }
    } else if (strcmp(cmd, "del") == 0 && argc == 4) {
        rc = ferrite_store_delete(s, argv[3], strlen(argv[3]));
        if (rc == FERRITE_NOT_FOUND) status = 1;
        else if (rc < 0) status = fail("del", rc);
    } else if (strcmp(cmd, "scan") == 0 && argc <= 5) {
        const char *start = argc > 3 ? argv[3] : NULL, *end = argc > 4 ? argv[4] : NULL;
        ferrite_iter *it = NULL;
        rc = ferrite_store_scan(s, start, start ? strlen(start) : 0, end, end ? strlen(end) : 0, 0, &it);
        if (rc < 0) {
            status = fail("scan", rc);
        } else {
            const void *k, *v;
            size_t kl, vl;
            while ((rc = ferrite_iter_next(it, &k, &kl, &v, &vl)) == FERRITE_OK)
                printf("%.*s=%.*s\n", (int)kl, (const char *)k, (int)vl, (const char *)v);
            if (rc < 0) status = fail("scan", rc);
            ferrite_iter_free(it);
        }
    } else {
        fprintf(stderr, "ferrite-kv: bad command or arguments\n");
        status = 2;
    }
    rc = ferrite_store_close(s);
    if (rc < 0 && status == 0) status = fail("close", rc);
    ferrite_store_free(s);
    return status;
}
