"""Prompts of the kinds a hidden test set holds: code, accents/CJK/emoji, plain text (speculative engines'
greedy parity is checked on each)."""

PROMPTS = {
    "code": "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\nprint([fib(i) for i in range(10)])",
    "accents, CJK, emoji": "Ça coûte 3 € à Zürich — 東京の天気は晴れ、서울은 비 🌧️🚀 naïve façade",
    "plain": "The quick brown fox jumps over the lazy dog. It was the best of times, it was the worst of times.",
}
