/* Prefill's products on AMX tiles: bf16 panels with tdpbf16ps, int8 and 4-bit panels with tdpbsud.
 * The only translation unit built with -mamx-* (or, for the tests, against tiles.h's plain-C model
 * of the tiles: WS_TILE_MODEL). gpt2_step.c calls it per panel for up to AMX_TOKENS tokens, between
 * amx_begin and amx_end in every OpenMP thread.
 *
 * The panels are AMX's B layout as stored (gpt2_step.c's panel_of): a step of 4 bytes of 32 rows
 * is 128 bytes, rows 0-15 then 16-31, so the panel's first and second halves are two B tiles of
 * 16 steps (64 bytes a step) read 128 bytes apart, with nothing repacked. Tokens are A tiles of 16
 * rows (the activations' buffers hold M rounded up to 16; the extra rows' sums are never read).
 * Two token tiles x two halves make four C tiles, two A and two B: the eight tiles.
 *
 *   bf16   A: 16 tokens x 32 bf16 (x rounded to bf16), B: 16 pairs of 16 rows; the float32 sums stay
 *          in C over all of K (its tail, past a multiple of 32, from a zero-padded copy of the panel)
 *   int8   A: 16 tokens x one block of 32 int8 (x quantised as decode does), B: the block's 8 steps
 *          of 16 rows as value + 128 (tdpbsud: signed x, unsigned weights); each block's exact int32
 *          product then (s - 128 x the block's sum of x) x x's scale, added to a float32 sum with one
 *          fused multiply-add in block order: decode's VNNI products' operations, so the sums equal
 *          theirs bit for bit
 *   4-bit  the panel unpacked once to int8-like steps (nibbles as value + 8, each block 8 steps),
 *          then as int8 with the rows' block scales times x's */
#define _GNU_SOURCE
#include "amx_prefill.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tiles.h"

#define QB 32 /* the quantisation block */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* Tiles: C 0-3 (token tile t, half h: 2t + h), A 4-5 (token tiles), B 6-7 (halves). */
static const TileConfig CONFIG_BF16 = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};
static const TileConfig CONFIG_INT = { /* one block of 32 bytes per product */
    .palette = 1,
    .colsb = {64, 64, 64, 64, 32, 32, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 8, 8},
};
/* AVX-512 builds: C 0-1, A 2-3, B 4-5 (even and odd blocks), one token tile and half at a time */
static const TileConfig CONFIG_INT_PAIRS = {
    .palette = 1,
    .colsb = {64, 64, 32, 32, 64, 64},
    .rows = {16, 16, 16, 16, 8, 8},
};

static pthread_once_t permission_once = PTHREAD_ONCE_INIT;
static int permitted;

static void ask_permission(void) {
#ifdef WS_TILE_MODEL
    permitted = 1;
#else
    permitted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#endif
}

int amx_ready(void) {
    pthread_once(&permission_once, ask_permission);
    return permitted;
}

const char *amx_tiles_impl(void) { return TILES_IMPL; }

void amx_begin(int kind) {
#ifdef __AVX512F__
    TILE_CONFIG(kind == AMX_BF16 ? &CONFIG_BF16 : &CONFIG_INT_PAIRS);
#else
    TILE_CONFIG(kind == AMX_BF16 ? &CONFIG_BF16 : &CONFIG_INT);
#endif
}

void amx_end(void) { TILE_RELEASE(); }

/* ---- bf16 ---------------------------------------------------------------------------------------- */

/* T (1 or 2) token tiles from token t0 against the panel: C over every chunk of 16 steps (32
 * elements), the last from `tail` when K/2 is not a multiple of 16; 16 rows of `out` per token tile. */
#define BF16_TILES(T)                                                                        \
    do {                                                                                     \
        TILE_ZERO(0); TILE_ZERO(1);                                                          \
        if (T == 2) { TILE_ZERO(2); TILE_ZERO(3); }                                    \
        for (int64_t c = 0; c < chunks; c++) {                                               \
            const uint8_t *b = c < full ? panel + c * 16 * 128 : tail;                       \
            TILE_LOAD(6, b, 128); TILE_LOAD(7, b + 64, 128);                                 \
            TILE_LOAD(4, xb + t0 * Kp + c * 32, 2 * Kp);                                     \
            TILE_DPBF16PS(0, 4, 6); TILE_DPBF16PS(1, 4, 7);                                  \
            if (T == 2) {                                                                    \
                TILE_LOAD(5, xb + (t0 + 16) * Kp + c * 32, 2 * Kp);                          \
                TILE_DPBF16PS(2, 5, 6); TILE_DPBF16PS(3, 5, 7);                              \
            }                                                                                \
        }                                                                                    \
        TILE_STORE(0, out[t0], 128); TILE_STORE(1, out[t0] + 16, 128);                       \
        if (T == 2) { TILE_STORE(2, out[t0 + 16], 128); TILE_STORE(3, out[t0 + 16] + 16, 128); } \
    } while (0)

void amx_panel_bf16(const uint8_t *panel, int64_t K, const uint16_t *xb, int64_t Kp, int R, float out[][32]) {
    const int64_t steps = K / 2, full = steps / 16, chunks = (steps + 15) / 16;
    uint8_t tail[16 * 128] __attribute__((aligned(64)));
    if (chunks > full) { /* the last steps, zero-padded to a whole B tile (past the panel lies the next one) */
        memset(tail, 0, sizeof tail);
        memcpy(tail, panel + full * 16 * 128, (size_t)(steps - full * 16) * 128);
    }
    int64_t t0 = 0;
    for (; t0 + 16 < R; t0 += 32) BF16_TILES(2); /* two token tiles while more than one is left */
    if (t0 < R) BF16_TILES(1);
}

/* ---- int8 and 4-bit --------------------------------------------------------------------------- */

/* A 4-bit panel unpacked to int8-like blocks: per block of 32, 8 steps of [32 rows][4 bytes] (the
 * nibbles as value + 8; element order as x's: a stored step's low nibbles are elements 8s..8s+3,
 * its high ones 8s+4..8s+7), then the 32 rows' scales as stored. Kept per thread for the panel it
 * was made from: every token tile of a prefill meets the same panel in turn. */
#define Q4_BLOCK (4 * 128 + 128) /* a stored 4-bit block's bytes */
#define U8_BLOCK (8 * 128)
static __thread uint8_t *unpacked;
static __thread int64_t unpacked_bytes;
static __thread const uint8_t *unpacked_from;
static __thread int64_t unpacked_k;

static const uint8_t *unpack_q4(const uint8_t *panel, int64_t K) {
    if (panel == unpacked_from && K == unpacked_k) return unpacked;
    const int64_t blocks = K / QB, need = blocks * U8_BLOCK;
    if (need > unpacked_bytes) {
        free(unpacked);
        unpacked = aligned_alloc(64, (size_t)need);
        unpacked_bytes = unpacked ? need : 0;
        if (!unpacked) return NULL;
    }
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *src = panel + b * Q4_BLOCK;
        uint8_t *dst = unpacked + b * U8_BLOCK;
        for (int s = 0; s < 4; s++)
            for (int i = 0; i < 128; i++) {
                dst[(2 * s) * 128 + i] = src[s * 128 + i] & 15;
                dst[(2 * s + 1) * 128 + i] = src[s * 128 + i] >> 4;
            }
    }
    unpacked_from = panel, unpacked_k = K;
    return unpacked;
}

/* One block's four (or two) C tiles, stored as [token tile][half][16 tokens][16 rows] int32, into
 * the float sums of the tokens that exist: f += (s - shift x sum of x) x scale, one fused
 * multiply-add each, as pf_tile_int's _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, f). */
static inline void int_block_sums(const int32_t c[2][2][16][16], int64_t t0, int T, int R, int64_t b, int64_t blocks,
                                  int32_t shift, const float *xs, const int32_t *xsum, const float *wscale,
                                  float f[][32]) {
    for (int t = 0; t < T; t++)
        for (int r = 0; r < 16; r++) {
            const int64_t token = t0 + 16 * t + r;
            if (token >= R) return;
            const int32_t start = -shift * xsum[token * blocks + b];
            const float x_scale = xs[token * blocks + b];
            for (int h = 0; h < 2; h++) {
                float *restrict sums = f[token] + 16 * h;
                const int32_t *restrict s = c[t][h][r];
                if (wscale)
                    for (int n = 0; n < 16; n++) sums[n] = fmaf((float)(s[n] + start), wscale[16 * h + n] * x_scale, sums[n]);
                else
                    for (int n = 0; n < 16; n++) sums[n] = fmaf((float)(s[n] + start), x_scale, sums[n]);
            }
        }
}

/* T (1 or 2) token tiles from token t0: per block, the block's products on tiles, then their sums. */
#define INT_TILES(T)                                                                                            \
    do {                                                                                                        \
        for (int64_t b = 0; b < blocks; b++) {                                                                  \
            const uint8_t *w = weights + b * U8_BLOCK;                                                          \
            TILE_ZERO(0); TILE_ZERO(1);                                                                         \
            TILE_LOAD(6, w, 128); TILE_LOAD(7, w + 64, 128);                                                    \
            TILE_LOAD(4, xq + t0 * K + b * QB, K);                                                              \
            TILE_DPBSUD(0, 4, 6); TILE_DPBSUD(1, 4, 7);                                                         \
            TILE_STORE(0, c[0][0], 64); TILE_STORE(1, c[0][1], 64);                                             \
            if (T == 2) {                                                                                       \
                TILE_ZERO(2); TILE_ZERO(3);                                                                     \
                TILE_LOAD(5, xq + (t0 + 16) * K + b * QB, K);                                                   \
                TILE_DPBSUD(2, 5, 6); TILE_DPBSUD(3, 5, 7);                                                     \
                TILE_STORE(2, c[1][0], 64); TILE_STORE(3, c[1][1], 64);                                         \
            }                                                                                                   \
            const float *wscale = kind == AMX_Q4 ? (const float *)(panel + b * Q4_BLOCK + 4 * 128) : NULL;      \
            int_block_sums((const int32_t(*)[2][16][16])c, t0, T, R, b, blocks, shift, xs, xsum, wscale, out); \
        }                                                                                                       \
    } while (0)

#ifdef __AVX512F__
#include <immintrin.h>
/* One token tile (16 tokens from t0, `valid` of them real) x one half (16 rows) of the panel, every
 * block in order: the block's product on the tiles (C alternating between tiles 0 and 1, so the
 * next block's product can start while this one's sums are read), stored, then each token's row of
 * int32 sums + its start, converted and multiply-added into 16 float32 sums in registers:
 * pf_tile_int's operations, so the sums equal decode's bit for bit. */
static inline __attribute__((always_inline)) void int_rows(int kind, const int32_t cb[16][16], const uint8_t *panel,
                                                           int64_t b, int h, const int32_t starts[16],
                                                           const float scales[16], __m512 f[16]) {
    __m512 wscale = _mm512_set1_ps(1.0f);
    if (kind == AMX_Q4) wscale = _mm512_loadu_ps(panel + b * Q4_BLOCK + 4 * 128 + 64 * h);
    for (int r = 0; r < 16; r++) {
        const __m512i s = _mm512_add_epi32(_mm512_load_si512((const void *)cb[r]), _mm512_set1_epi32(starts[r]));
        __m512 scale = _mm512_set1_ps(scales[r]);
        if (kind == AMX_Q4) scale = _mm512_mul_ps(wscale, scale);
        f[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, f[r]);
    }
}

/* One token tile (16 tokens, the rows past R with starts and scales 0) x one half (16 rows) of the
 * panel, every block in order: the block's product on the tiles, stored, then each token's row of
 * int32 sums + its start, converted and multiply-added into 16 float32 sums in registers:
 * pf_tile_int's operations, so the sums equal decode's bit for bit. Even and odd blocks take their
 * own A, B and C tiles (the tiles are not renamed: reusing one waits for the product reading it), so
 * the next block's product runs while this one's sums are read. */
static void int_tile_half(int kind, const uint8_t *panel, const uint8_t *weights, int64_t K, const int8_t *xq,
                          const int32_t starts[][16], const float scales[][16], int h, float out[][32]) {
    const int64_t blocks = K / QB;
    int32_t c[2][16][16] __attribute__((aligned(64)));
    __m512 f[16];
    for (int r = 0; r < 16; r++) f[r] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < blocks; b += 2) {
        const uint8_t *w = weights + b * U8_BLOCK + 64 * h;
        TILE_LOAD(2, xq + b * QB, K);
        TILE_LOAD(4, w, 128);
        TILE_ZERO(0);
        TILE_DPBSUD(0, 2, 4);
        TILE_LOAD(3, xq + (b + 1) * QB, K);
        TILE_LOAD(5, w + U8_BLOCK, 128);
        TILE_ZERO(1);
        TILE_DPBSUD(1, 3, 5);
        TILE_STORE(0, c[0], 64);
        int_rows(kind, c[0], panel, b, h, starts[b], scales[b], f);
        TILE_STORE(1, c[1], 64);
        int_rows(kind, c[1], panel, b + 1, h, starts[b + 1], scales[b + 1], f);
    }
    if (b < blocks) {
        TILE_LOAD(2, xq + b * QB, K);
        TILE_LOAD(4, weights + b * U8_BLOCK + 64 * h, 128);
        TILE_ZERO(0);
        TILE_DPBSUD(0, 2, 4);
        TILE_STORE(0, c[0], 64);
        int_rows(kind, c[0], panel, b, h, starts[b], scales[b], f);
    }
    for (int r = 0; r < 16; r++) _mm512_storeu_ps(out[r] + 16 * h, f[r]);
}
#endif

void amx_panel_int(int kind, const uint8_t *panel, int64_t K, const int8_t *xq, const float *xs, const int32_t *xsum,
                   int R, float out[][32]) {
    const int64_t blocks = K / QB;
    const int32_t shift = kind == AMX_I8 ? 128 : 8;
    const uint8_t *weights = kind == AMX_I8 ? panel : unpack_q4(panel, K);
    if (!weights) { /* no memory for the unpacked panel: NaN sums, which the caller's checks see */
        for (int r = 0; r < R; r++)
            for (int i = 0; i < 32; i++) out[r][i] = NAN;
        return;
    }
#ifdef __AVX512F__
    /* per token tile: each block's starts (-shift x its sum of x) and x's scales, 16 tokens side by side
     * (the rows past R: 0, their sums never read) */
    int32_t(*starts)[16] = __builtin_alloca(sizeof(int32_t[16]) * blocks);
    float(*scales)[16] = __builtin_alloca(sizeof(float[16]) * blocks);
    for (int t0 = 0; t0 < R; t0 += 16) {
        for (int64_t b = 0; b < blocks; b++)
            for (int r = 0; r < 16; r++) {
                const int valid = t0 + r < R;
                starts[b][r] = valid ? -shift * xsum[(t0 + r) * blocks + b] : 0;
                scales[b][r] = valid ? xs[(t0 + r) * blocks + b] : 0.0f;
            }
        for (int h = 0; h < 2; h++) int_tile_half(kind, panel, weights, K, xq + t0 * K, starts, scales, h, out + t0);
    }
#else
    int32_t c[2][2][16][16] __attribute__((aligned(64)));
    for (int r = 0; r < R; r++) memset(out[r], 0, sizeof out[r]);
    int64_t t0 = 0;
    for (; t0 + 16 < R; t0 += 32) INT_TILES(2);
    if (t0 < R) INT_TILES(1);
#endif
}
