"""Which tokens of a text each perplexity window scores (the parent's side of a ScoreRequest).

Perplexity follows HF's "perplexity of fixed-length models": windows of `max_length` tokens
every `stride` tokens, scoring only the part of each window that earlier windows did not
cover, so every token after the first is scored once with up to `max_length` of context.
The log-likelihood itself is computed in each worker (backends/worker/scoring.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import UsageError

DEFAULT_STRIDE = 512


@dataclass(frozen=True)
class Windows:
    windows: tuple[tuple[int, ...], ...]
    targets: tuple[int, ...]  # trailing tokens scored per window

    @property
    def scored_tokens(self) -> int:
        return sum(len(w) - max(1, len(w) - t) for w, t in zip(self.windows, self.targets))


def strided_windows(ids: Sequence[int], max_length: int, stride: int) -> Windows:
    """HF's loop: for begin in 0, stride, ...: window ids[begin:begin+max_length], whose last
    (end - previous end) tokens are scored; stop once a window reaches the end of the text."""
    if max_length < 2:
        raise UsageError(f"--max-length must be >= 2, got {max_length}")
    if not 1 <= stride <= max_length:
        raise UsageError(f"--stride must be in 1..{max_length} (--max-length), got {stride}")
    if len(ids) < 2:
        raise UsageError("the text has fewer than 2 tokens: nothing to score")
    windows, targets, previous_end = [], [], 0
    for begin in range(0, len(ids), stride):
        end = min(begin + max_length, len(ids))
        windows.append(tuple(ids[begin:end]))
        targets.append(end - previous_end)
        previous_end = end
        if end == len(ids):
            break
    return Windows(tuple(windows), tuple(targets))
