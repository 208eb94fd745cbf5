"""How responsive the window stays while four engines stream 1,000 tokens each at once.

    python -m scripts.latency_probe [--engines a,b,c,d] [--tokens 1000] [--show]

Opens the real window (offscreen unless there is a display or --show), runs the engines in
Race mode on random:tiny, and measures the event loop's lateness: a 10 ms QTimer records
(actual interval - 10 ms) on every tick. Prints p50/p99/max in ms; the target is p99 < 50 ms.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

TARGET_P99_MS = 50.0
PREFERRED = ("hf", "hf-int8", "hf-bf16")  # then the registry's order


def pick_engines(count: int) -> list[str]:
    """`count` distinct available engines (no engine twice): hf's three first, then any other."""
    from whistle_stop.backends import registry

    names = list(PREFERRED) + [n for n in registry.names() if n not in PREFERRED]
    return [n for n in names if registry.available(n)[0]][:count]


def percentiles(values: list[float]) -> tuple[float, float, float]:
    import numpy as np

    data = np.asarray(values, dtype=np.float64)
    return float(np.percentile(data, 50)), float(np.percentile(data, 99)), float(data.max())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", help="comma-separated; default: four available engines")
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--interval-ms", type=float, default=10.0)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="threads per engine (default 1: four engines at every usable core each would "
        "oversubscribe a small machine; this measures the window, not the engines)",
    )
    parser.add_argument("--show", action="store_true", help="show the window on screen (needs a display)")
    args = parser.parse_args(argv)
    if not args.show and "QT_QPA_PLATFORM" not in os.environ:
        os.environ["QT_QPA_PLATFORM"] = "offscreen"

    from PySide6.QtCore import Qt, QTimer

    from whistle_stop.gui.app import create_app

    from .scripting import open_window, run_end_loop

    engines = args.engines.split(",") if args.engines else pick_engines(4)
    if len(engines) < 4:
        print(f"note: only {len(engines)} engines are available here ({', '.join(engines)}); using those")
    app = create_app()
    with tempfile.TemporaryDirectory() as settings_dir:
        window = open_window(Path(settings_dir))
        setup = window.setup
        setup.set_model_spec("random:tiny")
        setup.set_engines(engines)
        setup.prompt.setPlainText("The lighthouse keeper")  # short: 1,000 new tokens must fit in 1,024
        setup.new_tokens.setValue(args.tokens)
        setup.repeats.setValue(1)
        setup.warmup.setValue(0)
        setup.threads.setValue(args.threads)
        setup.race.setChecked(True)
        setup.flush()

        lateness: list[float] = []  # while tokens stream
        whole: list[float] = []  # from Run to the end
        last = [time.perf_counter()]

        def tick() -> None:
            now = time.perf_counter()
            late = (now - last[0]) * 1e3 - args.interval_ms
            last[0] = now
            whole.append(late)
            if any(p.token_count for p in window.grid.panes.values()):
                lateness.append(late)

        probe = QTimer()
        probe.setTimerType(Qt.TimerType.PreciseTimer)
        probe.setInterval(int(args.interval_ms))
        probe.timeout.connect(tick)
        loop, outcome = run_end_loop(window.bench.job)
        if not window.start_run():
            print(f"cannot run: {setup.problem()}", file=sys.stderr)
            return 2
        started = time.perf_counter()
        last[0] = started
        probe.start()
        loop.exec()
        probe.stop()
        took = time.perf_counter() - started
        if "error" in outcome:
            print(f"run failed: {outcome['error']}", file=sys.stderr)
            return 2
        result = outcome["result"]
        counts = {n: p.token_count for n, p in window.grid.panes.items()}
        window.close()

    print(
        f"engines: {', '.join(engines)} (race mode, random:tiny, {args.tokens} new tokens each, "
        f"{args.threads or 'all'} thread(s) each); "
        f"run took {took:.1f} s"
    )
    print(
        "tokens streamed: "
        + ", ".join(f"{n} {c}" for n, c in counts.items())
        + "; statuses: "
        + ", ".join(f"{r.backend} {r.status}" for r in result.runs)
    )
    for label, values in (("while streaming", lateness), ("whole run", whole)):
        if values:
            p50, p99, worst = percentiles(values)
            print(
                f"event-loop lateness {label} ({len(values)} ticks of a {args.interval_ms:g} ms timer): "
                f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {worst:.1f} ms"
            )
    if not lateness:
        print("no tokens streamed: nothing measured", file=sys.stderr)
        return 2
    p99 = percentiles(lateness)[1]
    print(f"target p99 < {TARGET_P99_MS:g} ms: {'met' if p99 < TARGET_P99_MS else 'NOT met'}")
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())
