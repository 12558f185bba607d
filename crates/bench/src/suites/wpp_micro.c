/* Interposition costs of whole-process persistence (P1 Fig. 4.5): the
 * same operations natively and under `ferrite run`. Prints one line per
 * operation: "<name> <ns per op>". Also `hold MIB`: allocate and touch MIB
 * MiB, print "ready", then wait (the restart-time benchmark). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void *nothing(void *a) { return a; }

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "hold") == 0) {
        size_t len = (size_t)atol(argv[2]) << 20;
        char *p = malloc(len);
        for (size_t i = 0; i < len; i += 4096)
            p[i] = (char)i;
        printf("ready\n");
        fflush(stdout);
        for (;;)
            pause();
    }
    int n = argc > 1 ? atoi(argv[1]) : 200;
    /* anon_slab: one 16 MiB anonymous mapping, every page touched, unmapped */
    double t = now_ns();
    for (int i = 0; i < n / 10 + 1; i++) {
        char *p = mmap(NULL, 16 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        for (size_t o = 0; o < (16 << 20); o += 4096)
            p[o] = 1;
        munmap(p, 16 << 20);
    }
    printf("anon_slab %.0f\n", (now_ns() - t) / (n / 10 + 1));
    /* anon_chunks: 128 mappings of 128 KiB, touched, unmapped */
    t = now_ns();
    for (int i = 0; i < n; i++) {
        char *ps[128];
        for (int c = 0; c < 128; c++) {
            ps[c] = mmap(NULL, 128 << 10, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            ps[c][0] = 1;
        }
        for (int c = 0; c < 128; c++)
            munmap(ps[c], 128 << 10);
    }
    printf("anon_chunks %.0f\n", (now_ns() - t) / n);
    /* mmap_munmap: one 4 KiB anonymous mapping and its unmap */
    t = now_ns();
    for (int i = 0; i < n * 100; i++) {
        void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        munmap(p, 4096);
    }
    printf("mmap_munmap %.0f\n", (now_ns() - t) / (n * 100));
    /* pthread_create: create and join a thread that does nothing */
    t = now_ns();
    for (int i = 0; i < n * 10; i++) {
        pthread_t th;
        pthread_create(&th, NULL, nothing, NULL);
        pthread_join(th, NULL);
    }
    printf("pthread_create %.0f\n", (now_ns() - t) / (n * 10));
    /* malloc_free: 64 B allocations, no interposed call on the path */
    t = now_ns();
    void *keep[1024];
    for (int i = 0; i < n * 1000; i++) {
        keep[i % 1024] = malloc(64);
        if (i % 1024 == 1023)
            for (int k = 0; k < 1024; k++)
                free(keep[k]);
    }
    printf("malloc_free %.0f\n", (now_ns() - t) / (n * 1000));
    return 0;
}
