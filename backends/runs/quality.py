"""Quality: perplexity through each engine's own forward pass, agreement, and where outputs diverge.

Perplexity follows HF's "perplexity of fixed-length models": windows of `max_length` tokens
every `stride` tokens, scoring only the part of each window that earlier windows did not
cover, so every token after the first is scored once with up to `max_length` of context.
Each engine scores inside its own worker (a `ScoreRequest`), so a quantised engine is judged
by the arithmetic it really runs. A short greedy bench in the same session (or a results
folder) gives tokens/s and the token streams whose agreement with the reference is measured;
at the first divergence both workers are asked for their top-k logits on the common prefix.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from ..errors import UsageError
from ..worker.events import LogitsRequest, ScoreRequest, TopLogits
from ..sources.model_files import RANDOM_LABEL, ModelFiles
from ..storage.paths import RESOURCES
from ..sources.prompts import prompt_ids as build_prompt_ids
from ..results.records import RunRecord, TokenRecord
from ..registry import EngineSpec
from .bench import BenchConfig, BenchResult, BenchSession, EventSink, _fill_agreement
from ..results.stats import agreement, summarize
from ..sources.tokenizer import decode, encode

DEFAULT_TEXT = RESOURCES / "eval" / "eval.txt"
DEFAULT_STRIDE = 512
RANDOM_NOTE = f"perplexity is meaningless on random weights ({RANDOM_LABEL})"


@dataclass(frozen=True)
class Windows:
    windows: tuple[tuple[int, ...], ...]
    targets: tuple[int, ...]  # trailing tokens scored per window

    @property
    def scored_tokens(self) -> int:
        return sum(len(w) - max(1, len(w) - t) for w, t in zip(self.windows, self.targets))


def strided_windows(ids: Sequence[int], max_length: int, stride: int) -> Windows:
    """HF's loop: for begin in 0, stride, ...: window ids[begin:begin+max_length], whose last
    (end - previous end) tokens are scored; stop once a window reaches the end of the text."""
    if max_length < 2:
        raise UsageError(f"--max-length must be >= 2, got {max_length}")
    if not 1 <= stride <= max_length:
        raise UsageError(f"--stride must be in 1..{max_length} (--max-length), got {stride}")
    if len(ids) < 2:
        raise UsageError("the text has fewer than 2 tokens: nothing to score")
    windows, targets, previous_end = [], [], 0
    for begin in range(0, len(ids), stride):
        end = min(begin + max_length, len(ids))
        windows.append(tuple(ids[begin:end]))
        targets.append(end - previous_end)
        previous_end = end
        if end == len(ids):
            break
    return Windows(tuple(windows), tuple(targets))


@dataclass(frozen=True)
class AgreementDetail:
    agree_tokens: int  # equal tokens before the first divergence
    first_divergence: int | None
    compared: int  # reference length
    agree_share: float  # agree_tokens / compared: the share generated before the outputs part
    identical_share: float  # positions holding the same token (after a divergence, mostly chance)


def agreement_detail(reference: Sequence[int], tokens: Sequence[int]) -> AgreementDetail:
    agree, first = agreement(reference, tokens)
    n = len(reference)
    same = sum(1 for a, b in zip(reference, tokens) if a == b)
    return AgreementDetail(agree, first, n, agree / n if n else math.nan, same / n if n else math.nan)


@dataclass
class QualitySettings:
    text_path: Path | None = None  # None: the bundled English text
    max_length: int | None = None  # None: the model's context
    stride: int = DEFAULT_STRIDE
    bench_dir: Path | None = None  # take tokens/s and token streams from here instead of a short bench
    top_k: int = 5


@dataclass
class QualityRow:
    backend: str
    dtype: str = ""
    perplexity: float | None = None
    nll_sum: float | None = None
    scored_tokens: int = 0
    windows: int = 0
    method: str = ""
    score_s: float | None = None
    reference: str = ""
    ppl_diff: float | None = None  # perplexity - the reference's
    ppl_diff_pct: float | None = None
    decode_tok_s: float | None = None  # median of measured runs
    decode_tok_s_ci95_low: float | None = None
    decode_tok_s_ci95_high: float | None = None
    agree_tokens: int | None = None
    compared_tokens: int | None = None
    agree_share: float | None = None
    identical_share: float | None = None
    first_divergence: int | None = None
    status: str = "ok"
    error: str = ""
    note: str = ""


QUALITY_COLUMNS = list(QualityRow.__dataclass_fields__)


@dataclass
class Divergence:
    backend: str
    reference: str
    run_id: str
    position: int  # index among the generated tokens
    prompt_tokens: int
    reference_token: dict
    token: dict
    reference_top: list[dict] = field(default_factory=list)
    top: list[dict] = field(default_factory=list)
    error: str = ""


@dataclass
class QualityResult:
    rows: list[QualityRow]
    divergences: list[Divergence]
    info: dict  # environment.json's "quality" section


def _top(answer, k: int) -> tuple[list[dict], str]:
    if not isinstance(answer, TopLogits):
        return [], getattr(answer, "message", "") or f"worker {getattr(answer, 'reason', '?')}: {getattr(answer, 'detail', '')}"
    return [{"token_id": t, "text": decode([t]), "logit": round(l, 5), "logprob": round(p, 5)}
            for t, l, p in list(zip(answer.token_ids, answer.logits, answer.logprobs))[:k]], ""


class QualitySession(BenchSession):
    """A greedy bench (unless `bench_dir`), then perplexity and divergence logits from the same workers."""

    def __init__(self, config: BenchConfig, settings: QualitySettings, on_event: EventSink | None = None,
                 specs: dict[str, EngineSpec] | None = None) -> None:
        super().__init__(config, on_event, specs)
        if settings.bench_dir is not None and config.mode == "race":
            raise UsageError("--bench takes the runs from a folder: it does not combine with --mode race")
        self.settings = settings
        self.windows: Windows | None = None
        self.text_info: dict = {}
        self.quality: QualityResult | None = None
        self._bench: tuple[list[RunRecord], list[TokenRecord], dict] | None = None
        self._scores: dict = {}
        self._divergences: list[Divergence] = []

    def prepare(self, progress=None, cancel=None) -> tuple[ModelFiles, list[int]]:
        if self.settings.bench_dir is not None:
            from ..results.reader import load_results

            runs, tokens, environment = load_results(Path(self.settings.bench_dir))
            keep = set(self.config.backends)
            self._bench = ([r for r in runs if r.backend in keep], [t for t in tokens if t.backend in keep], environment)
        model, ids = super().prepare(progress, cancel)
        if self._bench is not None:
            settings = self._bench[2].get("settings") or {}
            ids = build_prompt_ids(settings.get("prompt"), settings.get("prompt_tokens") or len(ids))
        path = Path(self.settings.text_path or DEFAULT_TEXT)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read the evaluation text {path}: {exc}") from exc
        text_ids = encode(text)
        max_length = self.settings.max_length or model.context
        if max_length > model.context:
            raise UsageError(f"--max-length {max_length} exceeds the model's context of {model.context}")
        self.windows = strided_windows(text_ids, max_length, self.settings.stride)
        self.text_info = {"text": str(path), "text_sha256_16": hashlib.sha256(text.encode()).hexdigest()[:16],
                          "text_tokens": len(text_ids), "max_length": max_length, "stride": self.settings.stride,
                          "windows": len(self.windows.windows), "scored_tokens": self.windows.scored_tokens}
        return model, ids

    # --- the bench part ------------------------------------------------------------------
    def _run_fair(self, result: BenchResult) -> None:
        if self._bench is None:
            super()._run_fair(result)
            return
        result.runs.extend(self._bench[0])  # runs from --bench DIR: only the workers are needed here
        result.tokens.extend(self._bench[1])
        for name in self.config.backends:
            if self._cancelled.is_set():
                return
            self._start(name, result)

    def run(self, model: ModelFiles | None = None, prompt_ids: list[int] | None = None) -> BenchResult:
        result = super().run(model, prompt_ids)
        self.quality = self._build(result)
        result.environment["quality"] = self.quality.info
        return result

    # --- with the workers still up ---------------------------------------------------------
    def _after_runs(self, result: BenchResult) -> None:
        windows = self.windows
        for name in self.config.backends:
            if self._cancelled.is_set() or not self._usable(name):
                continue
            request = ScoreRequest(f"{name}/perplexity", windows.windows, windows.targets)
            self._scores[name] = self._workers[name].score(request)
        _fill_agreement(result, self.reference)
        if result.runs and all(r.decoding == "greedy" for r in result.runs if r.status == "ok"):
            self._divergences = self._divergence_logits(result)

    def _divergence_logits(self, result: BenchResult) -> list[Divergence]:
        same_model = self._bench is None or (self._bench[2].get("model") or {}).get("weights_sha256_16") == result.model.weights_hash
        streams = _first_streams(result.runs, result.tokens)
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
            div = Divergence(name, self.reference, record.run_id, position, record.prompt_tokens,
                             {"token_id": ref_tokens[position], "text": decode([ref_tokens[position]])},
                             {"token_id": tokens[position], "text": decode([tokens[position]])})
            if not same_model or len(prompt) != record.prompt_tokens:
                div.error = "the bench folder used another model or prompt: logits not asked for"
            elif self._cancelled.is_set() or not (self._usable(name) and self._usable(self.reference)):
                div.error = "a worker is not available"
            else:
                prefix = tuple(prompt + list(ref_tokens[:position]))  # the common prefix, teacher-forced
                k = self.settings.top_k
                div.reference_top, e1 = _top(self._workers[self.reference].top_logits(
                    LogitsRequest(f"{self.reference}/div-{name}", prefix, k)), k)
                div.top, e2 = _top(self._workers[name].top_logits(LogitsRequest(f"{name}/div", prefix, k)), k)
                div.error = "; ".join(e for e in (e1, e2) if e)
            out.append(div)
        return out

    # --- results ---------------------------------------------------------------------------
    def _build(self, result: BenchResult) -> QualityResult:
        streams = _first_streams(result.runs, result.tokens)
        ref_stream = streams.get(self.reference)
        greedy = all(r.decoding == "greedy" for r in result.runs if r.status == "ok")
        rows = []
        for name in self.config.backends:
            row = QualityRow(name, reference=self.reference, windows=len(self.windows.windows))
            mine = [r for r in result.runs if r.backend == name]
            row.dtype = next((r.dtype for r in mine if r.dtype), "")
            speed = summarize([r.decode_tok_s for r in mine if not r.is_warmup and r.status == "ok"])
            if speed.n:
                row.decode_tok_s = speed.median
                if speed.n > 1:
                    row.decode_tok_s_ci95_low, row.decode_tok_s_ci95_high = speed.ci95_low, speed.ci95_high
            outcome = self._scores.get(name)
            if outcome is None:
                failed = next((r for r in mine if r.status not in ("ok", "cancelled")), None)
                row.status = failed.status if failed else ("cancelled" if self._cancelled.is_set() else "error")
                row.error = failed.error if failed else "not scored"
            else:
                row.status, row.error = outcome.status, outcome.error
                done = outcome.done
                if done is not None and done.tokens and not done.cancelled:
                    row.nll_sum, row.scored_tokens, row.method, row.score_s = done.nll_sum, done.tokens, done.method, done.seconds
                    row.perplexity = math.exp(done.nll_sum / done.tokens)
            if greedy and ref_stream is not None and name in streams:
                detail = agreement_detail(ref_stream[1], streams[name][1])
                row.agree_tokens, row.first_divergence = detail.agree_tokens, detail.first_divergence
                row.compared_tokens, row.agree_share, row.identical_share = detail.compared, detail.agree_share, detail.identical_share
            if result.model.is_random:
                row.note = RANDOM_NOTE
            rows.append(row)
        ref_row = next((r for r in rows if r.backend == self.reference), None)
        for row in rows:
            if ref_row is not None and ref_row.perplexity and row.perplexity is not None:
                row.ppl_diff = row.perplexity - ref_row.perplexity
                row.ppl_diff_pct = 100 * row.ppl_diff / ref_row.perplexity
        info = {**self.text_info, "reference": self.reference, "greedy": greedy, "top_k": self.settings.top_k,
                "bench_dir": str(self.settings.bench_dir) if self.settings.bench_dir else None,
                "random_weights": result.model.is_random, "note": RANDOM_NOTE if result.model.is_random else ""}
        return QualityResult(rows, list(self._divergences), info)


def _first_streams(runs: Sequence[RunRecord], tokens: Sequence[TokenRecord]) -> dict[str, tuple[RunRecord, list[int]]]:
    """Each backend's first measured complete run (warm-ups only if there is none), in the
    reference cell: the prompt/new-token setting of the first such run."""
    by_run: dict[str, list[int]] = {}
    for t in sorted(tokens, key=lambda t: t.token_index):
        by_run.setdefault(t.run_id, []).append(t.token_id)
    ok = sorted((r for r in runs if r.status == "ok" and r.run_id in by_run), key=lambda r: (r.is_warmup, r.repeat))
    if not ok:
        return {}
    cell = (ok[0].prompt_tokens, ok[0].new_tokens)
    out: dict[str, tuple[RunRecord, list[int]]] = {}
    for r in ok:
        if (r.prompt_tokens, r.new_tokens) == cell and r.backend not in out:
            out[r.backend] = (r, by_run[r.run_id])
    return out


def quality_rows_as_dicts(rows: Sequence[QualityRow]) -> list[dict]:
    return [asdict(r) for r in rows]


QUALITY_CSV, DIVERGENCE_JSON = "quality.csv", "divergence.json"


def write_quality(out_dir: Path, result: BenchResult, quality: QualityResult) -> list[Path]:
    """quality.csv, divergence.json and the session's runs/tokens/environment, each written atomically."""
    import json

    from ..storage.atomic import atomic_write
    from ..results.export import write_csv, write_results

    out_dir = Path(out_dir)
    paths = write_results(out_dir, result.runs, result.tokens, result.environment)
    write_csv(out_dir / QUALITY_CSV, QUALITY_COLUMNS, quality.rows)
    with atomic_write(out_dir / DIVERGENCE_JSON, encoding="utf-8") as f:
        json.dump([asdict(d) for d in quality.divergences], f, indent=2, ensure_ascii=False)
    return paths + [out_dir / QUALITY_CSV, out_dir / DIVERGENCE_JSON]


def read_quality(folder: Path) -> tuple[list[dict], list[dict]]:
    """(quality rows with numbers parsed, divergences) from a quality folder; empty if absent."""
    import json

    from ..results.export import read_csv

    folder = Path(folder)
    rows = []
    if (folder / QUALITY_CSV).exists():
        for raw in read_csv(folder / QUALITY_CSV):
            row: dict = {}
            for key, cell in raw.items():
                kind = str(getattr(QualityRow.__dataclass_fields__.get(key), "type", "str"))
                if cell in ("", None):
                    row[key] = None if kind != "str" else ""
                elif kind.startswith(("int", "float")):
                    try:
                        row[key] = int(float(cell)) if kind.startswith("int") else float(cell)
                    except ValueError:
                        row[key] = None
                else:
                    row[key] = cell
            rows.append(row)
    divergences = []
    if (folder / DIVERGENCE_JSON).exists():
        try:
            divergences = json.loads((folder / DIVERGENCE_JSON).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            divergences = []
    return rows, divergences
