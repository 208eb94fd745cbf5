/* The CPU's arithmetic peaks, the roofline's denominators: each thread of an OpenMP region runs
 * independent chains of the best multiply-add this build has for one arithmetic, in registers (no
 * memory), for `iters` rounds; the region's operations over its wall time.
 *
 *   fp32  AVX-512F vfmadd231ps zmm (32 flops), AVX2 FMA ymm (16), or plain C's
 *   bf16  AVX-512 BF16 vdpbf16ps zmm (16 lanes x 2 products: 64); none without it (its products
 *         would run in fp32: the roofline takes fp32's peak)
 *   int8  AVX-512 VNNI vpdpbusd zmm (64 products: 128 ops), AVX-VNNI vpdpbusd ymm (64), or AVX2
 *         vpmaddubsw + vpmaddwd + vpaddd ymm (32 products: 64 ops); none otherwise
 *
 *   amx-bf16, amx-int8  (kinds 3 and 4, where the build links peak_amx.c: WS_AMX) the AMX tiles'
 *         tdpbf16ps (16 x 16 x 32 products: 16,384 ops) and tdpbusd (16 x 16 x 64: 32,768 ops), four
 *         independent tile products a round; "" where the CPU lacks them or Linux does not grant
 *         the tiles' state
 *
 * Built with -march=native like every kernel of this folder: the instructions are the ones this CPU
 * has, and `peak_isa` says which ran. */
#include <omp.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

enum { PEAK_FP32 = 0, PEAK_BF16 = 1, PEAK_INT8 = 2, PEAK_AMX_BF16 = 3, PEAK_AMX_INT8 = 4 };
#ifdef WS_AMX
const char *peak_amx_isa(int kind); /* peak_amx.c */
double peak_amx_gops(int kind, int64_t iters, int threads);
#endif
#define CHAINS 12 /* independent accumulators: more than latency x throughput on any of these units */

#if defined(__AVX512F__)
#define FP32_ISA "avx512f vfmadd231ps zmm"
#define FP32_OPS 32
static float chains_fp32(int64_t iters) {
    __m512 a[CHAINS];
    const __m512 b = _mm512_set1_ps(1.0f), c = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < CHAINS; i++) a[i] = _mm512_set1_ps((float)i);
    for (int64_t k = 0; k < iters; k++)
        for (int i = 0; i < CHAINS; i++) a[i] = _mm512_fmadd_ps(a[i], b, c);
    __m512 s = a[0];
    for (int i = 1; i < CHAINS; i++) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}
#elif defined(__AVX2__) && defined(__FMA__)
#define FP32_ISA "avx2 vfmadd231ps ymm"
#define FP32_OPS 16
static float chains_fp32(int64_t iters) {
    __m256 a[CHAINS];
    const __m256 b = _mm256_set1_ps(1.0f), c = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < CHAINS; i++) a[i] = _mm256_set1_ps((float)i);
    for (int64_t k = 0; k < iters; k++)
        for (int i = 0; i < CHAINS; i++) a[i] = _mm256_fmadd_ps(a[i], b, c);
    __m256 s = a[0];
    for (int i = 1; i < CHAINS; i++) s = _mm256_add_ps(s, a[i]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0];
}
#else
#define FP32_ISA "plain C multiply-adds"
#define FP32_OPS 2
static float chains_fp32(int64_t iters) {
    float a[CHAINS];
    for (int i = 0; i < CHAINS; i++) a[i] = (float)i;
    for (int64_t k = 0; k < iters; k++)
        for (int i = 0; i < CHAINS; i++) a[i] = a[i] * 1.0f + 1e-7f;
    float s = 0.0f;
    for (int i = 0; i < CHAINS; i++) s += a[i];
    return s;
}
#endif

#if defined(__AVX512BF16__)
#define BF16_ISA "avx512-bf16 vdpbf16ps zmm"
#define BF16_OPS 64
static float chains_bf16(int64_t iters) {
    __m512 a[CHAINS];
    const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3f80), c = (__m512bh)_mm512_set1_epi16(0x3380); /* 1, 6e-8 */
    for (int i = 0; i < CHAINS; i++) a[i] = _mm512_set1_ps((float)i);
    for (int64_t k = 0; k < iters; k++)
        for (int i = 0; i < CHAINS; i++) a[i] = _mm512_dpbf16_ps(a[i], b, c);
    __m512 s = a[0];
    for (int i = 1; i < CHAINS; i++) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}
#else
#define BF16_ISA ""
#define BF16_OPS 0
static float chains_bf16(int64_t iters) { return (float)iters; }
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define INT8_ISA "avx512-vnni vpdpbusd zmm"
#define INT8_OPS 128
static float chains_int8(int64_t iters) {
    __m512i a[CHAINS];
    const __m512i b = _mm512_set1_epi8(1), c = _mm512_set1_epi8(1);
    for (int i = 0; i < CHAINS; i++) a[i] = _mm512_set1_epi32(i);
    for (int64_t k = 0; k < iters; k++)
        for (int i = 0; i < CHAINS; i++) a[i] = _mm512_dpbusd_epi32(a[i], b, c);
    __m512i s = a[0];
    for (int i = 1; i < CHAINS; i++) s = _mm512_add_epi32(s, a[i]);
    return (float)_mm512_reduce_add_epi32(s);
}
#elif defined(__AVXVNNI__)
#define INT8_ISA "avx-vnni vpdpbusd ymm"
#define INT8_OPS 64
static float chains_int8(int64_t iters) {
    __m256i a[CHAINS];
    const __m256i b = _mm256_set1_epi8(1), c = _mm256_set1_epi8(1);
    for (int i = 0; i < CHAINS; i++) a[i] = _mm256_set1_epi32(i);
    for (int64_t k = 0; k < iters; k++)
        for (int i = 0; i < CHAINS; i++) a[i] = _mm256_dpbusd_avx_epi32(a[i], b, c);
    __m256i s = a[0];
    for (int i = 1; i < CHAINS; i++) s = _mm256_add_epi32(s, a[i]);
    int32_t out[8];
    _mm256_storeu_si256((__m256i *)out, s);
    return (float)out[0];
}
#elif defined(__AVX2__)
#define INT8_ISA "avx2 vpmaddubsw+vpmaddwd ymm"
#define INT8_OPS 64
static float chains_int8(int64_t iters) {
    __m256i a[CHAINS], x[CHAINS];
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i w = _mm256_set1_epi8(1);
    for (int i = 0; i < CHAINS; i++) a[i] = _mm256_setzero_si256(), x[i] = _mm256_set1_epi8((char)(i + 1));
    for (int64_t k = 0; k < iters; k++) {
        for (int i = 0; i < CHAINS; i++) a[i] = _mm256_add_epi32(a[i], _mm256_madd_epi16(_mm256_maddubs_epi16(x[i], w), ones));
        w = _mm256_xor_si256(w, ones); /* the weights change every round: nothing is computed once */
    }
    __m256i s = a[0];
    for (int i = 1; i < CHAINS; i++) s = _mm256_add_epi32(s, a[i]);
    int32_t out[8];
    _mm256_storeu_si256((__m256i *)out, s);
    return (float)out[0];
}
#else
#define INT8_ISA ""
#define INT8_OPS 0
static float chains_int8(int64_t iters) { return (float)iters; }
#endif

/* What `kind` runs on this build ("" when this CPU has no instructions for it). */
const char *peak_isa(int kind) {
#ifdef WS_AMX
    if (kind == PEAK_AMX_BF16 || kind == PEAK_AMX_INT8) return peak_amx_isa(kind);
#endif
    return kind == PEAK_FP32 ? FP32_ISA : kind == PEAK_BF16 ? BF16_ISA : kind == PEAK_INT8 ? INT8_ISA : "";
}

/* 1e9 operations per second of `iters` rounds on every thread of this process's OpenMP team (0.0
 * when this CPU has no instructions for `kind`). `sink` keeps the chains' results alive. */
double peak_gops(int kind, int64_t iters, int threads, float *sink) {
#ifdef WS_AMX
    if (kind == PEAK_AMX_BF16 || kind == PEAK_AMX_INT8) return peak_amx_gops(kind, iters / 16 + 1, threads); /* a round: 64 cycles or more */
#endif
    const int ops = kind == PEAK_FP32 ? FP32_OPS : kind == PEAK_BF16 ? BF16_OPS : kind == PEAK_INT8 ? INT8_OPS : 0;
    if (!ops) return 0.0;
    float total = 0.0f;
    #pragma omp parallel num_threads(threads) reduction(+ : total)
    { total += kind == PEAK_FP32 ? chains_fp32(1) : kind == PEAK_BF16 ? chains_bf16(1) : chains_int8(1); } /* threads up */
    const double start = omp_get_wtime();
    #pragma omp parallel num_threads(threads) reduction(+ : total)
    { total += kind == PEAK_FP32 ? chains_fp32(iters) : kind == PEAK_BF16 ? chains_bf16(iters) : chains_int8(iters); }
    const double elapsed = omp_get_wtime() - start;
    *sink = total;
    return (double)ops * CHAINS * (double)iters * threads / elapsed / 1e9;
}
