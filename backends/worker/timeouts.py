"""How long a worker may stay silent in each step before it counts as hung and is killed."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Timeouts:
    """Seconds without any event from the child before it counts as hung and is killed."""

    load_s: float = 900.0  # progress events (downloads, ONNX export) reset this clock
    token_s: float = 120.0  # the first token includes prefill
    cancel_grace_s: float = 5.0  # after Cancel, how long a run may take to stop by itself
    score_s: float = 900.0  # one perplexity window (a teacher-forced fallback decodes it token by token)

    @classmethod
    def from_flag(cls, seconds: float | None) -> Timeouts:
        """The command line's --timeout: when given, the longest silence in every step (a load, a token, a
        perplexity window), so a hang ends after the time the user set, wherever it happens."""
        return cls() if seconds is None else cls(load_s=seconds, token_s=seconds, score_s=seconds)
