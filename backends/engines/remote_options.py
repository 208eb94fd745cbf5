"""Settings of the `remote` engine (an OpenAI-compatible server). Stdlib only: the CLI's parser
and the GUI's form import this without importing the engine.

The API key is either typed (GUI only: a password field kept in memory, redacted from every
record) or named as an environment variable that the engine reads in its worker.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from typing import ClassVar
from urllib.parse import urlsplit

from ..engine_settings import EngineSettings, option

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
EXAMPLE_URL = "http://127.0.0.1:8000/v1"
OWNER = "whistle-stop"  # /v1/models' owned_by: how a client (the remote engine) recognises this server


@dataclass(frozen=True)
class RemoteOptions(EngineSettings):
    TITLE: ClassVar[str] = "Remote server"
    CLI_TITLE: ClassVar[str] = "the `remote` engine (any OpenAI-compatible server)"

    url: str = option(
        "",
        label="URL",
        placeholder=EXAMPLE_URL,
        required=True,
        tooltip="an OpenAI-compatible completions endpoint (vLLM, TGI, llama.cpp server…)",
        flag="--remote-url",
        help=f"base URL, e.g. {EXAMPLE_URL}",
    )
    model: str = option(
        "",
        label="Model",
        placeholder="optional: the name the server expects",
        flag="--remote-model",
        help="model name the server knows",
    )
    api_key: str | None = option(
        None,
        label="API key",
        secret=True,
        placeholder="kept in memory only",
        tooltip="sent to the engine for this session only; never saved, redacted from every record",
    )
    # Written as <redacted> since the first version; kept so environment.json and the
    # fingerprints of unfinished sweeps stay the same.
    api_key_env: str | None = option(
        None,
        label="Key variable",
        saved_as="key_env",
        recorded=False,
        placeholder="or an environment variable, e.g. OPENAI_API_KEY",
        flag="--remote-api-key-env",
        cli_default="OPENAI_API_KEY",
        help="environment variable holding the API key (default: OPENAI_API_KEY; the key is never recorded)",
    )
    timeout_s: float | None = option(None)  # read timeout; None: the engine's default
    connect_timeout_s: float | None = option(None)

    def problem(self) -> str:
        problem = url_problem(self.url)
        if problem:
            return problem
        env = (self.api_key_env or "").strip()
        if self.api_key and env:
            return "give the remote API key or the name of an environment variable, not both"
        if env and not ENV_NAME.fullmatch(env):
            return f"{env!r} is not an environment variable name"
        return ""

    def hint(self) -> str:
        env = (self.api_key_env or "").strip()
        if env and ENV_NAME.fullmatch(env):
            state = "is set" if os.environ.get(env) else "is not set in this environment: no key will be sent"
            return f"${env} {state}"
        if self.api_key:
            return "the key is kept in memory for this session only"
        return "no API key"

    def with_token_timeout(self, token_s: float) -> RemoteOptions:
        # the engine's own read timeout fires first, with a clearer message
        return dataclasses.replace(self, timeout_s=max(1.0, token_s * 0.9))


def url_problem(url: str) -> str:
    """Why `url` cannot be a server's address, or ""."""
    url = url.strip()
    if not url:
        return f"the remote engine needs its server's URL, e.g. {EXAMPLE_URL}"
    if not url.lower().startswith(("http://", "https://")):
        shown = url.rsplit("@", 1)[-1]  # what precedes an @ may be a password
        return f"the remote URL must start with http:// or https:// (got {shown[:40]!r})"
    parts = urlsplit(url)
    if "@" in parts.netloc:  # not echoed: it may hold a password
        return (
            "the remote URL must not hold a user name or password (they are not sent, and records keep the URL): "
            "give an API key instead (--remote-api-key-env, or the window's API key field)"
        )
    if not parts.hostname:
        return "the remote URL has no host name"
    try:
        _ = parts.port  # urllib checks the port only when asked
    except ValueError:
        return "the remote URL's port is not a number from 0 to 65535"
    return ""
