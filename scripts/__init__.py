"""Developer scripts that drive the real window (not part of the app): run from the repository
root as `python -m scripts.latency_probe`, `python -m scripts.screenshot`, `python -m scripts.screenshot_tabs`."""
