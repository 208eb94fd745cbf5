"""The GUI form built from an engine's typed settings: fields, secrets, saved parameters."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from whistle_stop.backends.engines.remote_options import RemoteOptions  # noqa: E402
from whistle_stop.gui.engine_options_form import EngineOptionsForm  # noqa: E402

pytestmark = pytest.mark.gui
SECRET = "sk-form-test-0123456789"


def test_form_round_trip_keeps_everything_but_the_secret(qtbot, monkeypatch):
    monkeypatch.delenv("WHISTLE_FORM_KEY", raising=False)
    form = EngineOptionsForm(RemoteOptions)
    qtbot.addWidget(form)
    assert form.title() == "Remote server" and list(form.edits) == ["url", "model", "api_key", "api_key_env"]
    assert form.edits["api_key"].echoMode() == form.edits["api_key"].EchoMode.Password
    assert form.edits["url"].placeholderText() == "http://127.0.0.1:8000/v1"
    assert "vLLM" in form.edits["url"].toolTip()
    assert form.problem().startswith("the remote engine needs its server's URL")

    form.edits["url"].setText("  http://h:8000/v1 ")
    form.edits["model"].setText("gpt2")
    form.edits["api_key"].setText(SECRET)
    assert form.settings() == RemoteOptions(url="http://h:8000/v1", model="gpt2", api_key=SECRET)
    assert form.hint.text() == "the key is kept in memory for this session only"
    form.edits["api_key_env"].setText("WHISTLE_FORM_KEY")
    assert "not both" in form.problem()
    form.edits["api_key"].clear()
    assert form.problem() == "" and form.settings().api_key is None
    assert form.hint.text() == "$WHISTLE_FORM_KEY is not set in this environment: no key will be sent"

    form.edits["api_key"].setText(SECRET)
    params = form.params()  # the keys saved settings have always used
    assert params == {"url": "  http://h:8000/v1 ", "model": "gpt2", "key_env": "WHISTLE_FORM_KEY"}
    again = EngineOptionsForm(RemoteOptions)
    qtbot.addWidget(again)
    again.set_params({**params, "api_key": SECRET})  # a secret in saved settings is never loaded
    assert again.params() == params and again.edits["api_key"].text() == ""
    again.set_params("not a dict")
    assert again.params() == params


def test_the_speculative_engines_settings_come_as_a_form_with_numbers_from_text(qtbot):
    from whistle_stop.backends.engines.speculative_options import SpeculativeOptions

    form = EngineOptionsForm(SpeculativeOptions)
    qtbot.addWidget(form)
    assert form.title() == "Speculative decoding" and list(form.edits) == ["target", "draft", "draft_model", "k"]
    assert form.settings() == SpeculativeOptions() and form.problem() == ""
    form.edits["draft"].setText("native-int4")
    form.edits["k"].setText(" 6 ")
    assert form.settings() == SpeculativeOptions(draft="native-int4", k=6)
    form.edits["k"].setText("lots")
    assert "--spec-k must be" in form.problem()
