"""The app's shipped data files (tokenizer, model configs, prompts, evaluation text, icons).

Installed, this folder is the package `whistle_stop.resources`; the code finds it through
`importlib.resources` (see `whistle_stop.backends.storage.paths`), never by a path relative to itself.
"""
