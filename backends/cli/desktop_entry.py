"""`whistle-stop --install-desktop-entry` / `--uninstall-desktop-entry`: the app in the desktop's menu.

Linux (freedesktop.org) only, for the current user: a `whistle-stop.desktop` launcher in
`$XDG_DATA_HOME/applications/` and the app icon in `$XDG_DATA_HOME/icons/hicolor/scalable/apps/`
(XDG_DATA_HOME defaults to ~/.local/share). The launcher starts the `whistle-stop` command this
process was started from (a pipx or venv install), or `python main.py` of a source checkout.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from ..storage.paths import RESOURCES

DESKTOP_ID = "whistle-stop"  # also the window's desktop file name (gui/app.py), so the menu entry owns the window
COMMAND = "whistle-stop"


def data_home(env: Mapping[str, str] | None = None) -> Path:
    value = (os.environ if env is None else env).get("XDG_DATA_HOME", "")
    # The spec: a relative (or empty) path is invalid and is ignored.
    return Path(value) if value and os.path.isabs(value) else Path.home() / ".local" / "share"


def entry_path(home: Path) -> Path:
    return home / "applications" / f"{DESKTOP_ID}.desktop"


def icon_path(home: Path) -> Path:
    return home / "icons" / "hicolor" / "scalable" / "apps" / f"{DESKTOP_ID}.svg"


def launcher_command(argv0: str | None = None, executable: str | None = None) -> list[str]:
    """How the menu entry starts the app: the `whistle-stop` script we run from, else `python main.py`."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    executable = executable or sys.executable
    script = Path(argv0)
    if script.name == COMMAND and script.is_file():
        return [str(script.absolute())]
    beside = Path(executable).parent / COMMAND  # the venv's (pipx's) own bin folder
    if beside.is_file():
        return [str(beside)]
    if script.name == "main.py" and script.is_file():
        return [executable, str(script.resolve())]
    found = shutil.which(COMMAND)
    if found:
        return [found]
    return [executable, "-m", "whistle_stop.backends.cli.launcher"]


def exec_arg(arg: str) -> str:
    """Quote one Exec argument (Desktop Entry spec: quoting, then the string escape of backslashes)."""
    if arg and not any(c in arg for c in " \t\n\"'\\><~|&;$*?#()`="):
        return arg.replace("%", "%%")
    quoted = "".join("\\" + c if c in '"`$\\' else c for c in arg).replace("%", "%%")
    return '"' + quoted.replace("\\", "\\\\") + '"'


def desktop_entry(command: list[str], version: str) -> str:
    return "\n".join(
        [
            "[Desktop Entry]",
            "Type=Application",
            "Version=1.5",
            "Name=whistle-stop",
            "GenericName=GPT-2 engine benchmark",
            "Comment=Which way of running GPT-2 is fastest on this machine, and what the speed costs in quality",
            "Exec=" + " ".join(exec_arg(a) for a in command),
            f"Icon={DESKTOP_ID}",
            "Terminal=false",
            "Categories=Development;Profiling;",
            "Keywords=benchmark;GPT-2;LLM;ONNX;llama.cpp;latency;",
            "StartupNotify=true",
            f"X-Whistle-Stop-Version={version}",
            "",
        ]
    )


def install(home: Path | None = None, command: list[str] | None = None) -> list[Path]:
    from .. import __version__

    home = data_home() if home is None else home
    entry, icon = entry_path(home), icon_path(home)
    for path, data in (
        (icon, (RESOURCES / "icons" / "app.svg").read_bytes()),
        (entry, desktop_entry(command or launcher_command(), __version__).encode("utf-8")),
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.chmod(0o644)
        os.replace(tmp, path)
    return [entry, icon]


def uninstall(home: Path | None = None) -> list[Path]:
    home = data_home() if home is None else home
    removed = []
    for path in (entry_path(home), icon_path(home)):
        if path.exists():
            path.unlink()
            removed.append(path)
    return removed


def run(action: str, platform: str | None = None) -> int:
    from ..errors import UsageError

    if not (platform or sys.platform).startswith("linux"):
        raise UsageError("desktop entries are for Linux (freedesktop.org) desktops only")
    if action == "install":
        entry, icon = install()
        print(f"installed {entry}\ninstalled {icon}")
        return 0
    removed = uninstall()
    print("\n".join(f"removed {path}" for path in removed) if removed else "no desktop entry to remove")
    return 0
