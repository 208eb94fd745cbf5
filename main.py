"""whistle-stop: `python main.py` opens the app; `python main.py bench ...` runs headless.

The app is the installed package `whistle_stop` (`make` installs this checkout in editable mode);
installed elsewhere, the same entry point is the `whistle-stop` command.
"""

import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent


def installed_here() -> str:
    """'' when this Python imports `whistle_stop` from this checkout, else the one line saying what to run."""
    try:
        import whistle_stop.backends
    except ImportError:
        return "whistle-stop is not installed in this Python: run `make run` (or `pip install -e .` in this folder)"
    location = Path(whistle_stop.backends.__file__).resolve().parent.parent
    if location != CHECKOUT:
        return (
            f"this Python's whistle_stop is {location}, not this checkout: "
            f"run `pip install -e .` here (or use that checkout's main.py)"
        )
    return ""


def _main() -> int:
    problem = installed_here()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    from whistle_stop.backends.cli.launcher import main

    return main()


if __name__ == "__main__":
    sys.exit(_main())
