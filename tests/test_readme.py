"""The README stays short and whole: at most 250 lines, none over 160 characters, and every
relative link and image points at a file (and an anchor, where it names one) that exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    out = set()
    for heading in re.findall(r"^#+\s+(.*)$", markdown, re.M):
        text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
        out.add(text.replace(" ", "-"))
    return out


def test_readme_is_short_and_its_lines_fit():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250
    long = [(n, len(line)) for n, line in enumerate(lines, start=1) if len(line) > 160]
    assert not long, long


def test_every_relative_link_and_image_resolves():
    text = README.read_text(encoding="utf-8")
    targets = [t for t in LINK.findall(text) if not re.match(r"^[a-z]+:", t)]
    assert any(t.endswith(".png") for t in targets)
    for target in targets:
        path, _, anchor = target.partition("#")
        file = (README.parent / path) if path else README
        assert file.exists(), target
        if anchor and file.suffix == ".md":
            assert anchor in _anchors(file.read_text(encoding="utf-8")), target


def test_the_results_table_is_generated_from_its_measurement_file():
    """The README's results are rows of a dated file in docs/measurements/ (itself made by
    `report --markdown`), written by `python -m scripts.readme_results`: an edit by hand fails here."""
    from scripts.readme_results import current_block, results_block

    block, measurement, backends = current_block(README.read_text(encoding="utf-8"))
    assert measurement.is_file() and measurement.parent.name == "measurements" and backends
    assert block == results_block(measurement, backends)


def _command_flags() -> dict[str, set[str]]:
    """Every option of `main.py` and of each of its commands, with the commands that take it."""
    import argparse

    from whistle_stop.backends.cli.launcher import OPTIONS
    from whistle_stop.backends.cli.parser import build_parser

    flags: dict[str, set[str]] = {flag: {"whistle-stop"} for flag in OPTIONS}

    def walk(parser: argparse.ArgumentParser, command: str) -> None:
        for action in parser._actions:
            for flag in action.option_strings:
                flags.setdefault(flag, set()).add(command)
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, name)

    walk(build_parser(), "main.py")
    return flags


def _docs() -> str:
    """README and the pages under docs/ a user reads (not the generated measurement pages)."""
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    return "\n".join(page.read_text(encoding="utf-8") for page in pages)


PIP_FLAGS = {"--pip-args", "--extra-index-url", "--index-url", "--no-deps"}  # the install lines' own


def test_every_flag_the_readme_names_exists():
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", README.read_text(encoding="utf-8"))) - PIP_FLAGS
    assert named, "the README names no flag"
    assert not named - set(_command_flags()), sorted(named - set(_command_flags()))


def test_every_flag_of_every_command_is_documented():
    """`--help` is not the only place a flag is described: each is in the README or a docs/ page."""
    text = _docs()
    missing = [
        f"{flag} ({', '.join(sorted(commands))})"
        for flag, commands in _command_flags().items()
        if flag not in ("-h", "--help", "--version") and not re.search(rf"(?<![\w-]){flag}(?![\w-])", text)
    ]
    assert not missing, missing


def test_the_architecture_page_names_every_module_and_only_modules_that_exist():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![\w*])(\w+\.(?:py|c|h))\b", page))
    modules = [
        path
        for folder in ("backends", "gui")
        for path in (ROOT / folder).rglob("*")
        if path.suffix in (".py", ".c", ".h") and path.name != "__init__.py" and "__pycache__" not in path.parts
    ]
    unnamed = [
        str(path.relative_to(ROOT))
        for path in modules
        if path.name not in named and not (path.name.endswith("_command.py") and "*_command.py" in page)
    ]
    assert not unnamed, sorted(unnamed)
    existing = {path.name for path in ROOT.rglob("*") if not {".venv", ".git"} & set(path.parts)}
    assert not named - existing, sorted(named - existing)
