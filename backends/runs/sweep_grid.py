"""A sweep's grid of (prompt tokens, new tokens), and the named grids. Light (the CLI's parser imports it)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError

DEFAULT_PROMPT_TOKENS = (16, 64, 256, 512)
DEFAULT_NEW_TOKENS = (16, 64, 256)


@dataclass(frozen=True)
class SweepGrid:
    prompt_tokens: tuple[int, ...] = DEFAULT_PROMPT_TOKENS
    new_tokens: tuple[int, ...] = DEFAULT_NEW_TOKENS

    def validate(self) -> SweepGrid:
        for label, values in (("--prompt-tokens", self.prompt_tokens), ("--new-tokens", self.new_tokens)):
            if not values:
                raise UsageError(f"{label} needs at least one length")
            if min(values) < 1:
                raise UsageError(f"{label} lengths must be >= 1, got {min(values)}")
        return self

    def keys(self) -> list[tuple[int, int]]:
        return [(p, n) for p in sorted(set(self.prompt_tokens)) for n in sorted(set(self.new_tokens))]


@dataclass(frozen=True)
class NamedGrid:
    grid: SweepGrid
    help: str


# Grids with a purpose (`sweep --grid NAME`, the Sweep tab's Grid menu).
GRIDS: dict[str, NamedGrid] = {
    "ttft-vs-length": NamedGrid(
        SweepGrid((1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1023), (1,)),
        "TTFT against prompt length, 1 to 1,023 tokens, one new token each (the longest prompt that leaves "
        "room for the token it yields); the chart draws prefill's roofline",
    ),
    "long-context": NamedGrid(
        SweepGrid((16,), (1000,)),
        "ms/token against position: a 16-token prompt and 1,000 new tokens (positions up to 1,015), where "
        "the KV cache read grows to rival the weights; the chart draws the floor with it",
    ),
}


def named_grid(name: str) -> SweepGrid:
    try:
        return GRIDS[name.strip()].grid
    except KeyError:
        raise UsageError(f"unknown grid {name!r}; grids: {', '.join(GRIDS)}") from None
