/* Attention of one head over its cached keys and values (float32 rows, or int8 rows with a float32
 * scale each), for gpt2_step.c.
 *
 * Decode (one query) reads every cached key and value once: a stream, with the int8 rows widened in
 * registers (an 8-bit cache reads a quarter of float32's bytes, which at position ~1,000 is as much
 * as int4's weights). Prefill (many queries, AVX-512) makes two small GEMMs per tile of up to 12
 * queries: the scores from the keys packed as prefill.h's panels (32 keys a panel), then the
 * weighted values with the values' rows as vectors. At 1,024 tokens attention is about a tenth of
 * prefill's arithmetic, and query by query it ran at a third of the GEMMs' rate. */
#ifndef WHISTLE_STOP_ATTENTION_H
#define WHISTLE_STOP_ATTENTION_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* A head's cache: rows [S][hd] of float32 (q8 NULL), or int8 q8 with a scale per row. */
typedef struct {
    const float *f32;
    const int8_t *q8;
    const float *scale;
} KvHead;

/* One int8 row of hd values with its scale: symmetric, rounded to nearest. */
static inline void kv_quantise_row(const float *restrict x, int8_t *restrict q, float *restrict scale, int64_t hd) {
    float amax = 0.0f;
    for (int64_t e = 0; e < hd; e++) amax = fmaxf(amax, fabsf(x[e]));
    const float s = amax / 127.0f, inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (int64_t e = 0; e < hd; e++) q[e] = (int8_t)lrintf(x[e] * inv);
    *scale = s;
}

/* Row j widened to float32 into `out`. */
static inline void kv_widen_row(const KvHead *kv, int64_t j, int64_t hd, float *restrict out) {
    const int8_t *q = kv->q8 + j * hd;
    const float s = kv->scale[j];
    for (int64_t e = 0; e < hd; e++) out[e] = (float)q[e] * s;
}

/* Softmax of scores [n] in place (already scaled); returns 1 / their sum. */
static inline float att_softmax(float *restrict scores, int64_t n) {
    float best = -INFINITY, total = 0.0f;
    for (int64_t j = 0; j < n; j++) best = fmaxf(best, scores[j]);
    for (int64_t j = 0; j < n; j++) { scores[j] = expf(scores[j] - best); total += scores[j]; }
    return 1.0f / total;
}

/* A head's keys or values are one stream per thread, too few to keep the memory busy on their own:
 * each row read asks for the row ATT_AHEAD bytes on (the same head's only), so the reads of the
 * head's later rows overlap this one's arithmetic. 8 KB on the Zen 5 EPYC: 8-bit cache attention
 * at position ~1,000 0.80x (2 KB 0.85x, 24 KB 0.85x, alternating builds). */
#define ATT_AHEAD 8192
static inline void att_prefetch(const void *row, int64_t at, int64_t end, int64_t bytes) {
    if (at + ATT_AHEAD < end)
        for (int64_t l = 0; l < bytes; l += 64) __builtin_prefetch((const char *)row + ATT_AHEAD + l, 0, 3);
}

#ifdef __AVX512F__
#define ATT_Q8_VECS 8 /* the widest head the vector path takes: 8 x 16 dims */

/* 16 int8 values widened to float32. */
static inline __m512 att_widen16(const int8_t *q) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q)));
}

/* The 16 lanes of each of 16 vectors summed: lane u of the result is the sum of acc[u]. Four rounds
 * of pairs: each keeps half of every key's lanes from both vectors and adds the other halves, so
 * a key's lanes halve each round (45 operations for 16 keys; a reduction per key took 8 each). */
static const int32_t ATT_SUM_LANES[4][2][16] = { /* round (16, 8, 4, 2 lanes a key): the halves kept */
    {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}, {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}},
    {{0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27}, {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31}},
    {{0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29}, {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31}},
    {{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}, {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}},
};

static inline __m512 att_sum16(__m512 acc[16]) {
    for (int round = 0, n = 16; round < 4; round++, n /= 2) { /* n vectors */
        const __m512i ilo = _mm512_loadu_si512(ATT_SUM_LANES[round][0]), ihi = _mm512_loadu_si512(ATT_SUM_LANES[round][1]);
        for (int i = 0; i < n / 2; i++)
            acc[i] = _mm512_add_ps(_mm512_permutex2var_ps(acc[2 * i], ilo, acc[2 * i + 1]),
                                   _mm512_permutex2var_ps(acc[2 * i], ihi, acc[2 * i + 1]));
    }
    return acc[0];
}

/* att_query for an 8-bit cache and hd a multiple of 16 (at most 128): q and the output in
 * registers, each key's and value's row widened in them, the scores of 16 keys summed at once
 * (att_sum16). The compiler's loop summed each key's products lane by lane into memory; a
 * reduction per key read the cache at ~1.3x its speed at position ~1,000, and 16 keys' sums at once
 * took that attention to 0.94x. */
static void att_query_q8(const KvHead *k, const KvHead *v, const float *restrict q, int64_t keys, int64_t hd,
                         float scale, float *restrict scores, float *restrict out) {
    const int vecs = (int)(hd / 16);
    __m512 qv[ATT_Q8_VECS], o[2][ATT_Q8_VECS];
    for (int c = 0; c < vecs; c++) qv[c] = _mm512_loadu_ps(q + 16 * c), o[0][c] = o[1][c] = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= keys; j += 16) {
        __m512 acc[16];
        for (int u = 0; u < 16; u++) {
            const int8_t *row = k->q8 + (j + u) * hd;
            att_prefetch(row, (j + u) * hd, keys * hd, hd);
            acc[u] = _mm512_mul_ps(qv[0], att_widen16(row));
            for (int c = 1; c < vecs; c++) acc[u] = _mm512_fmadd_ps(qv[c], att_widen16(row + 16 * c), acc[u]);
        }
        const __m512 sums = _mm512_mul_ps(att_sum16(acc), _mm512_loadu_ps(k->scale + j));
        _mm512_storeu_ps(scores + j, _mm512_mul_ps(sums, _mm512_set1_ps(scale)));
    }
    for (; j < keys; j++) {
        const int8_t *row = k->q8 + j * hd;
        __m512 acc = _mm512_mul_ps(qv[0], att_widen16(row));
        for (int c = 1; c < vecs; c++) acc = _mm512_fmadd_ps(qv[c], att_widen16(row + 16 * c), acc);
        scores[j] = _mm512_reduce_add_ps(acc) * k->scale[j] * scale;
    }
    const float inv_total = att_softmax(scores, keys);
    for (j = 0; j < keys; j++) scores[j] = scores[j] * inv_total * v->scale[j]; /* each value row's weight */
    for (j = 0; j + 2 <= keys; j += 2) /* two keys' sums apart: twice the independent multiply-adds */
        for (int u = 0; u < 2; u++) {
            att_prefetch(v->q8 + (j + u) * hd, (j + u) * hd, keys * hd, hd);
            const __m512 p = _mm512_set1_ps(scores[j + u]);
            for (int c = 0; c < vecs; c++) o[u][c] = _mm512_fmadd_ps(att_widen16(v->q8 + (j + u) * hd + 16 * c), p, o[u][c]);
        }
    for (; j < keys; j++) {
        const __m512 p = _mm512_set1_ps(scores[j]);
        for (int c = 0; c < vecs; c++) o[0][c] = _mm512_fmadd_ps(att_widen16(v->q8 + j * hd + 16 * c), p, o[0][c]);
    }
    for (int c = 0; c < vecs; c++) _mm512_storeu_ps(out + 16 * c, _mm512_add_ps(o[0][c], o[1][c]));
}
#endif

/* One query against keys [0, keys) of a head: out [hd]. `scores` [keys] scratch. */
static void att_query(const KvHead *k, const KvHead *v, const float *restrict q, int64_t keys, int64_t hd, float scale,
                      float *restrict scores, float *restrict out) {
#ifdef __AVX512F__
    if (k->q8 && hd % 16 == 0 && hd <= 16 * ATT_Q8_VECS) {
        att_query_q8(k, v, q, keys, hd, scale, scores, out);
        return;
    }
#endif
    if (k->q8) {
        for (int64_t j = 0; j < keys; j++) {
            const int8_t *row = k->q8 + j * hd;
            float s = 0.0f;
            for (int64_t e = 0; e < hd; e++) s += q[e] * (float)row[e];
            scores[j] = s * k->scale[j] * scale;
        }
    } else {
        const float *kc = k->f32;
        int64_t j = 0;
        for (; j + 4 <= keys; j += 4) { /* four keys at once: independent sums */
            att_prefetch(kc + j * hd, j * hd * 4, keys * hd * 4, 4 * hd * 4);
            rows4_f32(kc + j * hd, kc + (j + 1) * hd, kc + (j + 2) * hd, kc + (j + 3) * hd, q, hd, scores + j);
        }
        for (; j < keys; j++) scores[j] = dot_f32(q, kc + j * hd, hd);
        for (j = 0; j < keys; j++) scores[j] *= scale;
    }
    const float inv_total = att_softmax(scores, keys);
    for (int64_t e = 0; e < hd; e++) out[e] = 0.0f;
    if (v->q8) {
        for (int64_t j = 0; j < keys; j++) {
            const int8_t *row = v->q8 + j * hd;
            const float p = scores[j] * inv_total * v->scale[j];
            for (int64_t e = 0; e < hd; e++) out[e] += p * (float)row[e];
        }
    } else {
        for (int64_t j = 0; j < keys; j++) {
            const float p = scores[j] * inv_total;
            const float *row = v->f32 + j * hd;
            att_prefetch(row, j * hd * 4, keys * hd * 4, hd * 4);
            for (int64_t e = 0; e < hd; e++) out[e] += p * row[e];
        }
    }
}

#ifdef PF_PANELS
#define ATT_TILE 12 /* queries per tile (prefill.h's float tile) */
#define ATT_PV 6    /* queries per weighted-values pass: 6 x 4 vectors of 16 dims */

/* Scratch one thread needs for att_head_tiles: float32 keys and values of a head (an int8 cache
 * widened), its keys' panels, a tile's scores. */
static inline size_t att_scratch(int64_t S, int64_t hd) {
    const int64_t keys = (S + PF_PANEL - 1) / PF_PANEL * PF_PANEL;
    return (size_t)(2 * S * hd + keys * hd + ATT_TILE * (keys + PF_PANEL)) * sizeof(float) + 64;
}

/* out[r][e0 .. e0 + 16 * VECS) = sum_j p[r][j] v[j][...] over j < keys for R <= ATT_PV queries (a
 * constant R and VECS per call: the accumulators stay in registers). */
static inline __attribute__((always_inline)) void att_pv_part(int R, int VECS, const float *const p[ATT_PV], const float *V,
                                                              int64_t keys, int64_t hd, int64_t e0, __mmask16 last_mask,
                                                              float *const out[ATT_PV]) {
    __m512 acc[ATT_PV][4];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < VECS; c++) acc[r][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < keys; j++) {
        __m512 vv[4];
        for (int c = 0; c < VECS; c++)
            vv[c] = _mm512_maskz_loadu_ps(c == VECS - 1 ? last_mask : 0xFFFF, V + j * hd + e0 + 16 * c);
        for (int r = 0; r < R; r++) {
            const __m512 pb = _mm512_set1_ps(p[r][j]);
            for (int c = 0; c < VECS; c++) acc[r][c] = _mm512_fmadd_ps(vv[c], pb, acc[r][c]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < VECS; c++)
            _mm512_mask_storeu_ps(out[r] + e0 + 16 * c, c == VECS - 1 ? last_mask : 0xFFFF, acc[r][c]);
}

/* The weighted values of R queries, 64 dims (four vectors) at a time. */
static inline __attribute__((always_inline)) void att_pv(int R, const float *const p[ATT_PV], const float *V, int64_t keys,
                                                         int64_t hd, float *const out[ATT_PV]) {
    for (int64_t e0 = 0; e0 < hd; e0 += 64) {
        const int64_t width = hd - e0 < 64 ? hd - e0 : 64, vecs = (width + 15) / 16, tail = width - 16 * (vecs - 1);
        const __mmask16 mask = tail >= 16 ? 0xFFFF : (__mmask16)((1u << tail) - 1);
        switch (vecs) {
        case 1: att_pv_part(R, 1, p, V, keys, hd, e0, mask, out); break;
        case 2: att_pv_part(R, 2, p, V, keys, hd, e0, mask, out); break;
        case 3: att_pv_part(R, 3, p, V, keys, hd, e0, mask, out); break;
        default: att_pv_part(R, 4, p, V, keys, hd, e0, mask, out);
        }
    }
}

/* Queries t = 0..T-1 at positions pos + t (q_t = q + t * q_stride) against a head's keys and
 * values [0, pos + T), causal: out_t = out + t * out_stride. */
static void att_head_tiles(const KvHead *k, const KvHead *v, const float *q, int64_t q_stride, float *out,
                           int64_t out_stride, int64_t T, int64_t pos, int64_t hd, float scale, uint8_t *scratch,
                           int64_t S) {
    const int64_t keys = pos + T, panels = (keys + PF_PANEL - 1) / PF_PANEL, stride = panels * PF_PANEL + PF_PANEL;
    float *kf = (float *)scratch, *vf = kf + S * hd, *sc = vf + S * hd;
    uint8_t *panel = (uint8_t *)(sc + ATT_TILE * stride);
    const float *K = k->f32, *V = v->f32;
    if (k->q8) {
        for (int64_t j = 0; j < keys; j++) kv_widen_row(k, j, hd, kf + j * hd);
        K = kf;
    }
    if (v->q8) {
        for (int64_t j = 0; j < keys; j++) kv_widen_row(v, j, hd, vf + j * hd);
        V = vf;
    }
    for (int64_t p = 0; p < panels; p++) {
        const uint8_t *rows[PF_PANEL];
        for (int i = 0; i < PF_PANEL; i++) {
            const int64_t j = p * PF_PANEL + i < keys ? p * PF_PANEL + i : keys - 1;
            rows[i] = (const uint8_t *)(K + j * hd);
        }
        pf_pack_panel(rows, hd * 4, panel + p * hd * 128);
    }
    const int64_t tiles = (T + ATT_TILE - 1) / ATT_TILE;
    for (int64_t i = 0, t0 = 0; i < tiles; i++) {
        const int R = (int)((T - t0 + (tiles - i) - 1) / (tiles - i));
        const int64_t last = pos + t0 + R, used = (last + PF_PANEL - 1) / PF_PANEL; /* keys the tile's last query sees */
        const void *xr[PF_FTOKENS];
        for (int r = 0; r < R; r++) xr[r] = q + (t0 + r) * q_stride;
        for (int64_t p = 0; p < used; p++) {
            __m512 acc[PF_FTOKENS][2];
            pf_float_tile(PK_F32, R, panel + p * hd * 128, xr, hd, NULL, 0, acc);
            for (int r = 0; r < R; r++) {
                _mm512_storeu_ps(sc + r * stride + p * PF_PANEL, _mm512_mul_ps(acc[r][0], _mm512_set1_ps(scale)));
                _mm512_storeu_ps(sc + r * stride + p * PF_PANEL + 16, _mm512_mul_ps(acc[r][1], _mm512_set1_ps(scale)));
            }
        }
        for (int r = 0; r < R; r++) { /* query t0 + r sees keys [0, pos + t0 + r]; the rest weigh nothing */
            float *row = sc + r * stride;
            const int64_t seen = pos + t0 + r + 1;
            const float inv = att_softmax(row, seen);
            for (int64_t j = 0; j < seen; j++) row[j] *= inv;
            for (int64_t j = seen; j < last; j++) row[j] = 0.0f;
        }
        for (int r0 = 0; r0 < R; r0 += ATT_PV) {
            const int n = R - r0 < ATT_PV ? R - r0 : ATT_PV;
            const float *pr[ATT_PV];
            float *orow[ATT_PV];
            for (int r = 0; r < n; r++) pr[r] = sc + (r0 + r) * stride, orow[r] = out + (t0 + r0 + r) * out_stride;
            switch (n) {
#define ATT_PV_CASE(c) case c: att_pv(c, pr, V, last, hd, orow); break;
                ATT_PV_CASE(1) ATT_PV_CASE(2) ATT_PV_CASE(3) ATT_PV_CASE(4) ATT_PV_CASE(5) default: ATT_PV_CASE(6)
#undef ATT_PV_CASE
            }
        }
        t0 += R;
    }
}
#endif /* PF_PANELS */

#endif
