/* An OpenMP team bound one thread to a CPU: thread i (the caller being thread 0) to cpus[i]. The rule
 * for which teams to bind is backends/worker/threads.py's cpus_to_bind. The team is libgomp's pool of
 * this process, whoever runs it: gpt2_step.c's step, or PyTorch's intra-op threads when gemv.c's
 * library shares torch's libgomp (same soname). Include after defining _GNU_SOURCE. */
#ifndef WHISTLE_STOP_AFFINITY_H
#define WHISTLE_STOP_AFFINITY_H

#include <omp.h>
#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

/* Returns n when every thread of the team of n was bound, else 0 (and 0 off Linux). */
static int bind_team(const int *cpus, int n) {
#ifdef __linux__
    int bound = 0;
    #pragma omp parallel num_threads(n) reduction(+ : bound)
    {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[omp_get_thread_num()], &one);
        bound += omp_get_num_threads() == n && pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
    }
    return bound == n ? n : 0;
#else
    (void)cpus, (void)n;
    return 0;
#endif
}

#endif
