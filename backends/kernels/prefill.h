/* Prefill's matrix products: T > 1 tokens against one weight matrix as a GEMM, not T GEMVs.
 *
 * Each thread takes a block of the matrix's rows, 32 at a time (a panel, as every type is stored:
 * gpt2_step.c's panel_of): one 64-byte vector per step holds the same 4 bytes of 16 rows, so a
 * token's 4 bytes, broadcast, multiply 16 rows at once with no sums across lanes. The panel stays in
 * the cache while every token of the prompt passes over it (a tile of up to 12 tokens at a time),
 * so each weight is read from memory once per prefill and used T times, and the next panel's lines
 * are asked for while this one computes. The instructions are the best this CPU has, chosen when
 * the kernel is built for it (-march=native; the build is cached per CPU flags, so it only runs
 * where it was built):
 *
 *   float32 weights   AVX-512F `vfmadd231ps`, 12 tokens x 32 rows per tile
 *   bf16 weights      AVX-512 BF16 `vdpbf16ps` (the tokens rounded to bf16 once per product, float32
 *                     sums); without it the pairs are widened to float32 in registers (AVX-512F)
 *   int8 / 4-bit      AVX-512 VNNI `vpdpbusd` (int8 stored as value + 128, 4-bit as value + 8 in
 *                     nibbles, unsigned), int32 sums per block of 32 started at -shift x the
 *                     block's sum of x, so each block's sum is exact, then one scaled float add per
 *                     block; the activations are decode's (int8 per block of 32) and the tiles
 *                     decode's own products (gpt2_step.c's panel_products). Without VNNI the AVX2
 *                     or plain-C panel tiles of int_panels.h. AVX-VNNI (256-bit) CPUs take those
 *                     too: no such CPU has tested a 256-bit VNNI kernel.
 *
 * AMX (Sapphire Rapids' tiles) comes first where the build links the AMX unit (amx_prefill.c, tiles.h;
 * gpt2_step.c's use_amx): bf16 products from a crossover number of tokens on; the integer tiles are
 * built and tested but lose to VNNI here (docs/native-runtime.md, "AMX").
 *
 * Without AVX-512 (AVX2 CPUs, the Zen 3 EPYC) the float types take AVX2 tiles of 3 tokens x 32 rows
 * (pf_avx2_tile): 0.63x (float32) and 0.64x (bf16) the prefill of the plain-C tiles the compiler
 * vectorised, whose 4 tokens' sums spilled from 16 registers (an AVX2 build on the Zen 5 EPYC).
 * Included by gpt2_step.c only (QBLOCK); each build
 * (AVX-512 with and without BF16 and VNNI, AVX2, plain C) is tested against its reference in
 * spawned children (tests/test_native_prefill.py). */
#ifndef WHISTLE_STOP_PREFILL_H
#define WHISTLE_STOP_PREFILL_H

#include <stdint.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define PF_PANELS 1 /* 32-row panels, 12-token tiles */
#endif
#if defined(PF_PANELS) && defined(__AVX512BF16__)
#define PF_BF16 1
#endif
#if defined(PF_PANELS) && defined(__AVX512VNNI__)
#define PF_VNNI 1
#endif

#define PF_STR_(x) #x
#define PF_STR(x) PF_STR_(x)

/* ---- AVX-512: panels ---------------------------------------------------------------------------- */
#ifdef PF_PANELS
#define PF_PANEL 32   /* rows per panel: two vectors of 16 lanes */
#ifndef PF_AHEAD
#define PF_AHEAD 1 /* panels ahead whose rows are prefetched */
#endif
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T0 /* into L1: the tiles read the next panel from there (0.92-0.95x prefill, Zen 5) */
#endif
#define PF_FTOKENS 12 /* tokens per float tile: 24 accumulators */
#ifndef PF_QTOKENS
#define PF_QTOKENS 6 /* tokens per integer tile: 12 int32 + 12 float accumulators */
#endif

enum { PK_F32 = 0, PK_BF16_DP = 1, PK_BF16_WIDEN = 2, PK_I8 = 3, PK_Q4 = 4 };

/* 16 rows of 16 dwords -> 16 vectors, vector j holding dword j of every row (lane = row). */
static inline void pf_transpose16(const __m512i r[16], __m512i out[16]) {
    __m512i a[16], b[16];
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        b[4 * i + 0] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    for (int j = 0; j < 4; j++) { /* b[4i + j], 128-bit lane L: dword 4L + j of rows 4i..4i+3 */
        const __m512i c0 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0x88), c1 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0xDD);
        const __m512i d0 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0x88), d1 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0xDD);
        out[j] = _mm512_shuffle_i32x4(c0, d0, 0x88);
        out[8 + j] = _mm512_shuffle_i32x4(c0, d0, 0xDD);
        out[4 + j] = _mm512_shuffle_i32x4(c1, d1, 0x88);
        out[12 + j] = _mm512_shuffle_i32x4(c1, d1, 0xDD);
    }
}

/* 32 rows of `bytes` bytes -> the panel: step s's two vectors hold bytes 4s..4s+3 of rows 0-15,
 * then of rows 16-31 (a last step of fewer bytes is padded with zeros). */
static void pf_pack_panel(const uint8_t *const rows[PF_PANEL], int64_t bytes, uint8_t *restrict panel) {
    for (int p = 0; p < 2; p++)
        for (int64_t k = 0; k < bytes; k += 64) {
            const int64_t left = bytes - k;
            const int steps = left >= 64 ? 16 : (int)(left + 3) / 4;
            const __mmask64 mask = left >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
            __m512i r[16], out[16];
            for (int i = 0; i < 16; i++) r[i] = _mm512_maskz_loadu_epi8(mask, rows[16 * p + i] + k);
            pf_transpose16(r, out);
            for (int j = 0; j < steps; j++) _mm512_storeu_si512((void *)(panel + ((k / 4 + j) * 2 + p) * 64), out[j]);
        }
}

/* Float tile: R tokens x the panel's 32 rows, `steps` steps of 4 bytes. PK_F32: x [R][steps]
 * floats; PK_BF16_DP: x in bf16 pairs, vdpbf16ps; PK_BF16_WIDEN: each bf16 pair widened to two
 * float32 vectors (even = pair << 16, odd = pair & 0xffff0000), x float32 [R][2 * steps]. */
static inline __attribute__((always_inline)) void pf_tile_float(int kind, int R, const uint8_t *restrict panel,
                                                                const void *const x[PF_FTOKENS], int64_t steps,
                                                                const char *ahead, int64_t lines,
                                                                __m512 out[PF_FTOKENS][2]) {
    __m512 acc[PF_FTOKENS][2], odd[PF_FTOKENS][2]; /* odd: the widened pairs' odd halves' own sums */
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = odd[r][0] = odd[r][1] = _mm512_setzero_ps();
    const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
    for (int64_t s = 0; s < steps; s++) {
        if (s < lines) _mm_prefetch(ahead + s * 64, PF_HINT); /* the next panel's rows, a line a step */
        const __m512i w0 = _mm512_loadu_si512((const void *)(panel + s * 128));
        const __m512i w1 = _mm512_loadu_si512((const void *)(panel + s * 128 + 64));
        if (kind == PK_F32) {
            for (int r = 0; r < R; r++) {
                const __m512 xb = _mm512_set1_ps(((const float *)x[r])[s]);
                acc[r][0] = _mm512_fmadd_ps(_mm512_castsi512_ps(w0), xb, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(_mm512_castsi512_ps(w1), xb, acc[r][1]);
            }
        } else if (kind == PK_BF16_WIDEN) {
            const __m512 e0 = _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)), o0 = _mm512_castsi512_ps(_mm512_and_si512(w0, high));
            const __m512 e1 = _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)), o1 = _mm512_castsi512_ps(_mm512_and_si512(w1, high));
            for (int r = 0; r < R; r++) {
                const __m512 xe = _mm512_set1_ps(((const float *)x[r])[2 * s]), xo = _mm512_set1_ps(((const float *)x[r])[2 * s + 1]);
                acc[r][0] = _mm512_fmadd_ps(e0, xe, acc[r][0]), odd[r][0] = _mm512_fmadd_ps(o0, xo, odd[r][0]);
                acc[r][1] = _mm512_fmadd_ps(e1, xe, acc[r][1]), odd[r][1] = _mm512_fmadd_ps(o1, xo, odd[r][1]);
            }
        }
#ifdef PF_BF16
        else {
            for (int r = 0; r < R; r++) {
                int32_t pair;
                memcpy(&pair, (const uint16_t *)x[r] + 2 * s, 4);
                const __m512bh xb = (__m512bh)_mm512_set1_epi32(pair);
                acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)w0, xb);
                acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)w1, xb);
            }
        }
#endif
    }
    if (kind == PK_BF16_WIDEN) /* two chains of multiply-adds per row vector, not one twice as long */
        for (int r = 0; r < R; r++) acc[r][0] = _mm512_add_ps(acc[r][0], odd[r][0]), acc[r][1] = _mm512_add_ps(acc[r][1], odd[r][1]);
    for (int r = 0; r < R; r++) out[r][0] = acc[r][0], out[r][1] = acc[r][1];
}

/* One token against S panels `stride` bytes apart at once (S memory streams, for decode): each row's sums are
 * made with exactly pf_tile_float's operations for one token (kind PK_F32 or PK_BF16_WIDEN), so a
 * decoded token's products equal the same token's among several (a verify pass) bit for bit. */
static inline __attribute__((always_inline)) void pf_streams_token(int kind, int S, const uint8_t *restrict panel,
                                                                   int64_t stride, const float *restrict x,
                                                                   int64_t steps, __m512 out[][2]) {
    __m512 acc[4][2], odd[4][2];
    for (int p = 0; p < S; p++) acc[p][0] = acc[p][1] = odd[p][0] = odd[p][1] = _mm512_setzero_ps();
    const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
    for (int64_t s = 0; s < steps; s++) {
        if (kind == PK_F32) {
            const __m512 xb = _mm512_set1_ps(x[s]);
            for (int p = 0; p < S; p++) {
                const float *w = (const float *)(panel + p * stride) + s * 32;
                acc[p][0] = _mm512_fmadd_ps(_mm512_loadu_ps(w), xb, acc[p][0]);
                acc[p][1] = _mm512_fmadd_ps(_mm512_loadu_ps(w + 16), xb, acc[p][1]);
            }
        } else {
            const __m512 xe = _mm512_set1_ps(x[2 * s]), xo = _mm512_set1_ps(x[2 * s + 1]);
            for (int p = 0; p < S; p++) {
                const uint8_t *w = panel + p * stride + s * 128;
                const __m512i w0 = _mm512_loadu_si512((const void *)w), w1 = _mm512_loadu_si512((const void *)(w + 64));
                acc[p][0] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)), xe, acc[p][0]);
                odd[p][0] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(w0, high)), xo, odd[p][0]);
                acc[p][1] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)), xe, acc[p][1]);
                odd[p][1] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(w1, high)), xo, odd[p][1]);
            }
        }
    }
    for (int p = 0; p < S; p++)
        for (int h = 0; h < 2; h++) out[p][h] = kind == PK_F32 ? acc[p][h] : _mm512_add_ps(acc[p][h], odd[p][h]);
}

/* pf_tile_float for any R <= PF_FTOKENS: a constant kind and R per call, so each tile's loops
 * unroll into registers. */
static void pf_float_tile(int kind, int R, const uint8_t *restrict panel, const void *const xr[PF_FTOKENS],
                          int64_t steps, const char *at, int64_t count, __m512 out[PF_FTOKENS][2]) {
#ifdef PF_BF16
#define PF_DP(n) else { pf_tile_float(PK_BF16_DP, n, panel, xr, steps, at, count, out); }
#else
#define PF_DP(n)
#endif
#define PF_FLT(n)                                                                                               \
    case n: {                                                                                                   \
        if (kind == PK_F32) { pf_tile_float(PK_F32, n, panel, xr, steps, at, count, out); }                     \
        else if (kind == PK_BF16_WIDEN) { pf_tile_float(PK_BF16_WIDEN, n, panel, xr, steps, at, count, out); } \
        PF_DP(n)                                                                                                \
        break;                                                                                                  \
    }
    switch (R) {
        PF_FLT(1) PF_FLT(2) PF_FLT(3) PF_FLT(4) PF_FLT(5) PF_FLT(6) PF_FLT(7) PF_FLT(8) PF_FLT(9)
        PF_FLT(10) PF_FLT(11) default: PF_FLT(12)
    }
#undef PF_FLT
#undef PF_DP
}

#ifdef PF_VNNI
/* The integer panels' block (gpt2_step.c's panel_of): int8, 8 steps of 128 bytes (value + 128); 4-bit,
 * 4 steps of 128 bytes (each byte two elements as value + 8: e in its low nibble, 4 + e in its high
 * one) and the 32 rows' float32 scales. */
#define PF_INT_BLOCK(kind) ((kind) == PK_I8 ? 8 * 128 : 4 * 128 + 128)

/* One step's two vectors of 16 rows, as vpdpbusd's unsigned operand, and the products with x's 4
 * (int8) or 8 (4-bit: low nibbles with x's first 4, high with the next 4) elements of the step. */
static inline __attribute__((always_inline)) void pf_int_step(int kind, const uint8_t *w, const int8_t *x, __m512i s[2]) {
    const __m512i w0 = _mm512_loadu_si512((const void *)w), w1 = _mm512_loadu_si512((const void *)(w + 64));
    int32_t four;
    memcpy(&four, x, 4);
    const __m512i x0 = _mm512_set1_epi32(four);
    if (kind == PK_I8) {
        s[0] = _mm512_dpbusd_epi32(s[0], w0, x0), s[1] = _mm512_dpbusd_epi32(s[1], w1, x0);
        return;
    }
    memcpy(&four, x + 4, 4);
    const __m512i x1 = _mm512_set1_epi32(four), low = _mm512_set1_epi8(0x0F);
    s[0] = _mm512_dpbusd_epi32(s[0], _mm512_and_si512(w0, low), x0);
    s[1] = _mm512_dpbusd_epi32(s[1], _mm512_and_si512(w1, low), x0);
    s[0] = _mm512_dpbusd_epi32(s[0], _mm512_and_si512(_mm512_srli_epi16(w0, 4), low), x1);
    s[1] = _mm512_dpbusd_epi32(s[1], _mm512_and_si512(_mm512_srli_epi16(w1, 4), low), x1);
}

/* Integer tile: R tokens x a panel's 32 rows (kind PK_I8 or PK_Q4). Per block: int32 sums of the
 * shifted unsigned weights times x, started at -shift x the block's sum of x (so each is the block's
 * exact product), then one float multiply-add with the block's scales (x's; 4-bit's times its rows'
 * scales; int8's one scale per row is the caller's). The next panel's `lines` are asked for spread
 * over the blocks. */
static inline __attribute__((always_inline)) void pf_tile_int(int kind, int R, const uint8_t *restrict panel,
                                                              const int8_t *const xq[PF_QTOKENS],
                                                              const float *const xs[PF_QTOKENS],
                                                              const int32_t *const xsum[PF_QTOKENS], int64_t K,
                                                              const char *ahead, int64_t lines,
                                                              __m512 out[PF_QTOKENS][2]) {
    const int32_t shift = kind == PK_I8 ? 128 : 8, steps = kind == PK_I8 ? 8 : 4, per_step = QBLOCK / steps;
    __m512 f[PF_QTOKENS][2];
    for (int r = 0; r < R; r++) f[r][0] = f[r][1] = _mm512_setzero_ps();
    const int64_t blocks = K / QBLOCK, per_block = (lines + blocks - 1) / blocks;
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *w = panel + b * PF_INT_BLOCK(kind);
        __m512i s[PF_QTOKENS][2];
        for (int r = 0; r < R; r++) s[r][0] = s[r][1] = _mm512_set1_epi32(-shift * xsum[r][b]);
        for (int64_t l = b * per_block; l < (b + 1) * per_block && l < lines; l++) _mm_prefetch(ahead + l * 64, PF_HINT);
        for (int step = 0; step < steps; step++)
            for (int r = 0; r < R; r++) pf_int_step(kind, w + step * 128, xq[r] + b * QBLOCK + step * per_step, s[r]);
        for (int r = 0; r < R; r++) {
            __m512 s0 = _mm512_set1_ps(xs[r][b]), s1 = s0;
            if (kind == PK_Q4) {
                s0 = _mm512_mul_ps(_mm512_loadu_ps(w + 4 * 128), s0);
                s1 = _mm512_mul_ps(_mm512_loadu_ps(w + 4 * 128 + 64), s1);
            }
            f[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r][0]), s0, f[r][0]);
            f[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r][1]), s1, f[r][1]);
        }
    }
    for (int r = 0; r < R; r++) out[r][0] = f[r][0], out[r][1] = f[r][1];
}

/* One token against S integer panels `stride` bytes apart at once (S memory streams, for decode):
 * each row's sums made with exactly pf_tile_int's operations for one token, so a decoded token's
 * products equal the same token's among several bit for bit. */
static inline __attribute__((always_inline)) void pf_streams_int(int kind, int S, const uint8_t *restrict panel,
                                                                 int64_t stride, const int8_t *restrict xq,
                                                                 const float *restrict xs,
                                                                 const int32_t *restrict xsum, int64_t K,
                                                                 __m512 out[][2]) {
    const int32_t shift = kind == PK_I8 ? 128 : 8, steps = kind == PK_I8 ? 8 : 4, per_step = QBLOCK / steps;
    __m512 f[4][2];
    for (int p = 0; p < S; p++) f[p][0] = f[p][1] = _mm512_setzero_ps();
    for (int64_t b = 0; b < K / QBLOCK; b++) {
        const uint8_t *w = panel + b * PF_INT_BLOCK(kind);
        __m512i s[4][2];
        const __m512i start = _mm512_set1_epi32(-shift * xsum[b]);
        for (int p = 0; p < S; p++) s[p][0] = s[p][1] = start;
        for (int step = 0; step < steps; step++)
            for (int p = 0; p < S; p++) pf_int_step(kind, w + p * stride + step * 128, xq + b * QBLOCK + step * per_step, s[p]);
        const __m512 x_scale = _mm512_set1_ps(xs[b]);
        for (int p = 0; p < S; p++) {
            __m512 s0 = x_scale, s1 = x_scale;
            if (kind == PK_Q4) {
                s0 = _mm512_mul_ps(_mm512_loadu_ps(w + p * stride + 4 * 128), s0);
                s1 = _mm512_mul_ps(_mm512_loadu_ps(w + p * stride + 4 * 128 + 64), s1);
            }
            f[p][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[p][0]), s0, f[p][0]);
            f[p][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[p][1]), s1, f[p][1]);
        }
    }
    for (int p = 0; p < S; p++) out[p][0] = f[p][0], out[p][1] = f[p][1];
}
#endif

#ifdef PF_BF16
/* x [M][K] float32 -> xb [M][K] bf16, rounded to nearest even (as vcvtne2ps2bf16). */
static void pf_to_bf16_row(const float *restrict x, uint16_t *restrict xb, int64_t K) {
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + k + 16), _mm512_loadu_ps(x + k));
        _mm512_storeu_si512((void *)(xb + k), (__m512i)v);
    }
    for (; k < K; k++) {
        uint32_t u;
        memcpy(&u, x + k, 4);
        xb[k] = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    }
}
#endif
#endif /* PF_PANELS */

/* ---- AVX2 (no AVX-512): float tiles ---------------------------------------------------------- */
#if !defined(PF_PANELS) && defined(__AVX2__) && defined(__FMA__)
#define PF_AVX2 1
#define PF_AVX2_TOKENS 3 /* 12 sums, 3 tokens and a row vector: 16 ymm registers with none to spare */
enum { PA_F32 = 0, PA_EVEN = 1, PA_ODD = 2 };

/* One pass over a panel for R (<= 3) tokens x its 32 rows (four vectors of 8): float32 weights, or
 * the even or the odd halves of bf16 pairs widened in registers (the odd ones by two shifts: a mask
 * would take the 17th register and spill the sums: 1.5x slower), one multiply-add chain per row and
 * token in k order. The next panel's `lines` are asked for, a line a step. */
static inline __attribute__((always_inline)) void pf_avx2_pass(int kind, int R, const uint8_t *restrict panel,
                                                               const float *restrict x, int64_t K, int64_t steps,
                                                               const char *ahead, int64_t lines, __m256 acc[][4]) {
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 4; v++) acc[r][v] = _mm256_setzero_ps();
    for (int64_t s = 0; s < steps; s++) {
        if (s < lines) _mm_prefetch(ahead + s * 64, _MM_HINT_T0);
        __m256 xb[PF_AVX2_TOKENS];
        for (int r = 0; r < R; r++) xb[r] = _mm256_broadcast_ss(x + r * K + (kind == PA_F32 ? s : 2 * s + (kind == PA_ODD)));
        for (int v = 0; v < 4; v++) {
            const uint8_t *at = panel + s * 128 + v * 32;
            __m256 w;
            if (kind == PA_F32) {
                w = _mm256_loadu_ps((const float *)at);
            } else {
                const __m256i pairs = _mm256_loadu_si256((const __m256i *)at);
                w = _mm256_castsi256_ps(_mm256_slli_epi32(kind == PA_EVEN ? pairs : _mm256_srli_epi32(pairs, 16), 16));
            }
            for (int r = 0; r < R; r++) acc[r][v] = _mm256_fmadd_ps(w, xb[r], acc[r][v]);
        }
    }
}

/* R tokens (x [R][K] float32) against a float32 or bf16 (`bf16`) panel: out[r][row]. bf16 takes two
 * passes, the pairs' even halves' sums and then their odd halves', added at the end: the two chains
 * gpt2_step.c's panel_streams_c makes for one token, so a token's products among others equal its
 * one-token decode's bit for bit. */
static inline __attribute__((always_inline)) void pf_avx2_tile(int bf16, int R, const uint8_t *restrict panel,
                                                               const float *restrict x, int64_t K, const char *ahead,
                                                               int64_t lines, float out[][32]) {
    __m256 acc[PF_AVX2_TOKENS][4], odd[PF_AVX2_TOKENS][4];
    pf_avx2_pass(bf16 ? PA_EVEN : PA_F32, R, panel, x, K, bf16 ? K / 2 : K, ahead, lines, acc);
    if (bf16) {
        pf_avx2_pass(PA_ODD, R, panel, x, K, K / 2, ahead, 0, odd);
        for (int r = 0; r < R; r++)
            for (int v = 0; v < 4; v++) acc[r][v] = _mm256_add_ps(acc[r][v], odd[r][v]);
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 4; v++) _mm256_storeu_ps(out[r] + 8 * v, acc[r][v]);
}
#endif

#endif
