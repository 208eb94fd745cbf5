"""What a run will do, said before it starts: how many runs, which one-time builds are still to
make (an engine's cached artefacts are missing or not whole; no engine is imported to know), and
roughly how long, from the median of what each engine measured here in its last sessions
(results/engine_history.py).

An engine never run here with this model is guessed from the model's own size: decode reads every
weight once per token at part of the machine's bandwidth (machine/bandwidth.py's cached probe: the
estimate never probes), prefill computes the prompt's FLOPs at part of its probed GEMM rate, and the
worker's start is a fixed allowance. The estimate says when a figure is such a guess."""

from __future__ import annotations

from dataclasses import dataclass

from .. import registry
from ..gpt2_config import GPT2Config
from ..machine.bandwidth import Bandwidth, cached_bandwidth
from ..machine.threads import default_threads
from ..results import engine_history
from ..results.roofline import prefill_flops
from ..sources.model_files import ModelFiles
from ..sources.tokenizer import encode
from ..storage import artifact_cache
from .config import BenchConfig

# A guess for an engine with no history here, from the model's size. The engines here reach a third to
# all of the probed bandwidth in decode (README's table: 16-50 GB/s), so half of it; each token also
# costs the loop itself (sampler, dispatch: 0.2-1 ms on a 2-layer model, where the weights cost less).
GUESS_SHARE = 0.5
GUESS_STEP_S = 1e-3
GUESS_GB_S = 10.0  # no bandwidth probe cached yet: a modest machine's, the guess says which it used
GUESS_GFLOPS = 50.0  # likewise for the GEMM rate
# Spawn to first token with the artefacts cached: importing torch alone takes ~2.5 s, the other
# runtimes start in about a second (README's table: 0.5-3.1 s).
GUESS_START_S = {True: 3.0, False: 1.0}
MATRIX_BYTES = {"fp32": 4.0, "bf16": 2.0, "f16": 2.0, "int8": 1.0, "int4": 0.5}  # anything else: fp32


@dataclass(frozen=True)
class PendingBuild:
    engine: str
    recent_build_s: float | None  # the median of its last builds measured here for this model, if any


@dataclass(frozen=True)
class Estimate:
    engines: int
    warmup: int
    repeats: int
    builds: tuple[PendingBuild, ...] = ()
    seconds: float | None = None  # about: the engines' history, else a guess from the model's size (None: neither)
    untimed: tuple[str, ...] = ()  # engines neither measured here with this model nor guessed (not counted)
    model_known: bool = True  # False: the model's files are not here yet, so builds cannot be checked
    guessed: tuple[str, ...] = ()  # engines never measured here with this model: guessed from its size
    probed: bool = True  # the guesses used this machine's cached bandwidth probe (False: assumed figures)

    @property
    def runs(self) -> int:
        return self.engines * (self.warmup + self.repeats)

    def lines(self) -> list[str]:
        out = [
            f"{self.runs} runs: {self.engines} engine{'s' if self.engines != 1 else ''} x "
            f"({self.warmup} warm-up + {self.repeats} repeat{'s' if self.repeats != 1 else ''})"
        ]
        if not self.model_known:
            out.append("one-time builds: not known until the model is here")
        elif self.builds:
            timed = [f"{b.engine} (about {b.recent_build_s:.1f} s here)" for b in self.builds if b.recent_build_s]
            untimed = [b.engine for b in self.builds if not b.recent_build_s]
            parts = timed + ([f"never timed here: {', '.join(untimed)}"] if untimed else [])
            out.append("one-time builds first: " + "; ".join(parts))
        if self.seconds is None:
            out.append("time: unknown (no engine has run here with this model yet)")
        else:
            line = f"time: about {_duration(self.seconds)}"
            if self.guessed:
                machine = "this machine's bandwidth" if self.probed else "an assumed bandwidth (none probed here yet)"
                line += (
                    f", a rough guess for {_names(self.guessed)} (never run here with this model): "
                    f"from the model's size and {machine}"
                )
            if any(b.recent_build_s is None for b in self.builds):
                line += ", builds never timed not counted"
            if self.untimed:
                line += f", not counting {_names(self.untimed)} (never run here)"
            out.append(line)
        return out


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(names) if len(names) <= 3 else f"{len(names)} engines"


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def pending_builds(names: list[str], model: ModelFiles) -> list[str]:
    """The engines whose cached artefacts for `model` are missing or not whole (storage check only)."""
    out = []
    for name in names:
        spec = registry.ENGINES.get(name)
        if spec is None:
            continue
        try:
            folders = artifact_cache.engine_folders(spec, model)
        except Exception:  # noqa: BLE001 - an estimate never stops a run: an unreadable folder counts as missing
            out.append(name)
            continue
        if any(artifact_cache.check(folder) for folder in folders):
            out.append(name)
    return out


def guess_seconds(
    config: BenchConfig, gpt2: GPT2Config, precision: str, torch: bool, machine: Bandwidth | None
) -> float:
    """One engine's start and runs, guessed from the model's weights and FLOPs and the machine's
    cached probe (or GUESS_GB_S / GUESS_GFLOPS without one)."""
    gb_s = machine.gb_s if machine is not None else GUESS_GB_S
    gflops = machine.compute_gflops if machine is not None and machine.compute_gflops > 0 else GUESS_GFLOPS
    step = gpt2.weight_bytes(MATRIX_BYTES.get(precision, 4.0)) / (gb_s * 1e9 * GUESS_SHARE) + GUESS_STEP_S
    prompt = len(encode(config.prompt)) if config.prompt is not None else config.prompt_tokens
    ttft = prefill_flops(gpt2, prompt) / (gflops * 1e9 * GUESS_SHARE) + GUESS_STEP_S
    return GUESS_START_S[torch] + (config.warmup + config.repeats) * (ttft + max(0, config.new_tokens - 1) * step)


def estimate(config: BenchConfig, model: ModelFiles | None) -> Estimate:
    names = list(config.backends)
    builds = pending_builds(names, model) if model is not None else []
    machine = cached_bandwidth(config.threads or default_threads())
    total, untimed, guessed = 0.0, [], []
    for name in names:
        seen = engine_history.lookup(name, model.weights_hash) if model is not None else None
        spec = registry.ENGINES.get(name)
        if seen is not None and seen.ms_per_token is not None:
            per_run = (seen.ttft_ms or 0.0) / 1e3 + max(0, config.new_tokens - 1) * seen.ms_per_token / 1e3
            total += (seen.cold_start_s or 0.0) + (config.warmup + config.repeats) * per_run
        elif model is not None and spec is not None:
            total += guess_seconds(config, model.gpt2_config, spec.precision, "torch" in spec.requires, machine)
            guessed.append(name)
        else:
            untimed.append(name)
            continue
        if name in builds and seen is not None:
            total += seen.build_s or 0.0
    pending = (
        tuple(
            PendingBuild(n, (engine_history.lookup(n, model.weights_hash) or engine_history.EngineHistory()).build_s)
            for n in builds
        )
        if model is not None
        else ()
    )
    counted = len(untimed) < len(names)
    return Estimate(
        len(names),
        config.warmup,
        config.repeats,
        pending,
        total if counted else None,
        tuple(untimed),
        model is not None,
        tuple(guessed),
        machine is not None,
    )
