/* P1 Fig. 4.1, the counterexample to failure-atomic sections, as a program
 * for ferrite-wpp's tests. Thread 1 holds lock0 for its whole life; thread
 * 2 prints x's second value, reads a number, and computes the third value
 * from a large array Q that exists only in (volatile) memory, filled from a
 * random seed. A run failed anywhere — at "line 81" too, between the scanf
 * and f3 — and resumed must print "x=" once and end with the x that the
 * seed and the input determine: `fig41 --verify SEED IN` recomputes it
 * without threads. Usage: fig41 [--verify SEED IN] < input */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { QLEN = 1 << 20 }; /* 4 MiB of ints */

static pthread_mutex_t lock0 = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock1 = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock2 = PTHREAD_MUTEX_INITIALIZER;
static int cond1, cond2;
static int *Q;
static int x; /* "nvm<int> x" */
static int s2_shared;

static int spin(int v, int rounds) {
    unsigned u = (unsigned)v;
    for (int i = 0; i < rounds; i++)
        u = u * 1103515245u + 12345u + (unsigned)i;
    return (int)(u & 0x3fffffff);
}
static int f1(int v) { return spin(v + 1, 8000000); }
static int f2(int v) { return spin(v + 2, 8000000); }
static int f3(int s2, int in, const int *q) {
    unsigned acc = (unsigned)s2;
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < QLEN; i++)
            acc = acc * 31u + (unsigned)q[((unsigned)i * 7919u + (unsigned)pass) % QLEN] + (unsigned)in;
    return (int)(acc & 0x3fffffff);
}
static int f4(int v) { return spin(v + 4, 8000000); }

static void fill_q(unsigned seed) {
    Q = malloc(sizeof(int) * QLEN);
    srand(seed);
    for (int i = 0; i < QLEN; i++)
        Q[i] = rand();
}

static void *thread1(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock0);
    x = f1(x);
    pthread_mutex_lock(&lock1);
    cond1 = 1;
    pthread_mutex_unlock(&lock1);
    int w = 1;
    while (w) {
        pthread_mutex_lock(&lock2);
        if (cond2)
            w = 0;
        pthread_mutex_unlock(&lock2);
    }
    x = f4(x);
    pthread_mutex_unlock(&lock0);
    return NULL;
}

static void *thread2(void *arg) {
    (void)arg;
    int w = 1, s2 = 0;
    while (w) {
        pthread_mutex_lock(&lock1);
        if (cond1) {
            w = 0;
            x = s2 = f2(x);
        }
        pthread_mutex_unlock(&lock1);
    }
    int in;
    printf("x=%d\n", s2);
    fflush(stdout);
    if (scanf("%d", &in) != 1)
        in = 0;
    /* line 81 */
    int s3 = f3(s2, in, Q);
    pthread_mutex_lock(&lock2);
    x = s3;
    cond2 = 1;
    pthread_mutex_unlock(&lock2);
    s2_shared = s2;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--verify") == 0) {
        unsigned seed = (unsigned)strtoul(argv[2], NULL, 10);
        int in = atoi(argv[3]);
        fill_q(seed);
        printf("x=%d\n", f4(f3(f2(f1(0)), in, Q)));
        return 0;
    }
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    fill_q(seed);
    pthread_t a, b;
    pthread_create(&a, NULL, thread1, NULL);
    pthread_create(&b, NULL, thread2, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("seed=%u final x=%d\n", seed, x);
    return 0;
}
