"""A saved session reopened in the window: its panes show what the records say, before and after a
Replay (a speculative engine's ms/token, a cancelled repeat beside a complete one), offscreen."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pyqtgraph")
pytest.importorskip("pytestqt")

from tests.run_records import run_record  # noqa: E402
from whistle_stop.backends.results.export import write_results  # noqa: E402
from whistle_stop.backends.results.records import fill_metrics, token_records  # noqa: E402
from whistle_stop.backends.worker.events import Token  # noqa: E402
from whistle_stop.gui.live import record_status  # noqa: E402

pytestmark = pytest.mark.gui
MS = 1_000_000


def recorded(backend: str, repeat: int, stamps_ms: list[float], **fields):
    """A record and its tokens from token times (ms since the request), as a worker's would be."""
    tokens = [Token(f"{backend}/r{repeat}", i, 100 + i, "x", int(t * MS)) for i, t in enumerate(stamps_ms)]
    record = run_record(backend, repeat, **fields)
    fill_metrics(record, 0, tokens, 1_000_000, decoded_tokens=fields.get("decoded_tokens"))
    return record, token_records(record.run_id, backend, repeat, False, 0, tokens)


def burst_stamps(first: int, passes: int, per_pass: int, pass_ms: float) -> list[float]:
    """`first` tokens together at 10 ms (the prefill's pass), then `per_pass` together every `pass_ms`."""
    out = [10.0] * first
    for p in range(1, passes + 1):
        out += [10.0 + p * pass_ms] * per_pass
    return out


@pytest.fixture
def window(qtbot, tmp_path):
    from whistle_stop.gui.main_window import MainWindow
    from whistle_stop.gui.settings import settings_in

    window = MainWindow(settings=settings_in(tmp_path / "settings"))
    qtbot.addWidget(window)
    window.show()
    return window


def test_a_speculative_engines_line_is_its_records_after_reopen_and_replay(qtbot, window, tmp_path):
    # 4 tokens with the first pass, then 9 passes of 4 every 40 ms: 36 decoded in 360 ms, 10 ms/token
    stamps = burst_stamps(4, 9, 4, 40.0)
    spec, spec_tokens = recorded("spec", 1, stamps, multi_token_steps=True, new_tokens=40, decoded_tokens=36)
    plain, plain_tokens = recorded("plain", 1, [10.0 + 5 * i for i in range(40)], new_tokens=40)
    assert spec.ms_per_token == pytest.approx(10.0) and spec.decode_tok_s == pytest.approx(100.0)
    write_results(tmp_path / "s", [spec, plain], spec_tokens + plain_tokens, {"reference": "plain"})

    with qtbot.waitSignal(window.session_loaded):
        assert window.open_session(tmp_path / "s")
    panes = window.grid.panes
    assert panes["spec"].status.text() == record_status(spec, 1)
    assert "10.00 ms/token" in panes["spec"].status.text() and "100 tok/s" in panes["spec"].status.text()

    seen = []  # the live line as Replay draws it: never a gap inside a burst (0.00 ms/token)
    window.replayer._timer.timeout.connect(lambda: seen.append(window.grid.panes["spec"].status.text()))
    with qtbot.waitSignal(window.replayer.finished, timeout=30_000):
        assert window.replay(speed=8)
    per_token = [float(m.group(1)) for line in seen if (m := re.search(r"([\d.]+) ms/token", line))]
    assert per_token and all(v == pytest.approx(10.0, abs=1.5) for v in per_token), seen
    panes = window.grid.panes
    assert panes["spec"].status.text() == record_status(spec, 1)
    assert panes["plain"].status.text() == record_status(plain, 1)


def test_a_cancelled_repeat_is_not_shown_over_a_complete_one(qtbot, window, tmp_path):
    ok, ok_tokens = recorded("hf", 1, [10.0 + 2 * i for i in range(20)])
    cut, cut_tokens = recorded("hf", 2, [10.0 + 2 * i for i in range(7)], status="cancelled")
    write_results(tmp_path / "s", [ok, cut], ok_tokens + cut_tokens, {"reference": "hf"})
    with qtbot.waitSignal(window.session_loaded):
        assert window.open_session(tmp_path / "s")
    pane = window.grid.panes["hf"]
    assert pane.token_count == 20 and pane.status.text() == record_status(ok, 2)
    assert pane.status.text().startswith("run 1 of 2  ·  TTFT")  # one run's figures, not the medians
    assert window.replayer.lanes_for(window.view.data.runs, window.view.data.tokens)["hf"][0].run_id == "hf/r1"

    only_cut, only_tokens = recorded("solo", 1, [10.0 + 2 * i for i in range(7)], status="cancelled")
    write_results(tmp_path / "c", [only_cut], only_tokens, {"reference": "solo"})
    with qtbot.waitSignal(window.session_loaded):
        assert window.open_session(tmp_path / "c")
    assert window.grid.panes["solo"].tag.text() == "cancelled"  # not "reference": its run was cut short


def test_a_pane_shows_a_typical_run_and_says_which(qtbot, window, tmp_path):
    """A slow round's run is not what a pane shows or Replay plays, whether the slow round hit its
    TTFT (run 1, whose ms/token is the lower median) or its ms/token (run 4)."""
    records, tokens = [], []
    for repeat, ttft_ms, gap_ms in ((1, 300.0, 5.0), (2, 10.0, 4.0), (3, 10.0, 6.0), (4, 10.0, 30.0)):
        record, run_tokens = recorded("hf", repeat, [ttft_ms + gap_ms * i for i in range(20)])
        records.append(record)
        tokens += run_tokens
    write_results(tmp_path / "s", records, tokens, {"reference": "hf"})
    with qtbot.waitSignal(window.session_loaded):
        assert window.open_session(tmp_path / "s")
    status = window.grid.panes["hf"].status.text()
    assert status == record_status(records[2], 4) and status.startswith("run 3 of 4  ·  TTFT 10.0 ms  ·  6.00 ms/token")
    assert window.replayer.lanes_for(records, tokens)["hf"][0].run_id == "hf/r3"


def test_a_streamed_speculative_run_counts_its_first_pass_as_its_record_does():
    """hf-assisted's first pass makes several tokens (its StampedTokens share step 0): the live line
    counts the tokens after it, as fill_metrics counts SpeculationStats.tokens."""
    from whistle_stop.backends.results.stats import decode_rate, run_metrics
    from whistle_stop.gui.live import Trace

    stamps = burst_stamps(4, 9, 4, 40.0)
    trace = Trace("r", 0, 40)
    trace.steps.extend(index // 4 for index in range(len(stamps)))
    assert trace.first_step_tokens == 4
    metrics = run_metrics(0, [int(t * MS) for t in stamps])
    per_token, tok_s = decode_rate(metrics, True, metrics.tokens - trace.first_step_tokens)
    record, _ = recorded("spec", 1, stamps, multi_token_steps=True, new_tokens=40, decoded_tokens=36)
    assert per_token == pytest.approx(record.ms_per_token) and tok_s == pytest.approx(record.decode_tok_s)

    one_per_step = Trace("r", 0, 40)
    one_per_step.steps.extend([None] * 5)
    assert one_per_step.first_step_tokens == 1


def test_a_profile_folder_s_verdict_names_no_slow_round_as_its_report_does(qtbot, window, tmp_path):
    """A profile runs each engine alone: its repeats are no rounds of the machine."""
    import json

    from tests.run_records import rounds
    from whistle_stop.backends.report.folder_data import folder_verdict, load_folder
    from whistle_stop.backends.results.verdict import CaveatKind

    runs = rounds({2: ("hf", "native", "onnx")})
    for name, extra in (("bench", None), ("profile", {"engines": [{"engine": "hf"}]})):
        write_results(tmp_path / name, runs, [], {"reference": "hf"})
        if extra:
            (tmp_path / name / "profile.json").write_text(json.dumps(extra))
        with qtbot.waitSignal(window.session_loaded):
            assert window.open_session(tmp_path / name)
        kinds = {c.kind for c in window.view.data.verdict().caveats}
        report = folder_verdict(data := load_folder(tmp_path / name), [data])
        assert kinds == {c.kind for c in report.caveats}
        assert (CaveatKind.SLOW_ROUND in kinds) == (name == "bench")


def test_the_histogram_says_what_lies_off_its_axis(qtbot):
    from whistle_stop.gui.charts import HistogramChart

    chart = HistogramChart()
    qtbot.addWidget(chart)
    chart.set_engines({"a": "#336699"})
    gaps = np.concatenate([np.full(999, 10.0) + np.linspace(0, 1, 999), [500.0, 900.0]])
    chart.set_data({"a": gaps})
    title = chart.plotItem.titleLabel.text
    assert "gaps over" in title and "not drawn" in title
    counts = chart.curves["a"].getData()[1]
    assert counts.sum() == gaps.size - int(title.split("·")[1].split()[0])  # none piled into the last bin
    chart.set_data({"a": np.full(10, 10.0)})
    assert chart.plotItem.titleLabel.text == HistogramChart.TITLE


def test_a_server_streaming_several_tokens_an_event_reads_per_decoded_token_while_it_streams(window):
    """`remote` says nothing at load about its steps; its tokens' steps (one per server event) do:
    the live line times it per decoded token as its record will (4 tokens every 40 ms: 10 ms/token),
    never by the ~0 gap inside an event."""
    from whistle_stop.backends.sampling import SamplingParams
    from whistle_stop.backends.worker.events import BackendEvent, RunContext, RunRequest, RunStarted, Token

    window.view.show_engines(["remote"])
    window.live.begin("prompt", "remote", True, 1)
    stamps = burst_stamps(4, 9, 4, 40.0)
    batch = [
        BackendEvent("remote", RunRequest("remote/r1", (1, 2), 40, SamplingParams()), RunContext(1, False)),
        BackendEvent("remote", RunStarted("remote/r1", 0)),
    ]
    batch += [
        BackendEvent("remote", Token("remote/r1", i, 100 + i, "x", int(t * MS) + i, step=i // 4))
        for i, t in enumerate(stamps)
    ]
    window.live.apply(batch)
    assert "10.00 ms/token" in window.grid.panes["remote"].status.text()


def test_an_opened_session_s_settings_are_the_setup_s(qtbot, window, tmp_path):
    """Run after Open runs what made the records: the engines, the prompt, the generation settings
    and each engine's own settings come from environment.json."""
    from whistle_stop.backends.engines.native_options import NativeOptions
    from whistle_stop.backends.runs.config import BenchConfig
    from whistle_stop.backends.sampling import SamplingParams

    config = BenchConfig(
        model="random:tiny",
        backends=("native-int8", "numpy"),
        prompt="The session's own prompt",
        new_tokens=37,
        sampling=SamplingParams(decoding="sample", temperature=0.7, top_k=11, top_p=0.9, seed=5),
        repeats=4,
        warmup=2,
        engine_options={"native-int8": NativeOptions(kv="int8")},
    )
    runs = [run_record(name, 1) for name in config.backends]
    write_results(tmp_path / "s", runs, [], {"reference": "numpy", "settings": config.as_dict()})
    window.setup.set_engines(["hf"])
    with qtbot.waitSignal(window.session_loaded):
        assert window.open_session(tmp_path / "s")
    setup = window.setup
    assert sorted(setup.selected_engines()) == ["native-int8", "numpy"]
    assert setup.model_spec() == "random:tiny" and setup.prompt.toPlainText() == "The session's own prompt"
    assert (setup.new_tokens.value(), setup.repeats.value(), setup.warmup.value()) == (37, 4, 2)
    assert setup.sampling() == config.sampling
    assert setup.config().engine_options["native-int8"] == NativeOptions(kv="int8")


def test_a_session_with_garbled_settings_opens_and_leaves_the_setup_as_it_is(qtbot, window, tmp_path):
    settings = {"threads": "abc", "new_tokens": True, "model": 12, "prompt": 7, "backends": [5, "numpy"]}
    settings |= {"sampling": {"decoding": "weird", "top_k": 1.5}, "engine_options": {"numpy": 3}}
    runs = [run_record("numpy", 1)]
    write_results(tmp_path / "s", runs, [], {"reference": "numpy", "settings": settings})
    window.setup.set_engines(["hf"])
    threads = window.setup.threads.value()
    with qtbot.waitSignal(window.session_loaded):
        assert window.open_session(tmp_path / "s")
    assert window.setup.selected_engines() == ["numpy"] and window.setup.threads.value() == threads


@pytest.mark.parametrize(
    "environment, why",
    [
        ({"settings": "x"}, "settings should be an object, not str"),  # was AttributeError in from_folder
        ({"settings": {"sampling": [1]}}, "settings.sampling should be an object, not list"),
        ({"model": [1]}, "model should be an object, not list"),
    ],
)
def test_a_damaged_environment_is_one_message_and_the_screen_stays(qtbot, window, tmp_path, environment, why):
    record, tokens = recorded("plain", 1, [10.0, 15.0])
    write_results(tmp_path / "s", [record], tokens, {})
    (tmp_path / "s" / "environment.json").write_text(json.dumps(environment))
    assert not window.open_session(tmp_path / "s")
    assert why in window.messages.last_error


def test_a_session_with_absurd_settings_opens(qtbot, window, tmp_path, monkeypatch):
    import whistle_stop.gui.session_data as session_data

    built = session_data.prompt_of_length

    def guarded(n_tokens: int) -> list[int]:
        assert n_tokens <= 1024, "a list of 10**9 token ids: the window runs out of memory"
        return built(n_tokens)

    monkeypatch.setattr(session_data, "prompt_of_length", guarded)
    record, tokens = recorded("plain", 1, [10.0, 15.0])
    settings = {"prompt_tokens": 10**9, "threads": 10**12, "repeats": 2**40, "sampling": {"seed": 2**64}}
    write_results(tmp_path / "s", [record], tokens, {"settings": settings})
    with qtbot.waitSignal(window.session_loaded):  # was OverflowError from a spin box, and the memory
        assert window.open_session(tmp_path / "s")
    assert window.setup.threads.value() == window.setup.threads.maximum()


@pytest.mark.parametrize("profile", ['{"engines": [{}]}', '{"engines": 5}', '{"engines": [{"decode": 3}]}'])
def test_a_damaged_profile_json_opens_as_a_plain_session(qtbot, window, tmp_path, profile):
    record, tokens = recorded("plain", 1, [10.0, 15.0])
    write_results(tmp_path / "s", [record], tokens, {})
    (tmp_path / "s" / "profile.json").write_text(profile)
    with qtbot.waitSignal(window.session_loaded):  # was TypeError from EngineProfile(**{})
        assert window.open_session(tmp_path / "s")


def _on_screen(window) -> dict[str, tuple]:
    """Each pane's tag, line, text and curves (latency and race) as drawn."""
    out = {}
    for name, pane in window.grid.panes.items():
        curves = tuple(
            tuple(np.asarray(a if a is not None else []).tolist() for a in chart.curves[name].getData())
            for chart in (window.latency, window.race)
        )
        out[name] = (pane.tag.text(), pane.status.text(), pane.generated_text(), curves)
    return out


def test_a_replay_stopped_part_way_leaves_the_whole_recorded_runs_on_screen(qtbot, window, tmp_path):
    """Stopping a replay (Esc) restores what the records show: its part-way figures ("12/40 tokens",
    a TTFT-only line, half curves) are of no record."""
    records, tokens = [], []
    for name, gap_ms in (("hf", 100.0), ("onnx", 60.0)):  # 4 and 2.4 s: a stop comes part-way
        for repeat in (1, 2, 3):
            stamps = [10.0 + (gap_ms + repeat) * i for i in range(40)]
            record, run_tokens = recorded(name, repeat, stamps, new_tokens=40)
            records.append(record)
            tokens += run_tokens
    write_results(tmp_path / "s", records, tokens, {"reference": "hf"})
    with qtbot.waitSignal(window.session_loaded):
        assert window.open_session(tmp_path / "s")
    before = _on_screen(window)
    assert before["hf"][1] == record_status(records[1], 3)  # run 2 of 3, the typical one

    assert window.replay(speed=1.0)
    qtbot.waitUntil(lambda: 0 < window.grid.panes["hf"].token_count < 40, timeout=10_000)
    window.cancel()
    assert not window.replayer.running and "Replay stopped" in window.state.text()
    assert _on_screen(window) == before
    for chart in (window.latency, window.race):  # fitted to the whole runs again, not growing with a stream
        assert chart.plotItem.vb.autoRangeEnabled() == [True, True]


def test_a_replayed_cancelled_run_keeps_saying_so(qtbot, window, tmp_path):
    """A pane whose run was cancelled, or whose engine never ran, says so before, during and after a
    Replay (a finished replay tagged every pane it drew "replayed", as if its run had been whole)."""
    from whistle_stop.gui.session_data import SessionData

    ok, ok_tokens = recorded("hf", 1, [10.0 + 2 * i for i in range(20)])
    cut, cut_tokens = recorded("onnx", 1, [10.0 + 30 * i for i in range(7)], status="cancelled")
    data = SessionData(
        [ok, cut], ok_tokens + cut_tokens, backends=["hf", "onnx", "numpy"], reference="hf", finished=True
    )
    data.cancelled = True
    window.view.show_engines(data.backends)  # as a live run cancelled before numpy's turn leaves it
    window.live.begin(data.prompt, data.reference, data.greedy, 1)
    window.view.show(data)
    tags = {name: pane.tag.text() for name, pane in window.grid.panes.items()}
    assert tags == {"hf": "reference", "onnx": "cancelled", "numpy": "not run"}

    with qtbot.waitSignal(window.replayer.finished, timeout=30_000):
        assert window.replay(speed=0.5)  # 0.4 s
        assert window.grid.panes["onnx"].tag.text() == "replay at 0.5× · run 1 of 1 · cancelled"
    assert window.replayer.completed and window.state.text() == "Replay finished"
    panes = window.grid.panes  # (a replay's panes are new ones)
    assert {name: pane.tag.text() for name, pane in panes.items()} == tags
    assert panes["onnx"].status.text() == record_status(cut, 1) and panes["onnx"].token_count == 7
