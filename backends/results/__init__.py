"""Results: run and token records, statistics, summaries, export and reading back, environment, bandwidth."""
