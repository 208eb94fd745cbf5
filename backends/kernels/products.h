/* The row products both kernels make (gemv.c's products for decode, gpt2_step.c's whole step):
 * one implementation each, included by both. Plain C: with -O3 -march=native -ffast-math the
 * compiler vectorises the loops for whatever the CPU has and widens bf16 to float32 in registers,
 * so the weights are read once at their stored size.
 *
 * Four rows at once are four independent memory streams: a decode product is bound by how fast
 * the weights stream in, and one stream per core leaves most of a core's bandwidth unused
 * (docs/native-runtime.md has the figures). */
#ifndef WHISTLE_STOP_PRODUCTS_H
#define WHISTLE_STOP_PRODUCTS_H

#include <stdint.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* One float32 row's dot with x. */
static inline float dot_f32(const float *restrict w, const float *restrict x, int64_t K) {
    float a = 0.0f;
    for (int64_t k = 0; k < K; k++) a += w[k] * x[k];
    return a;
}

/* Four rows' dots with x at once: rows4_f32 (float32 rows), rows4_bf16 (bf16 widened one by one). */
#define ROWS4(NAME, WTYPE, LOAD)                                                                  \
static inline void NAME(const WTYPE *restrict w0, const WTYPE *restrict w1, const WTYPE *restrict w2,\
                        const WTYPE *restrict w3, const float *restrict x, int64_t K, float out[4]) {\
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;                                             \
    for (int64_t k = 0; k < K; k++) {                                                             \
        const float xk = x[k];                                                                    \
        a0 += LOAD(w0[k]) * xk;                                                                   \
        a1 += LOAD(w1[k]) * xk;                                                                   \
        a2 += LOAD(w2[k]) * xk;                                                                   \
        a3 += LOAD(w3[k]) * xk;                                                                   \
    }                                                                                             \
    out[0] = a0; out[1] = a1; out[2] = a2; out[3] = a3;                                           \
}
#define AS_F32(v) (v)
ROWS4(rows4_f32, float, AS_F32)
ROWS4(rows4_bf16, uint16_t, bf16_to_f32)

/* bf16 rows against x de-interleaved (xd: x's K/2 even elements, then its K/2 odd ones): a bf16 is
 * the top half of a float32, so of a 32-bit pair of weights the even one is `pair << 16` and the
 * odd one `pair & 0xffff0000`, two integer ops per two weights where widening one by one spends a
 * zero-extension and a shift per weight. K is even. */
static inline void bf16_deinterleave(const float *restrict x, float *restrict xd, int64_t K) {
    for (int64_t j = 0; j < K / 2; j++) { xd[j] = x[2 * j]; xd[K / 2 + j] = x[2 * j + 1]; }
}

static inline float pair_even(uint32_t pair) { const uint32_t u = pair << 16; float f; memcpy(&f, &u, sizeof f); return f; }
static inline float pair_odd(uint32_t pair) { const uint32_t u = pair & 0xffff0000u; float f; memcpy(&f, &u, sizeof f); return f; }

/* One bf16 row against x de-interleaved. */
static inline float bf16_pairs_row(const uint16_t *restrict w, const float *restrict xd, int64_t K) {
    const float *restrict xe = xd, *restrict xo = xd + K / 2;
    float a = 0.0f;
    for (int64_t j = 0; j < K / 2; j++) {
        uint32_t p;
        memcpy(&p, w + 2 * j, 4);
        a += pair_even(p) * xe[j] + pair_odd(p) * xo[j];
    }
    return a;
}

/* Four bf16 rows against x de-interleaved. */
static inline void rows4_bf16_pairs(const uint16_t *restrict w0, const uint16_t *restrict w1,
                                    const uint16_t *restrict w2, const uint16_t *restrict w3,
                                    const float *restrict xd, int64_t K, float out[4]) {
    const float *restrict xe = xd, *restrict xo = xd + K / 2;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    for (int64_t j = 0; j < K / 2; j++) {
        uint32_t p0, p1, p2, p3;
        memcpy(&p0, w0 + 2 * j, 4); memcpy(&p1, w1 + 2 * j, 4); memcpy(&p2, w2 + 2 * j, 4); memcpy(&p3, w3 + 2 * j, 4);
        const float e = xe[j], o = xo[j];
        a0 += pair_even(p0) * e + pair_odd(p0) * o;
        a1 += pair_even(p1) * e + pair_odd(p1) * o;
        a2 += pair_even(p2) * e + pair_odd(p2) * o;
        a3 += pair_even(p3) * e + pair_odd(p3) * o;
    }
    out[0] = a0; out[1] = a1; out[2] = a2; out[3] = a3;
}

#endif
