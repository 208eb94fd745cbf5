/* int8 panels' products where the CPU has no AVX-512 VNNI (prefill.h's pf_tile_int and
 * pf_streams_int are those): AVX2's maddubs, or plain C. A panel is gpt2_step.c's panel_of: 32 rows
 * as [K/4][32 rows][4 bytes] of value + 128. S panels against R tokens quantised to int8 per block
 * of 32, one of S and R being 1: decode streams S = DECODE_STREAMS panels for its token (a memory
 * stream each), a verify pass or prefill takes R tokens per panel. Every row's sum for a token is
 * made with the same operations whatever S and R (per block the exact int32 product, then
 * f += (float)product * x's block scale, in block order), so decode, a verify pass and prefill agree
 * bit for bit. out[p * R + r][row]. Included by gpt2_step.c (QBLOCK, QuantX, PANEL). */
#ifndef WHISTLE_STOP_I8_PANELS_H
#define WHISTLE_STOP_I8_PANELS_H

#include <stdint.h>
#include <string.h>

#define I8_MOST 4 /* S x R at most */

#if defined(__AVX2__) && defined(__FMA__)
/* Eight rows a vector: each weight back to signed (XOR 0x80), then maddubs on |x| and w with x's
 * sign (127 * 127 * 2 fits in int16; |x| is made once a step for every row) and madd(ones) to each
 * row's int32 sum of its 4 bytes. The S streams are read side by side 32 bytes at a time (a panel's
 * whole block at a time made decode 1.09x slower, two passes of 16 rows 1.22x, on an AVX2 build of
 * the Zen 5 EPYC). */
static inline __attribute__((always_inline)) void i8_panels(const int S, const int R, const uint8_t *restrict panel,
                                                            int64_t stride, const QuantX *const x[], int64_t K,
                                                            float out[][PANEL]) {
    const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
    __m256 f[I8_MOST][PANEL / 8];
    for (int c = 0; c < S * R; c++)
        for (int j = 0; j < PANEL / 8; j++) f[c][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < K / QBLOCK; b++) {
        __m256i s[I8_MOST][PANEL / 8]; /* [p * R + r][j] */
        for (int c = 0; c < S * R; c++)
            for (int j = 0; j < PANEL / 8; j++) s[c][j] = _mm256_setzero_si256();
        for (int step = 0; step < QBLOCK / 4; step++) {
            __m256i xb[I8_MOST], magnitude[I8_MOST]; /* x's 4 bytes of the step, and |x| */
            for (int r = 0; r < R; r++) {
                int32_t four;
                memcpy(&four, x[r]->q + b * QBLOCK + step * 4, 4);
                xb[r] = _mm256_set1_epi32(four), magnitude[r] = _mm256_abs_epi8(xb[r]);
            }
            for (int j = 0; j < PANEL / 8; j++)
                for (int p = 0; p < S; p++) { /* the S streams side by side, 32 bytes at a time */
                    const uint8_t *w = panel + p * stride + (b * (QBLOCK / 4) + step) * 128 + j * 32;
                    const __m256i signed_w = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)w), flip);
                    for (int r = 0; r < R; r++) {
                        const __m256i pairs = _mm256_maddubs_epi16(magnitude[r], _mm256_sign_epi8(signed_w, xb[r]));
                        s[p * R + r][j] = _mm256_add_epi32(s[p * R + r][j], _mm256_madd_epi16(pairs, ones));
                    }
                }
        }
        for (int p = 0; p < S; p++)
            for (int r = 0; r < R; r++) {
                const __m256 x_scale = _mm256_set1_ps(x[r]->scale[b]);
                for (int j = 0; j < PANEL / 8; j++)
                    f[p * R + r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[p * R + r][j]), x_scale, f[p * R + r][j]);
            }
    }
    for (int c = 0; c < S * R; c++)
        for (int j = 0; j < PANEL / 8; j++) _mm256_storeu_ps(out[c] + 8 * j, f[c][j]);
}
#else
static inline __attribute__((always_inline)) void i8_panels(const int S, const int R, const uint8_t *restrict panel,
                                                            int64_t stride, const QuantX *const x[], int64_t K,
                                                            float out[][PANEL]) {
    float f[I8_MOST][PANEL];
    for (int c = 0; c < S * R; c++)
        for (int i = 0; i < PANEL; i++) f[c][i] = 0.0f;
    for (int64_t b = 0; b < K / QBLOCK; b++)
        for (int p = 0; p < S; p++) {
            const uint8_t *restrict w = panel + p * stride + b * (QBLOCK / 4) * 128;
            int32_t s[I8_MOST][PANEL];
            for (int r = 0; r < R; r++)
                for (int i = 0; i < PANEL; i++) s[r][i] = 0;
            for (int step = 0; step < QBLOCK / 4; step++)
                for (int r = 0; r < R; r++) {
                    const int8_t *xq = x[r]->q + b * QBLOCK + step * 4;
                    for (int i = 0; i < PANEL; i++)
                        for (int e = 0; e < 4; e++) s[r][i] += ((int32_t)w[step * 128 + i * 4 + e] - 128) * xq[e];
                }
            for (int r = 0; r < R; r++)
                for (int i = 0; i < PANEL; i++) f[p * R + r][i] += (float)s[r][i] * x[r]->scale[b];
        }
    for (int c = 0; c < S * R; c++) memcpy(out[c], f[c], sizeof f[c]);
}
#endif

#endif
