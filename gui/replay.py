"""Replay: the measured runs of a Fair session, side by side on their true time axis.

Each engine ran alone, so its run is timed without contention; replaying every engine's run
from t = 0 with each token at its recorded t_ms shows the race that was actually measured.
A replay only animates records: when it ends, finished or stopped, the window draws the records
again (its figures part-way through are of no record).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QElapsedTimer, QObject, QTimer, Signal

from whistle_stop.backends.results.records import RunRecord, TokenRecord, runs_of

from .event_queue import TICK_MS
from .live import LiveView, display_run, repeats_like, run_label


@dataclass
class _Lane:
    name: str
    t_ms: np.ndarray
    ids: list[int]
    texts: list[str]
    shown: int = 0


class Replayer(QObject):
    started = Signal()
    finished = Signal()

    def __init__(self, live: LiveView, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.live = live
        self.speed = 1.0
        self._lanes: list[_Lane] = []
        self._clock = QElapsedTimer()
        self._timer = QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self._tick)

    @property
    def running(self) -> bool:
        return self._timer.isActive()

    @property
    def completed(self) -> bool:
        """Whether the last replay played every token (False: it was stopped part-way)."""
        return all(lane.shown >= lane.t_ms.size for lane in self._lanes)

    @staticmethod
    def lanes_for(runs: list[RunRecord], tokens: list[TokenRecord]) -> dict[str, tuple[RunRecord, list[TokenRecord]]]:
        """The run each engine replays (the one its pane shows): measured runs with tokens only."""
        by_run: dict[str, list[TokenRecord]] = {}
        for token in tokens:
            by_run.setdefault(token.run_id, []).append(token)
        out = {}
        for name in dict.fromkeys(r.backend for r in runs):
            record = display_run(runs_of(runs, name), by_run)
            if by_run.get(record.run_id) and not record.is_warmup:
                out[name] = (record, sorted(by_run[record.run_id], key=lambda t: t.token_index))
        return out

    def start(self, runs: list[RunRecord], tokens: list[TokenRecord], speed: float = 1.0) -> bool:
        lanes = self.lanes_for(runs, tokens)
        if not lanes:
            return False
        self.stop()
        self.speed = speed
        self._lanes = []
        for name, (record, run_tokens) in lanes.items():
            if name not in self.live.grid.panes:
                continue
            self._lanes.append(
                _Lane(
                    name,
                    np.array([t.t_ms for t in run_tokens]),
                    [t.token_id for t in run_tokens],
                    [t.text for t in run_tokens],
                )
            )
            run = run_label(record.repeat, record.is_warmup, repeats_like(runs_of(runs, name), record))
            if record.status != "ok":  # a cancelled run replays as what it was
                run += f" · {record.status}"
            prefix = "replay" + (f" at {speed:g}×" if speed != 1 else "") + " · "
            self.live.start_trace(name, record.run_id, 0, run, total=record.new_tokens, record=record, prefix=prefix)
        self._clock.start()
        self._timer.start()
        self.started.emit()
        self._tick()
        return True

    def stop(self) -> None:
        if self._timer.isActive():
            self._timer.stop()
            self.finished.emit()

    def _tick(self) -> None:
        now_ms = self._clock.elapsed() * self.speed
        done = True
        for lane in self._lanes:
            upto = int(np.searchsorted(lane.t_ms, now_ms, side="right"))
            if upto > lane.shown:
                stamps = (lane.t_ms[lane.shown : upto] * 1e6).astype(np.int64).tolist()  # ns since the request
                self.live.feed(lane.name, lane.ids[lane.shown : upto], stamps, lane.texts[lane.shown : upto])
                lane.shown = upto
            done = done and lane.shown >= lane.t_ms.size
        self.live.flush()
        if done:
            self.stop()  # the window draws the records again (its `finished` handler)
