"""GPT-2's matrices in the layouts gpt2_step.c reads: [out, in] rows at a stored type.

Pure numpy on the mmapped safetensors (HF's Conv1D stores [in, out], so the layer matrices are
transposed once here; the tied wte is already [vocab, d]). Shapes: N rows (out), K columns (in).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

QBLOCK = 32  # q4 block along `in` (gpt2_step.c's QBLOCK)


class WeightType(IntEnum):
    """gpt2_step.c's WT_* values."""

    F32 = 0
    BF16 = 1
    I8 = 2
    Q4 = 3


@dataclass
class StoredMatrix:
    """One [N, K] matrix at its stored type: `data` (q4: [N, K/2] bytes), `scale` (i8: [N]; q4: [N, K/32])."""

    data: np.ndarray
    scale: np.ndarray | None
    bias: np.ndarray | None

    @property
    def nbytes(self) -> int:
        return self.data.nbytes + (0 if self.scale is None else self.scale.nbytes)


def to_bf16_bits(w: np.ndarray) -> np.ndarray:  # float32 [N, K] -> uint16 [N, K], round to nearest even
    bits = np.ascontiguousarray(w, dtype=np.float32).view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def quantise_rows_i8(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # [N, K] -> int8 [N, K], scale [N]
    scale = np.abs(w).max(axis=1) / np.float32(127)
    scale = np.where(scale > 0, scale, np.float32(1)).astype(np.float32)
    q = np.rint(w / scale[:, None])
    return np.clip(q, -127, 127).astype(np.int8), scale


def quantise_blocks_q4(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # [N, K] -> uint8 [N, K/2], scale [N, K/32]
    """Blocks of 32 with a scale each, stored as value + 8 (0..15); blocks 2p and 2p+1 share 32 bytes:
    byte j holds element j of block 2p in its low nibble and of block 2p+1 in its high one."""
    n, k = w.shape
    blocks = w.reshape(n, k // QBLOCK, QBLOCK)  # [N, B, 32]
    scale = np.abs(blocks).max(axis=2) / np.float32(7)  # symmetric: -7..7
    scale = np.where(scale > 0, scale, np.float32(1)).astype(np.float32)
    q = (np.clip(np.rint(blocks / scale[:, :, None]), -8, 7) + 8).astype(np.uint8)  # [N, B, 32] in 0..15
    pairs = q.reshape(n, k // (2 * QBLOCK), 2, QBLOCK)  # [N, B/2, 2, 32]
    packed = pairs[:, :, 0] | (pairs[:, :, 1] << np.uint8(4))  # [N, B/2, 32]
    return np.ascontiguousarray(packed.reshape(n, k // 2)), scale


def store(w_out_in: np.ndarray, bias: np.ndarray | None, wtype: WeightType) -> StoredMatrix:
    """A float32 [N, K] matrix (any strides) at `wtype`, in new arrays (never a view of `w_out_in`)."""
    if wtype == WeightType.F32:
        return StoredMatrix(np.array(w_out_in, dtype=np.float32, order="C", copy=True), None, bias)
    if wtype == WeightType.BF16:
        return StoredMatrix(to_bf16_bits(w_out_in), None, bias)
    w = np.ascontiguousarray(w_out_in, dtype=np.float32)
    if wtype == WeightType.I8:
        return StoredMatrix(*quantise_rows_i8(w), bias)
    if w.shape[1] % (2 * QBLOCK):
        raise ValueError(f"4-bit pairs of blocks need rows whose length is a multiple of {2 * QBLOCK} (got {w.shape[1]})")
    return StoredMatrix(*quantise_blocks_q4(w), bias)
