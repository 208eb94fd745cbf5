"""What a worker process tells its parent: small picklable dataclasses.

Timestamps are `time.perf_counter_ns()`: the highest-resolution clock Python has, and on Linux
(CLOCK_MONOTONIC), macOS (mach_absolute_time / CLOCK_UPTIME_RAW) and Windows
(QueryPerformanceCounter) a system-wide one, not a per-process one. So stamps taken in different
workers and in the parent line up on one time axis (runs in different workers can be laid side
by side), and the parent may subtract its own stamps from a child's (cold start = Ready.t_ns -
spawn_ns). Durations inside one process (`engine_ns`, `harness_ns`) use the same clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..sampling import SamplingParams
from ..speculation import SpeculationStats
from ..status import RunStatus

if TYPE_CHECKING:
    from ..profilers.capture import ProfileCapture

# Messages are compared by nobody, so they skip the generated __eq__ and __hash__ (identity is
# enough), and each has a docstring (without one, dataclass builds __doc__ from inspect.signature):
# every worker creates all these classes before Ready, and on Python 3.11 each generated method is
# one exec of its source (docs/methodology.md). RunContext is a value, compared, and
# keeps __eq__.
if TYPE_CHECKING:  # the type checker sees a dataclass decorator; the worker does not import typing_extensions
    from typing_extensions import dataclass_transform

    @dataclass_transform(frozen_default=True, eq_default=False)
    def message(cls: type) -> type: ...
else:
    message = dataclass(frozen=True, eq=False)


# Parent -> child
@message
class RunRequest:
    """Generate `new_tokens` after `prompt_ids` (the parent tokenises once, so every engine gets the same ids)."""

    run_id: str
    prompt_ids: tuple[int, ...]
    new_tokens: int
    sampling: SamplingParams
    profile_trace: str = ""  # profile this run with the engine's own profiler, trace written here ("" = not)
    # Each token sent as it comes (warm-ups, race: what a window streams), or, for measured runs, in
    # TokenBatch events sent by a thread every BATCH_S: on a 2-core machine each send wakes the parent,
    # which costs the engine it times (worker/child.py; docs/methodology.md). Stamps are the child's either way.
    live: bool = True
    # `serve`'s logprobs: each token's own log-probability and the best `logprobs` tokens' (None: none).
    logprobs: int | None = None
    # `serve`'s echo with logprobs: the prompt's tokens scored first (PromptLogprobs), before the clock.
    prompt_logprobs: bool = False


BATCH_S = 0.25  # a run that is not live still sends its tokens this often (progress, and a hang keeps them)


@message
class ScoreRequest:
    """Score text with the engine's own forward pass (perplexity).

    `targets[i]` is how many trailing tokens of `windows[i]` are scored (HF's strided method:
    only the part of a window that earlier windows did not cover). A window's first token is
    never scored: nothing predicts it.
    """

    run_id: str
    windows: tuple[tuple[int, ...], ...]
    targets: tuple[int, ...]


@message
class LogitsRequest:
    """The top-k logits after teacher-forcing `prefix_ids` (what the engine predicts next)."""

    run_id: str
    prefix_ids: tuple[int, ...]
    k: int = 5


@message
class LoadRequest:
    """`concurrency` streams of one prompt at once (a server engine only), each with its own random
    prefix (no prefix-cache hits) and the same lengths. With `arrivals_ms` (an open-loop level of
    `--request-rate`), stream i is sent `arrivals_ms[i]` after the first instead (one stream each)."""

    run_id: str
    prompt_ids: tuple[int, ...]
    new_tokens: int
    sampling: SamplingParams
    concurrency: int
    arrivals_ms: tuple[float, ...] = ()


@message
class Shutdown:
    """Close the engine and end the worker."""


# Child -> parent
@message
class Started:
    """The child's interpreter is up (spawn cost = t_ns - the parent's spawn time)."""

    t_ns: int


@message
class Progress:
    """A load step, shown while the engine loads."""

    message: str
    fraction: float | None = None  # None: indeterminate


@message
class Ready:
    """The engine is loaded: import and load times apart, and what the engine says of itself."""

    import_s: float
    load_s: float
    t_ns: int
    device: str
    dtype: str
    threads: int
    weight_bytes_per_token: int
    notes: str = ""
    kv_bytes_per_position: int = 0
    build_s: float = 0.0  # inside load_s's span but reported apart (load_s excludes it)
    artifact_cache: str = "none"  # "hit", "miss" or "none"
    samples_natively: bool = False
    serves_concurrently: bool = False  # a server: load runs may send it several streams at once
    multi_token_steps: bool = False  # its tokens come several per step (EngineInfo.multi_token_steps)
    load_peak_rss_mb: float | None = None  # the worker's own high-water mark at Ready (VmHWM on Linux)
    prefill_arithmetic: str = ""  # EngineInfo's: what its prefill multiplies ("" its precision's fastest)
    isa: str = ""  # EngineInfo's: the instruction-set level its own kernels ran at ("" none of its own)
    own_loop: bool = False  # generates in its own loop: no logits per token (no logprobs)


@message
class RunStarted:
    """The child took the request; TTFT counts from `t_ns`."""

    run_id: str
    t_ns: int  # request start: the clock TTFT is measured from


@message
class Token:
    """One generated token, stamped in the child.

    The gap that ends at `t_ns` (since the previous token's `t_ns`, or since `RunStarted.t_ns` for
    token 0) is split in two, both measured in the child with `perf_counter_ns`:

    - `engine_ns`: the engine's own call that produced this token's logits (`prefill` for token
      0, `decode` after). None for an engine that overrides `Engine.stream` (a server, a native
      generator): its calls cannot be seen from outside, so all of its time counts as engine.
    - `harness_ns`: the rest of the gap, i.e. the harness's own per-token work in it: sampling this
      token, and detokenizing + building + sending the previous token's event (nothing for token 0:
      RunStarted goes out from the sender thread; in a run that is not live, handing it to the batch
      sender), plus the loop around them. A token's own detokenizing and sending happen after
      its stamp, so they are counted in the next token's gap: each gap holds exactly one of each,
      and engine_ns + harness_ns equals the gap (the ITL; TTFT for token 0). For an engine that
      overrides `stream`, it is the time the child spent outside the engine's generator in the gap.
    """

    run_id: str
    index: int
    token_id: int
    text: str  # incremental text delta (may be empty while a character is incomplete)
    t_ns: int  # taken once the token id is on the CPU
    engine_ns: int | None = None  # the engine's prefill/decode call that produced this token's logits
    harness_ns: int | None = None  # the rest of the gap before t_ns: sampling, the previous token's send
    step: int | None = None  # the engine's step that made it, where a step makes several (StampedToken.step)
    logprob: float | None = None  # log-softmax of the raw logits at this token (RunRequest.logprobs)
    top_logprobs: tuple[tuple[int, float], ...] = ()  # the best RunRequest.logprobs (id, logprob), best first


@message
class PromptLogprobs:
    """The prompt's own tokens scored (RunRequest.prompt_logprobs), sent before RunStarted: each
    token's log-softmax given the ones before it (None for the first: nothing predicts it)."""

    run_id: str
    logprobs: tuple[float | None, ...]
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...]


@message
class TokenBatch:
    """Tokens of a run that is not live (RunRequest.live False), in order; the parent hands them on one by one."""

    run_id: str
    tokens: tuple[Token, ...]


@message
class RunDone:
    """The run's end (all its tokens were sent before it)."""

    run_id: str
    t_ns: int
    tokens: int
    peak_rss_mb: float  # the worker's own high-water mark since Ready (reset after load where the OS allows)
    cancelled: bool = False
    notes: str = ""  # what the engine could not honour in this run
    cpu_s: float | None = None  # the worker's user + system CPU seconds (all its threads) over the run
    speculation: SpeculationStats | None = None  # a speculative engine's counts (Engine.speculation)


@message
class StreamResult:
    """One request of a load run: its own start and token stamps (perf_counter_ns, in the child)."""

    index: int
    started_ns: int
    token_ns: tuple[int, ...]
    error: str = ""  # one failing request is recorded, the others go on
    ended_ns: int = 0  # when the request ended: after its last token (the stream's end), or its error
    token_steps: tuple[int | None, ...] = ()  # each token's step (StampedToken.step): a server's event


@message
class LoadProgress:
    """Sent about twice a second during a load run (tokens so far, all streams): life, and a live count."""

    run_id: str
    tokens: int
    streams_done: int


@message
class LoadDone:
    """A load run's end: every stream's own stamps."""

    run_id: str
    started_ns: int  # the first request sent (the round's wall time ends at its last token)
    streams: tuple[StreamResult, ...]
    notes: str = ""
    cancelled: bool = False


@message
class ProfileCaptured:
    """Sent before RunDone by a run with `profile_trace`: what the engine's profiler saw."""

    run_id: str
    capture: ProfileCapture


@message
class ScoreProgress:
    """Sent while scoring, so a long evaluation is not mistaken for a hang."""

    run_id: str
    windows_done: int
    windows_total: int


@message
class ScoreDone:
    """A scoring's result: summed negative log-likelihood over the scored tokens."""

    run_id: str
    nll_sum: float  # summed negative log-likelihood (natural log) over the scored tokens
    tokens: int  # tokens scored
    seconds: float
    method: str  # "forward_logits" or "prefill+decode"
    cancelled: bool = False


@message
class TopLogits:
    """The engine's best next tokens after a prefix (LogitsRequest)."""

    run_id: str
    token_ids: tuple[int, ...]  # best first
    logits: tuple[float, ...]
    logprobs: tuple[float, ...]  # log-softmax over the whole vocabulary


@message
class Failed:
    """An exception in the child, during load (run_id None) or during a run."""

    message: str
    traceback: str = ""
    run_id: str | None = None


@message
class WorkerLost:
    """Made by the parent: the child crashed, hung past its timeout, or was killed on cancel (at once while
    it loads)."""

    reason: RunStatus  # CRASHED, TIMEOUT, KILLED, or CANCELLED (a load cut by Cancel)
    detail: str = ""
    run_id: str | None = None


@dataclass(frozen=True)  # a value: compared (tests, displays)
class RunContext:
    """Where a run request sits in the session, for a display to label it (sent with it)."""

    repeat: int
    is_warmup: bool
    cell: str = ""  # a sweep cell's tag ("p64n16"); "" in a bench
    prompt_tokens: int | None = None  # the cell's lengths, in a sweep only
    new_tokens: int | None = None


@message
class BackendEvent:
    """An event tagged with the backend (and worker slot) it came from: what the GUI consumes."""

    backend: str
    event: object
    context: RunContext | None = None  # set on RunRequest events only
