"""How many tokens to draft before each target pass, from what the run has measured.

With acceptance a (the chance the target keeps a drafted token), k drafts make on average
1 + a + ... + a^k tokens per target pass and cost k draft steps plus a verify pass that reads the
target's weights once and computes k + 1 tokens: t1 + k * e, t1 the target's one-token pass and e
what each more token adds. The controller picks the k in [1, k_max] that makes the most tokens per
second; when the target alone would make more, it runs a plain target pass instead (which times
the target again), and after LOSING such choices in a row it turns the draft off for the rest of
the run: starting again would mean catching the draft's cache up on every token since, which costs
about what the draft saves. A draft that never agrees so costs a few passes, not a share of each.

Times are medians of the last few passes, and the acceptance counts the last few dozen drafts
with a prior worth two: one pass a shared machine slowed does not switch off a draft that agrees.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

ACCEPTANCE_PRIOR = 0.8  # before any evidence: a draft worth running agrees most of the time ...
PRIOR_WEIGHT = 2.0  # ... worth two observations: a draft that never agrees is found out in a few passes
OBSERVED = 32  # the acceptance is of the last this many observations (it follows a change in the text)
EXTRA_PRIOR = 0.15  # before any verify pass: each more token adds this share of a one-token pass
TIMED_ALONE = 2  # one-token target passes that time the target before the first draft
WINDOW = 9  # passes each median time covers
LOSING = 3  # choices in a row where the target alone wins before the draft is turned off


@dataclass
class DraftLength:
    k_max: int
    draft_share: float  # a draft step's time / the target's one-token pass, until measured (bytes ratio)
    off: bool = False  # the draft is not worth running: the target alone until the run ends
    _target: deque = field(default_factory=lambda: deque(maxlen=WINDOW))  # one-token target passes, s
    _draft: deque = field(default_factory=lambda: deque(maxlen=WINDOW))  # one draft step, s
    _extra: deque = field(default_factory=lambda: deque(maxlen=WINDOW))  # per more token in a verify pass, s
    _kept: deque = field(default_factory=lambda: deque(maxlen=OBSERVED))  # 1 a kept draft, 0 the first rejected
    _losing: int = 0  # choices in a row where the target alone would make more tokens per second

    def choose(self, room: int) -> int:
        """The draft length for the next pass; `room`: the most drafts that can still be used (the
        tokens still wanted minus one, and the context left)."""
        if self.off or room < 1 or len(self._target) < TIMED_ALONE:
            return 0
        best = max(range(1, min(self.k_max, room) + 1), key=self.rate)
        if self.rate(best) >= self.rate(0):
            self._losing = 0
            return best
        self._losing += 1
        self.off = self._losing >= LOSING
        return 0

    @property
    def acceptance(self) -> float:
        """The chance the target keeps a drafted token: the recent observations, with the prior's weight."""
        return (sum(self._kept) + PRIOR_WEIGHT * ACCEPTANCE_PRIOR) / (len(self._kept) + PRIOR_WEIGHT)

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
        self._kept.extend([1] * kept + ([0] if kept < k else []))  # each kept draft, and the first rejected one
        self._draft.append(draft_s / k)
        self._extra.append(max(0.0, verify_s - self.target_s) / k)
