/* For ferrite-wpp's tests: glibc records a mutex's owner by thread ID. Four
 * threads hold a recursive mutex (twice over) or an error-checking one for
 * most of their time, so failures land while one is held; a resume that
 * gave the holder another TID makes its unlock fail (EPERM), which this
 * program reports and exits 3 on (without the check, the next lock would
 * wait forever). Usage: owners ROUNDS */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t rec, chk;
static unsigned long total;
static long rounds;

static void must(const char *what, int e) {
    if (e) {
        fprintf(stderr, "owners: %s: %s\n", what, strerror(e));
        exit(3);
    }
}

static void *work(void *arg) {
    unsigned long h = (unsigned long)arg * 0x9e3779b97f4a7c15UL;
    for (long i = 0; i < rounds; i++) {
        int r = i & 1;
        pthread_mutex_t *m = r ? &rec : &chk;
        must("lock", pthread_mutex_lock(m));
        if (r)
            must("lock again", pthread_mutex_lock(m));
        for (int k = 0; k < 3000; k++)
            h = (h ^ (unsigned long)k) * 1099511628211UL;
        __atomic_fetch_add(&total, h & 0xff, __ATOMIC_RELAXED);
        if (r)
            must("unlock (inner)", pthread_mutex_unlock(m));
        must("unlock", pthread_mutex_unlock(m));
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: owners ROUNDS\n");
        return 2;
    }
    rounds = atol(argv[1]);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&rec, &a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_init(&chk, &a);
    pthread_t t[3];
    for (long i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, work, (void *)(i + 1));
    work((void *)7);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    printf("owners %ld: %lu\n", rounds, total);
    return 0;
}
