/* The AMX tiles' peaks for peak.c (its AMX translation unit: the only one built with -mamx-*): each
 * thread of an OpenMP region loads a tile configuration, runs `iters` rounds of four independent
 * tile products (two A and two B tiles into four C tiles, all in the tiles: no memory) and releases
 * the tiles. Linux grants the tiles' state once per process (arch_prctl ARCH_REQ_XCOMP_PERM); without
 * it the probe reports nothing. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tiles.h"

enum { PEAK_AMX_BF16 = 3, PEAK_AMX_INT8 = 4 }; /* peak.c's kinds */
static const TileConfig CONFIG = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int granted;
static void ask(void) { granted = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0; }

/* What `kind` runs ("" when the tiles' state is not granted, or no such kind). */
const char *peak_amx_isa(int kind) {
    pthread_once(&once, ask);
    if (!granted) return "";
    return kind == PEAK_AMX_BF16 ? "amx-bf16 tdpbf16ps tmm" : kind == PEAK_AMX_INT8 ? "amx-int8 tdpbusd tmm" : "";
}

/* Operations (a multiply and an add are two) of one tile product. */
static double ops(int kind) { return kind == PEAK_AMX_BF16 ? 16.0 * 16 * 32 * 2 : 16.0 * 16 * 64 * 2; }

static void rounds(int kind, int64_t iters) {
    static const uint8_t zeros[16 * 64] __attribute__((aligned(64))); /* any operands: zeros never denormal */
    TILE_CONFIG(&CONFIG);
    TILE_LOAD(4, zeros, 64);
    TILE_LOAD(5, zeros, 64);
    TILE_LOAD(6, zeros, 64);
    TILE_LOAD(7, zeros, 64);
    TILE_ZERO(0);
    TILE_ZERO(1);
    TILE_ZERO(2);
    TILE_ZERO(3);
    if (kind == PEAK_AMX_BF16)
        for (int64_t k = 0; k < iters; k++) {
            TILE_DPBF16PS(0, 4, 6);
            TILE_DPBF16PS(1, 4, 7);
            TILE_DPBF16PS(2, 5, 6);
            TILE_DPBF16PS(3, 5, 7);
        }
    else
        for (int64_t k = 0; k < iters; k++) {
            TILE_DPBUSD(0, 4, 6);
            TILE_DPBUSD(1, 4, 7);
            TILE_DPBUSD(2, 5, 6);
            TILE_DPBUSD(3, 5, 7);
        }
    TILE_RELEASE();
}

/* 1e9 operations per second of `iters` rounds (4 tile products each) on `threads` threads (0.0 without the tiles). */
double peak_amx_gops(int kind, int64_t iters, int threads) {
    if (!*peak_amx_isa(kind)) return 0.0;
    #pragma omp parallel num_threads(threads)
    rounds(kind, 1); /* threads up, each with the tiles' state */
    const double start = omp_get_wtime();
    #pragma omp parallel num_threads(threads)
    rounds(kind, iters);
    const double elapsed = omp_get_wtime() - start;
    return ops(kind) * 4 * (double)iters * threads / elapsed / 1e9;
}
