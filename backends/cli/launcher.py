"""The `whistle-stop` command (and `python main.py`): the desktop-entry options, else the command line.

`whistle-stop --install-desktop-entry` / `--uninstall-desktop-entry` (Linux) are handled here, before
the command line of `cli/main.py`, which they do not concern: everything else goes there unchanged.
"""

from __future__ import annotations

import sys

from . import desktop_entry

OPTIONS = {"--install-desktop-entry": "install", "--uninstall-desktop-entry": "uninstall"}
HELP = (
    "\ndesktop menu (Linux, for this user; $XDG_DATA_HOME or ~/.local/share):\n"
    "  --install-desktop-entry    add whistle-stop (launcher and icon) to the desktop's application menu\n"
    "  --uninstall-desktop-entry  remove them"
)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in OPTIONS:
        from ..errors import UsageError

        try:
            if len(argv) > 1:
                raise UsageError(f"{argv[0]} takes no other arguments")
            return desktop_entry.run(OPTIONS[argv[0]])
        except UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    from .main import main as command_line

    try:
        return command_line(argv)
    except SystemExit as exc:  # argparse's --help
        if argv in (["-h"], ["--help"]) and not exc.code:
            print(HELP)
        raise


if __name__ == "__main__":
    sys.exit(main())
