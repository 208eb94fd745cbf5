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


def window_problem(max_length: int, stride: int, context: int | None = None) -> str:
    """Why windows of `max_length` tokens `stride` apart cannot score a text on a model of this
    context, or "" (the command line and the Quality tab both ask here)."""
    if max_length < 2:
        return f"the max length must be at least 2 tokens (a window scores those after its first), got {max_length}"
    if context is not None and max_length > context:
        return f"the max length {max_length} exceeds the model's context of {context}"
    if not 1 <= stride <= max_length:
        return f"the stride must be 1 to the max length ({max_length}), got {stride}"
    return ""


def strided_windows(ids: Sequence[int], max_length: int, stride: int) -> Windows:
    """HF's loop: for begin in 0, stride, ...: window ids[begin:begin+max_length], whose last
    (end - previous end) tokens are scored; stop once a window reaches the end of the text."""
    problem = window_problem(max_length, stride)
    if problem:
        raise UsageError(problem)
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
