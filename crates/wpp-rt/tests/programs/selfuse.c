/* For ferrite-wpp's tests: the main thread and three workers use glibc's
 * thread descriptor all the time (pthread_self, thread-local counters,
 * mutexes, thread exit and join read and write it), so a resume that
 * damages a descriptor crashes or prints a wrong line. The first line is
 * the process ID of the first run (a resume never prints it again).
 * Usage: selfuse ROUNDS */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static __thread unsigned long mine;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static unsigned long total;
static long rounds;

static void *worker(void *arg) {
    unsigned long h = (unsigned long)arg * 0x9e3779b97f4a7c15UL;
    for (long i = 0; i < rounds; i++) {
        for (int k = 0; k < 4000; k++)
            h = (h ^ (unsigned long)k) * 1099511628211UL;
        mine += h & 0xffff;
        if (!pthread_equal(pthread_self(), pthread_self()))
            abort();
        pthread_mutex_lock(&m);
        total += h & 0xff;
        pthread_mutex_unlock(&m);
    }
    return (void *)mine;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: selfuse ROUNDS\n");
        return 2;
    }
    rounds = atol(argv[1]);
    printf("pid %d\n", (int)getpid());
    fflush(stdout);
    pthread_t t[3];
    for (long i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    unsigned long sum = (unsigned long)worker((void *)7);
    for (int i = 0; i < 3; i++) {
        void *r;
        pthread_join(t[i], &r);
        sum += (unsigned long)r;
    }
    printf("selfuse %ld: %lu %lu\n", rounds, sum, total);
    return 0;
}
