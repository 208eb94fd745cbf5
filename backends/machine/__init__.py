"""The machine's facts the engines dispatch on: its CPU's instruction-set levels."""
