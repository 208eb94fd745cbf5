"""The speculative loop over a target and a draft model, each with its own KV cache.

Each round the draft reads what it has not read yet and proposes k tokens one by one; the target
reads its last token and the k drafts in one pass (`forward(..., exact=True)`: every position's
logits as a one-token decode there gives them, bit for bit, with the weights read once), the rule
keeps a prefix of the drafts and adds one token of the target's. Neither cache is copied or
cleared after a rejection: each model's valid length moves back to the last token it read that
was kept, and the next pass writes over what follows. So greedy tokens equal the target's own, and
sampled tokens are distributed as the target's (rule.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ...engine import StampedToken
from ...sampling import Sampler
from ...speculation import SpeculationStats
from .draft_length import DraftLength
from .rule import accept_or_resample, accepted_greedy, draw

EXACT_CATCH_UP = 16  # a longer catch-up of the draft takes prefill's products (its arithmetic matters not)


class Model(Protocol):
    """A model with one sequence's KV cache (backends/engines/native/step.py's NativeGPT2)."""

    pos: int

    def prefill(self, ids: np.ndarray) -> np.ndarray: ...

    def decode(self, token: int) -> np.ndarray: ...

    def forward(self, ids: np.ndarray, pos: int, all_logits: bool, exact: bool = False) -> np.ndarray: ...


@dataclass(frozen=True)
class ReadCost:
    """What one pass of a model reads: its weights once, and its KV cache up to the last position."""

    weight_bytes: int
    kv_bytes_per_position: int

    def of(self, end_position: int) -> int:
        return self.weight_bytes + self.kv_bytes_per_position * end_position


# (role, position, token, logits): the logits a model gave after reading `token` at `position`, each
# time the loop used them (a test's view of both caches; None in the app)
Observer = Callable[[str, int, int, np.ndarray], None]


@dataclass
class SpeculativeDecoder:
    target: Model
    draft: Model
    target_cost: ReadCost
    draft_cost: ReadCost
    context: int  # positions either model holds
    k_max: int = 8
    observer: Observer | None = None
    policy: type[DraftLength] = DraftLength  # how k is chosen (a test may fix it)
    lengths: DraftLength = field(init=False)
    _counts: dict[str, int] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.lengths = self._new_lengths()

    def _new_lengths(self) -> DraftLength:
        # until the draft is timed, its step is taken to cost its share of the target's bytes
        return self.policy(self.k_max, self.draft_cost.weight_bytes / max(1, self.target_cost.weight_bytes))

    def generate(
        self, prompt_ids: Sequence[int], new_tokens: int, sampler: Sampler, cancel: threading.Event | None = None
    ) -> Iterator[int]:
        """`new_tokens` tokens after the prompt, yielded as they are decided (several per target pass)."""
        self.lengths = self._new_lengths()
        self._counts = dict.fromkeys(("tokens", "passes", "drafted", "accepted", "draft_ns", "verify_ns", "bytes"), 0)
        greedy = sampler.params.is_greedy
        # A stream of its own: one seeded as the sampler's repeats the numbers that drew the first token,
        # so the first draft followed from that token and the rule's output left the target's distribution.
        rng = np.random.default_rng(np.random.SeedSequence(sampler.params.seed).spawn(1)[0])
        tokens = [int(t) for t in prompt_ids]
        token = sampler(self.target.prefill(np.asarray(tokens, dtype=np.int32)))  # what the target alone makes
        self.draft.prefill(np.asarray(tokens, dtype=np.int32))
        read = len(tokens)  # the draft's cache holds positions [0, read)
        tokens.append(token)
        yield StampedToken.now(token, 0)
        produced, step = 1, 0
        while produced < new_tokens and not (cancel is not None and cancel.is_set()):
            step += 1  # a target pass: the tokens it decides share it
            position = len(tokens) - 1  # of `token`, which the target has not read yet
            room = min(new_tokens - produced - 1, self.context - 1 - position)
            k = self.lengths.choose(room)
            if k == 0:
                out = [self._target_alone(token, position, sampler)]
            else:
                out, read = self._speculate(tokens, read, k, greedy, sampler, rng)
            for token in out[: new_tokens - produced]:
                tokens.append(token)
                yield StampedToken.now(token, step)
                produced += 1
                if cancel is not None and cancel.is_set():
                    return

    def _target_alone(self, token: int, position: int, sampler: Sampler) -> int:
        began = time.perf_counter_ns()
        logits = self.target.forward(np.asarray([token], dtype=np.int32), position, False)
        took = time.perf_counter_ns() - began
        self.lengths.target_pass(took / 1e9)
        self._count(tokens=1, passes=1, verify_ns=took, bytes=self.target_cost.of(position + 1))
        self._observe("target", position, token, logits)
        return sampler(logits)

    def _speculate(
        self, tokens: list[int], read: int, k: int, greedy: bool, sampler: Sampler, rng: np.random.Generator
    ) -> tuple[list[int], int]:
        """One round: k drafts, one verify pass. Returns the tokens it decided and how far the draft's
        cache is still valid."""
        position = len(tokens) - 1
        began = time.perf_counter_ns()
        pending = np.asarray(tokens[read:], dtype=np.int32)  # catch the draft up, `token` included
        logits = self.draft.forward(pending, read, False, exact=len(pending) <= EXACT_CATCH_UP)
        spent = self.draft_cost.of(position + 1)
        self._observe("draft", position, tokens[-1], logits)
        drafts: list[int] = []
        draft_probs: list[np.ndarray] = []
        for i in range(k):
            if greedy:
                drafts.append(int(np.argmax(logits)))
            else:
                draft_probs.append(sampler.probabilities(logits))
                drafts.append(draw(draft_probs[-1], rng))
            if i + 1 < k:  # the last draft is read by the draft next round, if the target keeps it
                self.draft.pos = position + 1 + i
                logits = self.draft.decode(drafts[-1])
                spent += self.draft_cost.of(position + 2 + i)
                self._observe("draft", position + 1 + i, drafts[-1], logits)
        drafted = time.perf_counter_ns()
        rows = self.target.forward(np.asarray([tokens[-1], *drafts], dtype=np.int32), position, True, exact=True)
        verified = time.perf_counter_ns()
        if greedy:
            choices = [int(i) for i in np.argmax(rows, axis=1)]
            kept = accepted_greedy(drafts, choices)
            out = drafts[:kept] + [choices[kept]]
        else:
            targets = np.stack([sampler.probabilities(row) for row in rows])
            out = accept_or_resample(drafts, np.stack(draft_probs), targets, rng)
            kept = len(out) - 1
        for i in range(kept + 1):
            self._observe("target", position + i, ([tokens[-1]] + drafts)[i], rows[i])
        self.lengths.verified(k, kept, (drafted - began) / 1e9, (verified - drafted) / 1e9)
        self._count(
            tokens=kept + 1,
            passes=1,
            drafted=k,
            accepted=kept,
            draft_ns=drafted - began,
            verify_ns=verified - drafted,
            bytes=spent + self.target_cost.of(position + k + 1),
        )
        # the draft read `token` and drafts[:k-1]: valid up to the last of them the target kept
        return out, position + 1 + min(kept, k - 1)

    def _count(self, **amounts: int) -> None:
        for key, value in amounts.items():
            self._counts[key] += value

    def _observe(self, role: str, position: int, token: int, logits: np.ndarray) -> None:
        if self.observer is not None:
            self.observer(role, position, token, logits)

    def stats(self) -> SpeculationStats:
        c = self._counts
        return SpeculationStats(
            tokens=c.get("tokens", 0),
            target_passes=c.get("passes", 0),
            drafted=c.get("drafted", 0),
            accepted=c.get("accepted", 0),
            draft_ns=c.get("draft_ns", 0),
            verify_ns=c.get("verify_ns", 0),
            bytes_read=c.get("bytes", 0),
        )

    def notes(self) -> str:
        """What the run's draft length did, for the run's notes."""
        c, lengths = self._counts, self.lengths
        passes = c.get("passes", 0)
        if not passes:
            return ""
        mean_k = c.get("drafted", 0) / passes
        line = f"speculative: {passes} target passes, {mean_k:.2f} drafts per pass (k adapts, at most {self.k_max})"
        if lengths.off:
            line += f"; the draft was turned off (running acceptance {100 * lengths.acceptance:.0f}%): the target alone"
        return line
