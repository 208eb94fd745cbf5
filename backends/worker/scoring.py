"""Log-likelihood maths for the child's score and logits requests: pure numpy, no I/O.

Kept apart from the request loop (child.py) so it can be read and tested on its own; numpy is
the only import, since a spawned worker imports this before its engine.
"""

from __future__ import annotations

import numpy as np

from .events import PromptLogprobs, TopLogits


def score_window(engine, window: tuple[int, ...], target: int) -> tuple[float, int, str]:
    """(summed NLL, tokens scored, method) of the last `target` tokens of one window.

    Position p is predicted by the logits of position p - 1, so the window's first token is
    never scored. Engines without `forward_logits` are teacher-forced: prefill the unscored
    head, then decode the window's own tokens one by one.
    """
    first = max(1, len(window) - target)  # first scored position
    labels = np.asarray(window[first:], dtype=np.int64)
    if labels.size == 0:
        return 0.0, 0, "forward_logits"
    try:
        logits = np.asarray(engine.forward_logits(window))[first - 1 : len(window) - 1]
        method = "forward_logits"
    except NotImplementedError:
        rows = [np.asarray(engine.prefill(window[:first]))]
        for token in window[first : len(window) - 1]:
            rows.append(np.asarray(engine.decode(int(token))))
        logits = np.stack(rows)
        method = "prefill+decode"
    return nll_of(logits, labels), int(labels.size), method


def nll_of(logits: np.ndarray, labels: np.ndarray, chunk: int = 128) -> float:
    """Summed -log softmax(logits)[label] in float64, a chunk of rows at a time (bounded memory)."""
    total = 0.0
    for start in range(0, len(labels), chunk):
        rows = logits[start : start + chunk].astype(np.float64)
        peak = rows.max(axis=1, keepdims=True)
        log_z = peak[:, 0] + np.log(np.exp(rows - peak).sum(axis=1))
        picked = rows[np.arange(len(rows)), labels[start : start + chunk]]
        total += float((log_z - picked).sum())
    return total


def top_logits(run_id: str, logits: np.ndarray, k: int) -> TopLogits:
    """The k largest logits, best first, with their log-softmax over the whole vocabulary."""
    values = logits.astype(np.float64)
    order = np.argsort(-values, kind="stable")[:k]
    peak = values.max()
    log_z = peak + np.log(np.exp(values - peak).sum())
    return TopLogits(
        run_id,
        tuple(int(i) for i in order),
        tuple(float(values[i]) for i in order),
        tuple(float(values[i] - log_z) for i in order),
    )


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float64 log-softmax over the vocabulary (of the raw logits: no temperature, no top-k/top-p)."""
    values = np.asarray(logits, dtype=np.float64).reshape(-1)
    peak = values.max()
    return values - (peak + np.log(np.exp(values - peak).sum()))


def token_logprobs(logits: np.ndarray, token: int, k: int) -> tuple[float, tuple[tuple[int, float], ...]]:
    """The log-probability of `token` under `logits`, and the k likeliest (id, logprob), best first."""
    logprobs = log_softmax(logits)
    if k <= 0:
        return float(logprobs[token]), ()
    best = np.argpartition(-logprobs, k - 1)[:k] if k < logprobs.size else np.arange(logprobs.size)
    best = best[np.lexsort((best, -logprobs[best]))]  # falling logprob, ties by lower id
    return float(logprobs[token]), tuple((int(i), float(logprobs[i])) for i in best)


def prompt_logprobs(engine, run_id: str, prompt: tuple[int, ...], k: int) -> PromptLogprobs:
    """Every prompt token's logprob given the tokens before it, through the engine's forward pass (or
    teacher-forced prefill + decode where it has none), as `score_window` scores a window."""
    if len(prompt) < 2:
        return PromptLogprobs(run_id, (None,) * len(prompt), ((),) * len(prompt))
    try:
        rows = np.asarray(engine.forward_logits(prompt))[: len(prompt) - 1]
    except NotImplementedError:
        first = [np.asarray(engine.prefill(prompt[:1]))]
        rows = np.stack(first + [np.asarray(engine.decode(int(t))) for t in prompt[1:-1]])
    scored = [token_logprobs(row, int(token), k) for row, token in zip(rows, prompt[1:])]
    return PromptLogprobs(run_id, (None, *(s[0] for s in scored)), ((), *(s[1] for s in scored)))
