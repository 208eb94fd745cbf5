"""An engine's registry row: what the CLI, the window and the run code may know of it before it runs
(its class by path, its constructor arguments, what it needs, its role), without importing it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Role(Enum):
    """What the harness itself uses an engine for, beside the user's own choices."""

    NONE = "none"
    REFERENCE = "reference"  # ticked by default, and the one other engines' tokens are compared with
    CALIBRATION = "calibration"  # computes nothing: its ITL is the harness's own cost per token


@dataclass(frozen=True, kw_only=True)
class EngineSpec:
    name: str
    target: str  # "package.module:ClassName"
    description: str
    requires: tuple[str, ...] = ()  # importable module names
    install: str = ""  # the command that makes it available
    precision: str = "fp32"
    # The engine class's own constructor arguments, after (name, options).
    engine_args: dict[str, Any] = field(default_factory=dict)
    # "cuda" for GPU-only variants, "linux" for runtimes with Linux wheels only, "cc" for engines that
    # build their kernel with the machine's C compiler and have no fallback
    needs: str = ""
    # "package.module:function" in a light module: (**engine_args) -> "" where this machine can run the
    # engine, else why not in one line: a need only the engine's own code knows (torch.compile's C++ compiler)
    requirement: str = ""
    options: str = ""  # "package.module:Class" of its typed settings (an EngineSettings), if any
    # "package.module:function" in a light module: (model, **engine_args) -> the artefact-cache folders
    # it loads from (page-cache eviction for --cold; the parent never imports the engine for it)
    artifacts: str = ""
    # The distributions (as pip names them) whose versions a run of this engine depends on:
    # environment.json records each one's installed version.
    packages: tuple[str, ...] = ()
    # "package.module:function" in a light module: (model, port, threads, **kwargs) -> the
    # ServerCommand of the engine's own server program (llama.cpp's, vLLM's), which
    # `bench --serve-cold-start` times beside `whistle-stop serve`; "" for engines without one.
    own_server: str = ""
    role: Role = Role.NONE
    # A server: load runs may send it several streams at once. The CLI and the window know it before
    # anything runs; the engine class declares the same in its Capabilities (a test checks both agree).
    serves_concurrently: bool = False
