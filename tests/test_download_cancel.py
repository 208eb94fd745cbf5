"""Cancelling a hub download: a fake `snapshot_download` drives the tqdm class it is given, so
no network is needed. A cancel stops it with DownloadCancelled, and `auto` does not mistake
that for an unreachable hub (no fallback to random:gpt2)."""

from __future__ import annotations

import threading

import huggingface_hub
import pytest
from huggingface_hub.errors import LocalEntryNotFoundError

import whistle_stop.backends.sources.model_files as models
from whistle_stop.backends.errors import ModelError
from whistle_stop.backends.sources.hub import DownloadCancelled, fetch_safetensors_model
from whistle_stop.backends.sources.model_files import resolve_model


class FakeHub:
    """Not cached; a 'download' of 100 chunks that sets `cancel` after `cancel_at` of them."""

    def __init__(
        self, cancel: threading.Event | None, cancel_at: int | None = 10, wrap: bool = False, disable: bool = False
    ) -> None:
        self.cancel, self.cancel_at, self.wrap, self.disable = cancel, cancel_at, wrap, disable
        self.chunks = 0
        self.network_calls = 0

    def __call__(self, repo_id, allow_patterns=None, local_files_only=False, tqdm_class=None, **kwargs):
        if local_files_only:
            raise LocalEntryNotFoundError("not in the cache")
        self.network_calls += 1
        bar = tqdm_class(total=100, desc="model.safetensors", disable=self.disable)
        try:
            for index in range(100):
                if index == self.cancel_at and self.cancel is not None:
                    self.cancel.set()  # as if the user pressed Cancel during this chunk
                bar.update(1)
                self.chunks += 1
        except DownloadCancelled as exc:
            if self.wrap:  # the hub client may re-raise its own kind of error
                raise RuntimeError(f"download thread failed: {exc}") from exc
            raise
        raise AssertionError("the download was not stopped")


@pytest.fixture
def fake_hub(monkeypatch):
    def install(**kwargs) -> FakeHub:
        hub = FakeHub(**kwargs)
        monkeypatch.setattr(huggingface_hub, "snapshot_download", hub)
        return hub

    return install


def test_cancel_stops_the_download_at_its_next_progress_report(fake_hub):
    cancel = threading.Event()
    hub = fake_hub(cancel=cancel, cancel_at=10)
    reports: list[tuple[str, float | None]] = []
    with pytest.raises(DownloadCancelled, match="cancelled"):
        fetch_safetensors_model("gpt2", lambda message, fraction=None: reports.append((message, fraction)), cancel)
    assert hub.chunks == 10  # the 11th update raised
    assert reports and reports[-1][0] == "downloading model.safetensors"
    assert issubclass(DownloadCancelled, ModelError)  # callers that catch ModelError still do


def test_a_bar_disabled_without_a_terminal_still_reports_and_cancels(fake_hub):
    """huggingface_hub disables its bars when stderr is not a terminal (a GUI started from a
    desktop): progress is still reported, and Cancel still stops the download."""
    cancel = threading.Event()
    fake_hub(cancel=cancel, cancel_at=40, disable=True)
    reports: list[tuple[str, float | None]] = []
    with pytest.raises(DownloadCancelled):
        fetch_safetensors_model("gpt2", lambda message, fraction=None: reports.append((message, fraction)), cancel)
    assert reports[-1] == ("downloading model.safetensors", 0.4)  # the label survives a disabled bar


def test_a_cancel_wrapped_by_the_hub_client_is_still_a_cancel(fake_hub):
    cancel = threading.Event()
    fake_hub(cancel=cancel, cancel_at=3, wrap=True)
    with pytest.raises(DownloadCancelled):
        fetch_safetensors_model("gpt2", None, cancel)  # cancel alone installs the checking tqdm


def test_already_cancelled_never_reaches_the_network(fake_hub):
    cancel = threading.Event()
    cancel.set()
    hub = fake_hub(cancel=None)
    with pytest.raises(DownloadCancelled):
        resolve_model("distilgpt2", cancel=cancel)
    assert hub.network_calls == 0


def test_auto_does_not_fall_back_to_random_weights_when_cancelled(fake_hub, monkeypatch):
    def no_fallback(spec, asked):
        raise AssertionError("a cancelled download must not fall back to random:gpt2")

    monkeypatch.setattr(models, "_random", no_fallback)
    cancel = threading.Event()
    fake_hub(cancel=cancel, cancel_at=5)
    with pytest.raises(DownloadCancelled):
        resolve_model("auto", lambda *args: None, cancel)


def test_auto_still_falls_back_when_the_hub_fails(fake_hub, monkeypatch):
    """Without a cancel, a failing download is 'unreachable' as before: random:gpt2 with a notice."""
    monkeypatch.setattr(
        models, "_random", lambda spec, asked: models.ModelFiles(asked, spec, models.Path("."), "random", "x", {})
    )

    def unreachable(repo_id, local_files_only=False, **kwargs):
        if local_files_only:
            raise LocalEntryNotFoundError("not in the cache")
        raise OSError("network is unreachable")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    model = resolve_model("auto", cancel=threading.Event())
    assert model.model_id == "random:gpt2" and "network is unreachable" in model.notice
