"""Growable numpy buffers: appends are amortised O(1) and views cost nothing, so a 1,000-token
trace is redrawn from one contiguous array per tick instead of a Python list copy."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


class GrowBuffer:
    def __init__(self, dtype=np.float64, capacity: int = 256) -> None:
        self._data = np.empty(capacity, dtype=dtype)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def extend(self, values: Iterable[float] | np.ndarray) -> None:
        values = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=self._data.dtype)
        needed = self._size + values.size
        if needed > self._data.size:
            capacity = self._data.size
            while capacity < needed:
                capacity *= 2  # doubling keeps the total copy cost linear
            grown = np.empty(capacity, dtype=self._data.dtype)
            grown[: self._size] = self._data[: self._size]
            self._data = grown
        self._data[self._size : needed] = values
        self._size = needed

    def view(self) -> np.ndarray:
        """The filled part (a view: do not keep it across `extend`)."""
        return self._data[: self._size]

    def clear(self) -> None:
        self._size = 0
