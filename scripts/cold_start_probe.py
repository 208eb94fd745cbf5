"""Where a worker's cold start goes, stage by stage, over several fresh spawns.

    python -m scripts.cold_start_probe [--backends null,numpy] [--spawns 8] [--model random:gpt2]

Spawns each engine's worker `--spawns` times (the engines alternate, one worker at a time, so a
slow spell of the machine hits both alike) and reads the stamps every worker already sends:

  spawn    spawned -> Started: interpreter, site, multiprocessing's bootstrap, and the imports that
           unpickling the worker's arguments pulls in (numpy, the worker's own modules)
  ready    Started -> Ready: the engine's import and load
  ttft     the first run's RunStarted -> its first token: the first prefill (TTFT)

and, beside them, a second run's TTFT in the same worker (warm): what the first one pays on top of
it is first touches (weights mapped in, buffers faulted, caches cold).

Their sum is the cold start `bench` reports (spawned -> Ready, plus the first run's TTFT:
recording.cold_start_s).
Prints each stage's median and range per engine, and whether the engine room's bytecode is current
(without it, under PYTHONDONTWRITEBYTECODE every worker compiles the app's modules: storage/bytecode.py).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

# Each spawned worker imports this module again (as __mp_main__, the way it runs main.py in a
# bench), so anything imported here would be paid in every cold start it measures: the rest is
# imported inside the functions.


@dataclass(frozen=True)
class Stages:
    """One spawn's stages in seconds."""

    spawn: float
    ready: float
    ttft: float
    warm_ttft: float  # a second run's, in the same worker: not part of the cold start

    @property
    def total(self) -> float:
        return self.spawn + self.ready + self.ttft


def spawn_once(name: str, model, prompt_ids: tuple[int, ...], threads: int) -> Stages:
    from whistle_stop.backends import registry
    from whistle_stop.backends.engine import EngineOptions
    from whistle_stop.backends.sampling import SamplingParams
    from whistle_stop.backends.status import RunStatus
    from whistle_stop.backends.worker.events import RunRequest, Started
    from whistle_stop.backends.worker.process import Worker

    started: list[int] = []
    worker = Worker(
        registry.get(name),
        model,
        EngineOptions(threads=threads),
        on_event=lambda event: started.append(event.t_ns) if isinstance(event, Started) else None,
    )
    try:
        ready = worker.start()
        ttfts = []
        for run in ("first", "warm"):
            outcome = worker.run(RunRequest(f"{name}/probe/{run}", prompt_ids, 1, SamplingParams(), live=False))
            if outcome.status != RunStatus.OK or not outcome.tokens:
                raise RuntimeError(f"{name}: the {run} run ended {outcome.status}: {outcome.error}")
            ttfts.append((outcome.tokens[0].t_ns - outcome.started_ns) / 1e9)
    finally:
        worker.close()
    return Stages((started[0] - worker.spawn_ns) / 1e9, (ready.t_ns - started[0]) / 1e9, *ttfts)


def describe(values: list[float]) -> str:
    import statistics

    return f"{statistics.median(values) * 1e3:6.0f} ms [{min(values) * 1e3:.0f}-{max(values) * 1e3:.0f}]"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="null,numpy")
    parser.add_argument("--spawns", type=int, default=8)
    parser.add_argument("--model", default="random:gpt2")
    parser.add_argument("--prompt-tokens", type=int, default=50)
    parser.add_argument("--threads", type=int, default=0, help="threads per engine (0: the usable physical cores)")
    args = parser.parse_args(argv)

    from whistle_stop.backends.machine.threads import resolve_threads
    from whistle_stop.backends.runs.preparation import build_prompt_ids, resolve_model
    from whistle_stop.backends.storage import bytecode

    names = [n.strip() for n in args.backends.split(",") if n.strip()]
    model = resolve_model(args.model)
    prompt_ids = tuple(build_prompt_ids(None, args.prompt_tokens))
    threads = args.threads or resolve_threads().threads
    state = bytecode.check()
    print(
        f"model {model.label} · {len(prompt_ids)}-token prompt · {threads} threads · {args.spawns} spawns each · "
        f"engine room bytecode: {state.modules - state.uncompiled}/{state.modules} current"
        f"{'' if state.writes_bytecode else ' (PYTHONDONTWRITEBYTECODE)'}"
    )
    results: dict[str, list[Stages]] = {name: [] for name in names}
    for _ in range(args.spawns):
        for name in names:
            results[name].append(spawn_once(name, model, prompt_ids, threads))
    print(
        f"{'engine':<10} {'spawn -> Started':>22} {'Started -> Ready':>22} {'first TTFT':>22} "
        f"{'cold start':>22} {'warm TTFT':>22}"
    )
    for name, stages in results.items():
        print(
            f"{name:<10} {describe([s.spawn for s in stages]):>22} {describe([s.ready for s in stages]):>22} "
            f"{describe([s.ttft for s in stages]):>22} {describe([s.total for s in stages]):>22} "
            f"{describe([s.warm_ttft for s in stages]):>22}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
