"""What a speculative engine's run did: counts and times its worker sends with RunDone.

A speculative engine makes several tokens per pass of its target model: a cheap draft proposes
tokens, and one target pass checks them all (reading the target's weights once). The engine counts
what happened; the records derive the rates (runs.csv's `spec_*` columns, the Summary, the
profile). Stdlib only: the worker's messages carry it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpeculationStats:
    """One run's speculation, over its decoded tokens (every token after the first)."""

    tokens: int = 0  # tokens decoded (after the prefill's first)
    target_passes: int = 0  # target forward passes that made them (verify passes and plain decodes)
    drafted: int = 0  # tokens the draft proposed
    accepted: int = 0  # of them, the ones the target kept
    draft_ns: int = 0  # time in the draft's forward passes
    verify_ns: int = 0  # time in the target's forward passes (after the prefill)
    bytes_read: int = 0  # weights + KV cache that target and draft read for these tokens (0: not counted)

    @property
    def acceptance(self) -> float | None:
        """Accepted drafts / proposed drafts."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_pass(self) -> float | None:
        """Decoded tokens per target pass: the accepted drafts plus the target's own token."""
        return self.tokens / self.target_passes if self.target_passes else None

    @property
    def draft_ms_per_token(self) -> float | None:
        return self.draft_ns / self.tokens / 1e6 if self.tokens else None

    @property
    def verify_ms_per_token(self) -> float | None:
        return self.verify_ns / self.tokens / 1e6 if self.tokens else None

    @property
    def bytes_per_token(self) -> float | None:
        """Bytes read per decoded token: what an effective memory floor divides by the bandwidth."""
        return self.bytes_read / self.tokens if self.tokens and self.bytes_read else None
