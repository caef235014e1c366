/*
 * What one reading of the wall clock costs on this machine: the reading
 * snowflake_nextval() makes once per call (clock_gettime(CLOCK_REALTIME),
 * through the vDSO as glibc does it), timed over many calls.
 *
 *   clock N     prints the median over 9 runs of N readings, in ns per reading
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double) t.tv_sec * 1e9 + (double) t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 20000000L;
    double runs[9];
    volatile long sink = 0;

    for (int r = 0; r < 9; r++) {
        double start = now_ns();
        for (long i = 0; i < n; i++) {
            struct timespec t;
            clock_gettime(CLOCK_REALTIME, &t);
            sink += t.tv_nsec;
        }
        runs[r] = (now_ns() - start) / (double) n;
    }
    qsort(runs, 9, sizeof runs[0], cmp);
    printf("%.2f\n", runs[4]);
    return sink == 42;
}
