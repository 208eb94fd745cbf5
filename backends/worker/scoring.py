"""Log-likelihood maths for the child's score and logits requests: pure numpy, no I/O.

Kept apart from the request loop (child.py) so it can be read and tested on its own; numpy is
the only import, since a spawned worker imports this before its engine.
"""

from __future__ import annotations

import numpy as np

from .events import TopLogits


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
