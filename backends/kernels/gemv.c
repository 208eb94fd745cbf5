/* Matrix-vector products for one-token decode: y[m, n] = sum_k W[n, k] x[m, k] + b[n], with
 * x, y, b float32 and W either float32 (f32_gemv) or bfloat16 stored as raw uint16 (bf16_gemv).
 *
 * Plain C on purpose: with -O3 -march=native -ffast-math the compiler vectorises the inner
 * loop for whatever the CPU has (AVX2 here, AVX-512 elsewhere) and widens bf16 to float32 in
 * registers, so the weights are read once at their stored size. bf16 is widened in pairs: of a
 * 32-bit pair of weights the even one is `pair << 16` and the odd one `pair & 0xffff0000`, against
 * x de-interleaved once per call (its even elements, then its odd ones): two integer ops per two
 * weights where widening one by one spends a zero-extension and a shift per weight (GPT-2's 49 bf16
 * decode products 0.98x on the 2-core EPYC). gpt2_step.c widens its bf16 rows the same way.
 *
 * Each thread takes a contiguous block of rows and walks four quarters of it at once: four
 * independent memory streams per core. On a 2-core EPYC one stream per core read ~8 GB/s;
 * four took GPT-2's 49 bf16 decode products from 14.0 to 10.6 ms (eight gained nothing more),
 * and the float32 ones to 17-19 ms where OpenBLAS's sgemv took 21-23 ms.
 * The threads are OpenMP's; in a PyTorch process that is torch's own libgomp (same soname), so
 * torch.set_num_threads applies. */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline float from_f32(float v) { return v; }

static inline float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#define GEMV(NAME, WTYPE, LOAD)                                                                     \
void NAME(const WTYPE *restrict W, const float *restrict x, const float *restrict b,                \
          float *restrict y, int64_t M, int64_t N, int64_t K) {                                      \
    for (int64_t m = 0; m < M; m++) {                                                               \
        const float *restrict xm = x + m * K;                                                       \
        float *restrict ym = y + m * N;                                                             \
        _Pragma("omp parallel")                                                                     \
        {                                                                                           \
            const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();               \
            const int64_t lo = N * t / threads, hi = N * (t + 1) / threads, q = (hi - lo) / 4;     \
            for (int64_t i = lo; i < lo + q; i++) { /* rows i, i+q, i+2q, i+3q together */         \
                const WTYPE *w0 = W + i * K, *w1 = w0 + q * K, *w2 = w1 + q * K, *w3 = w2 + q * K; \
                float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;                                   \
                for (int64_t k = 0; k < K; k++) {                                                   \
                    const float xk = xm[k];                                                         \
                    a0 += LOAD(w0[k]) * xk;                                                         \
                    a1 += LOAD(w1[k]) * xk;                                                         \
                    a2 += LOAD(w2[k]) * xk;                                                         \
                    a3 += LOAD(w3[k]) * xk;                                                         \
                }                                                                                   \
                ym[i] = a0; ym[i + q] = a1; ym[i + 2 * q] = a2; ym[i + 3 * q] = a3;                \
            }                                                                                       \
            for (int64_t n = lo + 4 * q; n < hi; n++) { /* the rows a quarter split leaves */      \
                const WTYPE *w = W + n * K;                                                         \
                float acc = 0.0f;                                                                   \
                for (int64_t k = 0; k < K; k++)                                                     \
                    acc += LOAD(w[k]) * xm[k];                                                      \
                ym[n] = acc;                                                                        \
            }                                                                                       \
            if (b)                                                                                  \
                for (int64_t n = lo; n < hi; n++)                                                   \
                    ym[n] += b[n];                                                                  \
        }                                                                                           \
    }                                                                                               \
}

GEMV(f32_gemv, float, from_f32)
GEMV(bf16_gemv_by_one, uint16_t, from_bf16)

static inline float pair_even(uint32_t pair) { const uint32_t u = pair << 16; float f; memcpy(&f, &u, sizeof f); return f; }
static inline float pair_odd(uint32_t pair) { const uint32_t u = pair & 0xffff0000u; float f; memcpy(&f, &u, sizeof f); return f; }

/* One row of bf16 weights against x de-interleaved (xe: x's even elements, xo: its odd ones). */
static inline float bf16_row(const uint16_t *restrict w, const float *restrict xe, const float *restrict xo, int64_t half) {
    float a = 0.0f;
    for (int64_t j = 0; j < half; j++) {
        uint32_t p;
        memcpy(&p, w + 2 * j, 4);
        a += pair_even(p) * xe[j] + pair_odd(p) * xo[j];
    }
    return a;
}

void bf16_gemv(const uint16_t *restrict W, const float *restrict x, const float *restrict b,
               float *restrict y, int64_t M, int64_t N, int64_t K) {
    float *xd = K % 2 == 0 ? malloc(sizeof(float) * K) : NULL;
    if (!xd) { bf16_gemv_by_one(W, x, b, y, M, N, K); return; } /* odd K (or no memory): one by one */
    const int64_t half = K / 2;
    for (int64_t m = 0; m < M; m++) {
        const float *restrict xm = x + m * K;
        float *restrict ym = y + m * N;
        for (int64_t j = 0; j < half; j++) { xd[j] = xm[2 * j]; xd[half + j] = xm[2 * j + 1]; }
        const float *xe = xd, *xo = xd + half;
        #pragma omp parallel
        {
            const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
            const int64_t lo = N * t / threads, hi = N * (t + 1) / threads, q = (hi - lo) / 4;
            for (int64_t i = lo; i < lo + q; i++) { /* rows i, i+q, i+2q, i+3q together */
                const uint16_t *w0 = W + i * K, *w1 = w0 + q * K, *w2 = w1 + q * K, *w3 = w2 + q * K;
                float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
                for (int64_t j = 0; j < half; j++) {
                    uint32_t p0, p1, p2, p3;
                    memcpy(&p0, w0 + 2 * j, 4); memcpy(&p1, w1 + 2 * j, 4);
                    memcpy(&p2, w2 + 2 * j, 4); memcpy(&p3, w3 + 2 * j, 4);
                    const float e = xe[j], o = xo[j];
                    a0 += pair_even(p0) * e + pair_odd(p0) * o;
                    a1 += pair_even(p1) * e + pair_odd(p1) * o;
                    a2 += pair_even(p2) * e + pair_odd(p2) * o;
                    a3 += pair_even(p3) * e + pair_odd(p3) * o;
                }
                ym[i] = a0; ym[i + q] = a1; ym[i + 2 * q] = a2; ym[i + 3 * q] = a3;
            }
            for (int64_t n = lo + 4 * q; n < hi; n++) ym[n] = bf16_row(W + n * K, xe, xo, half); /* the rows a quarter split leaves */
            if (b)
                for (int64_t n = lo; n < hi; n++) ym[n] += b[n];
        }
    }
    free(xd);
}

/* OpenMP's thread count for this process's kernels (a process without torch has no other handle). */
void gemv_set_threads(int threads) { if (threads > 0) omp_set_num_threads(threads); }
