"""Typed engine settings: CLI flags built from the dataclass, validation, and secrets kept out
of records (the GUI form's round trip is in test_engine_options_form.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import pytest

from whistle_stop.backends import registry
from whistle_stop.backends.cli.common import config_from_args
from whistle_stop.backends.cli.main import COMMANDS
from whistle_stop.backends.cli.parser import build_parser
from whistle_stop.backends.engine_settings import EngineSettings, option
from whistle_stop.backends.engines.remote_options import RemoteOptions
from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.registry import EngineSpec
from whistle_stop.backends.runs.config import BenchConfig

ROOT = Path(__file__).resolve().parent.parent
SECRET = "sk-options-test-0123456789"


@dataclass(frozen=True)
class ToySettings(EngineSettings):
    CLI_TITLE: ClassVar[str] = "the toy engine"

    host: str = option("", label="Host", flag="--toy-host", required=True, placeholder="toy.local")
    port: int | None = option(None, label="Port", flag="--toy-port", help="a port")
    ratio: float | None = option(None, flag="--toy-ratio", cli_default=0.5)
    password: str | None = option(None, label="Password", secret=True)
    token_s: float | None = option(None)

    def with_token_timeout(self, token_s: float) -> ToySettings:
        return replace(self, token_s=token_s)


@pytest.fixture
def toy_engine(monkeypatch):
    spec = EngineSpec(
        name="toy",
        target="tests.fake_engines:ScriptedEngine",
        description="toy",
        options="tests.test_engine_options:ToySettings",
    )
    monkeypatch.setitem(registry.ENGINES, "toy", spec)


def _config(*args: str) -> BenchConfig:
    return config_from_args(build_parser().parse_args(["bench", *args]))


def test_flags_come_from_the_dataclass_with_types_and_defaults(toy_engine, capsys):
    config = _config("--backends", "hf,toy", "--toy-host", "h", "--toy-port", "8080", "--timeout", "30")
    settings = config.engine_options["toy"]
    assert settings == ToySettings(host="h", port=8080, ratio=0.5, token_s=30.0)
    assert set(config.engine_options) == {"toy"}  # hf has no settings
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--help"])
    help_text = capsys.readouterr().out
    assert "the toy engine" in help_text and "--toy-port" in help_text and "--password" not in help_text
    with pytest.raises(UsageError, match=r"^the toy backend needs --toy-host \(e.g. toy.local\)$"):
        _config("--backends", "toy")


def test_settings_are_built_only_for_selected_engines(toy_engine):
    assert _config("--backends", "hf").engine_options == {}


def test_a_flag_for_no_selected_engine_is_refused_not_dropped(toy_engine):
    # native-spec's target and draft keep their own KV cache: --native-kv would change nothing
    with pytest.raises(UsageError, match=r"^--native-kv is for native, native-bf16, native-int8, native-int4; none"):
        _config("--backends", "native-spec", "--native-kv", "int8")
    with pytest.raises(UsageError, match=r"^--remote-url is for remote; none of them is among the engines to run$"):
        _config("--backends", "hf", "--remote-url", "http://h/v1")
    with pytest.raises(UsageError, match=r"^--toy-ratio is for toy;"):  # a flag with a default, given another value
        _config("--backends", "hf", "--toy-ratio", "0.7")
    # defaults (--remote-api-key-env's OPENAI_API_KEY, --toy-ratio's 0.5) are not the user's choice
    assert _config("--backends", "hf", "--toy-ratio", "0.5").engine_options == {}
    assert _config("--backends", "native", "--native-kv", "int8").engine_options["native"].kv == "int8"


def test_remote_flags_keep_their_names_defaults_and_message():
    with pytest.raises(UsageError, match=r"^the remote backend needs --remote-url \(e.g. http://127.0.0.1:8000/v1\)$"):
        _config("--backends", "remote")
    settings = _config("--backends", "remote", "--remote-url", "http://h:1/v1").engine_options["remote"]
    assert settings == RemoteOptions(url="http://h:1/v1", model="", api_key_env="OPENAI_API_KEY", timeout_s=108.0)
    # what environment.json and sweep fingerprints said before the settings were typed
    assert settings.record() == {"url": "http://h:1/v1", "model": "", "api_key_env": "<redacted>", "timeout_s": 108.0}
    named = _config(
        "--backends", "remote", "--remote-url", "http://u/v1", "--remote-model", "m", "--remote-api-key-env", "K"
    )
    assert (named.engine_options["remote"].model, named.engine_options["remote"].api_key_env) == ("m", "K")
    # settings an engine cannot run with are one line before anything starts, as the window checks them
    with pytest.raises(UsageError, match=r"^remote: the remote URL must start with http:// or https://"):
        _config("--backends", "remote", "--remote-url", "u")


def test_secrets_stay_out_of_records_and_repr():
    config = BenchConfig(
        backends=("remote",), engine_options={"remote": RemoteOptions(url="http://h/v1", api_key=SECRET)}
    )
    data = config.as_dict()
    assert data["engine_options"] == {"remote": {"url": "http://h/v1", "model": "", "api_key": "<redacted>"}}
    assert SECRET not in json.dumps(data) and SECRET not in repr(config)
    assert config.engine_options["remote"].api_key == SECRET  # the engine still gets it


@pytest.mark.parametrize(
    "settings, problem",
    [
        (RemoteOptions(), "needs its server's URL"),
        (RemoteOptions(url="ftp://h/v1"), "must start with http:// or https://"),
        (RemoteOptions(url="user:pw@h/v1"), "must start with http:// or https:// (got 'h/v1')"),
        (RemoteOptions(url="http://h:99999/v1"), "port is not a number"),
        # never sent (the key goes in a header), and the URL is recorded as given
        (RemoteOptions(url=f"http://user:{SECRET}@h:8000/v1"), "must not hold a user name or password"),
        (RemoteOptions(url="https://user@h/v1"), "must not hold a user name or password"),
        (RemoteOptions(url="http://h/v1", api_key="k", api_key_env="K"), "not both"),
        (RemoteOptions(url="http://h/v1", api_key_env="NOT A NAME"), "not an environment variable name"),
        (RemoteOptions(url="http://h/v1", api_key_env="K"), ""),
    ],
)
def test_remote_problem(settings, problem):
    assert problem in settings.problem() and bool(problem) == bool(settings.problem())
    assert SECRET not in settings.problem()


def test_every_command_has_an_entry_in_the_dispatch_table():
    listed = re.search(r"\{([a-z,]+)\}", build_parser().format_help())  # usage: main.py {gui,backends,...}
    assert listed is not None and set(COMMANDS) == set(listed.group(1).split(","))


def test_parsing_imports_no_engine():
    code = (
        "import sys; from whistle_stop.backends.cli.parser import build_parser; build_parser(); "
        "print([m for m in sys.modules if m.startswith('whistle_stop.backends.engines.') and 'options' not in m])"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_speculative_flags_and_the_bundled_repeating_prompt():
    from whistle_stop.backends.engines.speculative_options import SpeculativeOptions
    from whistle_stop.backends.sources.prompts import example_prompt

    config = _config("--backends", "native-spec,native-bf16-spec", "--spec-draft", "native-int4", "--spec-k", "5")
    for name in ("native-spec", "native-bf16-spec"):  # one settings class: its flags apply to both
        assert config.engine_options[name] == SpeculativeOptions(draft="native-int4", k=5)
    with pytest.raises(UsageError, match="--spec-k must be"):
        _config("--backends", "native-spec", "--spec-k", "0")
    # the window's form gives text: a pasted run of digits longer than int() converts is named, not raised
    assert SpeculativeOptions(k="9" * 5000).problem().startswith("--spec-k must be a whole number from 1 to 16")
    assert (
        _config("--backends", "hf-assisted", "--hf-assistant-confidence", "0")
        .engine_options["hf-assisted"]
        .assistant_confidence
        == 0.0
    )
    repeating = _config("--prompt-example", "repeating-code").prompt
    assert repeating == example_prompt("Repeating code") and repeating.count("def __init__") == 4
    with pytest.raises(UsageError, match="unknown example prompt"):
        _config("--prompt-example", "sonnet")
