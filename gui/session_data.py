"""What the window holds about the session on screen: the records, and how to describe them.

Filled live from RunRecorded, replaced by the final BenchResult (which adds agreement with the
reference), or loaded from a saved folder; exports write exactly these records."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from whistle_stop.backends import registry
from whistle_stop.backends.results.records import RunRecord, TokenRecord
from whistle_stop.backends.results.summary import BackendSummary, markdown_table, measured_gaps, summarize_backends
from whistle_stop.backends.results.verdict import Verdict, verdict
from whistle_stop.backends.runs.bench import BenchResult
from whistle_stop.backends.sources.model_files import RANDOM_LABEL
from whistle_stop.backends.sources.prompts import prompt_of_length


@dataclass
class SessionData:
    runs: list[RunRecord] = field(default_factory=list)
    tokens: list[TokenRecord] = field(default_factory=list)
    environment: dict = field(default_factory=dict)
    backends: list[str] = field(default_factory=list)
    reference: str = ""
    greedy: bool = True
    mode: str = "fair"
    prompt: str = ""
    model_label: str = ""
    is_random: bool = False
    notice: str = ""
    finished: bool = False  # complete (or cancelled) and final: exports and Replay are allowed
    cancelled: bool = False
    # the engines' repeats ran in rounds (bench, the window); False for a profile's folder, which runs
    # each engine alone: its verdict names no slow round, as its report's does not
    interleaved: bool = True

    @classmethod
    def from_result(cls, result: BenchResult, prompt: str) -> SessionData:
        config = result.config
        return cls(
            list(result.runs),
            list(result.tokens),
            dict(result.environment),
            list(config.backends),
            result.environment.get("reference") or "",
            config.sampling.is_greedy,
            config.mode,
            prompt,
            result.model.label,
            result.model.is_random,
            result.model.notice,
            True,
            result.cancelled,
        )

    @classmethod
    def from_folder(
        cls, runs: list[RunRecord], tokens: list[TokenRecord], environment: dict, interleaved: bool = True
    ) -> SessionData:
        """A saved session: the settings and model come from environment.json when it has them."""
        settings = environment.get("settings") or {}
        model = environment.get("model") or {}
        backends = [b for b in settings.get("backends") or [] if any(r.backend == b for r in runs)]
        backends += [b for b in dict.fromkeys(r.backend for r in runs) if b not in backends]
        prompt = settings.get("prompt")
        if not isinstance(prompt, str):
            prompt = _bundled_prompt(settings.get("prompt_tokens"), model.get("context"))
        is_random = model.get("weights") == "random" or any(r.weights == "random" for r in runs)
        model_id = model.get("id") or (runs[0].model if runs else "")
        reference = environment.get("reference") or next((r.reference for r in runs if r.reference), "")
        greedy = all(r.decoding == "greedy" for r in runs) if runs else True
        mode = "race" if any(r.concurrent for r in runs) else "fair"
        return cls(
            runs,
            tokens,
            environment,
            backends,
            reference,
            greedy,
            mode,
            prompt,
            f"{model_id} ({RANDOM_LABEL})" if is_random else model_id,
            is_random,
            "",
            True,
            bool(environment.get("cancelled")),
            interleaved,
        )

    @property
    def adaptive(self) -> bool:
        """The session ran --repeats auto (its environment says how many rounds and the widths reached)."""
        return bool(self.environment.get("adaptive_repeats"))

    @property
    def concurrent(self) -> bool:
        return self.mode == "race" or any(r.concurrent for r in self.runs)

    def summaries(self) -> list[BackendSummary]:
        return summarize_backends(self.runs, self.backends or None, self.tokens)

    def verdict(self, quality: list[dict] | None = None) -> Verdict:
        """The verdict `bench` prints under its table, on these records (results/verdict.py)."""
        return verdict(self.runs, self.backends or None, self.reference or None, quality, self.interleaved)

    def markdown(self, quality: list[dict] | None = None) -> str:
        """Copy summary as Markdown: the verdict, then the table with its notes."""
        table = markdown_table(self.summaries(), self.reference or None, self.environment.get("harness"))
        return self.verdict(quality).markdown() + "\n" + table

    def measured_itl(self) -> dict[str, np.ndarray]:
        """Inter-token latencies per engine of the runs the table counts (measured and ok): a failed
        or cancelled run's gaps stay out of the histogram as they stay out of the pooled ITL."""
        out: dict[str, list[float]] = {name: [] for name in self.backends}
        out.update(measured_gaps(self.runs, self.tokens))
        return {name: np.asarray(values, dtype=np.float64) for name, values in out.items()}

    def setup_params(self) -> dict:
        """The session's settings as the setup panel's parameters (SetupPanel.params' keys), so that
        Run after Open runs what made these records; keys environment.json lacks are left out."""
        settings = self.environment.get("settings") or {}  # its sections' types checked as it was read
        sampling = settings.get("sampling") or {}
        model = settings.get("model")
        params = {
            "model": model,
            "folders": [model] if isinstance(model, str) and os.path.isdir(model) else [],
            "engines": [name for name in self.backends if isinstance(name, str) and name in registry.ENGINES],
            "prompt": self.prompt,
            "mode": self.mode,
            **{key: settings.get(key) for key in ("threads", "new_tokens", "repeats", "warmup", "cold")},
            **{key: sampling.get(key) for key in ("decoding", "temperature", "top_k", "top_p", "seed")},
        }
        return {key: value for key, value in params.items() if value is not None}

    def engine_options(self) -> dict[str, dict]:
        """Each engine's settings as the session recorded them (field names; unset ones left out)."""
        recorded = (self.environment.get("settings") or {}).get("engine_options") or {}
        return {name: value for name, value in recorded.items() if isinstance(value, dict)}

    def describe(self, threads: int | None = None) -> str:
        if not self.runs and not self.model_label:
            return ""
        first = self.runs[0] if self.runs else None
        parts = [self.model_label]
        if first is not None:
            parts += [
                f"{first.prompt_tokens}-token prompt",
                f"{first.new_tokens} new tokens",
                first.decoding,
                f"{first.threads} threads",
            ]
        parts.append(f"{self.mode} mode")
        return "  ·  ".join(p for p in parts if p)


def _bundled_prompt(tokens: object, context: object) -> str:
    """The bundled text cut to `tokens`, or to 50 when that is no prompt the model's context takes
    (a hand-edited 10**9 would exhaust memory building it)."""
    from whistle_stop.backends.sources.prompts import prompt_text

    limit = context if isinstance(context, int) and 0 < context <= _MOST_CONTEXT else _GPT2_CONTEXT
    count = tokens if isinstance(tokens, int) and 0 < tokens <= limit else 50
    return prompt_text(prompt_of_length(count))


_GPT2_CONTEXT = 1024  # every GPT-2's; a session without its model's context gets this
_MOST_CONTEXT = 1 << 20  # no GPT-2 has more: a larger "context" is a damaged file
