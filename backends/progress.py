"""The progress callback every long step reports through: downloads, artefact builds, engine loads.

A leaf module (no imports of ours) so that storage, sources and engines can all share it.
"""

from __future__ import annotations

from collections.abc import Callable

ProgressFn = Callable[[str, float | None], None]  # (message, fraction done or None)


def silent(message: str, fraction: float | None = None) -> None:
    """A ProgressFn for callers that do not listen."""


def scaled(progress: ProgressFn, low: float, high: float) -> ProgressFn:
    """Report a sub-step's fractions as the span [low, high] of the whole."""

    def report(message: str, fraction: float | None = None) -> None:
        progress(message, None if fraction is None else low + (high - low) * fraction)

    return report
