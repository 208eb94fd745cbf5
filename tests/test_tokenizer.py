from whistle_stop.backends.sources.tokenizer import REPLACEMENT, IncrementalDetokenizer, decode, encode


def test_real_gpt2_tokenizer_is_shipped():
    assert encode("Hello world") == [15496, 995]
    assert encode("What's the capital city of the USA? The answer is:") == [
        2061,
        338,
        262,
        3139,
        1748,
        286,
        262,
        4916,
        30,
        383,
        3280,
        318,
        25,
    ]


def test_incremental_detokenization_never_emits_half_characters():
    text = "Tea 🍵 and 東京の寿司 🍣🇯🇵, naïve café — done."
    prompt = encode("Prompt:")
    ids = encode(text)
    detok = IncrementalDetokenizer(prompt)
    pieces = [detok.push(i) for i in ids]
    pieces.append(detok.flush())
    assert all(REPLACEMENT not in piece for piece in pieces)
    assert "".join(pieces) == text
    # Some tokens carry only part of a character: their delta is held back (empty).
    assert any(piece == "" for piece in pieces[:-1])


def test_detokenizer_window_stays_correct_over_long_streams():
    text = "The quick brown fox 🦊 jumps over the lazy dog. " * 60
    ids = encode(text)
    detok = IncrementalDetokenizer()
    assert "".join(detok.push(i) for i in ids) + detok.flush() == decode(ids)


def test_shipped_token_bytes_match_the_vocabulary():
    from whistle_stop.backends.sources.tokenizer import TOKEN_BYTES_FILE, build_token_bytes

    assert TOKEN_BYTES_FILE.read_bytes() == build_token_bytes(), "regenerate token_bytes.bin (build_token_bytes)"


def test_decode_agrees_with_the_tokenizers_library():
    """The table decode against `tokenizers`' own, over random ids (half-characters, specials,
    ids outside the vocabulary included)."""
    import random

    from whistle_stop.backends.sources.tokenizer import gpt2_tokenizer

    reference = gpt2_tokenizer()
    rng = random.Random(14)
    samples = [[rng.randrange(50257) for _ in range(rng.randrange(0, 7))] for _ in range(5000)]
    samples += [encode("Tea 🍵 東京 naïve"), [50256, 50257, 70000, 198], [447, 247, 447]]
    for ids in samples:
        assert decode(ids) == reference.decode(ids, skip_special_tokens=False), ids
