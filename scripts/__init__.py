"""Developer scripts that drive the real window (not part of the app): run from the repository
root as `python -m scripts.latency_probe`, `python -m scripts.screenshot`, `python -m scripts.screenshot_tabs`;
and `python -m scripts.readme_results`, which writes the README's results table from a page in docs/measurements/."""
