/* y[m, n] = sum_k W[n, k] x[m, k] + b[n], W bfloat16 [N, K] (raw uint16), x, y, b float32.
 *
 * Plain C on purpose: with -O3 -march=native -ffast-math the compiler vectorises the inner
 * loop for whatever the CPU has (AVX2 here, AVX-512 elsewhere), unrolls it with several
 * accumulators and widens bf16 to float32 by a 16-bit shift in registers, so the weights are
 * read once at their stored size. Rows are split across OpenMP threads; in a PyTorch process
 * this is torch's own libgomp (same soname), so torch.set_num_threads applies. */
#include <stdint.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

void bf16_gemv(const uint16_t *restrict W, const float *restrict x, const float *restrict b,
               float *restrict y, int64_t M, int64_t N, int64_t K) {
    for (int64_t m = 0; m < M; m++) {
        const float *restrict xm = x + m * K;
        float *restrict ym = y + m * N;
        #pragma omp parallel for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            const uint16_t *restrict w = W + n * K;
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++)
                acc += bf16_to_f32(w[k]) * xm[k];
            ym[n] = b ? acc + b[n] : acc;
        }
    }
}
