"""GPT-2's matrices in the layouts gpt2_step.c reads, all as panels of 32 rows: float32, bf16 and int8
by to_panels, 4-bit by quantise_blocks_q4 (its scales beside its nibbles).

Pure numpy on the mmapped safetensors (HF's Conv1D stores [in, out], so the layer matrices are
transposed once here; the tied wte is already [vocab, d]). Shapes: N rows (out), K columns (in).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

QBLOCK = 32  # q4 block along `in` (gpt2_step.c's QBLOCK)
PANEL = 32  # rows per panel (gpt2_step.c's PANEL)
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
    int8 as uint8 value + 128; q4: quantise_blocks_q4's [ceil(N/32), K/32 * 640] bytes), `scale` (i8: [N])."""

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


def quantise_blocks_q4(w: np.ndarray) -> np.ndarray:  # [N, K] -> uint8 [ceil(N/32), K/32 * 640]
    """Blocks of 32 along `in` with a float32 scale each (symmetric, -8..7), stored as value + 8 (0..15) in
    panels of 32 rows (the last padded with rows of value 0 and scale 1): per block, four steps of 8
    elements, each step 4 bytes of each of the 32 rows side by side (byte e holds element e in its low
    nibble and element 4 + e in its high one), then the 32 rows' scales of the block: 640 bytes, so a
    block of 32 rows is one stretch of memory and a row's 4 bytes of a step lie where an int8 panel's do."""
    n, k = w.shape
    if k % QBLOCK:
        raise ValueError(f"4-bit blocks need rows whose length is a multiple of {QBLOCK} (got {k})")
    blocks = w.reshape(n, k // QBLOCK, QBLOCK)  # [N, B, 32]
    scale = np.abs(blocks).max(axis=2) / np.float32(7)
    scale = np.where(scale > 0, scale, np.float32(1)).astype(np.float32)
    q = (np.clip(np.rint(blocks / scale[:, :, None]), -8, 7) + 8).astype(np.uint8)  # [N, B, 32] in 0..15
    panels = -(-n // PANEL)
    q_padded = np.full((panels * PANEL, k // QBLOCK, QBLOCK), 8, np.uint8)
    s_padded = np.ones((panels * PANEL, k // QBLOCK), np.float32)
    q_padded[:n], s_padded[:n] = q, scale
    steps = q_padded.reshape(panels, PANEL, k // QBLOCK, 4, 2, 4)  # [P, 32 rows, B, step, low/high, e]
    nibbles = steps[:, :, :, :, 0] | (steps[:, :, :, :, 1] << np.uint8(4))  # [P, 32, B, step, e]
    nibbles = nibbles.transpose(0, 2, 3, 1, 4).reshape(panels, k // QBLOCK, 4 * PANEL * 4)  # [P, B, 512]
    scales = s_padded.reshape(panels, PANEL, k // QBLOCK).transpose(0, 2, 1)  # [P, B, 32]
    record = np.concatenate([nibbles, np.ascontiguousarray(scales).view(np.uint8)], axis=2)  # [P, B, 640]
    return np.ascontiguousarray(record).reshape(panels, k // QBLOCK * (4 * PANEL * 4 + PANEL * 4))


def unpack_q4(data: np.ndarray, n: int, k: int) -> np.ndarray:  # quantise_blocks_q4's panels -> float32 [N, K]
    """The float32 values quantise_blocks_q4 stored (a reference for tests)."""
    panels = data.shape[0]
    record = data.reshape(panels, k // QBLOCK, 4 * PANEL * 4 + PANEL * 4)
    nibbles = record[:, :, : 4 * PANEL * 4].reshape(panels, k // QBLOCK, 4, PANEL, 4)  # [P, B, step, row, e]
    values = np.stack([nibbles & 15, nibbles >> 4], axis=3)  # [P, B, step, low/high, row, e]
    values = values.transpose(0, 4, 1, 2, 3, 5).reshape(panels * PANEL, k).astype(np.float32) - 8
    scales = np.ascontiguousarray(record[:, :, 4 * PANEL * 4 :]).view(np.float32)  # [P, B, 32]
    scales = scales.transpose(0, 2, 1).reshape(panels * PANEL, k // QBLOCK)
    return (values * np.repeat(scales, QBLOCK, axis=1))[:n]


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
    return StoredMatrix(quantise_blocks_q4(w), None, bias)
