/* Matrix-vector products for one-token decode: y[m, n] = sum_k W[n, k] x[m, k] + b[n], with
 * x, y, b float32 and W either float32 (f32_gemv) or bfloat16 stored as raw uint16 (bf16_gemv).
 *
 * The row products are products.h's, which gpt2_step.c's decode makes too: each thread takes a
 * contiguous block of rows and walks four quarters of it at once (four independent memory streams
 * per core), and bf16 rows are widened in pairs against x de-interleaved once per call.
 * The threads are OpenMP's; in a PyTorch process that is torch's own libgomp (same soname), so
 * torch.set_num_threads applies. */
#define _GNU_SOURCE /* pthread_setaffinity_np (affinity.h) */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "affinity.h"
#include "products.h"

static inline float dot_bf16(const uint16_t *restrict w, const float *restrict x, int64_t K) {
    float a = 0.0f;
    for (int64_t k = 0; k < K; k++) a += bf16_to_f32(w[k]) * x[k];
    return a;
}

#define GEMV(NAME, WTYPE, ROWS4, DOT)                                                               \
void NAME(const WTYPE *restrict W, const float *restrict x, const float *restrict b,                \
          float *restrict y, int64_t M, int64_t N, int64_t K) {                                      \
    for (int64_t m = 0; m < M; m++) {                                                               \
        const float *restrict xm = x + m * K;                                                       \
        float *restrict ym = y + m * N;                                                             \
        _Pragma("omp parallel")                                                                     \
        {                                                                                           \
            const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();               \
            const int64_t lo = N * t / threads, hi = N * (t + 1) / threads, q = (hi - lo) / 4;     \
            float out[4];                                                                           \
            for (int64_t i = lo; i < lo + q; i++) { /* rows i, i+q, i+2q, i+3q together */         \
                const WTYPE *w0 = W + i * K, *w1 = w0 + q * K, *w2 = w1 + q * K, *w3 = w2 + q * K; \
                ROWS4(w0, w1, w2, w3, xm, K, out);                                                  \
                ym[i] = out[0]; ym[i + q] = out[1]; ym[i + 2 * q] = out[2]; ym[i + 3 * q] = out[3]; \
            }                                                                                       \
            for (int64_t n = lo + 4 * q; n < hi; n++) /* the rows a quarter split leaves */        \
                ym[n] = DOT(W + n * K, xm, K);                                                      \
            if (b)                                                                                  \
                for (int64_t n = lo; n < hi; n++)                                                   \
                    ym[n] += b[n];                                                                  \
        }                                                                                           \
    }                                                                                               \
}

GEMV(f32_gemv, float, rows4_f32, dot_f32)
GEMV(bf16_gemv_by_one, uint16_t, rows4_bf16, dot_bf16)

void bf16_gemv(const uint16_t *restrict W, const float *restrict x, const float *restrict b,
               float *restrict y, int64_t M, int64_t N, int64_t K) {
    float *xd = K % 2 == 0 ? malloc(sizeof(float) * K) : NULL;
    if (!xd) { bf16_gemv_by_one(W, x, b, y, M, N, K); return; } /* odd K (or no memory): one by one */
    for (int64_t m = 0; m < M; m++) {
        float *restrict ym = y + m * N;
        bf16_deinterleave(x + m * K, xd, K);
        #pragma omp parallel
        {
            const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
            const int64_t lo = N * t / threads, hi = N * (t + 1) / threads, q = (hi - lo) / 4;
            float out[4];
            for (int64_t i = lo; i < lo + q; i++) { /* rows i, i+q, i+2q, i+3q together */
                const uint16_t *w0 = W + i * K, *w1 = w0 + q * K, *w2 = w1 + q * K, *w3 = w2 + q * K;
                rows4_bf16_pairs(w0, w1, w2, w3, xd, K, out);
                ym[i] = out[0]; ym[i + q] = out[1]; ym[i + 2 * q] = out[2]; ym[i + 3 * q] = out[3];
            }
            for (int64_t n = lo + 4 * q; n < hi; n++) ym[n] = bf16_pairs_row(W + n * K, xd, K); /* the rows left */
            if (b)
                for (int64_t n = lo; n < hi; n++) ym[n] += b[n];
        }
    }
    free(xd);
}

/* OpenMP's thread count for this process's kernels (a process without torch has no other handle). */
void gemv_set_threads(int threads) { if (threads > 0) omp_set_num_threads(threads); }

/* This process's OpenMP team (torch's intra-op threads in a PyTorch process) bound one thread to a CPU. */
int gemv_bind_threads(const int *cpus, int n) { return bind_team(cpus, n); }
