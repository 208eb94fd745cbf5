/* Prefill's matrix products: T > 1 tokens against one weight matrix as a GEMM, not T GEMVs.
 *
 * Each thread takes a block of the matrix's rows, 32 at a time (a panel) as [K / e][2][16 rows][e
 * elements of 4 bytes] (e = 1 float32, 2 bf16, 4 int8): float32, bf16 and int8 matrices are stored
 * so (gpt2_step.c's panel_of); 4-bit rows are repacked into the thread's scratch per panel.
 * One 64-byte vector per step holds the same 4 bytes of 16 rows, so a token's 4 bytes,
 * broadcast, multiply 16 rows at once with no sums across lanes. The panel stays in the cache
 * while every token of the prompt passes over it (a tile of up to 12 tokens at a time), so each
 * weight is read from memory once per prefill and used T times, and the next panel's rows are
 * prefetched while this one computes. The instructions are the best this CPU has, chosen when the
 * kernel is built for it (-march=native; the build is cached per CPU flags, so it only runs where
 * it was built):
 *
 *   float32 weights   AVX-512F `vfmadd231ps`, 12 tokens x 32 rows per tile
 *   bf16 weights      AVX-512 BF16 `vdpbf16ps` (the tokens rounded to bf16 once per product, float32
 *                     sums); without it the pairs are widened to float32 in registers (AVX-512F)
 *   int8 / 4-bit      AVX-512 VNNI `vpdpbusd` (int8 stored as value + 128, 4-bit as value + 8,
 *                     unsigned), int32 sums per block of 32 started at -shift x the block's sum of
 *                     x, so each block's sum is exact, then one scaled float add per block; the
 *                     activations are decode's (int8 per block of 32). int8's tiles are decode's own
 *                     products (gpt2_step.c's panel_products); without VNNI int8 takes its AVX2 or
 *                     plain-C panel tiles there, and 4-bit decode's products token by token.
 *                     AVX-VNNI (256-bit) CPUs take those paths too: no such CPU has tested a 256-bit
 *                     VNNI kernel.
 *
 * AMX (Sapphire Rapids' tiles: bf16 and int8 products of 16 x 64-byte tiles) would come first where
 * the CPU has it, in pf_panel_tile's place: the panels here are already AMX's B layout (4 bytes of
 * 16 rows per 64-byte row), but it needs Linux's arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
 * once per process and a tile configuration per shape. It is not here: no AMX CPU has tested it,
 * and an untested kernel is not shipped (PF_AMX, tested before PF_VNNI, is the extension point).
 *
 * Without AVX-512 (AVX2 CPUs) gpt2_step.c keeps its plain-C tiles, which the compiler vectorises:
 * dot products along K with AVX2 (4 tokens x 3 rows, lanes summed at the end) were 1.08-1.11x
 * slower (docs/native-runtime.md). Included by gpt2_step.c only (it uses its q4 helpers); each build
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

enum { PK_F32 = 0, PK_BF16_DP = 1, PK_BF16_WIDEN = 2, PK_Q4 = 3 };

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

/* Where each plain-order dword of a 4-block q4 group comes from in (low nibbles | high nibbles):
 * plain dword d is part d % 8 of block d / 8; the record keeps it in slot part / 2 at run
 * (part % 2) * 4 + block (q4_position), slots 0 and 2 in the low nibbles' dwords 0-7 and 8-15,
 * slots 1 and 3 in the high nibbles' (indexes 16 + ...). */
static inline int32_t pf_q4_source(int d) {
    const int block = d / 8, part = d % 8, slot = part / 2, run = (part % 2) * 4 + block;
    return (slot % 2 ? 16 : 0) + (slot / 2) * 8 + run;
}

/* One q4 row's records -> K unsigned bytes in plain order (value + 8) and its K/32 block scales. */
static void pf_unpack_q4(const uint8_t *restrict row, int64_t K, uint8_t *restrict out, float *restrict scales) {
    const int64_t blocks = K / QBLOCK, quads = blocks / 4 * 4;
    int32_t lo_idx[16], hi_idx[16];
    for (int d = 0; d < 16; d++) lo_idx[d] = pf_q4_source(d), hi_idx[d] = pf_q4_source(16 + d);
    const __m512i ilo = _mm512_loadu_si512(lo_idx), ihi = _mm512_loadu_si512(hi_idx), low = _mm512_set1_epi8(0x0F);
    for (int64_t b = 0; b < quads; b += 4) {
        const uint8_t *record = row + b * Q4_BLOCK_BYTES;
        memcpy(scales + b, record, 4 * sizeof(float));
        const __m512i raw = _mm512_loadu_si512((const void *)(record + 16));
        const __m512i lo = _mm512_and_si512(raw, low), hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
        _mm512_storeu_si512((void *)(out + b * QBLOCK), _mm512_permutex2var_epi32(lo, ilo, hi));
        _mm512_storeu_si512((void *)(out + b * QBLOCK + 64), _mm512_permutex2var_epi32(lo, ihi, hi));
    }
    for (int64_t b = quads; b < blocks; b++) { /* a last group of two */
        scales[b] = q4_scale(row, b, blocks);
        for (int j = 0; j < QBLOCK; j++) out[b * QBLOCK + j] = (uint8_t)q4_nibble(row, b * QBLOCK + j, blocks);
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
/* Integer tile: R tokens x 32 rows. Per block: int32 sums of the zp-shifted unsigned weights times
 * x, started at -zp x the block's sum of x (so each is the block's exact product), then one float
 * multiply-add with the block's scales (x's, times the rows' `bscale` for q4; int8's one scale per
 * row is the caller's). The next panel's `lines` are asked for spread over the blocks. */
static inline __attribute__((always_inline)) void pf_tile_int(int R, const uint8_t *restrict panel, const float *bscale,
                                                              const int8_t *const xq[PF_QTOKENS],
                                                              const float *const xs[PF_QTOKENS],
                                                              const int32_t *const xsum[PF_QTOKENS], int32_t zp,
                                                              int64_t K, const char *ahead, int64_t lines,
                                                              __m512 out[PF_QTOKENS][2]) {
    __m512 f[PF_QTOKENS][2];
    for (int r = 0; r < R; r++) f[r][0] = f[r][1] = _mm512_setzero_ps();
    const int64_t blocks = K / QBLOCK, per_block = (lines + blocks - 1) / blocks;
    for (int64_t b = 0; b < blocks; b++) {
        __m512i s[PF_QTOKENS][2];
        for (int r = 0; r < R; r++) s[r][0] = s[r][1] = _mm512_set1_epi32(-zp * xsum[r][b]);
        for (int64_t l = b * per_block; l < (b + 1) * per_block && l < lines; l++) _mm_prefetch(ahead + l * 64, PF_HINT);
        const uint8_t *w = panel + b * (QBLOCK / 4) * 128;
        for (int step = 0; step < QBLOCK / 4; step++) {
            const __m512i w0 = _mm512_loadu_si512((const void *)(w + step * 128));
            const __m512i w1 = _mm512_loadu_si512((const void *)(w + step * 128 + 64));
            for (int r = 0; r < R; r++) {
                int32_t four;
                memcpy(&four, xq[r] + b * QBLOCK + step * 4, 4);
                const __m512i xb = _mm512_set1_epi32(four);
                s[r][0] = _mm512_dpbusd_epi32(s[r][0], w0, xb);
                s[r][1] = _mm512_dpbusd_epi32(s[r][1], w1, xb);
            }
        }
        __m512 b0 = _mm512_setzero_ps(), b1 = b0;
        if (bscale) b0 = _mm512_loadu_ps(bscale + b * 32), b1 = _mm512_loadu_ps(bscale + b * 32 + 16);
        for (int r = 0; r < R; r++) {
            const __m512 x_scale = _mm512_set1_ps(xs[r][b]);
            const __m512 s0 = bscale ? _mm512_mul_ps(b0, x_scale) : x_scale, s1 = bscale ? _mm512_mul_ps(b1, x_scale) : x_scale;
            f[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r][0]), s0, f[r][0]);
            f[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r][1]), s1, f[r][1]);
        }
    }
    for (int r = 0; r < R; r++) out[r][0] = f[r][0], out[r][1] = f[r][1];
}

/* One token against S int8 panels `stride` bytes apart at once (S memory streams, for decode): each row's
 * sums made with exactly pf_tile_int's operations for one token (zp 128, no block scales), so a
 * decoded token's products equal the same token's among several bit for bit. */
static inline __attribute__((always_inline)) void pf_streams_int(int S, const uint8_t *restrict panel,
                                                                 int64_t stride, const int8_t *restrict xq,
                                                                 const float *restrict xs,
                                                                 const int32_t *restrict xsum, int64_t K,
                                                                 __m512 out[][2]) {
    __m512 f[4][2];
    for (int p = 0; p < S; p++) f[p][0] = f[p][1] = _mm512_setzero_ps();
    for (int64_t b = 0; b < K / QBLOCK; b++) {
        __m512i s[4][2];
        const __m512i start = _mm512_set1_epi32(-128 * xsum[b]);
        for (int p = 0; p < S; p++) s[p][0] = s[p][1] = start;
        for (int step = 0; step < QBLOCK / 4; step++) {
            int32_t four;
            memcpy(&four, xq + b * QBLOCK + step * 4, 4);
            const __m512i xb = _mm512_set1_epi32(four);
            for (int p = 0; p < S; p++) {
                const uint8_t *w = panel + p * stride + (b * (QBLOCK / 4) + step) * 128;
                s[p][0] = _mm512_dpbusd_epi32(s[p][0], _mm512_loadu_si512((const void *)w), xb);
                s[p][1] = _mm512_dpbusd_epi32(s[p][1], _mm512_loadu_si512((const void *)(w + 64)), xb);
            }
        }
        const __m512 x_scale = _mm512_set1_ps(xs[b]);
        for (int p = 0; p < S; p++) {
            f[p][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[p][0]), x_scale, f[p][0]);
            f[p][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[p][1]), x_scale, f[p][1]);
        }
    }
    for (int p = 0; p < S; p++) out[p][0] = f[p][0], out[p][1] = f[p][1];
}
#endif

/* The tokens of one matrix product, as the tiles read them. */
typedef struct {
    const float *xf;        /* float32 [M][K] */
    const void *x;          /* PK_F32, PK_BF16_WIDEN: xf; PK_BF16_DP: bf16 [M][K]; integer: int8 [M][K] */
    const float *xs;        /* integer: [M][K/32] scales */
    const int32_t *xsum;    /* integer: [M][K/32] sums */
} PfTokens;

/* The token tiles of one packed panel into y (rows n0 .. n0 + rows): the tokens in tiles as even as
 * PF_FTOKENS/PF_QTOKENS allow (50 tokens: 5 tiles of 10, not 4 of 12 and one of 2). */
static void pf_panel_tiles(int kind, const uint8_t *panel, const float *bscale, const PfTokens *tk, float *y,
                           const float rs[PF_PANEL], const float bs[PF_PANEL], int rows, int64_t n0, int64_t M,
                           int64_t N, int64_t K, const char *ahead, int64_t ahead_bytes) {
    const int integer = kind == PK_Q4, most = integer ? PF_QTOKENS : PF_FTOKENS;
    const int64_t tiles = (M + most - 1) / most, blocks = K / QBLOCK;
    const int64_t elem = kind == PK_F32 || kind == PK_BF16_WIDEN ? 4 : kind == PK_BF16_DP ? 2 : 1;
    const __m512 rscale[2] = {_mm512_loadu_ps(rs), _mm512_loadu_ps(rs + 16)};
    const __m512 badd[2] = {_mm512_loadu_ps(bs), _mm512_loadu_ps(bs + 16)};
    const int64_t lines = (ahead_bytes + 63) / 64, per_tile = (lines + tiles - 1) / tiles;
    for (int64_t i = 0, t0 = 0; i < tiles; i++) {
        const int R = (int)((M - t0 + (tiles - i) - 1) / (tiles - i)); /* the rest, spread evenly */
        const int64_t first = i * per_tile, count = first >= lines ? 0 : (lines - first < per_tile ? lines - first : per_tile);
        const char *at = ahead + first * 64;
        __m512 out[PF_FTOKENS][2];
        if (integer) {
#ifndef PF_VNNI
            (void)bscale, (void)blocks;
#else
            const int8_t *xr[PF_QTOKENS];
            const float *sr[PF_QTOKENS];
            const int32_t *cr[PF_QTOKENS];
            for (int r = 0; r < R; r++)
                xr[r] = (const int8_t *)tk->x + (t0 + r) * K, sr[r] = tk->xs + (t0 + r) * blocks, cr[r] = tk->xsum + (t0 + r) * blocks;
            switch (R) { /* a constant R per call: the tile's loops unroll into registers */
#define PF_INT(n) case n: pf_tile_int(n, panel, bscale, xr, sr, cr, 8, K, at, count, out); break;
                PF_INT(1) PF_INT(2) PF_INT(3) PF_INT(4) PF_INT(5) default: PF_INT(6)
#undef PF_INT
            }
#endif
        } else {
            const void *xr[PF_FTOKENS];
            for (int r = 0; r < R; r++) xr[r] = (const uint8_t *)tk->x + (t0 + r) * K * elem;
            const int64_t steps = kind == PK_F32 ? K : K / 2; /* bf16: whole pairs */
            pf_float_tile(kind, R, panel, xr, steps, at, count, out);
        }
        for (int r = 0; r < R; r++)
            for (int h = 0; h < 2; h++) {
                const int valid = rows - 16 * h;
                if (valid <= 0) continue;
                const __mmask16 mask = valid >= 16 ? 0xFFFF : (__mmask16)((1u << valid) - 1);
                _mm512_mask_storeu_ps(y + (t0 + r) * N + n0 + 16 * h, mask, _mm512_fmadd_ps(out[r][h], rscale[h], badd[h]));
            }
        t0 += R;
    }
}

/* Scratch one thread needs for pf_gemm_panels at inner size K (any kind): the panel, 32 unpacked
 * q4 rows, and their block scales twice. */
static inline size_t pf_panel_scratch(int64_t K) {
    return (size_t)(K + 16) * 32 * 4 + (size_t)PF_PANEL * K + (size_t)(K / QBLOCK + 1) * PF_PANEL * 2 * sizeof(float) + 64;
}

/* Rows [lo, hi) of W (lo a multiple of PF_PANEL) against the tokens, panel by panel, then every tile
 * of tokens: bf16 weights lie as panels already (gpt2_step.c's panel_of); 4-bit rows [N][K/32 * 20]
 * are unpacked and packed into one per panel (the next panel's rows prefetched meanwhile). */
__attribute__((unused)) /* builds without VNNI or BF16 products call none */
static void pf_gemm_panels(int kind, const void *W, const PfTokens *tk, float *y, const float *bias, int64_t M,
                           int64_t N, int64_t K, int64_t lo, int64_t hi, uint8_t *scratch) {
    const int64_t blocks = K / QBLOCK, row_bytes = blocks * Q4_BLOCK_BYTES; /* a q4 row's records */
    uint8_t *panel = scratch, *unpacked = scratch + (K + 16) * 32 * 4;
    float *q4_scales = (float *)(unpacked + PF_PANEL * K); /* [PF_PANEL][blocks] */
    float *bscale = q4_scales + PF_PANEL * blocks;          /* [blocks][PF_PANEL] */
    for (int64_t n0 = lo; n0 < hi; n0 += PF_PANEL) {
        const int rows = hi - n0 < PF_PANEL ? (int)(hi - n0) : PF_PANEL;
        const uint8_t *src[PF_PANEL];
        float rs[PF_PANEL], bs[PF_PANEL];
        for (int i = 0; i < PF_PANEL; i++) rs[i] = 1.0f, bs[i] = bias && i < rows ? bias[n0 + i] : 0.0f;
        if (kind == PK_BF16_DP) { /* stored as panels already: the tiles read them as they lie */
            const int64_t bytes = K / 2 * PF_PANEL * 4;
            const uint8_t *own = (const uint8_t *)W + n0 / PF_PANEL * bytes;
            pf_panel_tiles(kind, own, NULL, tk, y, rs, bs, rows, n0, M, N, K, (const char *)own + bytes,
                           n0 + PF_PANEL < hi ? bytes : 0);
            continue;
        }
        for (int i = 0; i < PF_PANEL; i++) {
            if (i < rows) {
                pf_unpack_q4((const uint8_t *)W + (n0 + i) * row_bytes, K, unpacked + i * K, q4_scales + i * blocks);
                src[i] = unpacked + i * K;
            } else { /* a short panel repeats its last row */
                src[i] = src[rows - 1];
                memcpy(q4_scales + i * blocks, q4_scales + (rows - 1) * blocks, blocks * sizeof(float));
            }
        }
        pf_pack_panel(src, K, panel);
        for (int64_t b = 0; b < blocks; b++)
            for (int i = 0; i < PF_PANEL; i++) bscale[b * PF_PANEL + i] = q4_scales[i * blocks + b];
        /* the next panel's rows (one stretch of memory) on their way while this one computes */
        const int64_t next = n0 + PF_AHEAD * PF_PANEL, ahead = next < hi ? (hi - next < PF_PANEL ? hi - next : PF_PANEL) * row_bytes : 0;
        pf_panel_tiles(kind, panel, bscale, tk, y, rs, bs, rows, n0, M, N, K, (const char *)W + next * row_bytes, ahead);
    }
}

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

#endif
