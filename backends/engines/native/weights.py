"""GPT-2's matrices in the layouts gpt2_step.c reads: float32, bf16 and int8 as panels of 32 rows
(to_panels), 4-bit as [out, in] rows of records.

Pure numpy on the mmapped safetensors (HF's Conv1D stores [in, out], so the layer matrices are
transposed once here; the tied wte is already [vocab, d]). Shapes: N rows (out), K columns (in).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

QBLOCK = 32  # q4 block along `in` (gpt2_step.c's QBLOCK)
PANEL = 32  # rows per panel of a float32, bf16 or int8 matrix (gpt2_step.c's PANEL)
I8_SHIFT = 128  # int8 panels hold value + 128: the unsigned operand of VNNI's vpdpbusd


class WeightType(IntEnum):
    """gpt2_step.c's WT_* values."""

    F32 = 0
    BF16 = 1
    I8 = 2
    Q4 = 3


@dataclass
class StoredMatrix:
    """One [N, K] matrix at its stored type: `data` (float32, bf16 and int8: to_panels' [ceil(N/32), K * 32],
    int8 as uint8 value + 128; q4: [N, K/32 * 20] bytes of records), `scale` (i8: [N])."""

    data: np.ndarray
    scale: np.ndarray | None
    bias: np.ndarray | None

    @property
    def nbytes(self) -> int:
        return self.data.nbytes + (0 if self.scale is None else self.scale.nbytes)


def to_panels(rows: np.ndarray, fill: int = 0) -> np.ndarray:
    """[N, K] float32, bf16 bits with K even, or bytes with K a multiple of 4 -> the panels gpt2_step.c
    reads: 32 rows at a time (the last padded with rows of `fill`), each [K / e][32 rows][e] (e = 1
    float32, 2 bf16, 4 bytes: each row's 4 bytes of a step side by side), as [ceil(N / 32), K * 32] of
    the same dtype, in a new array."""
    n, k = rows.shape
    e = 4 // rows.dtype.itemsize
    if k % e:
        raise ValueError(f"panels of {rows.dtype} take rows whose length is a multiple of {e} (got {k})")
    panels = -(-n // PANEL)
    padded = np.full((panels * PANEL, k), fill, rows.dtype)
    padded[:n] = rows
    grouped = padded.reshape(panels, PANEL, k // e, e).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(grouped).reshape(panels, k * PANEL)


def from_panels(data: np.ndarray, n: int, k: int) -> np.ndarray:
    """to_panels' [N, K] rows again (a reference for tests)."""
    e = 4 // data.dtype.itemsize
    return data.reshape(-1, k // e, PANEL, e).transpose(0, 2, 1, 3).reshape(-1, k)[:n]


def to_bf16_bits(w: np.ndarray) -> np.ndarray:  # float32 [N, K] -> uint16 [N, K], round to nearest even
    bits = np.ascontiguousarray(w, dtype=np.float32).view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def i8_panels(q: np.ndarray) -> np.ndarray:  # int8 [N, K] -> uint8 panels of value + 128 (padding: 0)
    return to_panels(q.view(np.uint8) ^ np.uint8(I8_SHIFT), fill=I8_SHIFT)


def quantise_rows_i8(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # [N, K] -> int8 [N, K], scale [N]
    scale = np.abs(w).max(axis=1) / np.float32(127)
    scale = np.where(scale > 0, scale, np.float32(1)).astype(np.float32)
    q = np.rint(w / scale[:, None])
    return np.clip(q, -127, 127).astype(np.int8), scale


def q4_position(group: int, beta: int, j: int) -> int:
    """Where element j of block `beta` of a group of `group` (4, or 2) blocks sits among the group's
    group * 32 nibbles (gpt2_step.c's q4_position): slot s = position // 32 is the low (s even) or
    high (s odd) nibbles of the group's 32-byte word s // 2; lanes go in runs of four elements, and
    run g of every slot belongs to block g % group, so the kernel adds the slots' integer products
    before one conversion and one scaled add per group."""
    run, per_slot = j // 4, 8 // group
    slot, g = run // per_slot, (run % per_slot) * group + beta
    return slot * 32 + g * 4 + j % 4


def _q4_groups(blocks: int) -> list[tuple[int, int]]:  # (first block, blocks in the group)
    quads = blocks // 4 * 4
    return [(b, 4) for b in range(0, quads, 4)] + ([(quads, 2)] if blocks > quads else [])


def _q4_positions(group: int) -> np.ndarray:  # [G * 32]: element beta * 32 + j of the group -> its position
    return np.array([q4_position(group, beta, j) for beta in range(group) for j in range(QBLOCK)], np.int64)


def _pack_q4_group(q: np.ndarray, group: int) -> np.ndarray:  # [N, G, 32] in 0..15 -> uint8 [N, G * 16]
    n = q.shape[0]
    slots = np.empty((n, group * QBLOCK), np.uint8)
    slots[:, _q4_positions(group)] = q.reshape(n, group * QBLOCK)
    slots = slots.reshape(n, group // 2, 2, QBLOCK)  # [N, words, lo/hi, 32]
    return (slots[:, :, 0] | (slots[:, :, 1] << np.uint8(4))).reshape(n, group * QBLOCK // 2)


Q4_BLOCK_BYTES = 4 + QBLOCK // 2  # a float32 scale and 16 bytes of nibbles per block (gpt2_step.c)


def quantise_blocks_q4(w: np.ndarray) -> np.ndarray:  # [N, K] -> uint8 [N, K/32 * 20]
    """Blocks of 32 with a float32 scale each, stored as value + 8 (0..15), in groups of four blocks
    (a row whose block count is 2 mod 4 ends with a group of two); each group is one record, its
    scales and then its nibbles laid out by q4_position, so a row is one memory stream."""
    n, k = w.shape
    blocks = w.reshape(n, k // QBLOCK, QBLOCK)  # [N, B, 32]
    scale = np.abs(blocks).max(axis=2) / np.float32(7)  # symmetric: -7..7
    scale = np.where(scale > 0, scale, np.float32(1)).astype(np.float32)
    q = (np.clip(np.rint(blocks / scale[:, :, None]), -8, 7) + 8).astype(np.uint8)  # [N, B, 32] in 0..15
    records = [
        part
        for b, g in _q4_groups(k // QBLOCK)
        for part in (np.ascontiguousarray(scale[:, b : b + g]).view(np.uint8), _pack_q4_group(q[:, b : b + g], g))
    ]
    return np.ascontiguousarray(np.concatenate(records, axis=1))


def unpack_q4(records: np.ndarray, k: int) -> np.ndarray:  # uint8 [N, K/32 * 20] -> float32 [N, K]
    """The float32 values quantise_blocks_q4 stored (a reference for tests)."""
    n = records.shape[0]
    out = np.empty((n, k), np.float32)
    for b0, group in _q4_groups(k // QBLOCK):
        record = records[:, b0 * Q4_BLOCK_BYTES : (b0 + group) * Q4_BLOCK_BYTES]
        scale = np.ascontiguousarray(record[:, : 4 * group]).view(np.float32)  # [N, G]
        words = record[:, 4 * group :].reshape(n, group // 2, 1, QBLOCK)
        slots = np.concatenate([words & 15, words >> 4], axis=2).reshape(n, group * QBLOCK)
        values = slots[:, _q4_positions(group)].reshape(n, group, QBLOCK).astype(np.float32) - 8  # [N, G, 32]
        out[:, b0 * QBLOCK : (b0 + group) * QBLOCK] = (values * scale[:, :, None]).reshape(n, group * QBLOCK)
    return out


def store(w_out_in: np.ndarray, bias: np.ndarray | None, wtype: WeightType) -> StoredMatrix:
    """A float32 [N, K] matrix (any strides) at `wtype`, in new arrays (never a view of `w_out_in`)."""
    if wtype == WeightType.F32:
        return StoredMatrix(to_panels(np.asarray(w_out_in, dtype=np.float32)), None, bias)
    if wtype == WeightType.BF16:
        return StoredMatrix(to_panels(to_bf16_bits(w_out_in)), None, bias)
    w = np.ascontiguousarray(w_out_in, dtype=np.float32)
    if wtype == WeightType.I8:
        q, scale = quantise_rows_i8(w)
        return StoredMatrix(i8_panels(q), scale, bias)
    if w.shape[1] % (2 * QBLOCK):
        raise ValueError(
            f"4-bit pairs of blocks need rows whose length is a multiple of {2 * QBLOCK} (got {w.shape[1]})"
        )
    return StoredMatrix(quantise_blocks_q4(w), None, bias)
