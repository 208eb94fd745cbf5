/* GPT-2's whole forward pass in one C call: T tokens at positions [pos, pos+T) through every
 * layer, the KV cache written in place, logits out. One-token decode is one call and one OpenMP
 * parallel region, so nothing but the products' weight traffic and a few barriers stands between
 * a token and the memory floor (no interpreter, no framework dispatch, no thread pool wake-ups
 * between operations).
 *
 * Weights are [out, in] rows ("Mat") in one of four stored types:
 *   WT_F32   float32
 *   WT_BF16  bfloat16 as raw uint16, widened in registers (float32 sums): decode widens a
 *            pair of weights per 32-bit lane by a shift and a mask against x de-interleaved
 *   WT_I8    int8 with one float32 scale per row (symmetric)
 *   WT_Q4    4-bit, blocks of 32 along `in` with one float32 scale each, as value + 8, in
 *            groups of four blocks (a row whose block count is 2 mod 4 ends with a group of
 *            two), each group one record: its G scales, then its nibbles, interleaved so that
 *            one int32 lane of the summed products belongs to one block (see q4_position).
 *            20 bytes per block, one memory stream per row; rows are multiples of 64
 * For both integer types decode quantises the activations to int8 per block of 32 and sums the
 * products in int32 (as llama.cpp's q8_0/q4_0 and ONNX Runtime's MatMulNBits at accuracy level
 * 4 do): widening every weight to float32 made the products compute-bound on AVX2.
 * Everything else (embeddings, norms, biases, the KV cache, attention) is float32.
 *
 * Decode (T == 1) streams each matrix once: every thread takes a block of rows and walks four
 * quarters of it at once (four memory streams per core, as kernels/gemv.c). Prefill (T > 1)
 * widens two float32/bf16 weight rows at a time into a thread's buffer and multiplies them with
 * four tokens at once (compute-bound: each weight is used T times); int8/q4 prefill makes
 * decode's integer products token by token, so prefill, decode and scoring compute alike.
 * A verify pass (`exact`, speculative decoding) makes decode's own products for each of its T
 * tokens, reading each group of rows once for all of them (decode_products).
 *
 * Plain C compiled with -O3 -march=native -ffast-math -fopenmp: the compiler vectorises the
 * inner loops for the CPU at hand; the hand-written AVX2 parts (the int8 and q4 x int8 products,
 * the activations' quantisation) have plain-C twins.
 * Per-category nanoseconds (matmul, attention, KV, norm/act, other) are summed by thread 0 when
 * `timers` is set: a profile's breakdown without a profiler. */
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

#include "products.h" /* the row products gemv.c makes too */

enum { WT_F32 = 0, WT_BF16 = 1, WT_I8 = 2, WT_Q4 = 3 };
enum { T_MATMUL = 0, T_ATTENTION = 1, T_KV = 2, T_NORM_ACT = 3, T_OTHER = 4, T_COUNT = 5 };
#define QBLOCK 32

typedef struct {
    const void *w;       /* [N][K] (WT_Q4: [N][K/32 * 20] bytes of records) */
    const float *scale;  /* WT_I8: [N]; otherwise NULL (WT_Q4's are in its records) */
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
} Model;

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* x quantised to int8 per block of 32 for the integer products: values, scales, and (for q4's
 * unsigned nibbles) 8 * scale * sum of the block's values. */
typedef struct {
    int8_t *q;     /* [K] */
    float *scale;  /* [K/32] */
    float *offset; /* [K/32]: 8 * scale * sum(q of the block) */
    int32_t *sum;  /* [K/32]: sum(q of the block), or NULL (prefill's VNNI products need it) */
} QuantX;

/* Row r of x quantised, in scratch that holds M rows of K. */
static inline QuantX quant_row(const QuantX *qx, int64_t r, int64_t K) {
    const QuantX row = {qx->q + r * K, qx->scale + r * (K / QBLOCK), qx->offset + r * (K / QBLOCK),
                        qx->sum ? qx->sum + r * (K / QBLOCK) : NULL};
    return row;
}

/* q4's groups: four blocks, or two for the last group of a row whose block count is 2 mod 4. */
static inline int64_t q4_group_start(int64_t b, int64_t blocks) {
    const int64_t quads = blocks / 4 * 4;
    return b < quads ? b / 4 * 4 : quads;
}
static inline int64_t q4_group_size(int64_t start, int64_t blocks) { return blocks - start >= 4 ? 4 : 2; }

/* Where element j of block `beta` of a group of G blocks sits among the group's G * 32 nibbles,
 * counted as G vectors ("slots") of 32 lanes: slot s is the low (s even) or high (s odd) nibbles
 * of the group's 32-byte word s / 2. Lanes go in runs of four elements; run g of every slot
 * belongs to block g % G, so after maddubs and madd(ones) int32 lane g holds a sum from block
 * g % G alone, and the G slots' products can be added in int16 (G * 15 * 127 * 2 fits) before
 * one conversion and one scaled add per group instead of one per block. The activations are
 * quantised into the same order (slot s at byte s * 32 of the group). */
static inline int64_t q4_position(int64_t G, int64_t beta, int64_t j) {
    const int64_t run = j / 4, per_slot = 8 / G; /* runs of one block in one slot */
    const int64_t slot = run / per_slot, g = (run % per_slot) * G + beta;
    return slot * 32 + g * 4 + j % 4;
}

#if defined(__AVX2__) && defined(__FMA__)
/* quantise_block in registers (the same values: cvtps rounds to nearest even as lrintf does): a
 * decode step quantises thousands of blocks, a measurable part of an int4 step in scalar code. The
 * 32 values leave as eight 4-element runs, each stored where q4_position puts it. */
static void quantise_block(const float *restrict x, const QuantX *qx, int64_t blocks, int64_t b, int q4_order) {
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
    const __m256i runs = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    if (q4_order) {
        const int64_t start = q4_group_start(b, blocks), G = q4_group_size(start, blocks);
        int32_t word[8];
        _mm256_storeu_si256((__m256i *)word, runs);
        for (int run = 0; run < 8; run++)
            memcpy(qx->q + start * QBLOCK + q4_position(G, b - start, 4 * run), &word[run], 4);
    } else {
        _mm256_storeu_si256((__m256i *)(qx->q + b * QBLOCK), runs);
    }
    qx->scale[b] = scale;
    qx->offset[b] = 8.0f * scale * (float)sum;
    if (qx->sum) qx->sum[b] = sum;
}
#else
/* Block b of x quantised (of `blocks` per row); `q4_order` writes its values where q4_position
 * puts its weights (scales and offsets stay per block, in order). */
static void quantise_block(const float *restrict x, const QuantX *qx, int64_t blocks, int64_t b, int q4_order) {
    const float *xb = x + b * QBLOCK;
    float amax = 0.0f;
    for (int j = 0; j < QBLOCK; j++) amax = fmaxf(amax, fabsf(xb[j]));
    const float scale = amax / 127.0f, inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    const int64_t start = q4_group_start(b, blocks), G = q4_group_size(start, blocks);
    int32_t sum = 0;
    for (int j = 0; j < QBLOCK; j++) {
        const int8_t v = (int8_t)lrintf(xb[j] * inv);
        qx->q[q4_order ? start * QBLOCK + q4_position(G, b - start, j) : b * QBLOCK + j] = v;
        sum += v;
    }
    qx->scale[b] = scale;
    qx->offset[b] = 8.0f * scale * (float)sum;
    if (qx->sum) qx->sum[b] = sum;
}
#endif

static void quantise_blocks(const float *restrict x, const QuantX *qx, int64_t K, int q4_order) {
    for (int64_t b = 0; b < K / QBLOCK; b++) quantise_block(x, qx, K / QBLOCK, b, q4_order);
}

/* A q4 row's group that starts at block `start` is one record at byte start * Q4_BLOCK_BYTES:
 * G float32 scales, then G * 16 bytes of nibbles. */
#define Q4_BLOCK_BYTES (4 + QBLOCK / 2)

static inline float q4_scale(const uint8_t *restrict row, int64_t b, int64_t blocks) {
    const int64_t start = q4_group_start(b, blocks);
    float scale;
    memcpy(&scale, row + start * Q4_BLOCK_BYTES + (b - start) * 4, sizeof scale);
    return scale;
}

/* Element j of block b of x quantised in q4 order. */
static inline int32_t qx_value(const QuantX *qx, int64_t b, int j, int64_t blocks) {
    const int64_t start = q4_group_start(b, blocks);
    return qx->q[start * QBLOCK + q4_position(q4_group_size(start, blocks), b - start, j)];
}

/* Element k of a q4 row, value + 8 (0..15). */
static inline int q4_nibble(const uint8_t *restrict row, int64_t k, int64_t blocks) {
    const int64_t b = k / QBLOCK, start = q4_group_start(b, blocks), G = q4_group_size(start, blocks);
    const int64_t p = q4_position(G, b - start, k % QBLOCK);
    const uint8_t byte = row[start * Q4_BLOCK_BYTES + G * 4 + (p / 64) * 32 + p % 32];
    return (p / 32) % 2 ? byte >> 4 : byte & 15;
}

#if defined(__AVX2__) && defined(__FMA__)
static inline float hsum4(__m128 v) {
    const __m128 half = _mm_add_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_add_ss(half, _mm_movehdup_ps(half)));
}

static inline float hsum8(__m256 v) {
    return hsum4(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}
#endif

/* One int8 row (scale per row, applied by the caller) against x quantised per block. */
static float dot_i8(const int8_t *restrict w, const QuantX *qx, int64_t K) {
    const int64_t blocks = K / QBLOCK;
#if defined(__AVX2__) && defined(__FMA__)
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}; /* two chains: an FMA's latency is 4 cycles */
    for (int64_t b = 0; b < blocks; b++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(w + b * QBLOCK));
        const __m256i xv = _mm256_loadu_si256((const __m256i *)(qx->q + b * QBLOCK));
        /* maddubs wants unsigned x signed: |w| and x with w's sign (127 * 127 * 2 fits in int16) */
        const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(xv, q));
        acc[b & 1] = _mm256_fmadd_ps(_mm256_set1_ps(qx->scale[b]), _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones)), acc[b & 1]);
    }
    return hsum8(_mm256_add_ps(acc[0], acc[1]));
#else
    float a = 0.0f;
    for (int64_t b = 0; b < blocks; b++) {
        int32_t s = 0;
        for (int j = 0; j < QBLOCK; j++) s += (int32_t)w[b * QBLOCK + j] * qx->q[b * QBLOCK + j];
        a += qx->scale[b] * (float)s;
    }
    return a;
#endif
}

#if defined(__AVX2__) && defined(__FMA__)
/* Sum of the products of G q4 slots (G / 2 words of 32 bytes) with x's G slots: int32 lane g
 * holds block g % G's part (see q4_position), as float32. */
static inline __attribute__((always_inline)) __m256 q4_group_sums(const uint8_t *restrict w, const int8_t *restrict xq, int G) {
    const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256i sum = _mm256_setzero_si256();
    for (int v = 0; v < G / 2; v++) { /* G * 15 * 127 * 2 fits in int16 */
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(w + v * 32));
        const __m256i q0 = _mm256_and_si256(raw, low), q1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
        sum = _mm256_add_epi16(sum, _mm256_maddubs_epi16(q0, _mm256_loadu_si256((const __m256i *)(xq + v * 64))));
        sum = _mm256_add_epi16(sum, _mm256_maddubs_epi16(q1, _mm256_loadu_si256((const __m256i *)(xq + v * 64 + 32))));
    }
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(sum, ones));
}

/* The scale of each int32 lane of a group: block b + g % G's weight scale times its x scale. */
static inline __attribute__((always_inline)) __m256 q4_scales(const float *restrict ws, const float *restrict xs, int G) {
    if (G == 4) return _mm256_mul_ps(_mm256_broadcast_ps((const __m128 *)ws), _mm256_broadcast_ps((const __m128 *)xs));
    return _mm256_mul_ps(_mm256_castpd_ps(_mm256_broadcast_sd((const double *)ws)),
                         _mm256_castpd_ps(_mm256_broadcast_sd((const double *)xs)));
}

/* One group record of a q4 row against x: acc += its products times their scales; off4 += its
 * blocks' offset terms (weight scale times x's 8 * scale * sum, four lanes for four blocks). */
static inline __attribute__((always_inline)) void q4_group(const uint8_t *restrict record, const QuantX *qx, int64_t b,
                                                           int G, __m256 *acc, __m128 *off4) {
    const float *ws = (const float *)record;
    *acc = _mm256_fmadd_ps(q4_scales(ws, qx->scale + b, G), q4_group_sums(record + 4 * G, qx->q + b * QBLOCK, G), *acc);
    const __m128 w4 = G == 4 ? _mm_loadu_ps(ws) : _mm_castpd_ps(_mm_load_sd((const double *)ws)); /* zeros after two */
    const __m128 o4 = G == 4 ? _mm_loadu_ps(qx->offset + b) : _mm_castpd_ps(_mm_load_sd((const double *)(qx->offset + b)));
    *off4 = _mm_fmadd_ps(w4, o4, *off4);
}
#endif

/* One q4 row (its records) against x quantised per block (in q4_position's order). The nibbles
 * hold value + 8, so they multiply as unsigned bytes: sum_b ws[b] (xs[b] sum_j nibble_j x_j -
 * 8 xs[b] sum_j x_j), the second term from x's per-block offsets. */
static float dot_q4(const uint8_t *restrict row, const QuantX *qx, int64_t K) {
    const int64_t blocks = K / QBLOCK;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 acc = _mm256_setzero_ps();
    __m128 off4 = _mm_setzero_ps();
    int64_t b = 0;
    for (; b + 4 <= blocks; b += 4) q4_group(row + b * Q4_BLOCK_BYTES, qx, b, 4, &acc, &off4);
    if (b < blocks) q4_group(row + b * Q4_BLOCK_BYTES, qx, b, 2, &acc, &off4);
    return hsum8(acc) - hsum4(off4);
#else
    float a = 0.0f;
    for (int64_t b = 0; b < blocks; b++) {
        int32_t sum = 0;
        for (int j = 0; j < QBLOCK; j++) sum += (int32_t)q4_nibble(row, b * QBLOCK + j, blocks) * qx_value(qx, b, j, blocks);
        const float ws = q4_scale(row, b, blocks);
        a += ws * qx->scale[b] * (float)sum - ws * qx->offset[b];
    }
    return a;
#endif
}

/* Row n of an int8 or q4 matrix against x quantised per block. */
static inline float quant_dot(const Mat *m, int64_t wtype, int64_t n, int64_t K, const QuantX *qx) {
    if (wtype == WT_I8) return dot_i8((const int8_t *)m->w + n * K, qx, K) * m->scale[n];
    return dot_q4((const uint8_t *)m->w + n * (K / QBLOCK) * Q4_BLOCK_BYTES, qx, K);
}

#if defined(__AVX2__) && defined(__FMA__)
/* Four rows at once (rows n, n+q, n+2q, n+3q: four memory streams), sharing each block of x. */
static void dot4_i8(const int8_t *const w[4], const QuantX *qx, int64_t K, float out[4]) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < K / QBLOCK; b++) {
        const __m256i xv = _mm256_loadu_si256((const __m256i *)(qx->q + b * QBLOCK));
        const __m256 xs = _mm256_set1_ps(qx->scale[b]);
        for (int r = 0; r < 4; r++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(w[r] + b * QBLOCK));
            const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(xv, q));
            acc[r] = _mm256_fmadd_ps(xs, _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones)), acc[r]);
        }
    }
    for (int r = 0; r < 4; r++) out[r] = hsum8(acc[r]);
}

static void dot4_q4(const uint8_t *const rows[4], const QuantX *qx, int64_t K, float out[4]) {
    const int64_t blocks = K / QBLOCK;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    __m128 off4[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
    int64_t b = 0;
    for (; b + 4 <= blocks; b += 4) /* groups of four (constant G: the loops unroll) */
        for (int r = 0; r < 4; r++) q4_group(rows[r] + b * Q4_BLOCK_BYTES, qx, b, 4, &acc[r], &off4[r]);
    if (b < blocks) /* a last group of two */
        for (int r = 0; r < 4; r++) q4_group(rows[r] + b * Q4_BLOCK_BYTES, qx, b, 2, &acc[r], &off4[r]);
    for (int r = 0; r < 4; r++) out[r] = hsum8(acc[r]) - hsum4(off4[r]);
}
#endif

/* Rows n, n+q, n+2q, n+3q of an int8 or q4 matrix against x quantised per block. */
static void quant_dot4(const Mat *m, int64_t wtype, int64_t n, int64_t q, int64_t K, const QuantX *qx, float out[4]) {
#if defined(__AVX2__) && defined(__FMA__)
    if (wtype == WT_I8) {
        const int8_t *w[4];
        for (int r = 0; r < 4; r++) w[r] = (const int8_t *)m->w + (n + r * q) * K;
        dot4_i8(w, qx, K, out);
        for (int r = 0; r < 4; r++) out[r] *= m->scale[n + r * q];
    } else {
        const uint8_t *rows[4];
        for (int r = 0; r < 4; r++) rows[r] = (const uint8_t *)m->w + (n + r * q) * (K / QBLOCK) * Q4_BLOCK_BYTES;
        dot4_q4(rows, qx, K, out);
    }
#else
    for (int r = 0; r < 4; r++) out[r] = quant_dot(m, wtype, n + r * q, K, qx);
#endif
}

/* Row n of a matrix widened to float32 (prefill): `buf` [K]. */
static const float *widen_row(const Mat *m, int64_t wtype, int64_t n, int64_t K, float *restrict buf) {
    switch (wtype) {
    case WT_F32:
        return (const float *)m->w + n * K;
    case WT_BF16: {
        const uint16_t *w = (const uint16_t *)m->w + n * K;
        for (int64_t k = 0; k < K; k++) buf[k] = bf16_to_f32(w[k]);
        return buf;
    }
    case WT_I8: {
        const int8_t *w = (const int8_t *)m->w + n * K;
        const float s = m->scale[n];
        for (int64_t k = 0; k < K; k++) buf[k] = (float)w[k] * s;
        return buf;
    }
    default: { /* WT_Q4, in q4_position's order */
        const uint8_t *row = (const uint8_t *)m->w + n * (K / QBLOCK) * Q4_BLOCK_BYTES;
        for (int64_t k = 0; k < K; k++)
            buf[k] = (float)(q4_nibble(row, k, K / QBLOCK) - 8) * q4_scale(row, k / QBLOCK, K / QBLOCK);
        return buf;
    }
    }
}

#include "prefill.h"   /* prefill's GEMMs: float tiles, BF16 and VNNI products */
#include "attention.h" /* one head's attention: decode's stream, prefill's tiles */
#define ATT_MIN_TILED 8 /* fewer queries (a few drafted tokens) read the cache query by query */

#ifndef PF_PANELS
/* Without AVX-512: two weight rows x four tokens per inner loop, each widened weight used 4 times
 * from registers (plain C that the compiler vectorises). */
static void float_rows_2x4(const Mat *m, int64_t wtype, const float *restrict x, float *restrict y,
                           const float *bias, int64_t M, int64_t N, int64_t K, int64_t lo, int64_t hi,
                           float *restrict buf) {
    for (int64_t n = lo; n < hi; n += 2) {
        const int two = n + 1 < hi;
        const float *w0 = widen_row(m, wtype, n, K, buf);
        const float *w1 = two ? widen_row(m, wtype, n + 1, K, buf + K) : w0;
        const float b0 = bias ? bias[n] : 0.0f, b1 = bias && two ? bias[n + 1] : 0.0f;
        int64_t r = 0;
        for (; r + 4 <= M; r += 4) {
            const float *x0 = x + r * K, *x1 = x0 + K, *x2 = x1 + K, *x3 = x2 + K;
            float a00 = 0, a01 = 0, a02 = 0, a03 = 0, a10 = 0, a11 = 0, a12 = 0, a13 = 0;
            for (int64_t k = 0; k < K; k++) {
                const float u = w0[k], v = w1[k];
                a00 += u * x0[k]; a01 += u * x1[k]; a02 += u * x2[k]; a03 += u * x3[k];
                a10 += v * x0[k]; a11 += v * x1[k]; a12 += v * x2[k]; a13 += v * x3[k];
            }
            y[r * N + n] = a00 + b0; y[(r + 1) * N + n] = a01 + b0;
            y[(r + 2) * N + n] = a02 + b0; y[(r + 3) * N + n] = a03 + b0;
            if (two) {
                y[r * N + n + 1] = a10 + b1; y[(r + 1) * N + n + 1] = a11 + b1;
                y[(r + 2) * N + n + 1] = a12 + b1; y[(r + 3) * N + n + 1] = a13 + b1;
            }
        }
        for (; r < M; r++) {
            y[r * N + n] = dot_f32(w0, x + r * K, K) + b0;
            if (two) y[r * N + n + 1] = dot_f32(w1, x + r * K, K) + b1;
        }
    }
}
#endif

/* Scratch of one forward call: `qx` shared (x quantised for the integer types), `xb` shared (x in
 * bf16 for BF16 products; NULL in decode), `buf` this thread's [8][K] floats, `panel` this thread's
 * bytes for the integer panels (NULL in decode). */
typedef struct {
    const QuantX *qx;
    uint16_t *xb;
    float *buf;
    uint8_t *panel;
} Scratch;

#ifdef PF_PANELS
/* This thread's panels of a product (whole panels of PF_PANEL rows, split evenly). */
static void panel_product(const Mat *m, int kind, const PfTokens *tokens, float *y, int64_t M, int64_t N, int64_t K,
                          uint8_t *panel) {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t panels = (N + PF_PANEL - 1) / PF_PANEL;
    const int64_t lo = panels * t / threads * PF_PANEL, hi = panels * (t + 1) / threads * PF_PANEL;
    pf_gemm_panels(kind, m->w, m->scale, tokens, y, m->bias, M, N, K, lo, hi < N ? hi : N, panel);
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
/* Tokens multiplied with four rows at once: their sums, the rows' vectors and x's in registers. */
#ifdef __AVX512F__
#define TILE_TOKENS 4 /* 16 sums in 32 vector registers */
#else
#define TILE_TOKENS 2 /* 8 sums in 16 */
#endif
#define PREFETCH_BYTES 4096 /* how far ahead of its loads a verify pass asks for each row (into L2) */

/* Four rows against J tokens (token j's x at x + j * K): y[j * ldy + r * q] = w[r] . x[j]. Each
 * weight vector is loaded once for all J tokens; every row and token keeps its own eight-lane sum,
 * added in k order and reduced by hsum8: the same operations whatever J, so a token's products
 * among several equal a one-token decode's bit for bit. f32: K % 8 == 0; bf16 pairs against x
 * de-interleaved (even weights `pair << 16`, odd ones `pair & 0xffff0000`): K % 16 == 0. */
static inline __attribute__((always_inline)) void rows4_tile(int64_t wtype, const void *const w[4],
                                                             const float *restrict x, const int J, int64_t K,
                                                             float *restrict y, int64_t ldy, int64_t q,
                                                             int prefetch) {
    __m256 sum[TILE_TOKENS][4];
    for (int j = 0; j < J; j++)
        for (int r = 0; r < 4; r++) sum[j][r] = _mm256_setzero_ps();
    if (wtype == WT_F32) {
        const float *const *wf = (const float *const *)w;
        for (int64_t k = 0; k < K; k += 8) {
            if (prefetch && (k & 15) == 0) /* a line of each row, PREFETCH_BYTES ahead, into L2 */
                for (int r = 0; r < 4; r++) __builtin_prefetch((const char *)(wf[r] + k) + PREFETCH_BYTES, 0, 1);
            const __m256 w0 = _mm256_loadu_ps(wf[0] + k), w1 = _mm256_loadu_ps(wf[1] + k);
            const __m256 w2 = _mm256_loadu_ps(wf[2] + k), w3 = _mm256_loadu_ps(wf[3] + k);
            for (int j = 0; j < J; j++) {
                __m256 xv = _mm256_loadu_ps(x + j * K + k);
                __asm__("" : "+x"(xv)); /* x loaded once per token and kept (not folded into each row's FMA) */
                sum[j][0] = _mm256_fmadd_ps(w0, xv, sum[j][0]);
                sum[j][1] = _mm256_fmadd_ps(w1, xv, sum[j][1]);
                sum[j][2] = _mm256_fmadd_ps(w2, xv, sum[j][2]);
                sum[j][3] = _mm256_fmadd_ps(w3, xv, sum[j][3]);
            }
        }
    } else {
        const __m256i high = _mm256_set1_epi32((int)0xffff0000);
        const int64_t half = K / 2;
        for (int64_t p = 0; p < half; p += 8) { /* eight pairs of each row */
            if (prefetch && (p & 15) == 0)
                for (int r = 0; r < 4; r++)
                    __builtin_prefetch((const char *)((const uint16_t *)w[r] + 2 * p) + PREFETCH_BYTES, 0, 1);
            __m256 even[4], odd[4];
            for (int r = 0; r < 4; r++) {
                const __m256i pairs = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w[r] + 2 * p));
                even[r] = _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
                odd[r] = _mm256_castsi256_ps(_mm256_and_si256(pairs, high));
            }
            for (int j = 0; j < J; j++) {
                __m256 xe = _mm256_loadu_ps(x + j * K + p), xo = _mm256_loadu_ps(x + j * K + half + p);
                __asm__("" : "+x"(xe), "+x"(xo));
                for (int r = 0; r < 4; r++) sum[j][r] = _mm256_fmadd_ps(odd[r], xo, _mm256_fmadd_ps(even[r], xe, sum[j][r]));
            }
        }
    }
    for (int j = 0; j < J; j++)
        for (int r = 0; r < 4; r++) y[j * ldy + r * q] = hsum8(sum[j][r]);
}

/* rows4_tile for M tokens, in chunks of at most TILE_TOKENS (even ones: 3 + 2, not 4 + 1), each
 * chunk size compiled apart. From three tokens on, the first chunk asks for the rows' next lines
 * ahead of its loads: with that much arithmetic per weight the core stops running far enough ahead
 * for the memory stream, and the products then add to the stream's time instead of hiding in it. */
static void rows4_tokens(int64_t wtype, const void *const w[4], const float *restrict x, int64_t M, int64_t K,
                         float *restrict y, int64_t ldy, int64_t q) {
    const int64_t chunks = (M + TILE_TOKENS - 1) / TILE_TOKENS;
    for (int64_t c = 0, j = 0; c < chunks; c++) {
        const int J = (int)(M / chunks + (c < M % chunks)), pf = c == 0 && M >= 3;
        const float *xj = x + j * K;
        float *yj = y + j * ldy;
        switch (J) {
        case 1: rows4_tile(wtype, w, xj, 1, K, yj, ldy, q, pf); break;
        case 2: rows4_tile(wtype, w, xj, 2, K, yj, ldy, q, pf); break;
#if TILE_TOKENS > 2
        case 3: rows4_tile(wtype, w, xj, 3, K, yj, ldy, q, pf); break;
        default: rows4_tile(wtype, w, xj, 4, K, yj, ldy, q, pf); break;
#else
        default: break;
#endif
        }
        j += J;
    }
}
#endif

/* Decode's products for M tokens (rows of x [M][K]): each thread takes its block of rows of W and
 * walks four quarters of it at once (four memory streams per core, as kernels/gemv.c); each group
 * of four rows comes from memory once and meets every token while it sits in the cache. Each
 * token's products are the ones a one-token decode makes, bit for bit (M == 1 is decode itself):
 * a speculative verify pass checks M drafted tokens for about one token's weight traffic.
 * `qx` holds M rows of x quantised (integer types); `buf` is this thread's [M + 1][K]: a widened
 * row, then each token's x de-interleaved (bf16 pairs). Called by every thread of the region. */
static void decode_products(const Mat *m, int64_t wtype, const float *restrict x, float *restrict y, int64_t M,
                            int64_t N, int64_t K, const QuantX *qx, float *restrict buf) {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t lo = N * t / threads, hi = N * (t + 1) / threads;
    const int64_t q = (hi - lo) / 4; /* rows i, i+q, i+2q, i+3q together: four streams per thread */
    const float *bias = m->bias;
    float out[4];
    if (wtype == WT_I8 || wtype == WT_Q4) {
        const int64_t blocks = K / QBLOCK;
        #pragma omp for schedule(static) /* both threads quantise; the implied barrier shares it */
        for (int64_t rb = 0; rb < M * blocks; rb++) {
            const QuantX row = quant_row(qx, rb / blocks, K);
            quantise_block(x + rb / blocks * K, &row, blocks, rb % blocks, wtype == WT_Q4);
        }
        for (int64_t i = lo; i < lo + q; i++)
            for (int64_t r = 0; r < M; r++) {
                const QuantX row = quant_row(qx, r, K);
                quant_dot4(m, wtype, i, q, K, &row, out);
                for (int64_t j = 0; j < 4; j++) y[r * N + i + j * q] = out[j];
            }
        for (int64_t n = lo + 4 * q; n < hi; n++)
            for (int64_t r = 0; r < M; r++) {
                const QuantX row = quant_row(qx, r, K);
                y[r * N + n] = quant_dot(m, wtype, n, K, &row);
            }
    } else {
        const int pairs = wtype == WT_BF16 && K % 2 == 0;
        float *xd = buf + K; /* each token's x de-interleaved (widen_row uses buf[0, K)) */
        if (pairs)
            for (int64_t r = 0; r < M; r++) bf16_deinterleave(x + r * K, xd + r * K, K);
#if defined(__AVX2__) && defined(__FMA__)
        const int tiled = wtype == WT_F32 ? K % 8 == 0 : pairs && K % 16 == 0; /* decode's products, any M */
#else
        const int tiled = 0;
#endif
        for (int64_t i = lo; i < lo + q && tiled; i++) {
#if defined(__AVX2__) && defined(__FMA__)
            const size_t bytes = wtype == WT_F32 ? sizeof(float) : sizeof(uint16_t);
            const void *w[4];
            for (int j = 0; j < 4; j++) w[j] = (const char *)m->w + (i + j * q) * K * bytes;
            rows4_tokens(wtype, w, wtype == WT_F32 ? x : xd, M, K, y + i, N, q);
#endif
        }
        for (int64_t i = lo; i < lo + q && !tiled; i++) {
            const int64_t r0 = i, r1 = i + q, r2 = i + 2 * q, r3 = i + 3 * q;
            for (int64_t r = 0; r < M; r++) {
                if (wtype == WT_F32) {
                    const float *w = (const float *)m->w;
                    rows4_f32(w + r0 * K, w + r1 * K, w + r2 * K, w + r3 * K, x + r * K, K, out);
                } else if (pairs) {
                    const uint16_t *w = (const uint16_t *)m->w;
                    rows4_bf16_pairs(w + r0 * K, w + r1 * K, w + r2 * K, w + r3 * K, xd + r * K, K, out);
                } else {
                    const uint16_t *w = (const uint16_t *)m->w;
                    rows4_bf16(w + r0 * K, w + r1 * K, w + r2 * K, w + r3 * K, x + r * K, K, out);
                }
                float *yr = y + r * N;
                yr[r0] = out[0]; yr[r1] = out[1]; yr[r2] = out[2]; yr[r3] = out[3];
            }
        }
        for (int64_t n = lo + 4 * q; n < hi; n++) {
            const float *w = widen_row(m, wtype, n, K, buf);
            for (int64_t r = 0; r < M; r++) y[r * N + n] = dot_f32(w, x + r * K, K);
        }
    }
    if (bias)
        for (int64_t r = 0; r < M; r++)
            for (int64_t n = lo; n < hi; n++) y[r * N + n] += bias[n];
}
/* y[m, n] = x[m] . W[n] + b[n] for M rows of x [M][K], W [N][K]: called by every thread of the
 * parallel region, each taking its block of rows of W; ends with a barrier. One token (decode)
 * streams W once; more (prefill, scoring) take prefill.h's GEMMs where this CPU has them.
 * `exact`: decode's products for every row of x (decode_products; `sc->buf` then holds [M + 1][K]). */
static void matmul(const Mat *m, int64_t wtype, const float *restrict x, float *restrict y, int64_t M,
                   int64_t N, int64_t K, const Scratch *sc, int exact) {
    const QuantX *qx = sc->qx;
    float *restrict buf = sc->buf;
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t lo = N * t / threads, hi = N * (t + 1) / threads;
    const float *bias = m->bias;
    (void)lo; (void)hi; (void)bias; /* the plain paths' (builds without AVX-512 panels) */
    if (M == 1 || exact) {
        decode_products(m, wtype, x, y, M, N, K, qx, buf);
    } else if (wtype == WT_I8 || wtype == WT_Q4) {
#ifdef PF_VNNI
        #pragma omp for schedule(static) /* x quantised as decode does, in plain order, with its sums */
        for (int64_t r = 0; r < M; r++) {
            const QuantX row = quant_row(qx, r, K);
            quantise_blocks(x + r * K, &row, K, 0);
        } /* implied barrier */
        const PfTokens tokens = {x, qx->q, qx->scale, qx->sum};
        panel_product(m, wtype == WT_I8 ? PK_I8 : PK_Q4, &tokens, y, M, N, K, sc->panel);
#else
        /* the products decode makes, row by row: prefill, decode and scoring compute alike */
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < M; r++) {
            const QuantX row = quant_row(qx, r, K);
            quantise_blocks(x + r * K, &row, K, wtype == WT_Q4);
        } /* implied barrier */
        for (int64_t n = lo; n < hi; n++) {
            const float b0 = bias ? bias[n] : 0.0f;
            for (int64_t r = 0; r < M; r++) {
                const QuantX row = quant_row(qx, r, K);
                y[r * N + n] = quant_dot(m, wtype, n, K, &row) + b0;
            }
        }
#endif
    } else {
#if defined(PF_PANELS)
        int kind = wtype == WT_F32 ? PK_F32 : PK_BF16_WIDEN;
#ifdef PF_BF16
        if (wtype == WT_BF16) {
            kind = PK_BF16_DP;
            #pragma omp for schedule(static) /* the tokens rounded to bf16 once for every row's products */
            for (int64_t r = 0; r < M; r++) pf_to_bf16_row(x + r * K, sc->xb + r * K, K);
        }
#endif
        const PfTokens tokens = {x, kind == PK_BF16_DP ? (const void *)sc->xb : (const void *)x, NULL, NULL};
        panel_product(m, kind, &tokens, y, M, N, K, sc->panel);
#else
        float_rows_2x4(m, wtype, x, y, bias, M, N, K, lo, hi, buf);
#endif
    }
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

/* Each thread's float scratch, in rows of the widest K: decode's widened row and x de-interleaved,
 * or two widened rows of the plain tiles. (Larger, it came from mmap, and its page faults landed on
 * every decoded token.) */
#define BUF_ROWS 2
#ifdef PF_PANELS
#define PANEL_BYTES(K) pf_panel_scratch(K)
#define ATT_BYTES(S, hd) att_scratch(S, hd)
#else
#define PANEL_BYTES(K) ((size_t)0)
#define ATT_BYTES(S, hd) ((size_t)0)
#endif

#define DECODE_BF16_PATH "bf16 widened in registers, float32 sums"
#if defined(__AVX2__) && defined(__FMA__)
#define DECODE_INT_PATH "avx2 maddubs row streams (int8 activations per block of 32)"
#else
#define DECODE_INT_PATH "plain C integer row streams (int8 activations per block of 32)"
#endif

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
    const int64_t widest = inner > 3 * d ? inner : 3 * d;
    const int64_t rows_out = all_logits ? T : 1;
    const int threads = omp_get_max_threads();
    /* x: residual [T][d]; h: normed [T][d]; big: qkv or fc [T][widest]; att: [T][d] */
    float *x = malloc(sizeof(float) * T * d), *h = malloc(sizeof(float) * T * d);
    float *big = malloc(sizeof(float) * T * widest), *att = malloc(sizeof(float) * T * d);
    float *scores = malloc(sizeof(float) * threads * md->max_seq);
    const int64_t per_thread = (exact ? T + 1 : BUF_ROWS) * widest; /* matmul's buf */
    float *bufs = malloc(sizeof(float) * threads * per_thread);
    const int64_t blocks = T * (widest / QBLOCK) + 1; /* x quantised: T rows of up to `widest` */
    QuantX qx = {malloc(T * widest), malloc(sizeof(float) * blocks), malloc(sizeof(float) * blocks),
                 T > 1 ? malloc(sizeof(int32_t) * blocks) : NULL};
    /* prefill only (a decode step allocates nothing more): x in bf16, each thread's integer panel */
    uint16_t *xb = T > 1 ? malloc(sizeof(uint16_t) * T * widest) : NULL;
    const size_t panel_bytes = T > 1 ? PANEL_BYTES(inner > d ? inner : d) : 0;
    uint8_t *panels = T > 1 ? malloc(panel_bytes * threads) : NULL;
    const size_t tile_bytes = T >= ATT_MIN_TILED && !exact ? ATT_BYTES(md->max_seq, d / md->n_head) : 0;
    uint8_t *tiles = tile_bytes ? malloc(tile_bytes * threads) : NULL;
    int failed = !x || !h || !big || !att || !scores || !bufs || !qx.q || !qx.scale || !qx.offset ||
                 (T > 1 && (!qx.sum || !xb || (panel_bytes && !panels))) || (tile_bytes && !tiles);
    if (!failed) {
        const int timing = md->timers != NULL;
        #pragma omp parallel
        {
            int64_t t0 = timing ? now_ns() : 0;
            const int main_thread = omp_get_thread_num() == 0;
            float *buf = bufs + omp_get_thread_num() * per_thread;
            const Scratch sc = {&qx, xb, buf, panels ? panels + omp_get_thread_num() * panel_bytes : NULL};
            #pragma omp for schedule(static)
            for (int64_t t = 0; t < T; t++) { /* the embedding is the lm_head's row, at its stored type */
                const float *row = widen_row(&md->lm_head, wt, ids[t], d, buf);
                for (int64_t i = 0; i < d; i++) x[t * d + i] = row[i] + md->wpe[(pos + t) * d + i];
            }
            if (main_thread) TICK(T_OTHER);
            for (int64_t l = 0; l < md->n_layer; l++) {
                const Layer *ly = &md->layers[l];
                #pragma omp for schedule(static)
                for (int64_t t = 0; t < T; t++) layer_norm(x + t * d, h + t * d, ly->ln1_w, ly->ln1_b, d, md->eps);
                if (main_thread) TICK(T_NORM_ACT);
                matmul(&ly->qkv, wt, h, big, T, 3 * d, d, &sc, exact);
                if (main_thread) TICK(T_MATMUL);
                kv_write(md, l, big, T, pos);
                if (main_thread) TICK(T_KV);
                attention(md, l, big, att, T, pos, scores, tiles);
                if (main_thread) TICK(T_ATTENTION);
                matmul(&ly->proj, wt, att, h, T, d, d, &sc, exact);
                if (main_thread) TICK(T_MATMUL);
                #pragma omp for schedule(static)
                for (int64_t t = 0; t < T; t++) {
                    for (int64_t i = 0; i < d; i++) x[t * d + i] += h[t * d + i];
                    layer_norm(x + t * d, h + t * d, ly->ln2_w, ly->ln2_b, d, md->eps);
                }
                if (main_thread) TICK(T_NORM_ACT);
                matmul(&ly->fc, wt, h, big, T, inner, d, &sc, exact);
                if (main_thread) TICK(T_MATMUL);
                #pragma omp for schedule(static)
                for (int64_t t = 0; t < T; t++) gelu(big + t * inner, inner);
                if (main_thread) TICK(T_NORM_ACT);
                matmul(&ly->fc2, wt, big, h, T, d, inner, &sc, exact);
                if (main_thread) TICK(T_MATMUL);
                #pragma omp for schedule(static)
                for (int64_t t = 0; t < T; t++)
                    for (int64_t i = 0; i < d; i++) x[t * d + i] += h[t * d + i];
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
    free(x); free(h); free(big); free(att); free(scores); free(bufs); free(qx.q); free(qx.scale); free(qx.offset);
    free(qx.sum); free(xb); free(panels); free(tiles);
    return failed ? -1 : 0;
}

/* One matrix product y [M][N] = x [M][K] W^T + b as the step makes it (decode's products for one
 * row, prefill's for more), in a parallel region of its own: tests hold each path to a reference on
 * any shape. Returns 0, or -1 when scratch memory could not be had. */
int gpt2_matmul(const Mat *m, int64_t wtype, const float *x, float *y, int64_t M, int64_t N, int64_t K) {
    const int threads = omp_get_max_threads();
    const int64_t blocks = M * (K / QBLOCK) + 1;
    const size_t panel_bytes = PANEL_BYTES(K);
    float *bufs = malloc(sizeof(float) * threads * BUF_ROWS * K);
    QuantX qx = {malloc(M * K + 64), malloc(sizeof(float) * blocks), malloc(sizeof(float) * blocks),
                 malloc(sizeof(int32_t) * blocks)};
    uint16_t *xb = malloc(sizeof(uint16_t) * M * K + 64);
    uint8_t *panels = panel_bytes ? malloc(panel_bytes * threads) : NULL;
    const int failed = !bufs || !qx.q || !qx.scale || !qx.offset || !qx.sum || !xb || (panel_bytes && !panels);
    if (!failed) {
        #pragma omp parallel
        {
            const int t = omp_get_thread_num();
            const Scratch sc = {&qx, xb, bufs + t * BUF_ROWS * K, panels ? panels + t * panel_bytes : NULL};
            matmul(m, wtype, x, y, M, N, K, &sc, 0);
        }
    }
    free(bufs); free(qx.q); free(qx.scale); free(qx.offset); free(qx.sum); free(xb); free(panels);
    return failed ? -1 : 0;
}

/* The threads this library's OpenMP runtime will use (set before the first call). */
void gpt2_set_threads(int threads) { if (threads > 0) omp_set_num_threads(threads); }
int gpt2_threads(void) { return omp_get_max_threads(); }

/* Which instructions this build's products use for a weight type (the engine's notes say it), and the
 * arithmetic of its prefill: 0 float32, 1 bf16, 2 int8 (the roofline's peak is that arithmetic's). */
const char *gpt2_paths(int wtype) {
    switch (wtype) {
    case WT_F32:
#if defined(PF_PANELS)
        return "prefill: avx512f float32 GEMM (panels of 32 rows, tiles of up to 12 tokens); decode: float32 row streams";
#else
        return "prefill: float32 tiles of 2 rows x 4 tokens (no AVX-512 on this CPU); decode: float32 row streams";
#endif
    case WT_BF16:
#if defined(PF_BF16)
        return "prefill: avx512-bf16 GEMM (vdpbf16ps, tokens rounded to bf16, float32 sums); decode: " DECODE_BF16_PATH;
#elif defined(PF_PANELS)
        return "prefill: avx512f GEMM, bf16 pairs widened to float32 in registers (no BF16 products on this CPU); decode: " DECODE_BF16_PATH;
#else
        return "prefill: bf16 rows widened to float32, tiles of 2 rows x 4 tokens (no AVX-512 on this CPU); decode: " DECODE_BF16_PATH;
#endif
    default:
#if defined(PF_VNNI)
        return "prefill: avx512-vnni GEMM (vpdpbusd, panels of 32 rows, int32 sums per block); decode: " DECODE_INT_PATH;
#else
        return "prefill: decode's integer products token by token (no AVX-512 VNNI on this CPU); decode: " DECODE_INT_PATH;
#endif
    }
}

int gpt2_prefill_arithmetic(int wtype) {
    if (wtype == WT_I8 || wtype == WT_Q4) return 2;
#ifdef PF_BF16
    if (wtype == WT_BF16) return 1;
#endif
    return 0;
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
    FIELD(Model, k_scale); FIELD(Model, v_scale);
#undef STRUCT
#undef FIELD
    return text;
}
