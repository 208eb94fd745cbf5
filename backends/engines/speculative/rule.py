"""Which drafted tokens the target keeps: the rule of speculative decoding (Leviathan et al. 2023,
"Fast Inference from Transformers via Speculative Decoding"; Chen et al. 2023, "Accelerating Large
Language Model Decoding with Speculative Sampling").

Greedy: a draft is kept while it equals the target's own argmax, and the target's token follows
the kept ones, so the output is the target's greedy output exactly. Sampling: draft token d_i
(drawn from the draft's q_i) is kept with probability min(1, p_i(d_i) / q_i(d_i)); the first one
rejected is replaced by a draw from max(0, p_i - q_i) renormalised; after k kept drafts a bonus
token comes from p_k. Each output token is then distributed exactly as the target's p, whatever
the draft proposed. Pure functions of the distributions and a random generator.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def accepted_greedy(drafts: Sequence[int], target_tokens: Sequence[int]) -> int:
    """How many drafts the target keeps: the longest prefix equal to its own tokens at those positions
    (`target_tokens[i]`: its argmax after the context and drafts[:i])."""
    kept = 0
    for draft, target in zip(drafts, target_tokens):
        if draft != target:
            break
        kept += 1
    return kept


def accept_or_resample(
    drafts: Sequence[int], draft_probs: np.ndarray, target_probs: np.ndarray, rng: np.random.Generator
) -> list[int]:
    """The tokens that follow the context: the kept drafts, then one token of the target's.

    `draft_probs` [k, V]: q_i, what draft i was drawn from; `target_probs` [k + 1, V]: p_i, the
    target's distribution after the context and drafts[:i] (row k: after all of them)."""
    out: list[int] = []
    for i, draft in enumerate(drafts):
        q, p = draft_probs[i], target_probs[i]
        if rng.random() * q[draft] < p[draft]:  # u < p / q, with q(draft) > 0 since it was drawn
            out.append(int(draft))
            continue
        residual = np.maximum(p - q, 0.0)
        total = residual.sum()
        # p <= q everywhere means p == q up to rounding: then rejection had probability zero
        out.append(draw(residual / total if total > 0 else p, rng))
        return out
    out.append(draw(target_probs[len(drafts)], rng))
    return out


def draw(probs: np.ndarray, rng: np.random.Generator) -> int:
    """One token from a distribution (float64, summing to 1 up to rounding), in token-id order."""
    cumulative = np.cumsum(probs)
    index = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    return min(index, probs.size - 1)
