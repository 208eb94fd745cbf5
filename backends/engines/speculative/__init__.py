"""Speculative decoding over two models of one vocabulary: the accept/reject rule (rule.py), how
many tokens to draft (draft_length.py) and the loop that keeps both KV caches (decoder.py)."""
