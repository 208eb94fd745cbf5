"""What a session runs: the settings of a bench (or of every cell of a sweep) and one cell."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

from .. import registry
from ..engine_settings import EngineSettings
from ..errors import UsageError
from ..results.load import Slo
from ..sampling import SamplingParams
from ..worker.timeouts import Timeouts
from .arrivals import RateSpec

Mode = Literal["fair", "race"]
MAX_CONCURRENCY = 256  # vLLM's default max_num_seqs


@dataclass
class BenchConfig:
    model: str = "auto"
    backends: tuple[str, ...] = field(default_factory=lambda: (registry.reference(),))
    prompt: str | None = None  # explicit text; otherwise the bundled text cut to prompt_tokens
    prompt_tokens: int = 50
    new_tokens: int = 100
    sampling: SamplingParams = field(default_factory=SamplingParams)
    repeats: int = 3  # with repeats_auto: the most rounds (--max-repeats)
    repeats_auto: bool = False  # --repeats auto: rounds until every engine's median interval is narrow enough
    target_width_pct: float = 5.0  # ... narrower than this share of its median
    max_minutes: float = 10.0  # ... or until the measured rounds have taken this long
    warmup: int = 1
    threads: int = 0  # 0: the usable physical cores, capped by the cgroup CPU quota (machine/threads.py)
    mode: Mode = "fair"
    reference: str | None = None  # default: the registry's reference engine if selected, else the first backend
    timeouts: Timeouts = field(default_factory=Timeouts)
    engine_options: dict[str, EngineSettings] = field(default_factory=dict)  # per backend: its typed settings
    cold: bool = False  # evict the weights and each engine's artefact files from the page cache before it starts
    concurrency: tuple[int, ...] = ()  # load levels for server engines (bench runs are level 1)
    rate: RateSpec = field(default_factory=RateSpec)  # open-loop levels for server engines (--request-rate)
    slo_ttft_ms: float | None = None  # goodput: a request is good when its TTFT <= this ...
    slo_itl_ms: float | None = None  # ... and its TPOT (mean inter-token latency) <= this
    # time the null engine afterwards (environment.json "harness"); bench and Run set it
    calibrate_harness: bool = False

    def validate(self) -> BenchConfig:
        """Checks that need no model. The context check follows once the model is known."""
        if not self.backends:
            raise UsageError("no backends selected")
        twice = sorted({name for name in self.backends if self.backends.count(name) > 1})
        if twice:
            raise UsageError(f"listed more than once: {', '.join(twice)}")
        if self.new_tokens < 1:
            raise UsageError(f"--new-tokens must be >= 1, got {self.new_tokens}")
        if self.prompt is None and self.prompt_tokens < 1:
            raise UsageError(f"--prompt-tokens must be >= 1, got {self.prompt_tokens}")
        if self.prompt is not None and not self.prompt.strip():
            raise UsageError("the prompt is empty")
        if self.repeats < 1:
            raise UsageError(f"--repeats must be >= 1, got {self.repeats}")
        if self.repeats_auto:
            if not (math.isfinite(self.target_width_pct) and self.target_width_pct > 0):
                raise UsageError(f"--target-width must be a percentage > 0, got {self.target_width_pct}")
            if not (math.isfinite(self.max_minutes) and self.max_minutes > 0):
                raise UsageError(f"--max-minutes must be > 0, got {self.max_minutes}")
            if self.repeats < 2:
                raise UsageError(f"--max-repeats must be >= 2 with --repeats auto, got {self.repeats}")
            if self.mode == "race":
                raise UsageError("--repeats auto needs fair mode (its rounds are the fair order's)")
        if self.warmup < 0:
            raise UsageError(f"--warmup must be >= 0, got {self.warmup}")
        if self.threads < 0:
            raise UsageError(f"--threads must be >= 0, got {self.threads}")
        if self.mode not in ("fair", "race"):
            raise UsageError(f"--mode must be 'fair' or 'race', not {self.mode!r}")
        if any(c < 1 or c > MAX_CONCURRENCY for c in self.concurrency):
            raise UsageError(f"--concurrency levels must be 1 to {MAX_CONCURRENCY}, got {list(self.concurrency)}")
        for flag, value in (("--slo-ttft-ms", self.slo_ttft_ms), ("--slo-itl-ms", self.slo_itl_ms)):
            if value is not None and not value > 0:
                raise UsageError(f"{flag} must be > 0, got {value}")
        if not (math.isfinite(self.timeouts.token_s) and self.timeouts.token_s > 0):  # NaN passes `<= 0`
            raise UsageError(f"--timeout must be a number of seconds > 0, got {self.timeouts.token_s}")
        if self.concurrency and self.mode == "race":
            raise UsageError("--concurrency needs fair mode (a race already runs every engine at once)")
        self.rate.validate()
        if self.rate.set and self.mode == "race":
            raise UsageError("--request-rate needs fair mode (a race already runs every engine at once)")
        self.sampling.validate()
        return self

    @property
    def slo(self) -> Slo:
        return Slo(self.slo_ttft_ms, self.slo_itl_ms)

    @property
    def reference_backend(self) -> str:
        """The engine every other one's tokens are compared with (--reference, else registry.reference_among)."""
        lowered = [name for name, settings in self.engine_options.items() if not settings.full_precision]
        return self.reference or registry.reference_among(self.backends, lowered)

    def as_dict(self) -> dict:
        """Settings for environment.json; secrets (API keys) are never written."""
        data = asdict(replace(self, engine_options={}, rate=RateSpec()))  # asdict would copy the secrets too
        data["backends"] = list(self.backends)
        data["concurrency"] = list(self.concurrency)
        data["rate"] = self.rate.record()
        data["engine_options"] = {name: opts.record() for name, opts in self.engine_options.items()}
        return data


@dataclass(frozen=True)
class Cell:
    """One (prompt, new tokens) setting; a bench has one, a sweep many. `tag` goes into run ids."""

    prompt_ids: tuple[int, ...]
    new_tokens: int
    tag: str = ""

    @property
    def key(self) -> tuple[int, int]:
        return len(self.prompt_ids), self.new_tokens
