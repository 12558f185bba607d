/* Multi-threaded hash-table builder for ferrite-wpp's tests: THREADS
 * threads insert disjoint key ranges into one chained table guarded by
 * striped mutexes, meet at a barrier, delete every third key, and the main
 * thread joins them and prints an order-independent digest of the table.
 * Usage: hashbuild THREADS KEYS_PER_THREAD */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* A bucket's stripe is a function of the bucket, so one lock guards each
 * chain. */
enum { BUCKETS = 1 << 14, STRIPES = 64 };

struct node {
    unsigned long key, val;
    struct node *next;
};

static struct node *table[BUCKETS];
static pthread_mutex_t locks[STRIPES];
static pthread_barrier_t barrier;
static long per_thread;

static unsigned long mix(unsigned long k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdUL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53UL;
    return k ^ (k >> 33);
}

static void insert(unsigned long key) {
    unsigned long h = mix(key);
    struct node *n = malloc(sizeof *n);
    n->key = key;
    n->val = h;
    for (int i = 0; i < 200; i++) /* work between locks */
        n->val = mix(n->val + (unsigned long)i);
    pthread_mutex_t *l = &locks[(h % BUCKETS) % STRIPES];
    pthread_mutex_lock(l);
    n->next = table[h % BUCKETS];
    table[h % BUCKETS] = n;
    pthread_mutex_unlock(l);
}

static void delete(unsigned long key) {
    unsigned long h = mix(key);
    pthread_mutex_t *l = &locks[(h % BUCKETS) % STRIPES];
    pthread_mutex_lock(l);
    for (struct node **p = &table[h % BUCKETS]; *p; p = &(*p)->next) {
        if ((*p)->key == key) {
            struct node *d = *p;
            *p = d->next;
            free(d);
            break;
        }
    }
    pthread_mutex_unlock(l);
}

static void *worker(void *arg) {
    long t = (long)arg;
    unsigned long lo = (unsigned long)(t * per_thread);
    for (unsigned long k = lo; k < lo + (unsigned long)per_thread; k++)
        insert(k);
    pthread_barrier_wait(&barrier);
    for (unsigned long k = lo; k < lo + (unsigned long)per_thread; k += 3)
        delete(k);
    return (void *)(lo + 1);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: hashbuild THREADS KEYS_PER_THREAD\n");
        return 2;
    }
    long threads = atol(argv[1]);
    per_thread = atol(argv[2]);
    for (int i = 0; i < STRIPES; i++)
        pthread_mutex_init(&locks[i], NULL);
    pthread_barrier_init(&barrier, NULL, (unsigned)threads);
    pthread_t *ts = calloc((size_t)threads, sizeof *ts);
    for (long t = 0; t < threads; t++)
        if (pthread_create(&ts[t], NULL, worker, (void *)t) != 0) {
            perror("pthread_create");
            return 1;
        }
    unsigned long joined = 0;
    for (long t = 0; t < threads; t++) {
        void *r;
        pthread_join(ts[t], &r);
        joined += (unsigned long)r;
    }
    unsigned long count = 0, digest = 0;
    for (int b = 0; b < BUCKETS; b++)
        for (struct node *n = table[b]; n; n = n->next) {
            count++;
            digest += mix(n->key) ^ n->val;
        }
    printf("hashbuild %ld threads: %lu keys, digest %lu, joined %lu\n", threads, count, digest, joined);
    return 0;
}
