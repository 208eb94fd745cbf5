/* The AMX translation unit's interface (amx_prefill.c), included by gpt2_step.c where the build
 * links that unit (WS_AMX): prefill's products of bf16, int8 and 4-bit panels on tiles. */
#ifndef WHISTLE_STOP_AMX_PREFILL_H
#define WHISTLE_STOP_AMX_PREFILL_H

#include <stdint.h>

enum { AMX_BF16 = 0, AMX_I8 = 1, AMX_Q4 = 2 };
#define AMX_TOKENS 64 /* tokens per amx_panel_* call at most (its `out` rows) */
#define AMX_PAD 16    /* the tokens' rows a tile loads: the activations' buffers hold M rounded up to it */
#define AMX_KPAD 32   /* bf16 activations' rows padded with zeros to a multiple of 32 elements (a tile's 64 bytes) */

/* Asks Linux for the tiles' state once per process (arch_prctl ARCH_REQ_XCOMP_PERM,
 * XFEATURE_XTILEDATA); 1 when granted (always with the model). Thread-safe. */
int amx_ready(void);
/* "amx" or the model's name. */
const char *amx_tiles_impl(void);
/* Loads `kind`'s tile configuration in the calling thread, before its first tile operation; amx_end
 * releases the tiles. Every thread that calls amx_panel_* brackets its calls with them. */
void amx_begin(int kind);
void amx_end(void);
/* R (<= AMX_TOKENS) tokens against a bf16 panel of 32 rows: out[r][i] = float32 sums of row i . x[r]
 * (`out` holds R rounded up to AMX_PAD rows: the tiles store whole ones),
 * x in bf16 [R rounded up to AMX_PAD][Kp], Kp = K rounded up to AMX_KPAD, zeros past K. */
void amx_panel_bf16(const uint8_t *panel, int64_t K, const uint16_t *xb, int64_t Kp, int R, float out[][32]);
/* R tokens against an int8 (AMX_I8: value + 128) or 4-bit (AMX_Q4) panel, x quantised per block of 32
 * (xq [R rounded up to AMX_PAD][K], xs and xsum [R][K / 32]): out[r][i] = sum over blocks of the
 * block's exact int32 product times its scale (x's; 4-bit's times the row's), made in block order
 * with one fused multiply-add per block, as decode's VNNI products make them. */
void amx_panel_int(int kind, const uint8_t *panel, int64_t K, const int8_t *xq, const float *xs, const int32_t *xsum,
                   int R, float out[][32]);

#endif
