/* The AMX tile operations behind one small interface, with two implementations:
 *
 *   the real instructions (ldtilecfg, tilezero, tileloadd, tilestored, tdpbf16ps, tdpbsud, tdpbusd,
 *   tdpbssd, tilerelease): only the AMX translation unit (amx_prefill.c, built with -mamx-*) includes
 *   this header that way;
 *   a plain-C model of their documented semantics (WS_TILE_MODEL; Intel SDM vol. 2 and the ISA
 *   extensions reference: palette 1, eight tiles of up to 16 rows of 64 bytes), so the kernels'
 *   tiling, padding, packing and threading run and are tested on every CPU.
 *
 * The model is strict where the hardware is: a tile operation in a thread without a loaded
 * configuration, or on shapes that do not fit (C rows != A rows, A's bytes != 4 x B's rows, C's
 * bytes != B's), traps (SIGILL, as the real #UD does), so a thread that forgets its configuration
 * fails on any CPU, not only on an AMX one. Tile numbers are literal constants (the real intrinsics
 * take them as immediates).
 *
 * GCC 12's _tile_loadconfig takes its operand as 8 bytes of memory: a configuration written on the
 * stack just before it can lose its stores to dead-store elimination (seen in an OpenMP-outlined
 * function), and the first tileloadd then raises SIGILL. Its tileloadd likewise takes only the
 * address, as if it read no memory: a buffer filled just before (a zero-padded copy) may lose its
 * stores too. Configurations here are static const, and a compiler barrier precedes every
 * ldtilecfg and tileloadd. */
#ifndef WHISTLE_STOP_TILES_H
#define WHISTLE_STOP_TILES_H

#include <stdint.h>
#include <string.h>

#define TILE_ROWS 16   /* rows of a tile (palette 1) */
#define TILE_COLSB 64  /* bytes of a tile's row */
#define TILE_COUNT 8

/* The 64-byte operand of ldtilecfg (palette 1). */
typedef struct __attribute__((aligned(64))) {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileConfig;

#ifndef WS_TILE_MODEL
/* ---- the real instructions ------------------------------------------------------------------ */
#include <immintrin.h>
#define TILES_IMPL "amx"
#define TILE_CONFIG(cfg)                                                                            \
    do {                                                                                            \
        __asm__ volatile("" ::: "memory"); /* GCC 12: the configuration's stores before ldtilecfg */ \
        _tile_loadconfig((const void *)(cfg));                                                      \
    } while (0)
#define TILE_RELEASE() _tile_release()
#define TILE_ZERO(t) _tile_zero(t)
#define TILE_LOAD(t, base, stride)                                                                  \
    do {                                                                                            \
        __asm__ volatile("" ::: "memory"); /* GCC 12's tileloadd does not say it reads memory */    \
        _tile_loadd(t, (const void *)(base), (long)(stride));                                       \
    } while (0)
#define TILE_STORE(t, base, stride) _tile_stored(t, (void *)(base), (long)(stride))
#define TILE_DPBF16PS(c, a, b) _tile_dpbf16ps(c, a, b)
#define TILE_DPBSUD(c, a, b) _tile_dpbsud(c, a, b)
#define TILE_DPBUSD(c, a, b) _tile_dpbusd(c, a, b)
#define TILE_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#else
/* ---- the plain-C model ---------------------------------------------------------------------- */
#include <math.h>
#define TILES_IMPL "amx tile model (plain C)"

typedef struct {
    int configured;
    uint16_t colsb[TILE_COUNT];
    uint8_t rows[TILE_COUNT];
    uint8_t data[TILE_COUNT][TILE_ROWS][TILE_COLSB];
} TileState;
static __thread TileState tile_state; /* each thread its own tiles and configuration, as the hardware's */

static inline void tm_check(int ok) {
    if (!ok) __builtin_trap(); /* the hardware's #UD: SIGILL */
}

/* ldtilecfg: palette 1, every tile's shape; every tile zeroed. Palette 0 releases. */
static inline void tm_config(const TileConfig *cfg) {
    if (cfg->palette == 0) {
        memset(&tile_state, 0, sizeof tile_state);
        return;
    }
    tm_check(cfg->palette == 1 && cfg->start_row == 0);
    for (int t = 0; t < TILE_COUNT; t++) {
        tm_check(cfg->rows[t] <= TILE_ROWS && cfg->colsb[t] <= TILE_COLSB && (cfg->rows[t] == 0) == (cfg->colsb[t] == 0));
        tile_state.rows[t] = cfg->rows[t], tile_state.colsb[t] = cfg->colsb[t];
    }
    memset(tile_state.data, 0, sizeof tile_state.data);
    tile_state.configured = 1;
}

static inline void tm_used(int t) { tm_check(tile_state.configured && t >= 0 && t < TILE_COUNT && tile_state.rows[t] > 0); }

static inline void tm_zero(int t) {
    tm_used(t);
    memset(tile_state.data[t], 0, sizeof tile_state.data[t]);
}

/* tileloadd: `rows` rows of `colsb` bytes, `stride` bytes apart; the rest of the tile zeroed. */
static inline void tm_load(int t, const void *base, long stride) {
    tm_used(t);
    memset(tile_state.data[t], 0, sizeof tile_state.data[t]);
    for (int r = 0; r < tile_state.rows[t]; r++)
        memcpy(tile_state.data[t][r], (const uint8_t *)base + r * stride, tile_state.colsb[t]);
}

static inline void tm_store(int t, void *base, long stride) {
    tm_used(t);
    for (int r = 0; r < tile_state.rows[t]; r++) memcpy((uint8_t *)base + r * stride, tile_state.data[t][r], tile_state.colsb[t]);
}

/* The shapes a dot product needs: C M x N dwords, A M x K bytes, B K/4 x N dwords. */
static inline void tm_shapes(int c, int a, int b) {
    tm_used(c), tm_used(a), tm_used(b);
    tm_check(c != a && c != b && a != b);
    tm_check(tile_state.rows[c] == tile_state.rows[a] && tile_state.colsb[c] == tile_state.colsb[b]);
    tm_check(tile_state.colsb[a] == 4 * tile_state.rows[b] && tile_state.colsb[c] % 4 == 0);
}

/* bf16 -> float32 with the instruction's DAZ (denormal inputs as zeros). */
static inline float tm_bf16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    uint32_t u = (uint32_t)h << 16;
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* tdpbf16ps: C[m][n] += A[m][2k] B[k][2n] + A[m][2k+1] B[k][2n+1] for every pair k, the two
 * products added in turn (round to nearest even), output denormals flushed to zero. */
static inline void tm_dpbf16ps(int c, int a, int b) {
    tm_shapes(c, a, b);
    for (int m = 0; m < tile_state.rows[c]; m++) {
        float tmp[16];
        memcpy(tmp, tile_state.data[c][m], sizeof tmp);
        for (int k = 0; k < tile_state.colsb[a] / 4; k++)
            for (int n = 0; n < tile_state.colsb[c] / 4; n++) {
                tmp[n] += tm_bf16(&tile_state.data[a][m][4 * k]) * tm_bf16(&tile_state.data[b][k][4 * n]);
                tmp[n] += tm_bf16(&tile_state.data[a][m][4 * k + 2]) * tm_bf16(&tile_state.data[b][k][4 * n + 2]);
            }
        for (int n = 0; n < tile_state.colsb[c] / 4; n++)
            if (fabsf(tmp[n]) < 1.17549435e-38f) tmp[n] = copysignf(0.0f, tmp[n]);
        memcpy(tile_state.data[c][m], tmp, sizeof tmp);
    }
}

/* tdpb[su][su]d: C[m][n] (int32, wrapping) += the four products of A[m]'s bytes 4k..4k+3 and
 * B[k]'s bytes 4n..4n+3 for every k; `a_signed`, `b_signed` say how each side's bytes read. */
static inline void tm_dpb(int c, int a, int b, int a_signed, int b_signed) {
    tm_shapes(c, a, b);
    for (int m = 0; m < tile_state.rows[c]; m++)
        for (int n = 0; n < tile_state.colsb[c] / 4; n++) {
            uint32_t acc;
            memcpy(&acc, &tile_state.data[c][m][4 * n], 4);
            for (int k = 0; k < tile_state.colsb[a] / 4; k++)
                for (int i = 0; i < 4; i++) {
                    const uint8_t x = tile_state.data[a][m][4 * k + i], w = tile_state.data[b][k][4 * n + i];
                    const int32_t xv = a_signed ? (int8_t)x : x, wv = b_signed ? (int8_t)w : w;
                    acc += (uint32_t)(xv * wv);
                }
            memcpy(&tile_state.data[c][m][4 * n], &acc, 4);
        }
}

#define TILE_CONFIG(cfg) tm_config(cfg)
#define TILE_RELEASE() memset(&tile_state, 0, sizeof tile_state)
#define TILE_ZERO(t) tm_zero(t)
#define TILE_LOAD(t, base, stride) tm_load(t, (const void *)(base), (long)(stride))
#define TILE_STORE(t, base, stride) tm_store(t, (void *)(base), (long)(stride))
#define TILE_DPBF16PS(c, a, b) tm_dpbf16ps(c, a, b)
#define TILE_DPBSUD(c, a, b) tm_dpb(c, a, b, 1, 0)
#define TILE_DPBUSD(c, a, b) tm_dpb(c, a, b, 0, 1)
#define TILE_DPBSSD(c, a, b) tm_dpb(c, a, b, 1, 1)
#endif

#endif
