"""Perplexity through the workers, agreement and divergence logits, the quality files."""

import csv
import json
import math
import statistics
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests import fake_engines
from tests.fake_engines import VOCAB, ScriptedEngine
from whistle_stop.backends import registry
from whistle_stop.backends.engine import EngineOptions
from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.registry import EngineSpec
from whistle_stop.backends.results.agreement import agreement_detail
from whistle_stop.backends.results.export import write_results
from whistle_stop.backends.runs.bench import BenchConfig
from whistle_stop.backends.runs.perplexity import strided_windows
from whistle_stop.backends.runs.quality import DEFAULT_TEXT, QualitySession, QualitySettings
from whistle_stop.backends.runs.quality_files import read_quality, write_quality
from whistle_stop.backends.runs.quality_rows import quality_rows
from whistle_stop.backends.sources.tokenizer import encode
from whistle_stop.backends.worker.events import Failed, LogitsRequest, ScoreDone, ScoreRequest, TopLogits
from whistle_stop.backends.worker.outcomes import ScoreOutcome
from whistle_stop.backends.worker.process import Worker


class DivergingEngine(ScriptedEngine):
    """Greedy stream 100, 101, ... (position after the prompt); from `diverge_at` on it prefers 200 + position.
    The runner-up keeps a small margin, so the top-k of both engines is known exactly."""

    def __init__(self, name: str, options: EngineOptions, prompt_len: int = 4, diverge_at: int | None = None) -> None:
        super().__init__(name, options)
        self.prompt_len, self.diverge_at = prompt_len, diverge_at

    def _logits(self) -> np.ndarray:
        logits = np.zeros(VOCAB, np.float32)
        swapped = self.diverge_at is not None and self._position >= self.diverge_at
        logits[100 + self._position] = 1.0 if swapped else 3.0
        logits[200 + self._position] = 3.0 if swapped else 2.0
        return logits

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        self._position = max(0, len(token_ids) - self.prompt_len)  # teacher-forced prefixes land mid-stream
        return self._step(0.0)


def diverging_spec(name: str, **kwargs) -> EngineSpec:
    return EngineSpec(
        name=name, target="tests.test_quality:DivergingEngine", description="diverging test engine", engine_args=kwargs
    )


def test_strided_windows_follow_hfs_loop():
    ids = list(range(2500))
    w = strided_windows(ids, 1024, 512)
    assert [len(x) for x in w.windows] == [1024, 1024, 1024, 964]
    assert [x[0] for x in w.windows] == [0, 512, 1024, 1536]
    assert w.targets == (1024, 512, 512, 452)
    assert w.scored_tokens == len(ids) - 1  # every token but the first, exactly once
    assert strided_windows(ids[:300], 1024, 512).targets == (300,)
    with pytest.raises(Exception, match="stride"):
        strided_windows(ids, 100, 200)


def test_bundled_text_fills_more_than_two_windows():
    text = DEFAULT_TEXT.read_text(encoding="utf-8")
    assert len(text.split()) > 2000
    assert len(strided_windows(encode(text), 1024, 512).windows) > 2


def test_agreement_detail_share_and_first_divergence():
    d = agreement_detail([1, 2, 3, 4], [1, 2, 9, 4])
    assert (d.agree_tokens, d.first_divergence, d.compared) == (2, 2, 4)
    assert d.agree_share == 0.5 and d.identical_share == 0.75
    same = agreement_detail([5, 6], [5, 6])
    assert same.first_divergence is None and same.agree_share == 1.0


def _direct_hf_perplexity(folder, ids, max_length, stride):
    """HF's documented method with transformers' own loss, counting exactly the scored labels."""
    import torch
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(str(folder)).eval()
    nll, count, previous_end = 0.0, 0, 0
    with torch.inference_mode():
        for begin in range(0, len(ids), stride):
            end = min(begin + max_length, len(ids))
            target = end - previous_end
            window = torch.tensor([ids[begin:end]])
            labels = window.clone()
            labels[:, :-target] = -100
            loss = model(window, labels=labels).loss.item()  # mean over the shifted, unmasked labels
            scored = int((labels[0, 1:] != -100).sum())
            nll += loss * scored
            count += scored
            previous_end = end
            if end == len(ids):
                break
    return math.exp(nll / count), count


def test_hf_perplexity_in_its_worker_equals_transformers_loss(tiny_model):
    ids = encode(DEFAULT_TEXT.read_text(encoding="utf-8"))[:1500]
    windows = strided_windows(ids, 512, 256)
    direct: dict = {}  # computed here while the worker imports transformers in its own process
    thread = threading.Thread(target=lambda: direct.update(r=_direct_hf_perplexity(tiny_model.folder, ids, 512, 256)))
    thread.start()
    worker = Worker(registry.get("hf"), tiny_model, EngineOptions(threads=1))
    try:
        worker.start()
        outcome = worker.score(ScoreRequest("hf/ppl", windows.windows, windows.targets))
    finally:
        worker.close()
        thread.join()
    assert outcome.status == "ok", outcome.error
    expected, count = direct["r"]
    assert outcome.done.tokens == count == len(ids) - 1 and outcome.done.method == "forward_logits"
    assert math.exp(outcome.done.nll_sum / outcome.done.tokens) == pytest.approx(expected, rel=1e-4)


class StreamOnlyEngine(fake_engines.OwnLoopEngine):
    """A server's engine: tokens from its own loop only, no prefill, no forward pass (remote, vllm)."""

    def prefill(self, token_ids):
        raise NotImplementedError("a server engine generates in its own loop: use stream()")


def test_an_engine_with_no_logits_outside_its_loop_says_so(tiny_model):
    """Quality on a server engine read "NotImplementedError: ... use stream()" in its row."""
    from dataclasses import replace as replace_spec

    spec = replace_spec(fake_engines.spec("served"), target="tests.test_quality:StreamOnlyEngine")
    worker = Worker(spec, tiny_model, EngineOptions(threads=1))
    worker.start()
    try:
        outcome = worker.score(ScoreRequest("served/ppl", ((1, 2, 3),), (2,)))
    finally:
        worker.close()
    assert outcome.status == "error"
    assert outcome.error == "not available: served gives no logits outside its own loop"


def test_engines_without_forward_logits_are_teacher_forced(tiny_model):
    ids = list(range(1000, 1300))
    windows = strided_windows(ids, 64, 32)
    worker = Worker(fake_engines.spec("plain"), tiny_model, EngineOptions(threads=1))
    worker.start()
    try:
        outcome = worker.score(ScoreRequest("plain/ppl", windows.windows, windows.targets))
    finally:
        worker.close()
    # ScriptedEngine puts one logit of 1.0 at 100 + step; the text's ids never match it.
    assert outcome.done.method == "prefill+decode" and outcome.done.tokens == len(ids) - 1
    assert outcome.done.nll_sum == pytest.approx((len(ids) - 1) * math.log(VOCAB - 1 + math.e), rel=1e-9)


class OwnCacheEngine(ScriptedEngine):
    """No prefill (its cache lives inside its own loop, as CTranslate2's), but a scoring pass."""

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        raise NotImplementedError("keeps its KV cache inside its own loop")

    def forward_logits(self, token_ids: Sequence[int]) -> np.ndarray:
        logits = np.zeros((len(token_ids), VOCAB), np.float32)
        logits[:, 300] = 1.0
        logits[-1, 400 + len(token_ids)] = 5.0  # the next token after the whole prefix
        return logits


class NoLogitsEngine(ScriptedEngine):
    """Neither a prefill nor a scoring pass (OpenVINO GenAI's LLMPipeline)."""

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        raise NotImplementedError("keeps its KV cache inside its own loop")


def _top_after(model, engine_class: str, name: str) -> TopLogits | Failed:
    """One of this module's engines in a worker of its own: its top 2 tokens after (1, 2, 3)."""
    spec = EngineSpec(name=name, target=f"tests.test_quality:{engine_class}", description=engine_class)
    worker = Worker(spec, model, EngineOptions(threads=1))
    worker.start()
    try:
        return worker.top_logits(LogitsRequest(f"{name}/div", (1, 2, 3), 2))
    finally:
        worker.close()


def test_the_divergence_s_top_tokens_come_from_a_scoring_pass_where_an_engine_has_no_prefill(tiny_model):
    """CTranslate2 and the GenAI runtimes keep their cache inside their own loop: the top tokens after
    the common prefix are the last row of their whole-sequence logits, not a NotImplementedError."""
    answer = _top_after(tiny_model, "OwnCacheEngine", "own-cache")
    assert isinstance(answer, TopLogits) and answer.token_ids == (403, 300)

    answer = _top_after(tiny_model, "NoLogitsEngine", "own-loop-only")
    assert (
        isinstance(answer, Failed)
        and answer.message == "not available: own-loop-only gives no logits outside its own loop"
    )


@pytest.fixture(scope="module")
def quality_run(tiny_model, tmp_path_factory):
    text = tmp_path_factory.mktemp("text") / "short.txt"
    text.write_text("A small text to score, long enough for a few windows of sixteen tokens each. " * 3)
    specs = {"ref": diverging_spec("ref"), "fast": diverging_spec("fast", diverge_at=3)}
    config = BenchConfig(
        model="random:tiny",
        backends=("ref", "fast"),
        prompt_tokens=4,
        new_tokens=6,
        repeats=2,
        warmup=0,
        threads=1,
        reference="ref",
    )
    with registry.use(specs.values()):  # the session takes its engines' specs now
        session = QualitySession(config, QualitySettings(text_path=text, max_length=16, stride=8))
    result = session.run()
    return session, result


def test_quality_session_agreement_and_divergence_logits(quality_run):
    session, result = quality_run
    rows = {r.backend: r for r in session.quality.rows}
    assert rows["ref"].status == rows["fast"].status == "ok"
    assert rows["ref"].perplexity > 1 and rows["ref"].scored_tokens == session.windows.scored_tokens
    assert rows["ref"].ppl_diff == 0
    assert rows["fast"].ppl_diff == pytest.approx(rows["fast"].perplexity - rows["ref"].perplexity)
    assert (rows["fast"].agree_tokens, rows["fast"].first_divergence, rows["fast"].compared_tokens) == (3, 3, 6)
    assert rows["fast"].agree_share == pytest.approx(0.5) and rows["ref"].agree_share == 1.0
    assert rows["fast"].decode_tok_s > 0
    (div,) = session.quality.divergences
    assert (div.backend, div.reference, div.position) == ("fast", "ref", 3)
    assert div.reference_token["token_id"] == 103 and div.token["token_id"] == 203
    # Both workers were asked on the common prefix (prompt + 3 reference tokens).
    assert [t["token_id"] for t in div.reference_top[:2]] == [103, 203]
    assert [t["token_id"] for t in div.top[:2]] == [203, 103]
    assert len(div.top) == 5 and div.top[0]["logit"] == pytest.approx(3.0) and div.top[0]["logprob"] < 0
    assert "meaningless" in rows["ref"].note and session.quality.info["random_weights"]


def test_quality_files_round_trip(quality_run, tmp_path):
    session, result = quality_run
    paths = write_quality(tmp_path, result, session.quality)
    assert {p.name for p in paths} >= {"quality.csv", "divergence.json", "runs.csv", "environment.json"}
    rows, divergences = read_quality(tmp_path)
    assert [r["backend"] for r in rows] == ["ref", "fast"] and rows[1]["first_divergence"] == 3
    assert divergences[0]["top"][0]["token_id"] == 203
    # the speed's interval is the median's (the figure beside it), and its columns say so
    assert rows[1]["decode_tok_s_median_ci_low"] <= rows[1]["decode_tok_s"] <= rows[1]["decode_tok_s_median_ci_high"]
    assert not any("ci95" in key for key in rows[1])
    # beside it, its level and run count, as summary.csv gives them for the same runs
    with (tmp_path / "summary.csv").open(newline="", encoding="utf-8") as f:
        summary = {r["backend"]: r for r in csv.DictReader(f) if r["metric"] == "decode_tok_s"}
    for row in rows:
        assert row["decode_tok_s_n"] == int(summary[row["backend"]]["n"]) == 2
        assert row["decode_tok_s_median_ci_level"] == float(summary[row["backend"]]["median_ci_level"]) == 0.5
    env = json.loads((tmp_path / "environment.json").read_text())
    assert env["quality"]["stride"] == 8 and env["quality"]["reference"] == "ref"
    assert "meaningless" in env["quality"]["note"]
    assert env["threads_resolution"] == {"source": "--threads", "threads": 1}  # as bench's and sweep's say it


def test_a_perplexity_past_the_float_range_is_inf_and_the_other_rows_stay(quality_run):
    """A broken engine's huge logits (mean NLL above 709.8) overflow math.exp: its row says inf,
    not an OverflowError that loses every engine's row."""
    session, result = quality_run

    def outcome(name: str, nll_sum: float) -> ScoreOutcome:
        request = ScoreRequest(f"{name}/perplexity", ((1, 2),), (2,))
        return ScoreOutcome(request, ScoreDone(request.run_id, nll_sum, 10, 0.1, "forward_logits"))

    scores = {"ref": outcome("ref", 25.0), "fast": outcome("fast", 10 * 800.0)}
    rows = {r.backend: r for r in quality_rows(result, "ref", scores, 1, False)}
    assert rows["ref"].perplexity == pytest.approx(math.exp(2.5))
    assert rows["fast"].perplexity == math.inf and rows["fast"].ppl_diff_pct == math.inf


def test_the_report_shows_the_perplexity_change_signed_as_the_terminal_does(quality_run, tmp_path):
    """A rise of 0.22% read "0.22" in the report's table and "+0.22%" everywhere else."""
    from whistle_stop.backends.report.folder_data import load_folder
    from whistle_stop.backends.report.html import _quality_html

    session, result = quality_run
    rows = [replace(r) for r in session.quality.rows]
    rows[1].ppl_diff, rows[1].ppl_diff_pct = 427.199, 0.2153
    write_quality(tmp_path, result, replace(session.quality, rows=rows))
    page = _quality_html(load_folder(tmp_path))
    assert "+427.199 (+0.22%)" in page and "Δ vs reference %" not in page


def _bench_folder(quality_run, folder: Path) -> Path:
    """The fixture's bench as a results folder, as `bench` writes one."""
    session, result = quality_run
    write_results(folder, result.runs, result.tokens, result.environment)
    return folder


def _session_on(quality_run, bench_dir: Path) -> QualitySession:
    session, _ = quality_run
    specs = {"ref": diverging_spec("ref"), "fast": diverging_spec("fast", diverge_at=3)}
    settings = replace(session.settings, bench_dir=bench_dir)
    with registry.use(specs.values()):
        return QualitySession(session.config, settings)


def test_a_bench_folder_of_other_weights_is_refused(quality_run, tmp_path):
    """Another model's tokens/s and streams must not stand beside this model's perplexity."""
    folder = _bench_folder(quality_run, tmp_path / "bench")
    environment = json.loads((folder / "environment.json").read_text())
    environment["model"]["weights_sha256_16"] = "0123456789abcdef"
    (folder / "environment.json").write_text(json.dumps(environment))
    with pytest.raises(UsageError, match="--bench ran random:tiny \\(weights 0123456789abcdef\\)"):
        _session_on(quality_run, folder).prepare()


def test_a_bench_folder_without_runs_and_a_damaged_prompt_length_takes_this_run_s(quality_run, tmp_path):
    """A hand-edited prompt_tokens (here 10**7; 10**9 would exhaust memory) is not built into ids."""
    _, result = quality_run
    environment = json.loads(json.dumps(result.environment))
    environment["settings"]["prompt_tokens"] = 10**7
    write_results(tmp_path / "bench", [], [], environment)
    session = _session_on(quality_run, tmp_path / "bench")
    _, ids = session.prepare()
    assert len(ids) == result.runs[0].prompt_tokens


def test_a_sweep_folder_gives_the_speed_and_streams_of_its_first_cell_only(quality_run, tmp_path):
    """A second cell (other output length, 100x the tokens/s) is no repeat of the first: the row's
    tokens/s is the first cell's median, the same cell its agreement comes from."""
    _, result = quality_run
    other = [
        replace(r, run_id=f"{r.run_id}/n12", new_tokens=12, decode_tok_s=100 * r.decode_tok_s) for r in result.runs
    ]
    tokens = result.tokens + [replace(t, run_id=f"{t.run_id}/n12") for t in result.tokens]
    folder = tmp_path / "sweep"
    write_results(folder, result.runs + other, tokens, result.environment)
    session = _session_on(quality_run, folder)
    kept = session.run()
    for row in session.quality.rows:
        first_cell = [r.decode_tok_s for r in result.runs if r.backend == row.backend and not r.is_warmup]
        assert row.decode_tok_s == pytest.approx(statistics.median(first_cell))
    assert {r.new_tokens for r in kept.runs} == {6}  # the records written (and the verdict's) are that cell's


@pytest.mark.slow
def test_quality_command_end_to_end_with_default_windows(tmp_path):
    """`main.py quality` on random:tiny with the bundled text and HF's default 1024/512 windows."""
    import csv
    import subprocess
    import sys
    from pathlib import Path

    from whistle_stop.backends.sources.model_files import resolve_model

    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "quality"
    proc = subprocess.run(
        [
            sys.executable,
            "main.py",
            "quality",
            "--model",
            "random:tiny",
            "--backends",
            "hf,hf-int8",
            "--new-tokens",
            "16",
            "--repeats",
            "1",
            "--out",
            str(out),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "perplexity is meaningless on random weights" in proc.stdout
    with (out / "quality.csv").open() as f:
        rows = {r["backend"]: r for r in csv.DictReader(f)}
    ids = encode(DEFAULT_TEXT.read_text(encoding="utf-8"))
    expected, count = _direct_hf_perplexity(resolve_model("random:tiny").folder, ids, 1024, 512)
    assert int(rows["hf"]["scored_tokens"]) == count and float(rows["hf"]["windows"]) > 2
    assert float(rows["hf"]["perplexity"]) == pytest.approx(expected, rel=1e-4)
    assert rows["hf-int8"]["perplexity"] and rows["hf-int8"]["decode_tok_s"]
    assert (out / "speed_vs_quality.png").stat().st_size > 1000 and (out / "divergence.json").exists()


@pytest.mark.parametrize(
    ("content", "match"), [(b"", "has 0 token\\(s\\)"), (b"\xff\xfe bad", "cannot read the evaluation text")]
)
def test_an_empty_or_undecodable_text_is_one_line_before_the_model_resolves(tmp_path, monkeypatch, content, match):
    """The Quality tab used to load the model (a hub download, say) before saying the text was unusable."""
    import whistle_stop.backends.runs.quality as quality

    def resolve(*_args, **_kwargs):
        raise AssertionError("the model was resolved before the text was checked")

    monkeypatch.setattr(quality, "prepare_bench", resolve)
    text = tmp_path / "text.txt"
    text.write_bytes(content)
    config = BenchConfig(model="random:tiny", backends=("hf",), prompt_tokens=4, new_tokens=2, repeats=1, warmup=0)
    session = QualitySession(config, QualitySettings(text_path=text))
    with pytest.raises(UsageError, match=match):
        session.prepare()


def test_the_quality_table_s_agreement_is_the_summary_s_least_agreeing_run():
    """The verdict says the smallest agreement over the measured runs; the quality table used the
    first run's, so a run that parted earlier read 'agrees on 6' in one place and '3' in the other."""
    from tests.run_records import run_record
    from whistle_stop.backends.results.agreement import fill_agreement
    from whistle_stop.backends.results.records import TokenRecord
    from whistle_stop.backends.results.summary import summarize_backends
    from whistle_stop.backends.runs.result import BenchResult

    streams = {
        ("hf", 1): [1, 2, 3, 4, 5, 6],
        ("hf", 2): [1, 2, 3, 4, 5, 6],
        ("native", 1): [1, 2, 3, 4, 5, 6],
        ("native", 2): [1, 2, 3, 9, 9, 9],
        ("native", 3): [1, 2, 3, 4, 9, 9],
    }
    runs = [run_record(name, repeat, new_tokens=6) for name, repeat in streams]
    tokens = [
        TokenRecord(f"{name}/r{repeat}", name, repeat, False, i, t, "", float(i), None, "decode")
        for (name, repeat), ids in streams.items()
        for i, t in enumerate(ids)
    ]
    fill_agreement(runs, tokens, "hf")
    summary = {s.backend: s for s in summarize_backends(runs, tokens=tokens)}
    config = BenchConfig(model="m", backends=("hf", "native"), new_tokens=6)
    result = BenchResult(config, SimpleNamespace(is_random=False), [1], runs, tokens)
    row = {r.backend: r for r in quality_rows(result, "hf", {}, windows=0, cancelled=False)}["native"]
    assert summary["native"].agree_tokens == row.agree_tokens == 3
    assert row.first_divergence == 3


def test_quality_with_no_plots_writes_the_records_and_no_chart(tmp_path, monkeypatch, capsys):
    """--no-plots, as sweep's: the records without speed_vs_quality.png (nor one an earlier run left), and
    no Qt started for it."""
    from whistle_stop.backends.cli.main import main

    def no_render(*_args, **_kwargs):
        raise AssertionError("a chart was drawn with --no-plots")

    monkeypatch.setattr("whistle_stop.backends.report.plots.render_png", no_render)
    monkeypatch.setattr("whistle_stop.backends.cli.charts.qt_platform_problem", no_render)
    out = tmp_path / "quality"
    out.mkdir()
    (out / "speed_vs_quality.png").write_bytes(b"an earlier run's chart")
    args = ["--model", "random:tiny", "--backends", "null", "--repeats", "1", "--warmup", "0", "--threads", "1"]
    windows = ["--new-tokens", "3", "--max-length", "32", "--stride", "32"]
    code = main(["quality", *args, *windows, "--out", str(out), "--no-plots"])
    err = capsys.readouterr().err
    assert code == 0, err
    for name in ("quality.csv", "divergence.json", "runs.csv", "tokens.csv", "summary.csv", "environment.json"):
        assert (out / name).exists(), name
    assert not list(out.glob("*.png")) and "charts" not in err
