"""How many tokens to draft before each target pass, from what the run has measured.

With acceptance a (the chance the target keeps a drafted token), k drafts make on average
1 + a + ... + a^k tokens per target pass and cost k draft steps plus a verify pass that reads the
target's weights once and computes k + 1 tokens: t1 + k * e, t1 the target's one-token pass and e
what each more token adds. The controller picks the k in [1, k_max] that makes the most tokens per
second. It turns the draft off (k = 0, the target alone) when even one draft would not pay for
itself: a < d / v, with d a draft step and v the verify pass of the same round (v >= t1, so the
test errs towards drafting, and both are timed within one round, so a shared machine's slow minute
slows both and cannot switch off a draft that agrees). Off stays off for the rest of the run:
starting again would mean catching the draft's cache up on every token since, which costs about
what the draft saves.

Times are medians of the last few passes: one pass the machine slowed does not move them.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

ACCEPTANCE_PRIOR = 0.8  # before any evidence: a draft worth running agrees most of the time
EXTRA_PRIOR = 0.15  # before any verify pass: each more token adds this share of a one-token pass
WEIGHT = 0.1  # of each new observation in the running acceptance (about the last ten)
TIMED_ALONE = 2  # one-token target passes that time the target before the first draft
WINDOW = 9  # passes each median time covers


@dataclass
class DraftLength:
    k_max: int
    draft_share: float  # a draft step's time / the target's one-token pass, until measured (bytes ratio)
    acceptance: float = ACCEPTANCE_PRIOR
    off: bool = False  # the draft is not worth running: the target alone until the run ends
    _target: deque = field(default_factory=lambda: deque(maxlen=WINDOW))  # one-token target passes, s
    _draft: deque = field(default_factory=lambda: deque(maxlen=WINDOW))  # one draft step, s
    _extra: deque = field(default_factory=lambda: deque(maxlen=WINDOW))  # per more token in a verify pass, s
    _cost: deque = field(default_factory=lambda: deque(maxlen=WINDOW))  # a draft step / its round's verify pass

    def choose(self, room: int) -> int:
        """The draft length for the next pass; `room`: the most drafts that can still be used (the
        tokens still wanted minus one, and the context left)."""
        if self.off or room < 1 or len(self._target) < TIMED_ALONE:
            return 0
        if self._cost and self.acceptance < statistics.median(self._cost):
            self.off = True
            return 0
        return max(range(1, min(self.k_max, room) + 1), key=self.rate)

    @property
    def target_s(self) -> float:
        return statistics.median(self._target) if self._target else 1.0

    @property
    def draft_s(self) -> float:
        return statistics.median(self._draft) if self._draft else self.draft_share * self.target_s

    @property
    def extra_s(self) -> float:
        return statistics.median(self._extra) if self._extra else EXTRA_PRIOR * self.target_s

    def rate(self, k: int) -> float:
        """Expected tokens per second with k drafts (k = 0: the target alone)."""
        a, t1 = self.acceptance, self.target_s
        tokens = float(k + 1) if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)
        return tokens / (t1 + k * (self.draft_s + self.extra_s))

    def target_pass(self, seconds: float) -> None:
        """A one-token target pass took `seconds`."""
        self._target.append(seconds)

    def verified(self, k: int, kept: int, draft_s: float, verify_s: float) -> None:
        """A pass drafted k tokens in `draft_s` (catching the draft up included), the target kept
        `kept` of them, and its verify pass took `verify_s`."""
        for _ in range(kept):  # each kept draft, and the first rejected one, is one observation
            self.acceptance += WEIGHT * (1.0 - self.acceptance)
        if kept < k:
            self.acceptance -= WEIGHT * self.acceptance
        self._draft.append(draft_s / k)
        self._extra.append(max(0.0, verify_s - self.target_s) / k)
        self._cost.append(draft_s / k / verify_s if verify_s > 0 else 1.0)
