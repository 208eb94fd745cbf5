"""Quality: perplexity through each engine's own forward pass, agreement, and where outputs diverge.

Each engine scores inside its own worker (a `ScoreRequest` of strided windows, see
perplexity.py), so a quantised engine is judged by the arithmetic it really runs. A short
greedy bench in the same session (or a results folder) gives tokens/s and the token streams
whose agreement with the reference is measured; at the first divergence both workers are
asked for their top-k logits on the common prefix.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..results.agreement import first_cell, least_agreeing_streams
from ..results.reader import load_results
from ..results.records import RunRecord, TokenRecord
from ..results.stats import agreement
from ..sources.model_files import ModelFiles
from ..sources.prompts import prompt_ids as build_prompt_ids
from ..sources.tokenizer import decode, encode
from ..storage.paths import RESOURCES
from ..worker.events import Failed, LogitsRequest, ScoreRequest, TopLogits, WorkerLost
from ..worker.outcomes import ScoreOutcome, failure_text
from .bench import bench_cell, finish_bench
from .config import BenchConfig
from .events import EventSink, SessionStarted
from .orchestrator import Orchestrator
from .perplexity import DEFAULT_STRIDE, Windows, strided_windows, window_problem
from .preparation import prepare_bench
from .quality_files import QUALITY_CSV, read_quality, write_quality
from .quality_rows import (
    QUALITY_COLUMNS,
    RANDOM_NOTE,
    Divergence,
    QualityResult,
    QualityRow,
    all_greedy,
    quality_rows,
    quality_rows_as_dicts,
)
from .result import BenchResult

# The names callers import from here.
__all__ = [
    "DEFAULT_STRIDE",
    "DEFAULT_TEXT",
    "Divergence",
    "QUALITY_COLUMNS",
    "QUALITY_CSV",
    "QualityResult",
    "QualityRow",
    "QualitySession",
    "QualitySettings",
    "quality_rows_as_dicts",
    "read_quality",
    "write_quality",
]

DEFAULT_TEXT = RESOURCES / "eval" / "eval.txt"


@dataclass
class QualitySettings:
    text_path: Path | None = None  # None: the bundled English text
    max_length: int | None = None  # None: the model's context
    stride: int = DEFAULT_STRIDE
    bench_dir: Path | None = None  # take tokens/s and token streams from here instead of a short bench
    top_k: int = 5


def _top(answer: TopLogits | Failed | WorkerLost, k: int) -> tuple[list[dict], str]:
    """A worker's answer to a LogitsRequest as rows for divergence.json, or the reason there are none."""
    if not isinstance(answer, TopLogits):
        return [], failure_text(answer)
    return [
        {"token_id": t, "text": decode([t]), "logit": round(logit, 5), "logprob": round(p, 5)}
        for t, logit, p in list(zip(answer.token_ids, answer.logits, answer.logprobs))[:k]
    ], ""


def _one_cell(runs: list[RunRecord], tokens: list[TokenRecord]) -> tuple[list[RunRecord], list[TokenRecord]]:
    """The runs and tokens of the reference cell only: a sweep folder's cells differ in prompt and
    output length, so their tokens/s are no repeats of each other (nor their streams)."""
    cell = first_cell(runs, tokens)
    if cell is None:
        return runs, tokens
    kept = [r for r in runs if (r.prompt_tokens, r.new_tokens) == cell]
    ids = {r.run_id for r in kept}
    return kept, [t for t in tokens if t.run_id in ids]


def _check_bench_model(environment: dict, model: ModelFiles) -> None:
    """Refuse a --bench folder of other weights: its tokens/s and streams would stand beside this
    model's perplexity as if they were its own."""
    theirs = environment.get("model") or {}
    weights = theirs.get("weights_sha256_16")
    if weights and weights != model.weights_hash:
        raise UsageError(
            f"--bench ran {theirs.get('id') or 'another model'} (weights {weights}), not {model.model_id} "
            f"(weights {model.weights_hash}): run quality with that --model, or bench this one"
        )


def _read_text(path: Path) -> tuple[str, list[int]]:
    """The evaluation text and its token ids, or one line on why it cannot be scored."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the evaluation text {path}: {exc}") from exc
    ids = encode(text)
    if len(ids) < 2:
        raise UsageError(f"the evaluation text {path} has {len(ids)} token(s): perplexity needs at least 2")
    return text, ids


class QualitySession:
    """A greedy bench (unless `bench_dir`), then perplexity and divergence logits from the same workers."""

    def __init__(self, config: BenchConfig, settings: QualitySettings, on_event: EventSink | None = None) -> None:
        self.config = config.validate()
        self._orchestrator = Orchestrator(self.config, on_event)
        self.threads = self._orchestrator.threads
        if settings.bench_dir is not None and config.mode == "race":
            raise UsageError("--bench takes the runs from a folder: it does not combine with --mode race")
        self.settings = settings
        self.windows: Windows | None = None
        self.text_info: dict = {}
        self.quality: QualityResult | None = None
        self._bench: tuple[list[RunRecord], list[TokenRecord], dict] | None = None
        self._scores: dict[str, ScoreOutcome] = {}
        self._divergences: list[Divergence] = []

    @property
    def reference(self) -> str:
        return self.config.reference_backend

    def cancel(self) -> None:
        """Stop after the current token (or window) of every running engine; nothing further starts."""
        self._orchestrator.cancel()

    def prepare(self, progress=None, cancel=None) -> tuple[ModelFiles, list[int]]:
        # The text is read first: a bad file is one line before any model resolves or loads.
        path = Path(self.settings.text_path or DEFAULT_TEXT)
        text, text_ids = _read_text(path)
        if self.settings.bench_dir is not None:
            runs, tokens, environment = load_results(Path(self.settings.bench_dir))
            keep = set(self.config.backends)
            runs, tokens = _one_cell([r for r in runs if r.backend in keep], [t for t in tokens if t.backend in keep])
            self._bench = (runs, tokens, environment)
        model, ids = prepare_bench(self.config, self._orchestrator.specs, progress, cancel)
        if self._bench is not None:
            _check_bench_model(self._bench[2], model)
            settings = self._bench[2].get("settings") or {}
            cell = first_cell(self._bench[0], self._bench[1])
            length = cell[0] if cell else settings.get("prompt_tokens")  # the kept cell's prompt
            if isinstance(length, bool) or not isinstance(length, int) or not 0 < length <= model.context:
                length = len(ids)  # none, or a damaged file's (10**9 ids would exhaust memory)
            ids = build_prompt_ids(settings.get("prompt"), length)
        max_length = self.settings.max_length or model.context
        problem = window_problem(max_length, self.settings.stride, model.context)
        if problem:
            raise UsageError(problem)
        self.windows = strided_windows(text_ids, max_length, self.settings.stride)
        self.text_info = {
            "text": str(path),
            "text_sha256_16": hashlib.sha256(text.encode()).hexdigest()[:16],
            "text_tokens": len(text_ids),
            "max_length": max_length,
            "stride": self.settings.stride,
            "windows": len(self.windows.windows),
            "scored_tokens": self.windows.scored_tokens,
        }
        return model, ids

    def run(self, model: ModelFiles | None = None, prompt_ids: list[int] | None = None) -> BenchResult:
        if model is None or prompt_ids is None:
            model, prompt_ids = self.prepare()
        result = BenchResult(self.config, model, list(prompt_ids))
        self._orchestrator.emit(SessionStarted(model, list(prompt_ids), self.config))
        cell = bench_cell(self.config, prompt_ids)
        with self._orchestrator.session(result):
            if self._bench is None:
                self._orchestrator.run_bench(cell)
            else:  # runs from --bench DIR: only the workers are needed here
                result.runs.extend(self._bench[0])
                result.tokens.extend(self._bench[1])
                self._orchestrator.load(cell, warm_up=False)
            self._score(result)  # with the workers still up
        finish_bench(result, self._orchestrator)
        self.quality = self._build(result)
        result.environment["quality"] = self.quality.info
        return result

    # --- with the workers still up ---------------------------------------------------------
    def _score(self, result: BenchResult) -> None:
        windows = self.windows
        for name in self.config.backends:
            if self._orchestrator.cancelled or not self._orchestrator.usable(name):
                continue
            request = ScoreRequest(f"{name}/perplexity", windows.windows, windows.targets)
            self._scores[name] = self._orchestrator.score(name, request)
        if result.runs and all_greedy(result.runs):
            self._divergences = self._divergence_logits(result)

    def _divergence_logits(self, result: BenchResult) -> list[Divergence]:
        bench_weights = (self._bench[2].get("model") or {}).get("weights_sha256_16") if self._bench else None
        same_model = self._bench is None or bench_weights == result.model.weights_hash
        streams = least_agreeing_streams(result.runs, result.tokens, self.reference)
        ref = streams.get(self.reference)
        out = []
        for name, (record, tokens) in streams.items():
            if ref is None or name == self.reference:
                continue
            ref_record, ref_tokens = ref
            position = agreement(ref_tokens, tokens)[1]
            if position is None or position >= min(len(ref_tokens), len(tokens)):
                continue
            prompt = list(result.prompt_ids)
            div = Divergence(
                name,
                self.reference,
                record.run_id,
                position,
                record.prompt_tokens,
                {"token_id": ref_tokens[position], "text": decode([ref_tokens[position]])},
                {"token_id": tokens[position], "text": decode([tokens[position]])},
            )
            if not same_model or len(prompt) != record.prompt_tokens:
                div.error = "the bench folder used another model or prompt: logits not asked for"
            elif self._orchestrator.cancelled or not all(map(self._orchestrator.usable, (name, self.reference))):
                div.error = "a worker is not available"
            else:
                prefix = tuple(prompt + list(ref_tokens[:position]))  # the common prefix, teacher-forced
                k = self.settings.top_k
                div.reference_top, e1 = _top(
                    self._orchestrator.top_logits(
                        self.reference, LogitsRequest(f"{self.reference}/div-{name}", prefix, k)
                    ),
                    k,
                )
                div.top, e2 = _top(self._orchestrator.top_logits(name, LogitsRequest(f"{name}/div", prefix, k)), k)
                div.error = "; ".join(e for e in (e1, e2) if e)
            out.append(div)
        return out

    # --- results ---------------------------------------------------------------------------
    def _build(self, result: BenchResult) -> QualityResult:
        cancelled = self._orchestrator.cancelled
        rows = quality_rows(result, self.reference, self._scores, len(self.windows.windows), cancelled)
        info = {
            **self.text_info,
            "reference": self.reference,
            "greedy": all_greedy(result.runs),
            "top_k": self.settings.top_k,
            "bench_dir": str(self.settings.bench_dir) if self.settings.bench_dir else None,
            "random_weights": result.model.is_random,
            "note": RANDOM_NOTE if result.model.is_random else "",
        }
        return QualityResult(rows, list(self._divergences), info)
