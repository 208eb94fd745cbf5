"""The one small interface every engine implements.

An engine keeps one sequence's state. `prefill` starts a new sequence and returns the logits
of its last position; `decode` appends one token and returns the next logits. Sampling is not
the engine's business: the shared `Sampler` picks tokens from these logits, so every engine
is driven identically. Engines that generate in their own loop (a server, a runtime's generator)
override `stream` and declare it in their `Capabilities`; servers also implement `ServerEngine`.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from .engine_settings import EngineSettings
from .progress import ProgressFn
from .sampling import Sampler
from .sources.model_files import ModelFiles
from .speculation import SpeculationStats

if TYPE_CHECKING:
    from .profilers.capture import EngineProfiler
    from .server_metrics import ServerMetrics


class StampedToken(int):
    """A token id that knows when its runtime made it (`made_ns`, time.perf_counter_ns, this
    process). A runtime that generates on threads of its own hands tokens to the worker's thread,
    which may wait for a core while the runtime's threads hold them all (2 cores, 2 threads:
    CTranslate2's first dozen tokens came in one burst 6-12 ms late); such an engine yields these, and
    a token's time is its runtime's. `step`: the runtime's step that made it, where a step makes
    several (a speculative pass: its tokens share it), so a view of the stream counts what came with
    the first step as the records do. An int still, for every consumer that only wants the id."""

    made_ns: int
    step: int | None

    def __new__(cls, token: int, made_ns: int, step: int | None = None) -> StampedToken:
        stamped = super().__new__(cls, token)
        stamped.made_ns = made_ns
        stamped.step = step
        return stamped

    @classmethod
    def now(cls, token: int, step: int | None = None) -> StampedToken:
        """`token`, stamped now: called where the runtime hands it over (on its own thread, if it has one)."""
        return cls(int(token), time.perf_counter_ns(), step)


def token_time(item: int, previous_ns: int, received_ns: int) -> tuple[int, int | None]:
    """(time, step) of a token an engine's stream yielded, `received_ns` when the consumer got it: a
    StampedToken's own time, never before the previous token's nor after it came; else its arrival."""
    if isinstance(item, StampedToken):
        return min(max(item.made_ns, previous_ns), received_ns), item.step
    return received_ns, None


@dataclass
class EngineOptions:
    """Settings the user can give any engine; engines read what applies to them."""

    # 0: the engine's own default (sessions pass the usable physical cores, capped by the cgroup quota)
    threads: int = 0
    device: str = "cpu"
    settings: EngineSettings | None = None  # the engine's own typed settings (e.g. a server's URL), if any
    # the engine runs alone in a worker process of its own (the app's workers set it), so it may bind its
    # threads to CPUs (threads.cpus_to_bind); never in a process it shares (a test's, a library user's)
    owns_process: bool = False


@dataclass
class EngineInfo:
    """What an engine reports once loaded; it goes into every run record."""

    device: str = "cpu"
    dtype: str = "float32"
    weight_bytes_per_token: int = 0  # bytes of weights read to decode one token, at their stored size (scales included)
    notes: str = ""  # settings it could not honour, implementation details
    kv_bytes_per_position: int = 0  # KV-cache bytes read per cached position in one decode step (all layers, K and V)
    build_s: float = 0.0  # part of load spent building cached artefacts (export, conversion, quantisation)
    artifact_cache: str = "none"  # "hit", "miss" (built now) or "none" (the engine builds nothing)
    samples_natively: bool = False  # picks tokens in its own code (not the shared Sampler): sampled timings differ
    # The numbers its prefill's matrix products multiply ("fp32", "bf16", "int8": results/roofline.py's
    # Arithmetic); "" for its precision's fastest. Prefill's roofline divides by that arithmetic's peak.
    prefill_arithmetic: str = ""
    # Several tokens per step (speculative decoding): its tokens arrive in bursts, so its median
    # gap falls inside a burst and its ms/token is TPOT instead (docs/methodology.md).
    multi_token_steps: bool = False
    # The instruction-set level its own kernels were built for and ran at (the native engines':
    # machine/isa.py's "amx", "avx512", "avx2", "c"); "" for an engine whose runtime dispatches itself.
    isa: str = ""


@dataclass(frozen=True)
class Capabilities:
    """What an engine class can do, declared once on the class (the worker reads it, never probes)."""

    # Generates in its own `stream` (a server, a runtime's generation loop): the worker relays its
    # tokens and cannot time its prefill and decode calls apart (no per-step profile).
    own_loop: bool = False
    # A server: `stream` may be called from several threads at once (load runs). Its registry entry
    # says the same (`EngineSpec.serves_concurrently`) for the CLI and the window.
    serves_concurrently: bool = False


class Engine(ABC):
    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(self, name: str, options: EngineOptions) -> None:
        self.name = name  # the registry entry's name ("hf-bf16"): one class serves several entries
        self.options = options
        # Set during a run when the engine could not honour a setting (e.g. a server ignored `seed`);
        # it travels with the run's record in the `notes` column. The worker empties it before each run.
        self.run_notes = ""
        # A speculative engine's counts for the run (RunDone carries them); emptied before each run too.
        self.speculation: SpeculationStats | None = None

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.stream is not Engine.stream and not cls.capabilities.own_loop:
            raise TypeError(f"{cls.__name__} overrides stream(): declare Capabilities(own_loop=True)")

    @abstractmethod
    def load(self, model: ModelFiles, progress: ProgressFn) -> EngineInfo:
        """Load weights (building any cached artefacts, reporting progress)."""

    @abstractmethod
    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        """Start a new sequence; return float32 logits [vocab] of its last position."""

    @abstractmethod
    def decode(self, token_id: int) -> np.ndarray:
        """Append one token; return float32 logits [vocab] for the next position."""

    def stream(
        self, token_ids: Sequence[int], new_tokens: int, sampler: Sampler, cancel: threading.Event | None = None
    ) -> Iterator[int]:
        """Yield `new_tokens` token ids (no early stop at end-of-text); an engine whose runtime makes
        them on threads of its own yields StampedTokens. Cancel is checked between tokens."""
        logits = self.prefill(token_ids)
        for index in range(new_tokens):
            token = sampler(logits)
            yield token
            if index + 1 == new_tokens or (cancel is not None and cancel.is_set()):
                return
            logits = self.decode(token)

    def profiler(self) -> EngineProfiler | None:
        """A profiler for one profiled run (its runtime's own, see backends/profile), or None when
        the engine has none: a profile then shows its total and the harness only."""
        return None

    def forward_logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """Logits [T, vocab] for every position of one sequence (used for perplexity)."""
        raise NotImplementedError(f"{self.name} cannot score whole sequences")

    def close(self) -> None:  # noqa: B027 - a hook: only engines that hold something override it
        """Free resources; the worker process exits afterwards anyway."""


class ServerEngine(Engine):
    """An engine in front of a server that keeps its own latency histograms (its /metrics)."""

    capabilities: ClassVar[Capabilities] = Capabilities(own_loop=True, serves_concurrently=True)

    @abstractmethod
    def server_metrics(self) -> ServerMetrics | None:
        """The server's own latency histograms now, or None (none to read). Read outside every timed
        span: before a run starts and after its last token."""

    def share_streams(self, shared: bool) -> None:  # noqa: B027 - most servers keep no per-run counters
        """A load run's streams share the server from shared=True to shared=False. An engine that reads
        the server's counters after each stream reads none meanwhile: they would count the other
        streams' tokens, and each read would land inside the other streams' timed spans."""
