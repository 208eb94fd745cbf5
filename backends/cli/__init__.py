"""The command line: arguments (`parser`, with each engine's own flags from `engine_flags`),
dispatch (`main`), a module per command, and what the run commands share (`common`)."""
