"""Errors that reach the user as one clear line."""


class UsageError(ValueError):
    """Bad input from the user: printed as one line, exit status 2, no traceback."""


class ModelError(UsageError):
    """A model that cannot be found, fetched or read."""
