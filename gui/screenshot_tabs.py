"""Save screenshots of the Sweep and Quality tabs after a tiny real run (for the README):

    python -m gui.screenshot_tabs [docs/sweep.png] [docs/quality.png] [--engines hf,hf-int8]

Runs offscreen when there is no display. Settings and the sweep folder go to a temporary
folder. The sweep draws its bandwidth limit lines only if the probe's result is cached: this never runs it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from .scripting import offscreen_without_display


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_out", nargs="?", default="docs/sweep.png")
    parser.add_argument("quality_out", nargs="?", default="docs/quality.png")
    parser.add_argument("--engines", default="hf,hf-int8")
    parser.add_argument("--model", default="random:tiny")
    parser.add_argument("--prompts", default="16, 64, 256, 1000")
    parser.add_argument("--news", default="8, 32, 64")
    parser.add_argument("--size", default="1600x1000")
    parser.add_argument("--dock-height", type=int, default=560)
    parser.add_argument("--only", choices=("sweep", "quality"), help="take one of the two screenshots")
    args = parser.parse_args(argv)
    offscreen_without_display()

    from PySide6.QtCore import QEventLoop, Qt, QTimer

    from backends.results.bandwidth import cached_bandwidth
    from backends.worker.process import default_threads

    from .app import create_app
    from .scripting import open_window

    app = create_app()
    with tempfile.TemporaryDirectory() as scratch:
        window = open_window(Path(scratch), args.size)
        window.resizeDocks([window.charts_dock], [args.dock_height], Qt.Orientation.Vertical)
        setup = window.setup
        setup.set_model_spec(args.model)
        setup.set_engines(args.engines.split(","))
        setup.new_tokens.setValue(32)
        setup.repeats.setValue(3)
        setup.warmup.setValue(1)
        setup.flush()
        loop = QEventLoop()

        def wait(tab) -> object:
            """The tab's result, or None (and why, printed) if its job failed."""
            box: dict = {}
            tab.finished.connect(lambda value: (box.update(value=value), loop.quit()))
            tab.runner.failed.connect(lambda message: (print(message, file=sys.stderr), loop.quit()))
            loop.exec()
            return box.get("value")

        def settle_and_grab(widget, out: str) -> None:
            QTimer.singleShot(400, loop.quit)  # let the last layout and paint settle
            loop.exec()
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            widget.grab().save(out)
            print(f"wrote {out} ({widget.width()}x{widget.height()})")

        if args.only != "quality":
            sweep = window.sweep_tab
            window.tabs.setCurrentWidget(sweep)
            sweep.prompt_lengths.setText(args.prompts)
            sweep.new_lengths.setText(args.news)
            sweep.folder.setText(str(Path(scratch) / "sweep"))
            sweep.measure.setChecked(cached_bandwidth(default_threads()) is not None)  # never a probe here
            if not sweep.start():
                print(f"cannot sweep: {sweep.reason.text()}", file=sys.stderr)
                return 1
            if wait(sweep) is None:
                return 1
            settle_and_grab(window.charts_dock, args.sweep_out)
        if args.only != "sweep":
            quality = window.quality_tab
            window.tabs.setCurrentWidget(quality)
            quality.max_length.setValue(256)
            quality.stride.setValue(256)
            if not quality.start():
                print(f"cannot evaluate: {quality.reason.text()}", file=sys.stderr)
                return 1
            if wait(quality) is None:
                return 1
            settle_and_grab(window.charts_dock, args.quality_out)
        window.close()
        window.deleteLater()
        app.processEvents()
    return 0


if __name__ == "__main__":
    sys.exit(main())
