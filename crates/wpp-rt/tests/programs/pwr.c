/* A program with a failure handler (SIGPWR) for ferrite-wpp's tests: the
 * handler writes one line per resume it sees (a write(2), so a failure
 * right after it cannot make it count twice or not at all); the work is a
 * deterministic loop whose result ends the output. Usage: pwr STEPS */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void on_power(int sig) {
    (void)sig;
    static const char line[] = "failure handler ran\n";
    if (write(1, line, sizeof line - 1) < 0)
        _exit(3);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_power;
    sigaction(SIGPWR, &sa, NULL);
    unsigned long h = 14695981039346656037UL;
    for (long i = 0; i < n; i++)
        for (long k = 0; k < 20000; k++)
            h = (h ^ (unsigned long)(i + k)) * 1099511628211UL;
    printf("pwr %ld steps: %lu\n", n, h);
    return 0;
}
