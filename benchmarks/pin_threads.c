/* The OpenMP team's threads pinned one CPU each, round robin over the process's CPUs, and unpinned again
 * (benchmarks/spare_thread.py's "pinned" setting: three threads on two CPUs then sit two and one, whichever CPU
 * another process runs on). Each thread sets its own affinity from inside one parallel region of n threads. */
#define _GNU_SOURCE
#include <omp.h>
#include <sched.h>

void pin_team(int n, const int *cpus, int ncpus) {
#pragma omp parallel num_threads(n)
    {
        cpu_set_t s;
        CPU_ZERO(&s);
        CPU_SET(cpus[omp_get_thread_num() % ncpus], &s);
        sched_setaffinity(0, sizeof(s), &s);
    }
}

void unpin_team(int n, const int *cpus, int ncpus) {
#pragma omp parallel num_threads(n)
    {
        cpu_set_t s;
        CPU_ZERO(&s);
        for (int i = 0; i < ncpus; i++) CPU_SET(cpus[i], &s);
        sched_setaffinity(0, sizeof(s), &s);
    }
}
