"""Errors that reach the user as one clear line."""

import signal


class UsageError(ValueError):
    """Bad input from the user: printed as one line, exit status 2, no traceback."""


class ModelError(UsageError):
    """A model that cannot be found, fetched or read."""


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message`: how a failure is reported in a record or a status line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def describe_exit(code: int | None) -> str:
    """How a child process ended, in words: a negative exit code is the signal that killed it."""
    if code is None:
        return "exited (exit code unknown)"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name} (exit code {code})"
    return f"exited (exit code {code})"
