"""Harness calibration: what the worker itself costs per token, measured with the null engine.

The null engine computes nothing (it hands back the same logits every time), so the gap between
two of its tokens is the harness's own cost per token: sampling, detokenizing, pickling the event
and sending it over the pipe, and the loop around them. Every engine's ITL contains that cost, so
it is the floor under every figure of a session. Its cold start, measured as every engine's is
(spawned -> Ready, plus its first run's TTFT), is the floor under every cold start: the
interpreter, numpy and the worker's own imports. A bench records both in environment.json
("harness") and the CLI prints them under the table.

It runs in its own spawned worker, like any engine, after the session's engines are closed (it
never competes with them): a short warm-up, then `tokens` greedy tokens, then (when the session
samples) `tokens` more with the session's sampling settings.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from .. import registry
from ..engine import EngineOptions
from ..profile.breakdown import median_decode_ms
from ..results.stats import run_metrics
from ..sampling import SamplingParams
from ..sources.model_files import ModelFiles
from ..status import RunStatus
from ..worker.events import RunRequest, Token
from ..worker.process import Worker, WorkerError
from ..worker.timeouts import Timeouts
from .recording import cold_start_s

DEFAULT_TOKENS = 200
WARMUP_TOKENS = 20


def median_itl_us(tokens: Sequence[Token]) -> float | None:
    """Median gap between consecutive token stamps, in microseconds (None under two tokens)."""
    ms = median_decode_ms(tokens)
    return None if ms is None else ms * 1e3


def median_harness_us(tokens: Sequence[Token]) -> float | None:
    """Median of the child's own harness_ns of the decode tokens, in microseconds."""
    values = [t.harness_ns / 1e3 for t in tokens[1:] if t.harness_ns is not None]
    return statistics.median(values) if values else None


def calibrate_harness(
    model: ModelFiles,
    prompt_ids: Sequence[int],
    sampling: SamplingParams,
    tokens: int = DEFAULT_TOKENS,
    threads: int = 1,
    timeouts: Timeouts = Timeouts(),
    cancelled: Callable[[], bool] = lambda: False,
) -> dict:
    """The harness's cost per token, for environment.json's "harness".

    `null_itl_us_median`: the null engine's median ITL under greedy decoding, in microseconds;
    `harness_us_median`: the part of it the child measured as its own (events.Token.harness_ns);
    `null_cold_start_s`: its worker's cold start (spawned -> Ready, plus the first run's TTFT);
    `sampled`: the same two with the session's sampling settings, when it samples. On any failure
    the dict carries `error` instead of figures: calibration never fails a bench.
    """
    engine = registry.with_role(registry.Role.CALIBRATION)  # the registry's engine with no compute
    out: dict = {"engine": engine, "tokens": tokens, "sampling": "greedy"}
    worker = Worker(registry.get(engine), model, EngineOptions(threads=threads), timeouts=timeouts)
    ids = tuple(prompt_ids)
    try:
        ready = worker.start()
        plan = [("warmup", SamplingParams(), min(WARMUP_TOKENS, tokens)), ("greedy", SamplingParams(), tokens)]
        if not sampling.is_greedy:
            plan.append(("sampled", sampling, tokens))
        for label, params, count in plan:
            if cancelled():
                out["error"] = "cancelled"
                return out
            outcome = worker.run(
                RunRequest(f"{engine}/calibration/{label}", ids, count, params, live=False)
            )  # the harness as measured runs meet it
            if outcome.status != RunStatus.OK:
                out["error"] = f"{label} run {outcome.status}: {outcome.error}"
                return out
            if label == "warmup" and outcome.tokens:  # the worker's first run: the one its cold start includes
                ttft_ms = run_metrics(outcome.started_ns, [t.t_ns for t in outcome.tokens]).ttft_ms
                out["null_cold_start_s"] = round(cold_start_s(ready, worker.spawn_ns, ttft_ms), 3)
            figures = {
                "null_itl_us_median": _round(median_itl_us(outcome.tokens)),
                "harness_us_median": _round(median_harness_us(outcome.tokens)),
            }
            if label == "greedy":
                out.update(figures)
            elif label == "sampled":
                out["sampled"] = {**figures, "sampling": params.as_dict()}
    except WorkerError as exc:
        out["error"] = f"the {engine} engine did not load: {exc}"
    finally:
        worker.close()
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
