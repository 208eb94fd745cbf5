/* GPT-2's whole forward pass in one C call: T tokens at positions [pos, pos+T) through every
 * layer, the KV cache written in place, logits out. One-token decode is one call and one OpenMP
 * parallel region, so nothing but the products' weight traffic and a few barriers stands between
 * a token and the memory floor (no interpreter, no framework dispatch, no thread pool wake-ups
 * between operations).
 *
 * Weights ("Mat": N rows of K) are stored as panels of 32 rows (see panel_of) in one of four types:
 *   WT_F32   float32
 *   WT_BF16  bfloat16 as raw uint16, widened in registers (float32 sums): decode widens a
 *            pair of weights per 32-bit lane by a shift and a mask against x de-interleaved
 *   WT_I8    int8 with one float32 scale per row (symmetric), stored as value + 128 (unsigned:
 *            VNNI's vpdpbusd multiplies unsigned by signed bytes)
 *   WT_Q4    4-bit, blocks of 32 along `in` with one float32 scale each, as value + 8 in
 *            nibbles; a panel's block is its 32 rows' nibbles then their 32 scales (20 bytes per
 *            row and block)
 * For both integer types decode quantises the activations to int8 per block of 32 and sums the
 * products in int32 (as llama.cpp's q8_0/q4_0 and ONNX Runtime's MatMulNBits at accuracy level
 * 4 do): widening every weight to float32 made the products compute-bound on AVX2.
 * Everything else (embeddings, norms, biases, the KV cache, attention) is float32.
 *
 * Decode (T == 1) streams each matrix once, two memory streams per core: two halves of a thread's
 * panels walked side by side (DECODE_STREAMS). Prefill (T > 1) is a GEMM (the panels' token tiles,
 * and prefill.h's; compute-bound: each weight is used T times). A verify pass (`exact`,
 * speculative decoding) makes decode's own products for each of its T tokens, reading the weights
 * once for all of them (decode_products).
 *
 * Plain C compiled with -O3 -march=native -ffast-math -fopenmp: the compiler vectorises the
 * inner loops for the CPU at hand; the hand-written AVX2 parts (int_panels.h, the activations'
 * quantisation) have plain-C twins, the AVX-512 ones (prefill.h, attention.h) AVX2 or plain-C ones.
 * Per-category nanoseconds (matmul, attention, KV, norm/act, other) are summed by thread 0 when
 * `timers` is set: a profile's breakdown without a profiler. */
#define _GNU_SOURCE /* pthread_setaffinity_np (affinity.h) */
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "affinity.h" /* binding the team to CPUs, gemv.c's too */
#include "products.h" /* the row products gemv.c makes too */

enum { WT_F32 = 0, WT_BF16 = 1, WT_I8 = 2, WT_Q4 = 3 };
/* The AMX crossovers (see amx_min_tokens), measured on a 2-core Xeon (family 6 model 207) by
 * scripts/amx_crossover.py: bf16's tiles ran 0.47-0.56x the AVX-512 tiles' time from 8 tokens (0.34x
 * at 50), noise from 3 to 6, 1.2-1.4x slower at 2. The integer tiles ran 1.1-1.4x slower than VNNI at
 * every M from 16 to 256 (each block of 32 needs its int32 sums out of the tiles and scaled in
 * vector registers, as many vector operations as VNNI's own products save): 0, never, until a
 * kernel beats VNNI. */
#ifndef AMX_MIN_BF16
#define AMX_MIN_BF16 8
#endif
#ifndef AMX_MIN_I8
#define AMX_MIN_I8 0
#endif
#ifndef AMX_MIN_Q4
#define AMX_MIN_Q4 0
#endif
enum { T_MATMUL = 0, T_ATTENTION = 1, T_KV = 2, T_NORM_ACT = 3, T_OTHER = 4, T_COUNT = 5 };
#define QBLOCK 32

typedef struct {
    const void *w;       /* [N][K] (WT_Q4: [N][K/32 * 20] bytes of records) */
    const float *scale;  /* WT_I8: [N]; otherwise NULL (WT_Q4's are in its panels) */
    const float *bias;   /* [N] or NULL */
} Mat;

typedef struct {
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    Mat qkv, proj, fc, fc2;
} Layer;

typedef struct {
    int64_t n_layer, n_head, n_embd, n_inner, vocab, max_seq, wtype;
    float eps;
    const float *wpe;         /* [max_seq][d] */
    const float *lnf_w, *lnf_b;
    Mat lm_head;              /* [V][d] at the stored type: the tied embedding too (rows widened) */
    const Layer *layers;      /* [n_layer] */
    float *k_cache, *v_cache; /* [L][H][max_seq][hd] each (NULL with an 8-bit cache) */
    int64_t *timers;          /* [T_COUNT] ns, or NULL */
    int8_t *kq_cache, *vq_cache; /* the 8-bit cache instead: [L][H][max_seq][hd] each, or NULL */
    float *k_scale, *v_scale;    /* its scale per row: [L][H][max_seq] each */
    uint8_t *scratch;            /* the step's scratch, kept between calls (gpt2_scratch_bytes), or NULL */
    int64_t scratch_bytes;
} Model;

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* x quantised to int8 per block of 32 for the integer products: values, scales, and each block's
 * sum of values (the unsigned weights' shift comes back out as shift x that sum). */
typedef struct {
    int8_t *q;    /* [K] */
    float *scale; /* [K/32] */
    int32_t *sum; /* [K/32] */
} QuantX;

/* Row r of x quantised, in scratch that holds M rows of K. */
static inline QuantX quant_row(const QuantX *qx, int64_t r, int64_t K) {
    const QuantX row = {qx->q + r * K, qx->scale + r * (K / QBLOCK), qx->sum + r * (K / QBLOCK)};
    return row;
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
/* quantise_block in AVX-512 registers: the 32 values as two vectors, the same values as the plain
 * code (cvtps rounds to nearest even as lrintf does; every value lies in -127..127, so the narrowing
 * never saturates). A prefill of 50 tokens quantises ~100,000 blocks. */
static void quantise_block(const float *restrict x, const QuantX *qx, int64_t b) {
    const float *xb = x + b * QBLOCK;
    const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float scale = amax / 127.0f, inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(inv)));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(inv)));
    _mm_storeu_si128((__m128i *)(qx->q + b * QBLOCK), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128((__m128i *)(qx->q + b * QBLOCK + 16), _mm512_cvtsepi32_epi8(q1));
    qx->scale[b] = scale;
    qx->sum[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
}
#elif defined(__AVX2__) && defined(__FMA__)
/* quantise_block in registers (the same values: cvtps rounds to nearest even as lrintf does): a
 * decode step quantises thousands of blocks, a measurable part of an int4 step in scalar code. */
static void quantise_block(const float *restrict x, const QuantX *qx, int64_t b) {
    const float *xb = x + b * QBLOCK;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], amax8 = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(xb + 8 * i);
        amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    const float scale = amax / 127.0f, inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    __m256i q[4];
    for (int i = 0; i < 4; i++) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(inv)));
    const __m256i total = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i t4 = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
    t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, _MM_SHUFFLE(1, 0, 3, 2)));
    const int32_t sum = _mm_cvtsi128_si32(_mm_add_epi32(t4, _mm_shuffle_epi32(t4, _MM_SHUFFLE(2, 3, 0, 1))));
    /* packs work per 128-bit lane: 4-byte runs come out as x[0,8,16,24 | 4,12,20,28]; put them in order */
    const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256((__m256i *)(qx->q + b * QBLOCK), _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    qx->scale[b] = scale;
    qx->sum[b] = sum;
}
#else
/* Block b of x quantised. */
static void quantise_block(const float *restrict x, const QuantX *qx, int64_t b) {
    const float *xb = x + b * QBLOCK;
    float amax = 0.0f;
    for (int j = 0; j < QBLOCK; j++) amax = fmaxf(amax, fabsf(xb[j]));
    const float scale = amax / 127.0f, inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < QBLOCK; j++) {
        const int8_t v = (int8_t)lrintf(xb[j] * inv);
        qx->q[b * QBLOCK + j] = v;
        sum += v;
    }
    qx->scale[b] = scale;
    qx->sum[b] = sum;
}
#endif

/* Every matrix is stored as panels (weights.py's to_panels and quantise_blocks_q4): 32 rows at a time
 * (the last padded with rows of zeros), float32, bf16 and int8 panels [K / e][32 rows][e] (e = 1
 * float32, 2 bf16, 4 int8; K even for bf16), so 4 bytes of 32 rows lie in 128 contiguous bytes;
 * 4-bit ones per block of 32 elements four such steps of 8 elements (4 bytes of nibbles a row) and
 * the block's 32 scales. Decode streams a panel with a token's x broadcast against 32 rows at once;
 * prefill's GEMM tiles read the same panels as they lie, so no prefill repacks them (repacking rows
 * took 10-21% of its products' time). */
#define PANEL 32
/* Memory streams one decoded token reads at once per thread: its panels in that many parts walked side
 * by side. Two against four on the Zen 5 EPYC, whole-step decode: 0.96-0.99x; on its AVX2 build int8
 * 0.81-0.93x (four streams' int32 sums spill from 16 registers), bf16 0.97-0.98x, float32 0.96x;
 * one stream 1.08x of two. */
#define DECODE_STREAMS 2
static inline int64_t panel_bytes(int64_t wtype, int64_t K) {
    return wtype == WT_Q4 ? K / QBLOCK * (4 * 128 + 4 * PANEL) : (wtype == WT_F32 ? 4 * K : wtype == WT_BF16 ? 2 * K : K) * PANEL;
}
static inline const uint8_t *panel_of(const Mat *m, int64_t wtype, int64_t p, int64_t K) {
    return (const uint8_t *)m->w + p * panel_bytes(wtype, K);
}

/* Row n of a matrix widened to float32 (the embedding): `buf` [K]. */
static const float *widen_row(const Mat *m, int64_t wtype, int64_t n, int64_t K, float *restrict buf) {
    switch (wtype) {
    case WT_F32: {
        const float *w = (const float *)panel_of(m, wtype, n / PANEL, K) + n % PANEL;
        for (int64_t k = 0; k < K; k++) buf[k] = w[k * PANEL];
        return buf;
    }
    case WT_BF16: {
        const uint16_t *w = (const uint16_t *)panel_of(m, wtype, n / PANEL, K) + 2 * (n % PANEL);
        for (int64_t k = 0; k < K; k++) buf[k] = bf16_to_f32(w[(k / 2) * 2 * PANEL + k % 2]);
        return buf;
    }
    case WT_I8: {
        const uint8_t *w = panel_of(m, wtype, n / PANEL, K) + 4 * (n % PANEL);
        const float s = m->scale[n];
        for (int64_t k = 0; k < K; k++) buf[k] = (float)((int32_t)w[(k / 4) * 4 * PANEL + k % 4] - 128) * s;
        return buf;
    }
    default: { /* WT_Q4: per block four steps of 4 bytes a row (elements e and 4 + e), then 32 scales */
        const uint8_t *panel = panel_of(m, wtype, n / PANEL, K);
        for (int64_t k = 0; k < K; k++) {
            const uint8_t *block = panel + k / QBLOCK * (4 * 128 + 4 * PANEL);
            const uint8_t byte = block[(k % QBLOCK) / 8 * 128 + (n % PANEL) * 4 + k % 4];
            float scale;
            memcpy(&scale, block + 4 * 128 + (n % PANEL) * 4, sizeof scale);
            buf[k] = (float)(((k % 8) < 4 ? byte & 15 : byte >> 4) - 8) * scale;
        }
        return buf;
    }
    }
}

#include "prefill.h"   /* prefill's GEMMs: float tiles, BF16 and VNNI products */
#include "int_panels.h" /* integer panels without VNNI: AVX2 or plain C */
#include "attention.h" /* one head's attention: decode's stream, prefill's tiles */
#ifdef WS_AMX
#include "amx_prefill.h" /* prefill's products on AMX tiles: the AMX translation unit */
/* The tokens from which a product takes the tiles, per weight type (WT_*; 0: never): below them the
 * AVX-512 tiles are faster (docs/native-runtime.md, "AMX": the crossover measured by
 * scripts/amx_crossover.py). Tests set 2 to run the tiles on every shape. */
static int amx_min_tokens[4] = {0, AMX_MIN_BF16, AMX_MIN_I8, AMX_MIN_Q4};
#endif
#define ATT_MIN_TILED 8 /* fewer queries (a few drafted tokens) read the cache query by query */

/* R tokens (x [R][K] float32) against one float32 or bf16 panel: out[r][i] = row i . x[r], float32
 * sums in k order for each row and token, whatever R and the token's neighbours, so a token's
 * products among several (a verify pass, prefill) equal a one-token decode's bit for bit. AVX-512:
 * prefill.h's float tile (bf16 pairs widened in registers, or with `xb`, the tokens in bf16, BF16
 * products: prefill's where the CPU has them); AVX2: prefill.h's AVX2 tiles for several tokens, decode
 * in plain C; otherwise plain C throughout, which the compiler vectorises across the panel's 32 rows. */
#ifdef PF_PANELS
static void float_panel_tokens(int64_t wtype, const uint8_t *panel, const float *x, const uint16_t *xb, int R,
                               int64_t K, float out[][PANEL], const char *ahead, int64_t lines) {
    const void *xr[PF_FTOKENS];
    for (int r = 0; r < R; r++) xr[r] = xb ? (const void *)(xb + r * K) : (const void *)(x + r * K);
    const int kind = wtype == WT_F32 ? PK_F32 : xb ? PK_BF16_DP : PK_BF16_WIDEN;
    __m512 acc[PF_FTOKENS][2];
    pf_float_tile(kind, R, panel, xr, wtype == WT_F32 ? K : K / 2, ahead, lines, acc);
    for (int r = 0; r < R; r++) _mm512_storeu_ps(out[r], acc[r][0]), _mm512_storeu_ps(out[r] + 16, acc[r][1]);
}
#else
static inline __attribute__((always_inline)) void panel_tile_c(int64_t wtype, const uint8_t *restrict panel,
                                                               const float *restrict x, const int R, int64_t K,
                                                               float out[][PANEL]) {
    float acc[4][PANEL], odd[4][PANEL]; /* odd: bf16 pairs' odd halves, summed apart */
    for (int r = 0; r < R; r++)
        for (int i = 0; i < PANEL; i++) acc[r][i] = odd[r][i] = 0.0f;
    if (wtype == WT_F32) {
        const float *restrict w = (const float *)panel;
        for (int64_t k = 0; k < K; k++)
            for (int r = 0; r < R; r++) {
                const float xk = x[r * K + k];
                for (int i = 0; i < PANEL; i++) acc[r][i] += w[k * PANEL + i] * xk;
            }
    } else {
        const uint32_t *restrict w = (const uint32_t *)panel;
        for (int64_t s = 0; s < K / 2; s++)
            for (int r = 0; r < R; r++) {
                const float xe = x[r * K + 2 * s], xo = x[r * K + 2 * s + 1];
                for (int i = 0; i < PANEL; i++) acc[r][i] += pair_even(w[s * PANEL + i]) * xe;
                for (int i = 0; i < PANEL; i++) odd[r][i] += pair_odd(w[s * PANEL + i]) * xo;
            }
        for (int r = 0; r < R; r++)
            for (int i = 0; i < PANEL; i++) acc[r][i] += odd[r][i];
    }
    for (int r = 0; r < R; r++) memcpy(out[r], acc[r], sizeof acc[r]);
}

/* One token against DECODE_STREAMS panels `stride` bytes apart at once (a memory stream each): each
 * row's sums made with panel_tile_c's operations for one token, so decode equals a verify pass bit for bit. */
static void panel_streams_c(int64_t wtype, const uint8_t *restrict panel, int64_t stride, const float *restrict x,
                            int64_t K, float out[][PANEL]) {
    float acc[DECODE_STREAMS][PANEL], odd[DECODE_STREAMS][PANEL];
    for (int p = 0; p < DECODE_STREAMS; p++)
        for (int i = 0; i < PANEL; i++) acc[p][i] = odd[p][i] = 0.0f;
    if (wtype == WT_F32) {
        for (int64_t k = 0; k < K; k++) {
            const float xk = x[k];
            for (int p = 0; p < DECODE_STREAMS; p++) {
                const float *restrict w = (const float *)(panel + p * stride) + k * PANEL;
                for (int i = 0; i < PANEL; i++) acc[p][i] += w[i] * xk;
            }
        }
    } else {
        for (int64_t s = 0; s < K / 2; s++) {
            const float xe = x[2 * s], xo = x[2 * s + 1];
            for (int p = 0; p < DECODE_STREAMS; p++) {
                const uint32_t *restrict w = (const uint32_t *)(panel + p * stride) + s * PANEL;
                for (int i = 0; i < PANEL; i++) acc[p][i] += pair_even(w[i]) * xe;
                for (int i = 0; i < PANEL; i++) odd[p][i] += pair_odd(w[i]) * xo;
            }
        }
        for (int p = 0; p < DECODE_STREAMS; p++)
            for (int i = 0; i < PANEL; i++) acc[p][i] += odd[p][i];
    }
    for (int p = 0; p < DECODE_STREAMS; p++) memcpy(out[p], acc[p], sizeof acc[p]);
}

static void float_panel_tokens(int64_t wtype, const uint8_t *panel, const float *x, const uint16_t *xb, int R,
                               int64_t K, float out[][PANEL], const char *ahead, int64_t lines) {
    (void)xb;
#ifndef PF_AVX2
    (void)ahead, (void)lines; /* plain C leaves the next panel to the hardware prefetcher */
#endif
    switch (R) { /* a constant R per call: its sums stay in registers */
#ifdef PF_AVX2
    case 1: pf_avx2_tile(wtype == WT_BF16, 1, panel, x, K, ahead, lines, out); break;
    case 2: pf_avx2_tile(wtype == WT_BF16, 2, panel, x, K, ahead, lines, out); break;
    default: pf_avx2_tile(wtype == WT_BF16, 3, panel, x, K, ahead, lines, out); break;
#else
    case 1: panel_tile_c(wtype, panel, x, 1, K, out); break;
    case 2: panel_tile_c(wtype, panel, x, 2, K, out); break;
    case 3: panel_tile_c(wtype, panel, x, 3, K, out); break;
    default: panel_tile_c(wtype, panel, x, 4, K, out); break;
#endif
    }
}
#endif

/* R tokens (rows r0 .. r0 + R of x quantised) against one int8 or 4-bit panel: out[r][i] = row i's
 * sums (before int8's row scale). VNNI: prefill.h's integer tile; otherwise int_panels.h's. */
static void int_panel_tokens(int64_t wtype, const uint8_t *panel, const QuantX *qx, int64_t r0, int R, int64_t K,
                             float out[][PANEL], const char *ahead, int64_t lines) {
#ifdef PF_VNNI
    const int64_t blocks = K / QBLOCK;
    const int8_t *xq[PF_QTOKENS];
    const float *xs[PF_QTOKENS];
    const int32_t *xsum[PF_QTOKENS];
    for (int r = 0; r < R; r++)
        xq[r] = qx->q + (r0 + r) * K, xs[r] = qx->scale + (r0 + r) * blocks, xsum[r] = qx->sum + (r0 + r) * blocks;
    __m512 acc[PF_QTOKENS][2];
    switch (R) { /* a constant kind and R per call: the tile's loops unroll into registers */
#define INT_TILE(n)                                                                                              \
    case n:                                                                                                      \
        if (wtype == WT_I8) pf_tile_int(PK_I8, n, panel, xq, xs, xsum, K, ahead, lines, acc);                    \
        else pf_tile_int(PK_Q4, n, panel, xq, xs, xsum, K, ahead, lines, acc);                                   \
        break;
        INT_TILE(1) INT_TILE(2) INT_TILE(3) INT_TILE(4) INT_TILE(5) default: INT_TILE(6)
#undef INT_TILE
    }
    for (int r = 0; r < R; r++) _mm512_storeu_ps(out[r], acc[r][0]), _mm512_storeu_ps(out[r] + 16, acc[r][1]);
#else
    (void)ahead, (void)lines;
    QuantX rows[INT_MOST];
    const QuantX *xr[INT_MOST];
    for (int r = 0; r < R; r++) rows[r] = quant_row(qx, r0 + r, K), xr[r] = &rows[r];
    switch (R) {
#define INT_TILE(n)                                                                                              \
    case n:                                                                                                      \
        if (wtype == WT_I8) int_panels(WT_I8, 1, n, panel, 0, xr, K, out);                                       \
        else int_panels(WT_Q4, 1, n, panel, 0, xr, K, out);                                                      \
        break;
        INT_TILE(1) INT_TILE(2) INT_TILE(3) default: INT_TILE(4)
#undef INT_TILE
    }
#endif
}

/* The tokens a tile of one panel takes at most (its sums in registers). */
#ifdef PF_VNNI
#define INT_TILE_TOKENS PF_QTOKENS
#else
#define INT_TILE_TOKENS INT_MOST
#endif
static inline int panel_tile_tokens(int64_t wtype) {
    if (wtype == WT_I8 || wtype == WT_Q4) return INT_TILE_TOKENS;
#ifdef PF_PANELS
    if (wtype == WT_F32) return PF_FTOKENS;
    if (wtype == WT_BF16) return 6; /* 4 sums a token */
#elif defined(PF_AVX2)
    return PF_AVX2_TOKENS;
#endif
    return 4;
}
#define TILE_MOST 12 /* the most tokens a tile takes (PF_FTOKENS) */

/* One token against DECODE_STREAMS panels `stride` bytes apart at once (a memory stream each), each
 * row's sums made with its tile's operations for one token, so decode equals a verify pass bit for bit. */
static void panel_streams(int64_t wtype, const uint8_t *panel, int64_t stride, const float *x, const QuantX *qx,
                          int64_t K, float out[][PANEL]) {
    if (wtype == WT_I8 || wtype == WT_Q4) {
#ifdef PF_VNNI
        __m512 sums[DECODE_STREAMS][2];
        if (wtype == WT_I8) pf_streams_int(PK_I8, DECODE_STREAMS, panel, stride, qx->q, qx->scale, qx->sum, K, sums);
        else pf_streams_int(PK_Q4, DECODE_STREAMS, panel, stride, qx->q, qx->scale, qx->sum, K, sums);
        for (int j = 0; j < DECODE_STREAMS; j++) _mm512_storeu_ps(out[j], sums[j][0]), _mm512_storeu_ps(out[j] + 16, sums[j][1]);
#else
        const QuantX *xr[1] = {qx};
        if (wtype == WT_I8) int_panels(WT_I8, DECODE_STREAMS, 1, panel, stride, xr, K, out);
        else int_panels(WT_Q4, DECODE_STREAMS, 1, panel, stride, xr, K, out);
#endif
        return;
    }
#ifdef PF_PANELS
    __m512 sums[DECODE_STREAMS][2];
    if (wtype == WT_F32)
        pf_streams_token(PK_F32, DECODE_STREAMS, panel, stride, x, K, sums);
    else
        pf_streams_token(PK_BF16_WIDEN, DECODE_STREAMS, panel, stride, x, K / 2, sums);
    for (int j = 0; j < DECODE_STREAMS; j++) _mm512_storeu_ps(out[j], sums[j][0]), _mm512_storeu_ps(out[j] + 16, sums[j][1]);
#else
    panel_streams_c(wtype, panel, stride, x, K, out);
#endif
}

/* A panel's sums for one token into its row of y (n0 .. n0 + rows): times int8's row scales, plus
 * the bias. */
static inline void panel_store(const float sums[PANEL], const float *scale, const float *bias, float *restrict y,
                               int64_t n0, int64_t rows) {
    for (int64_t i = 0; i < rows; i++)
        y[n0 + i] = (scale ? sums[i] * scale[n0 + i] : sums[i]) + (bias ? bias[n0 + i] : 0.0f);
}

/* y [M][N] = x [M][K] W^T + b for a matrix (the integer types: x quantised in `qx` first; `xb`: x in
 * bf16 for BF16 products, or NULL), each thread taking its share of the panels, every token tile
 * meeting a panel while it sits in the cache. Decode, a verify pass and prefill. */
static void panel_products(const Mat *m, int64_t wtype, const float *restrict x, const QuantX *qx, const uint16_t *xb,
                           float *restrict y, int64_t M, int64_t N, int64_t K, int amx) {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t panels = (N + PANEL - 1) / PANEL, p0 = panels * t / threads, p1 = panels * (t + 1) / threads;
    const int64_t bytes = panel_bytes(wtype, K);
#ifdef WS_AMX
    if (amx) { /* the tiles: this thread's configuration loaded before its first tile operation */
        amx_begin(wtype == WT_BF16 ? AMX_BF16 : wtype == WT_I8 ? AMX_I8 : AMX_Q4);
        float out[AMX_TOKENS][PANEL] __attribute__((aligned(64)));
        const int64_t Kp = (K + AMX_KPAD - 1) / AMX_KPAD * AMX_KPAD, blocks = K / QBLOCK;
        for (int64_t p = p0; p < p1; p++) {
            const int64_t n0 = p * PANEL, rows = N - n0 < PANEL ? N - n0 : PANEL;
            const uint8_t *panel = panel_of(m, wtype, p, K);
            for (int64_t r0 = 0; r0 < M; r0 += AMX_TOKENS) {
                const int R = (int)(M - r0 < AMX_TOKENS ? M - r0 : AMX_TOKENS);
                if (wtype == WT_BF16)
                    amx_panel_bf16(panel, K, xb + r0 * Kp, Kp, R, out);
                else
                    amx_panel_int(wtype == WT_I8 ? AMX_I8 : AMX_Q4, panel, K, qx->q + r0 * K, qx->scale + r0 * blocks,
                                  qx->sum + r0 * blocks, R, out);
                for (int r = 0; r < R; r++) panel_store(out[r], m->scale, m->bias, y + (r0 + r) * N, n0, rows);
            }
        }
        amx_end();
        return;
    }
#else
    (void)amx;
#endif
#ifdef PF_PANELS
    const int most = xb ? PF_FTOKENS : panel_tile_tokens(wtype); /* BF16 products: 2 sums a token */
#else
    const int most = panel_tile_tokens(wtype);
#endif
    int64_t p = p0;
    if (M == 1) { /* decode: a thread's panels in DECODE_STREAMS parts, walked side by side (a long
                   * stream each; neighbouring panels at a time were 1.01-1.11x slower, most on AVX2) */
        const int64_t part = (p1 - p0) / DECODE_STREAMS;
        for (int64_t i = 0; i < part; i++) {
            float out[DECODE_STREAMS][PANEL];
            panel_streams(wtype, panel_of(m, wtype, p0 + i, K), part * bytes, x, qx, K, out);
            for (int j = 0; j < DECODE_STREAMS; j++) {
                const int64_t n0 = (p0 + j * part + i) * PANEL;
                panel_store(out[j], m->scale, m->bias, y, n0, N - n0 < PANEL ? N - n0 : PANEL);
            }
        }
        p = p0 + DECODE_STREAMS * part;
    }
    for (; p < p1; p++) {
        const int64_t n0 = p * PANEL, rows = N - n0 < PANEL ? N - n0 : PANEL;
        const uint8_t *panel = panel_of(m, wtype, p, K);
        const int64_t tiles = (M + most - 1) / most;
        for (int64_t i = 0, r0 = 0; i < tiles; i++) {
            const int R = (int)((M - r0 + (tiles - i) - 1) / (tiles - i)); /* the rest, spread evenly */
            float out[TILE_MOST][PANEL];
            /* the next panel on its way while this one computes, a share of its lines per tile; one
             * token leaves the contiguous stream to the hardware prefetcher (asking made decode 1.04x
             * slower on the Zen 5 EPYC, and prefill 1.14x slower without) */
            const int64_t all = p + 1 < p1 && M > 1 ? bytes / 64 : 0, share = (all + tiles - 1) / tiles;
            const int64_t first = i * share < all ? i * share : all, lines = all - first < share ? all - first : share;
            const char *ahead = (const char *)panel + bytes + first * 64;
            if (wtype == WT_I8 || wtype == WT_Q4)
                int_panel_tokens(wtype, panel, qx, r0, R, K, out, ahead, lines);
            else
                float_panel_tokens(wtype, panel, x + r0 * K, xb ? xb + r0 * K : NULL, R, K, out, ahead, lines);
            for (int r = 0; r < R; r++) panel_store(out[r], m->scale, m->bias, y + (r0 + r) * N, n0, rows);
            r0 += R;
        }
    }
}

/* Scratch of one forward call: `qx` shared (x quantised for the integer types), `xb` shared (x in
 * bf16 for BF16 products; NULL in decode). */
typedef struct {
    const QuantX *qx;
    uint16_t *xb;
} Scratch;

/* Decode's products for M tokens (rows of x [M][K]). Each token's products are the ones a one-token
 * decode makes, bit for bit (M == 1 is decode itself): a speculative verify pass checks M drafted
 * tokens for about one token's weight traffic. The integer types' tiles are these products too, so
 * their prefill is this. Called by every thread of the region. */
static void decode_products(const Mat *m, int64_t wtype, const float *restrict x, float *restrict y, int64_t M,
                            int64_t N, int64_t K, const QuantX *qx, int amx) {
    if (wtype == WT_I8 || wtype == WT_Q4) {
        const int64_t blocks = K / QBLOCK;
        #pragma omp for schedule(static) /* both threads quantise; the implied barrier shares it */
        for (int64_t rb = 0; rb < M * blocks; rb++) {
            const QuantX row = quant_row(qx, rb / blocks, K);
            quantise_block(x + rb / blocks * K, &row, rb % blocks);
        }
    }
    panel_products(m, wtype, x, qx, NULL, y, M, N, K, amx);
}

/* Whether a product of M tokens takes the AMX tiles: a build with the AMX unit, a type the tiles
 * multiply (bf16, int8, 4-bit), M at least the type's crossover, and the tiles' state granted to this
 * process. A verify pass (`exact`) only where the tiles' sums equal decode's bit for bit: the integer
 * types on a VNNI build (bf16 tiles round the tokens to bf16; decode multiplies float32). */
static int use_amx(int64_t wtype, int64_t M, int exact) {
#ifdef WS_AMX
    if (M < 2 || wtype == WT_F32 || amx_min_tokens[wtype] <= 0 || M < amx_min_tokens[wtype]) return 0;
#ifdef PF_VNNI
    if (exact && wtype == WT_BF16) return 0;
#else
    if (exact) return 0;
#endif
    return amx_ready();
#else
    (void)wtype, (void)M, (void)exact;
    return 0;
#endif
}

#ifdef WS_AMX
/* A row of x in bf16 (round to nearest even, as vcvtne2ps2bf16), zeros from K to Kp; x NULL: all zeros
 * (the rows that pad M to whole tiles). */
static void to_bf16_padded(const float *restrict x, uint16_t *restrict xb, int64_t K, int64_t Kp) {
    int64_t k = 0;
    if (x) {
#ifdef PF_BF16
        pf_to_bf16_row(x, xb, K);
        k = K;
#else
        for (; k < K; k++) {
            uint32_t u;
            memcpy(&u, x + k, 4);
            xb[k] = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
        }
#endif
    }
    for (; k < Kp; k++) xb[k] = 0;
}
#endif

/* y[m, n] = x[m] . W[n] + b[n] for M rows of x [M][K], W [N][K]: called by every thread of the
 * parallel region, each taking its share of W's panels; ends with a barrier. One token (decode)
 * streams W once; more (prefill, scoring) take the panels' tiles, bf16's with BF16 products where
 * this CPU has them. `exact`: decode's products for every row of x (decode_products). */
static void matmul(const Mat *m, int64_t wtype, const float *restrict x, float *restrict y, int64_t M,
                   int64_t N, int64_t K, const Scratch *sc, int exact) {
#ifdef PF_BF16
    if (wtype == WT_BF16 && M > 1 && !exact && !use_amx(wtype, M, exact)) { /* BF16 products: the tokens rounded to bf16 once for every row's */
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < M; r++) pf_to_bf16_row(x + r * K, sc->xb + r * K, K);
        panel_products(m, wtype, x, sc->qx, sc->xb, y, M, N, K, 0);
        #pragma omp barrier
        return;
    }
#endif
    const int amx = use_amx(wtype, M, exact);
#ifdef WS_AMX
    if (amx && wtype == WT_BF16) { /* the tokens in bf16, each row padded with zeros to whole tiles */
        const int64_t Kp = (K + AMX_KPAD - 1) / AMX_KPAD * AMX_KPAD, Mp = (M + AMX_PAD - 1) / AMX_PAD * AMX_PAD;
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < Mp; r++) to_bf16_padded(r < M ? x + r * K : NULL, sc->xb + r * Kp, K, Kp);
        panel_products(m, wtype, x, sc->qx, sc->xb, y, M, N, K, 1);
        #pragma omp barrier
        return;
    }
#endif
    decode_products(m, wtype, x, y, M, N, K, sc->qx, amx); /* decode's own products: prefill computes alike */
    #pragma omp barrier
}

/* ---- the rest of a layer -------------------------------------------------------------------- */

static void layer_norm(const float *restrict x, float *restrict out, const float *restrict w,
                       const float *restrict b, int64_t d, float eps) {
    float mean = 0.0f, var = 0.0f;
    for (int64_t i = 0; i < d; i++) mean += x[i];
    mean /= (float)d;
    for (int64_t i = 0; i < d; i++) var += (x[i] - mean) * (x[i] - mean);
    const float inv = 1.0f / sqrtf(var / (float)d + eps);
    for (int64_t i = 0; i < d; i++) out[i] = (x[i] - mean) * inv * w[i] + b[i];
}

/* GPT-2's tanh GELU: 0.5 x (1 + tanh(u)) == x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3). */
static void gelu(float *restrict x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i], u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        x[i] = v / (1.0f + expf(-2.0f * u));
    }
}

/* A head's keys or values in the cache (float32, or 8-bit rows with a scale each). */
static KvHead kv_head(const Model *md, int values, int64_t layer, int64_t h) {
    const int64_t H = md->n_head, hd = md->n_embd / H, S = md->max_seq, row0 = (layer * H + h) * S;
    if (md->kq_cache) {
        const KvHead kv = {NULL, (values ? md->vq_cache : md->kq_cache) + row0 * hd, (values ? md->v_scale : md->k_scale) + row0};
        return kv;
    }
    const KvHead kv = {(values ? md->v_cache : md->k_cache) + row0 * hd, NULL, NULL};
    return kv;
}

/* Causal attention for T queries at positions [pos, pos+T), heads split across threads.
 * qkv [T][3d] (q | k | v, each head's hd contiguous), out [T][d]; scores scratch [threads][max_seq];
 * `tiles` each thread's att_scratch (NULL in decode). */
static void attention(const Model *md, int64_t layer, const float *restrict qkv, float *restrict out,
                      int64_t T, int64_t pos, float *scores_all, uint8_t *tiles) {
    const int64_t d = md->n_embd, H = md->n_head, hd = d / H, S = md->max_seq;
    const float scale = 1.0f / sqrtf((float)hd);
    float *scores = scores_all + omp_get_thread_num() * S;
    #pragma omp for schedule(static)
    for (int64_t h = 0; h < H; h++) {
        const KvHead k = kv_head(md, 0, layer, h), v = kv_head(md, 1, layer, h);
#ifdef PF_PANELS
        if (tiles && T >= ATT_MIN_TILED) {
            att_head_tiles(&k, &v, qkv + h * hd, 3 * d, out + h * hd, d, T, pos, hd, scale,
                           tiles + omp_get_thread_num() * att_scratch(S, hd), S);
            continue;
        }
#else
        (void)tiles;
#endif
        for (int64_t t = 0; t < T; t++)
            att_query(&k, &v, qkv + t * 3 * d + h * hd, pos + t + 1, hd, scale, scores, out + t * d + h * hd);
    }
}

/* Keys and values of T tokens into the cache at [pos, pos+T) (an 8-bit cache: each row quantised). */
static void kv_write(const Model *md, int64_t layer, const float *restrict qkv, int64_t T, int64_t pos) {
    const int64_t d = md->n_embd, H = md->n_head, hd = d / H, S = md->max_seq;
    #pragma omp for schedule(static)
    for (int64_t h = 0; h < H; h++)
        for (int64_t t = 0; t < T; t++) {
            const int64_t row = (layer * H + h) * S + pos + t;
            const float *key = qkv + t * 3 * d + d + h * hd, *value = qkv + t * 3 * d + 2 * d + h * hd;
            if (md->kq_cache) {
                kv_quantise_row(key, md->kq_cache + row * hd, md->k_scale + row, hd);
                kv_quantise_row(value, md->vq_cache + row * hd, md->v_scale + row, hd);
            } else {
                memcpy(md->k_cache + row * hd, key, hd * sizeof(float));
                memcpy(md->v_cache + row * hd, value, hd * sizeof(float));
            }
        }
}

#ifdef PF_PANELS
#define ATT_BYTES(S, hd) att_scratch(S, hd)
#else
#define ATT_BYTES(S, hd) ((size_t)0)
#endif

#define DECODE_FLOAT_PATH "panels of 32 rows in two streams a thread"
#define DECODE_BF16_PATH "bf16 widened in registers, float32 sums, " DECODE_FLOAT_PATH
#if defined(PF_VNNI)
#define INT_PANELS "avx512-vnni panel tiles (vpdpbusd"
#elif defined(__AVX2__) && defined(__FMA__)
#define INT_PANELS "avx2 maddubs panel tiles (no AVX-512 VNNI on this CPU"
#else
#define INT_PANELS "plain C integer panel tiles (no AVX2 on this CPU"
#endif
#define DECODE_INT_PATH INT_PANELS ", int8 activations per block of 32), " DECODE_FLOAT_PATH

/* ---- the step's scratch ----------------------------------------------------------------------- */

#define SCRATCH_ALIGN 64

typedef struct {
    float *x, *h, *big, *att; /* x: residual [T][d]; h: normed [T][d]; big: qkv or fc [T][widest]; att: [T][d] */
    float *scores, *rows;     /* [threads][max_seq] attention scores; [threads][d] embedding rows, widened */
    QuantX qx;                /* x quantised: T rows of up to `widest` */
    uint16_t *xb;             /* prefill only (a decode step needs no more): x in bf16 */
    uint8_t *tiles;           /* prefill's attention tiles, [threads] of att_scratch, or NULL */
} StepScratch;

/* Lays the scratch of a T-token step out from `base` (NULL: only counts) and returns its bytes,
 * each part aligned to SCRATCH_ALIGN. */
static size_t step_scratch(const Model *md, int64_t T, int threads, int exact, uint8_t *base, StepScratch *sp) {
    const int64_t d = md->n_embd, inner = md->n_inner, widest = inner > 3 * d ? inner : 3 * d;
    const int64_t blocks = T * (widest / QBLOCK) + 1;
#ifdef WS_AMX /* the AMX tiles load the tokens' rows 16 at a time, bf16 rows in whole tiles of 32 */
    const int64_t rows_q = (T + AMX_PAD - 1) / AMX_PAD * AMX_PAD, kb = (widest + AMX_KPAD - 1) / AMX_KPAD * AMX_KPAD;
#else
    const int64_t rows_q = T, kb = widest;
#endif
    const size_t tile_bytes = T >= ATT_MIN_TILED && !exact ? ATT_BYTES(md->max_seq, d / md->n_head) : 0;
    size_t used = 0;
#define PART(FIELD, TYPE, COUNT)                                                                   \
    do {                                                                                           \
        sp->FIELD = (COUNT) > 0 && base ? (TYPE *)(base + used) : NULL;                             \
        used += ((sizeof(TYPE) * (size_t)(COUNT) + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN) * SCRATCH_ALIGN; \
    } while (0)
    PART(x, float, T * d); PART(h, float, T * d); PART(big, float, T * widest); PART(att, float, T * d);
    PART(scores, float, threads * md->max_seq); PART(rows, float, threads * d);
    PART(qx.q, int8_t, rows_q * widest); PART(qx.scale, float, blocks); PART(qx.sum, int32_t, blocks);
    PART(xb, uint16_t, T > 1 ? rows_q * kb : 0); PART(tiles, uint8_t, tile_bytes * threads);
#undef PART
    return used;
}

/* The scratch bytes a step of up to T tokens needs with the team as it is now (the engine keeps a
 * buffer of this size for the model's whole context: untouched pages cost no memory). */
int64_t gpt2_scratch_bytes(const Model *md, int64_t T) {
    StepScratch sp;
    return (int64_t)step_scratch(md, T, omp_get_max_threads(), 0, NULL, &sp);
}

/* ---- the step -------------------------------------------------------------------------------- */

#define TICK(CAT)                                                                                  \
    do {                                                                                           \
        if (timing) { const int64_t t1 = now_ns(); md->timers[CAT] += t1 - t0; t0 = t1; }          \
    } while (0)

/* T tokens `ids` at positions [pos, pos+T) -> logits [T][V] (`all_logits`) or [V] for the last
 * position. `exact`: every token's products made as decode makes them (decode_products) and its
 * attention read query by query, so each position's logits equal a one-token decode's bit for bit
 * (a speculative verify pass); otherwise T > 1 takes prefill's products and tiles. Returns 0, or -1
 * when scratch memory could not be had. The caller checks the range. */
int gpt2_forward(const Model *md, const int32_t *ids, int64_t T, int64_t pos, float *logits, int all_logits,
                 int exact) {
    const int64_t d = md->n_embd, inner = md->n_inner, V = md->vocab, wt = md->wtype;
    const int64_t rows_out = all_logits ? T : 1;
    const int threads = omp_get_max_threads();
    StepScratch sp;
    const size_t need = step_scratch(md, T, threads, exact, NULL, &sp);
    /* The model's own scratch when it is large enough: its pages stay mapped between calls, so a
     * step pays no page faults for it (a fresh block each call faulted ~350 pages at 50 tokens). */
    const int kept = md->scratch && (int64_t)need <= md->scratch_bytes;
    uint8_t *fresh = kept ? NULL : aligned_alloc(SCRATCH_ALIGN, need);
    const int failed = !kept && !fresh;
    step_scratch(md, T, threads, exact, kept ? md->scratch : fresh, &sp);
    float *x = sp.x, *h = sp.h, *big = sp.big, *att = sp.att, *scores = sp.scores, *rows = sp.rows;
    QuantX qx = sp.qx;
    uint16_t *xb = sp.xb;
    uint8_t *tiles = sp.tiles;
    if (!failed) {
        const int timing = md->timers != NULL;
        #pragma omp parallel
        {
            int64_t t0 = timing ? now_ns() : 0;
            const int main_thread = omp_get_thread_num() == 0;
            float *buf = rows + omp_get_thread_num() * d;
            const Scratch sc = {&qx, xb};
            #pragma omp for schedule(static)
            for (int64_t t = 0; t < T; t++) { /* the embedding is the lm_head's row, at its stored type */
                const float *row = widen_row(&md->lm_head, wt, ids[t], d, buf);
                for (int64_t i = 0; i < d; i++) x[t * d + i] = row[i] + md->wpe[(pos + t) * d + i];
            }
            if (main_thread) TICK(T_OTHER);
            for (int64_t l = 0; l < md->n_layer; l++) {
                const Layer *ly = &md->layers[l];
                /* After the last layer's keys and values, only the rows whose logits are asked for
                 * go on: the others' outputs feed nothing (llama.cpp's unused outputs, likewise). */
                const int64_t skip = l == md->n_layer - 1 ? T - rows_out : 0, R = T - skip;
                float *xr = x + skip * d, *hr = h + skip * d, *ar = att + skip * d;
                #pragma omp for schedule(static)
                for (int64_t t = 0; t < T; t++) layer_norm(x + t * d, h + t * d, ly->ln1_w, ly->ln1_b, d, md->eps);
                if (main_thread) TICK(T_NORM_ACT);
                matmul(&ly->qkv, wt, h, big, T, 3 * d, d, &sc, exact);
                if (main_thread) TICK(T_MATMUL);
                kv_write(md, l, big, T, pos);
                if (main_thread) TICK(T_KV);
                attention(md, l, big + skip * 3 * d, ar, R, pos + skip, scores, tiles);
                if (main_thread) TICK(T_ATTENTION);
                matmul(&ly->proj, wt, ar, hr, R, d, d, &sc, exact);
                if (main_thread) TICK(T_MATMUL);
                #pragma omp for schedule(static)
                for (int64_t t = 0; t < R; t++) {
                    for (int64_t i = 0; i < d; i++) xr[t * d + i] += hr[t * d + i];
                    layer_norm(xr + t * d, hr + t * d, ly->ln2_w, ly->ln2_b, d, md->eps);
                }
                if (main_thread) TICK(T_NORM_ACT);
                matmul(&ly->fc, wt, hr, big, R, inner, d, &sc, exact);
                if (main_thread) TICK(T_MATMUL);
                #pragma omp for schedule(static)
                for (int64_t t = 0; t < R; t++) gelu(big + t * inner, inner);
                if (main_thread) TICK(T_NORM_ACT);
                matmul(&ly->fc2, wt, big, hr, R, d, inner, &sc, exact);
                if (main_thread) TICK(T_MATMUL);
                #pragma omp for schedule(static)
                for (int64_t t = 0; t < R; t++)
                    for (int64_t i = 0; i < d; i++) xr[t * d + i] += hr[t * d + i];
                if (main_thread) TICK(T_OTHER);
            }
            const int64_t first = T - rows_out; /* the lm_head only for the rows asked for */
            #pragma omp for schedule(static)
            for (int64_t t = first; t < T; t++) layer_norm(x + t * d, h + (t - first) * d, md->lnf_w, md->lnf_b, d, md->eps);
            if (main_thread) TICK(T_NORM_ACT);
            matmul(&md->lm_head, wt, h, logits, rows_out, V, d, &sc, exact);
            if (main_thread) TICK(T_MATMUL);
        }
    }
    free(fresh);
    return failed ? -1 : 0;
}

/* One matrix product y [M][N] = x [M][K] W^T + b as the step makes it (decode's products for one
 * row, prefill's for more), in a parallel region of its own: tests hold each path to a reference on
 * any shape. Returns 0, or -1 when scratch memory could not be had. */
int gpt2_matmul(const Mat *m, int64_t wtype, const float *x, float *y, int64_t M, int64_t N, int64_t K) {
    const int64_t blocks = M * (K / QBLOCK) + 1;
    const int64_t Mp = (M + 15) / 16 * 16, Kp = (K + 31) / 32 * 32; /* the AMX tiles' padding */
    QuantX qx = {malloc(Mp * K + 64), malloc(sizeof(float) * blocks), malloc(sizeof(int32_t) * blocks)};
    uint16_t *xb = malloc(sizeof(uint16_t) * Mp * Kp + 64);
    const int failed = !qx.q || !qx.scale || !qx.sum || !xb;
    if (!failed) {
        #pragma omp parallel
        {
            const Scratch sc = {&qx, xb};
            matmul(m, wtype, x, y, M, N, K, &sc, 0);
        }
    }
    free(qx.q); free(qx.scale); free(qx.sum); free(xb);
    return failed ? -1 : 0;
}

/* The threads this library's OpenMP runtime will use (set before the first call). */
void gpt2_set_threads(int threads) { if (threads > 0) omp_set_num_threads(threads); }

/* The step's team bound one thread to a CPU (affinity.h). */
int gpt2_bind_threads(const int *cpus, int n) { return bind_team(cpus, n); }
int gpt2_threads(void) { return omp_get_max_threads(); }

/* Which instructions this build's products use for a weight type (the engine's notes say it), and the
 * arithmetic of its prefill: 0 float32, 1 bf16, 2 int8 (the roofline's peak is that arithmetic's). */
static const char *vector_paths(int wtype) {
    switch (wtype) {
    case WT_F32:
#if defined(PF_PANELS)
        return "prefill: avx512f float32 GEMM on the stored panels of 32 rows (tiles of up to 12 tokens); decode: " DECODE_FLOAT_PATH;
#elif defined(PF_AVX2)
        return "prefill: avx2 float32 panel tiles of 3 tokens (no AVX-512 on this CPU); decode: " DECODE_FLOAT_PATH;
#else
        return "prefill: float32 panel tiles of 4 tokens in plain C (no AVX2 on this CPU); decode: " DECODE_FLOAT_PATH;
#endif
    case WT_BF16:
#if defined(PF_BF16)
        return "prefill: avx512-bf16 GEMM (vdpbf16ps, tokens rounded to bf16, float32 sums); decode: " DECODE_BF16_PATH;
#elif defined(PF_PANELS)
        return "prefill: avx512f GEMM, bf16 pairs widened to float32 in registers (no BF16 products on this CPU); decode: " DECODE_BF16_PATH;
#elif defined(PF_AVX2)
        return "prefill: avx2 panel tiles of 3 tokens, bf16 pairs widened to float32 in registers (no AVX-512 on this CPU); decode: " DECODE_BF16_PATH;
#else
        return "prefill: bf16 pairs widened to float32, panel tiles of 4 tokens in plain C (no AVX2 on this CPU); decode: " DECODE_BF16_PATH;
#endif
    default:
        return "prefill: " INT_PANELS ", tiles of up to " PF_STR(INT_TILE_TOKENS) " tokens on the stored panels of 32 rows, int32 sums per block); decode: " DECODE_INT_PATH;
    }
}

const char *gpt2_paths(int wtype) {
    const char *paths = vector_paths(wtype);
#ifdef WS_AMX
    static __thread char text[4][768];
    const int least = wtype >= 0 && wtype < 4 ? amx_min_tokens[wtype] : 0;
    if (least > 0) { /* the tiles from the crossover on, the vector path below it (and in decode) */
        const char *tiles = wtype == WT_BF16 ? "tdpbf16ps, tokens rounded to bf16, float32 sums"
                            : wtype == WT_I8 ? "tdpbsud, int32 sums per block of 32"
                                             : "tdpbsud on the panels unpacked to int8, int32 sums per block of 32";
        snprintf(text[wtype], sizeof text[wtype], "prefill: %s tiles (%s) from %d tokens, below them %s", amx_tiles_impl(),
                 tiles, least, paths + strlen("prefill: "));
        return text[wtype];
    }
#endif
    return paths;
}

int gpt2_prefill_arithmetic(int wtype) {
    if (wtype == WT_I8 || wtype == WT_Q4) return 2;
#ifdef PF_BF16
    if (wtype == WT_BF16) return 1;
#endif
#ifdef WS_AMX
    if (wtype == WT_BF16 && amx_min_tokens[WT_BF16] > 0) return 1; /* from the crossover on */
#endif
    return 0;
}

/* The AMX tiles' crossover for a weight type: products of at least `tokens` tokens take the tiles
 * (0 or less: never; 2: every product of more than one token, as the tests run them). No effect on
 * a build without the AMX unit. */
void gpt2_set_amx_min_tokens(int wtype, int tokens) {
#ifdef WS_AMX
    if (wtype == WT_BF16 || wtype == WT_I8 || wtype == WT_Q4) amx_min_tokens[wtype] = tokens > 0 ? tokens : 0;
#else
    (void)wtype, (void)tokens;
#endif
}

/* The crossover in force (0: this build's products never take the tiles for the type). */
int gpt2_amx_min_tokens(int wtype) {
#ifdef WS_AMX
    if (wtype == WT_BF16 || wtype == WT_I8 || wtype == WT_Q4) return amx_min_tokens[wtype];
#endif
    (void)wtype;
    return 0;
}

/* The tiles this build links: "amx", "amx tile model (plain C)" (tests), or "" (none). */
const char *gpt2_amx_tiles(void) {
#ifdef WS_AMX
    return amx_tiles_impl();
#else
    return "";
#endif
}

/* Each struct's size, each field's offset and size, as this compiler lays them out ("Mat=24;Mat.w=0:8;..."):
 * the ctypes side (engines/native/step.py) compares them with its own at load, so a struct edited on
 * one side only is an error there instead of the step reading the wrong memory. */
static void put_layout(char *text, size_t size, size_t *used, const char *name, size_t value, long field_size) {
    if (*used < size)
        *used += (size_t)snprintf(text + *used, size - *used, "%s%s=%zu", *used ? ";" : "", name, value);
    if (field_size >= 0 && *used < size)
        *used += (size_t)snprintf(text + *used, size - *used, ":%ld", field_size);
}

const char *gpt2_layout(void) {
    static char text[2048];
    size_t used = 0;
#define STRUCT(S) put_layout(text, sizeof text, &used, #S, sizeof(S), -1)
#define FIELD(S, F) put_layout(text, sizeof text, &used, #S "." #F, offsetof(S, F), (long)sizeof(((S *)0)->F))
    STRUCT(Mat); FIELD(Mat, w); FIELD(Mat, scale); FIELD(Mat, bias);
    STRUCT(Layer); FIELD(Layer, ln1_w); FIELD(Layer, ln1_b); FIELD(Layer, ln2_w); FIELD(Layer, ln2_b);
    FIELD(Layer, qkv); FIELD(Layer, proj); FIELD(Layer, fc); FIELD(Layer, fc2);
    STRUCT(Model); FIELD(Model, n_layer); FIELD(Model, n_head); FIELD(Model, n_embd); FIELD(Model, n_inner);
    FIELD(Model, vocab); FIELD(Model, max_seq); FIELD(Model, wtype); FIELD(Model, eps); FIELD(Model, wpe);
    FIELD(Model, lnf_w); FIELD(Model, lnf_b); FIELD(Model, lm_head); FIELD(Model, layers); FIELD(Model, k_cache);
    FIELD(Model, v_cache); FIELD(Model, timers); FIELD(Model, kq_cache); FIELD(Model, vq_cache);
    FIELD(Model, k_scale); FIELD(Model, v_scale); FIELD(Model, scratch); FIELD(Model, scratch_bytes);
#undef STRUCT
#undef FIELD
    return text;
}
