/* The integer panels' products where the CPU has no AVX-512 VNNI (prefill.h's pf_tile_int and
 * pf_streams_int are those): AVX2's maddubs, or plain C. A panel is gpt2_step.c's panel_of: 32 rows
 * in blocks of 32 elements, int8 as 8 steps of [32 rows][4 bytes] of value + 128, 4-bit as 4 steps of
 * [32 rows][4 bytes] (each byte two elements as value + 8: e in its low nibble, 4 + e in its high
 * one) and the block's 32 float32 scales. S panels `stride` bytes apart against R tokens quantised to
 * int8 per block of 32, one of S and R being 1: decode streams S = DECODE_STREAMS panels for its
 * token (a memory stream each), a verify pass or prefill takes R tokens per panel. Every row's sum
 * for a token is made with the same operations whatever S and R (per block the exact int32 product,
 * then f += (float)product * its scale, in block order), so decode, a verify pass and prefill agree
 * bit for bit. out[p * R + r][row]. Included by gpt2_step.c (QBLOCK, QuantX, PANEL, WT_*). */
#ifndef WHISTLE_STOP_INT_PANELS_H
#define WHISTLE_STOP_INT_PANELS_H

#include <stdint.h>
#include <string.h>

#define INT_MOST 4 /* S x R at most */
#define INT_BLOCK(wtype) ((wtype) == WT_I8 ? 8 * 128 : 4 * 128 + 128) /* bytes of a panel's block */

#if defined(__AVX2__) && defined(__FMA__)
/* Eight rows a vector. int8: each weight back to signed (XOR 0x80), then maddubs on |x| and w with
 * x's sign (127 * 127 * 2 fits in int16; |x| made once a step for every row). 4-bit: maddubs on the
 * unsigned nibbles and x, low and high nibbles' pairs added in int16 (2 * 2 * 15 * 127 fits), the
 * sums started at -8 x the block's sum of x. Then madd(ones) to each row's int32 sum. The S streams
 * are read side by side 32 bytes at a time (a panel's whole block at a time made int8 decode 1.09x
 * slower, two passes of 16 rows 1.22x, on an AVX2 build of the Zen 5 EPYC). */
static inline __attribute__((always_inline)) void int_panels(const int64_t wtype, const int S, const int R,
                                                             const uint8_t *restrict panel, int64_t stride,
                                                             const QuantX *const x[], int64_t K, float out[][PANEL]) {
    const int q4 = wtype == WT_Q4, steps = q4 ? 4 : 8, per_step = QBLOCK / steps;
    const __m256i flip = _mm256_set1_epi8((char)0x80), low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 f[INT_MOST][PANEL / 8];
    for (int c = 0; c < S * R; c++)
        for (int j = 0; j < PANEL / 8; j++) f[c][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < K / QBLOCK; b++) {
        __m256i s[INT_MOST][PANEL / 8]; /* [p * R + r][j] */
        for (int p = 0; p < S; p++)
            for (int r = 0; r < R; r++) {
                const __m256i start = q4 ? _mm256_set1_epi32(-8 * x[r]->sum[b]) : _mm256_setzero_si256();
                for (int j = 0; j < PANEL / 8; j++) s[p * R + r][j] = start;
            }
        for (int step = 0; step < steps; step++) {
            __m256i x0[INT_MOST], x1[INT_MOST]; /* int8: x's 4 bytes of the step and |x|; 4-bit: its 4 + 4 */
            for (int r = 0; r < R; r++) {
                int32_t four;
                memcpy(&four, x[r]->q + b * QBLOCK + step * per_step, 4);
                x0[r] = _mm256_set1_epi32(four);
                if (q4) memcpy(&four, x[r]->q + b * QBLOCK + step * per_step + 4, 4), x1[r] = _mm256_set1_epi32(four);
                else x1[r] = _mm256_abs_epi8(x0[r]);
            }
            for (int j = 0; j < PANEL / 8; j++)
                for (int p = 0; p < S; p++) { /* the S streams side by side, 32 bytes at a time */
                    const __m256i w = _mm256_loadu_si256((const __m256i *)(panel + p * stride + b * INT_BLOCK(wtype) + step * 128 + j * 32));
                    const __m256i signed_w = _mm256_xor_si256(w, flip);
                    const __m256i lo = _mm256_and_si256(w, low), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low);
                    for (int r = 0; r < R; r++) {
                        const __m256i pairs = q4 ? _mm256_add_epi16(_mm256_maddubs_epi16(lo, x0[r]), _mm256_maddubs_epi16(hi, x1[r]))
                                                 : _mm256_maddubs_epi16(x1[r], _mm256_sign_epi8(signed_w, x0[r]));
                        s[p * R + r][j] = _mm256_add_epi32(s[p * R + r][j], _mm256_madd_epi16(pairs, ones));
                    }
                }
        }
        for (int p = 0; p < S; p++)
            for (int r = 0; r < R; r++) {
                const __m256 x_scale = _mm256_set1_ps(x[r]->scale[b]);
                const float *scales = (const float *)(panel + p * stride + b * INT_BLOCK(wtype) + 4 * 128);
                for (int j = 0; j < PANEL / 8; j++) {
                    const __m256 s0 = q4 ? _mm256_mul_ps(_mm256_loadu_ps(scales + 8 * j), x_scale) : x_scale;
                    f[p * R + r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[p * R + r][j]), s0, f[p * R + r][j]);
                }
            }
    }
    for (int c = 0; c < S * R; c++)
        for (int j = 0; j < PANEL / 8; j++) _mm256_storeu_ps(out[c] + 8 * j, f[c][j]);
}
#else
static inline __attribute__((always_inline)) void int_panels(const int64_t wtype, const int S, const int R,
                                                             const uint8_t *restrict panel, int64_t stride,
                                                             const QuantX *const x[], int64_t K, float out[][PANEL]) {
    const int q4 = wtype == WT_Q4, steps = q4 ? 4 : 8, per_step = QBLOCK / steps;
    const int32_t shift = q4 ? 8 : 128;
    float f[INT_MOST][PANEL];
    for (int c = 0; c < S * R; c++)
        for (int i = 0; i < PANEL; i++) f[c][i] = 0.0f;
    for (int64_t b = 0; b < K / QBLOCK; b++)
        for (int p = 0; p < S; p++) {
            const uint8_t *restrict w = panel + p * stride + b * INT_BLOCK(wtype);
            const float *scales = (const float *)(w + 4 * 128);
            int32_t s[INT_MOST][PANEL];
            for (int r = 0; r < R; r++)
                for (int i = 0; i < PANEL; i++) s[r][i] = -shift * x[r]->sum[b];
            for (int step = 0; step < steps; step++)
                for (int r = 0; r < R; r++) {
                    const int8_t *xq = x[r]->q + b * QBLOCK + step * per_step;
                    for (int i = 0; i < PANEL; i++)
                        for (int e = 0; e < 4; e++) {
                            const int32_t byte = w[step * 128 + i * 4 + e];
                            s[r][i] += q4 ? (byte & 15) * xq[e] + (byte >> 4) * xq[4 + e] : byte * xq[e];
                        }
                }
            float s0[INT_MOST][PANEL]; /* each row's scale of the block: x's (4-bit: times the row's) */
            for (int r = 0; r < R; r++)
                for (int i = 0; i < PANEL; i++) s0[r][i] = q4 ? scales[i] * x[r]->scale[b] : x[r]->scale[b];
#ifdef __GNUC__
            __asm__("" : "+m"(s0)); /* fast maths could multiply the three factors in another order per caller */
#endif
            for (int r = 0; r < R; r++)
                for (int i = 0; i < PANEL; i++) f[p * R + r][i] += (float)s[r][i] * s0[r][i];
        }
    for (int c = 0; c < S * R; c++) memcpy(out[c], f[c], sizeof f[c]);
}
#endif

#endif
