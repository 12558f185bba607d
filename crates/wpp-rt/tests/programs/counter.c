/* Single-threaded counter for ferrite-wpp's tests: heap and stack state,
 * progress written to a file through stdio (its buffer is process memory),
 * the result on stdout. The output must be the same however often the run
 * is failed and resumed. Usage: counter OUTFILE STEPS */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: counter OUTFILE STEPS\n");
        return 2;
    }
    long n = atol(argv[2]);
    FILE *f = fopen(argv[1], "w");
    if (!f) {
        perror("fopen");
        return 1;
    }
    enum { SLOTS = 1 << 16 };
    unsigned long *slots = calloc(SLOTS, sizeof *slots);
    unsigned long h = 1469598103934665603UL;
    for (long i = 0; i < n; i++) {
        for (long k = 0; k < 20000; k++)
            h = (h ^ (unsigned long)(i * k)) * 1099511628211UL;
        slots[h % SLOTS] += h;
        fprintf(f, "%ld %lu\n", i, h);
        if (i % 64 == 0)
            fflush(f);
    }
    unsigned long sum = 0;
    for (long i = 0; i < SLOTS; i++)
        sum += slots[i] * (unsigned long)(i + 1);
    fclose(f);
    printf("counter %ld steps: %lu %lu\n", n, h, sum);
    return 0;
}
