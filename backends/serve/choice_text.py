"""One choice's text as it is generated: stop strings cut, and logprobs lined up with the text.

A stop string ends the choice and is left out of its text, also when it spans tokens or arrives
mid-stream. Only the end of the text that could still become a stop string is held back (as vLLM
does); everything before it goes out at once. Logprobs are kept per token in the legacy completions
format (`tokens`, `token_logprobs`, `top_logprobs`, `text_offset`), with the token's own text and its
offset into the choice's text (after the echoed prompt, when there is one).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..sources.tokenizer import IncrementalDetokenizer, decode


@dataclass
class Logprobs:
    """The legacy completions `logprobs` object, filled token by token."""

    tokens: list[str] = field(default_factory=list)
    token_logprobs: list[float | None] = field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = field(default_factory=list)
    text_offset: list[int] = field(default_factory=list)

    def add(self, token_id: int, logprob: float | None, top: tuple[tuple[int, float], ...] | None, offset: int) -> None:
        self.tokens.append(decode([token_id]))
        self.token_logprobs.append(logprob)
        self.top_logprobs.append(None if top is None else _top_dict(top))
        self.text_offset.append(offset)

    def extend(self, other: Logprobs) -> None:
        self.tokens += other.tokens
        self.token_logprobs += other.token_logprobs
        self.top_logprobs += other.top_logprobs
        self.text_offset += other.text_offset

    def body(self) -> dict:
        return {
            "tokens": self.tokens,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": self.top_logprobs,
            "text_offset": self.text_offset,
        }


def _top_dict(top: tuple[tuple[int, float], ...]) -> dict[str, float]:
    """{token text: logprob}, best first; two ids that decode alike keep the likelier."""
    out: dict[str, float] = {}
    for token_id, logprob in top:
        out.setdefault(decode([token_id]), logprob)
    return out


def hold_back(text: str, stops: tuple[str, ...]) -> int:
    """How many characters at the end of `text` could still become the start of a stop string."""
    longest = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:k]):
                longest = k
                break
    return longest


def first_stop(text: str, stops: tuple[str, ...]) -> int:
    """Where the earliest stop string starts in `text`, or -1."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else -1


@dataclass
class Delta:
    """What one step adds to a choice: text, and the logprobs of its tokens (None when not asked)."""

    text: str = ""
    logprobs: Logprobs | None = None


class ChoiceText:
    """One choice's text: push each generated token, `finish` at the end; `stopped` once a stop string
    (or nothing more is wanted) ended it. `offset` starts after the echoed prompt's text."""

    def __init__(self, prompt_ids: tuple[int, ...], stops: tuple[str, ...], logprobs: bool, offset: int = 0) -> None:
        self.stops = tuple(s for s in stops if s)
        self.want_logprobs = logprobs
        self.detokenizer = IncrementalDetokenizer(prompt_ids)
        self.held = ""  # generated, not yet out: it could still be the start of a stop string
        self.offset = offset  # the text's length so far, echo included: the next token's text_offset
        self.tokens = 0  # tokens that count (up to and including the one that completed a stop)
        self.logprob_sum = 0.0  # the generated tokens' summed logprob (best_of's ranking)
        self.stopped = False

    def push(self, token_id: int, logprob: float | None, top: tuple[tuple[int, float], ...]) -> Delta | None:
        """The token's share of the text; None for a token after the choice ended (not counted)."""
        if self.stopped:
            return None
        self.tokens += 1
        self.logprob_sum += logprob or 0.0
        logprobs = None
        if self.want_logprobs:
            logprobs = Logprobs()
            logprobs.add(token_id, logprob, top, self.offset + len(self.held))
        pending = self.held + self.detokenizer.push(token_id)
        cut = first_stop(pending, self.stops)
        if cut >= 0:
            self.stopped = True
            self.held = ""
            return self._out(pending[:cut], logprobs)
        keep = hold_back(pending, self.stops)
        self.held = pending[len(pending) - keep :] if keep else ""
        return self._out(pending[: len(pending) - keep], logprobs)

    def finish(self) -> Delta:
        """The text still held back (none after a stop string): the choice has ended."""
        if self.stopped:
            return Delta()
        rest = self.held + self.detokenizer.flush()
        self.held = ""
        cut = first_stop(rest, self.stops)
        if cut >= 0:
            self.stopped = True
            rest = rest[:cut]
        return self._out(rest, None)

    def _out(self, text: str, logprobs: Logprobs | None) -> Delta:
        self.offset += len(text)
        return Delta(text, logprobs)
