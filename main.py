"""whistle-stop: `python main.py` opens the app; `python main.py bench ...` runs headless."""

import sys


def _main() -> int:
    from whistle_stop.backends.cli.main import main

    return main()


if __name__ == "__main__":
    sys.exit(_main())
