"""Does the window slow the engines down? The same fair-mode bench headless, then in the window.

    python -m scripts.observer_probe [--model random:gpt2] [--engines numpy,onnx-int8]
                                     [--tokens 100] [--repeats 3] [--warmup 1] [--rounds 1] [--show]

Builds ONE BenchConfig from the real window's setup panel, runs it through `BenchSession`
headless (what `bench` does), then through the window's Run button (offscreen unless there is a
display or --show), one after the other, never at once. Prints each engine's median ms/token
(TPOT, decode ms per token, over the measured repeats) in both and the ratio window / bench;
the target is a ratio <= 1.03. With --rounds N, N rounds in alternating order (bench then
window, window then bench, ...), and the verdict is the geometric mean of the rounds' ratios.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

TARGET_RATIO = 1.03


@dataclass(frozen=True)
class Comparison:
    engine: str
    bench_ms: float | None  # median TPOT of the measured runs, headless
    window_ms: float | None  # the same in the window
    bench_parent_cpu_s: float = 0.0  # this process's own CPU (all its threads) during each phase
    window_parent_cpu_s: float = 0.0

    @property
    def ratio(self) -> float | None:
        if self.bench_ms is None or self.window_ms is None or self.bench_ms <= 0:
            return None
        return self.window_ms / self.bench_ms


def median_ms_per_token(runs, engine: str) -> float | None:
    values = [
        r.tpot_ms
        for r in runs
        if r.backend == engine and not r.is_warmup and r.status == "ok" and r.tpot_ms is not None
    ]
    return statistics.median(values) if values else None


def probe(
    model: str,
    engines: list[str],
    tokens: int,
    repeats: int,
    warmup: int,
    threads: int = 0,
    prompt: str = "The lighthouse keeper",
    rounds: int = 1,
) -> list[list[Comparison]]:
    """One list of comparisons per round (a QApplication must exist)."""
    from whistle_stop.backends.runs.bench import BenchSession

    from .scripting import open_window, run_end_loop

    out = []
    with tempfile.TemporaryDirectory() as settings_dir:
        window = open_window(Path(settings_dir))
        setup = window.setup
        setup.set_model_spec(model)
        setup.set_engines(engines)
        setup.prompt.setPlainText(prompt)
        setup.new_tokens.setValue(tokens)
        setup.repeats.setValue(repeats)
        setup.warmup.setValue(warmup)
        setup.threads.setValue(threads)
        setup.fair.setChecked(True)
        setup.flush()
        problem = setup.problem()
        if problem:
            raise RuntimeError(f"the window refuses these settings: {problem}")
        config = setup.config()

        def in_window():
            loop, outcome = run_end_loop(window.bench.job)
            if not window.start_run():
                raise RuntimeError(f"the window cannot run: {window.last_error or setup.problem()}")
            loop.exec()
            if "error" in outcome:
                raise RuntimeError(f"the window's run failed: {outcome['error']}")
            return outcome["result"]

        phases = {"bench": lambda: BenchSession(config).run(), "window": in_window}  # bench: what `bench` runs
        try:
            for index in range(rounds):
                # A B, B A, A B, ...: a drift of the machine over the rounds cancels out.
                order = ["bench", "window"] if index % 2 == 0 else ["window", "bench"]
                results, cpu = {}, {}
                for phase in order:
                    began = _own_cpu_s()
                    results[phase] = phases[phase]()
                    cpu[phase] = _own_cpu_s() - began
                headless, shown = results["bench"], results["window"]
                bench_cpu, window_cpu = cpu["bench"], cpu["window"]
                out.append(
                    [
                        Comparison(
                            e,
                            median_ms_per_token(headless.runs, e),
                            median_ms_per_token(shown.runs, e),
                            bench_cpu,
                            window_cpu,
                        )
                        for e in config.backends
                    ]
                )
        finally:
            window.close()
    return out


def _own_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="random:gpt2")
    parser.add_argument("--engines", default="numpy,onnx-int8")
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0, help="0: the default (usable physical cores)")
    parser.add_argument("--rounds", type=int, default=1, help="bench then window, this many times")
    parser.add_argument("--show", action="store_true", help="show the window on screen (needs a display)")
    args = parser.parse_args(argv)
    if not args.show and "QT_QPA_PLATFORM" not in os.environ:
        os.environ["QT_QPA_PLATFORM"] = "offscreen"

    from whistle_stop.gui.app import create_app

    app = create_app()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    try:
        rounds = probe(args.model, engines, args.tokens, args.repeats, args.warmup, args.threads, rounds=args.rounds)
    except RuntimeError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(
        f"model {args.model}, fair mode, {args.tokens} new tokens, {args.repeats} repeat(s), "
        f"{args.warmup} warm-up(s), threads {args.threads or 'default'}; median TPOT (ms/token)"
    )
    print(f"{'round':>5}  {'engine':<14} {'bench':>9} {'window':>9} {'ratio':>7}")
    ratios: dict[str, list[float]] = {}
    for index, comparisons in enumerate(rounds, start=1):
        for c in comparisons:
            print(f"{index:>5}  {c.engine:<14} {_fmt(c.bench_ms):>9} {_fmt(c.window_ms):>9} {_fmt(c.ratio, 3):>7}")
            if c.ratio is not None:
                ratios.setdefault(c.engine, []).append(c.ratio)
    for index, comparisons in enumerate(rounds, start=1):
        if comparisons:
            print(
                f"round {index}: this process's own CPU: {comparisons[0].bench_parent_cpu_s:.2f} s during bench, "
                f"{comparisons[0].window_parent_cpu_s:.2f} s during the window's run"
            )
    # One round's ratio carries the process-to-process noise of both runs (here often +-10%), so the
    # verdict uses the geometric mean over rounds; every round's ratio is printed beside it.
    for engine, values in ratios.items():
        overall = math.exp(sum(math.log(v) for v in values) / len(values))
        print(
            f"{engine}: ratio per round {', '.join(f'{v:.3f}' for v in values)}; geometric mean {overall:.3f} "
            f"over {len(values)} round(s); "
            f"target <= {TARGET_RATIO}: {'met' if overall <= TARGET_RATIO else 'NOT met'}"
        )
    del app
    return 0 if ratios else 2


if __name__ == "__main__":
    sys.exit(main())
