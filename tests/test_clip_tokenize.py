"""clip.tokenize: OpenAI framing (SOT/EOT, padding, raise on over-long) over the BPE shipped with open_clip."""
from __future__ import annotations

import pytest
import torch

import clip

STRINGS = [
    "a photo of a cat.",
    "A Photo Of A CAT!",
    "  lots   of\twhitespace \n here ",
    "punctuation: (yes), [no]; {maybe}? — 'quoted' \"double\"...",
    "café crème brûlée, naïve Zoë, Ångström",
    "emoji 🐶🐱 and symbols © ™ ≥ ∑",
    "numbers 1234567 and 3.14159, 1st 2nd",
    "it's we're they've I'm you'll he'd",
    "&amp; html &lt;entities&gt;",
    "日本語のテキスト",
    "",
]


def test_ids_equal_open_clip_tokenizer():
    from open_clip import tokenizer as oc_tokenizer

    ours = clip.tokenize(STRINGS)
    assert ours.dtype == torch.long and ours.shape == (len(STRINGS), 77)
    assert torch.equal(ours, oc_tokenizer.tokenize(STRINGS))


def test_known_ids_and_framing():
    tokens = clip.tokenize("a diagram")
    assert tokens.shape == (1, 77)
    assert tokens[0, :4].tolist() == [49406, 320, 22697, 49407] and not tokens[0, 4:].any()
    assert torch.equal(clip.tokenize("A DIAGRAM"), tokens)  # lower-cased
    assert clip.tokenize("").tolist()[0][:3] == [49406, 49407, 0]
    assert clip.tokenize(["a", "b"], context_length=5).shape == (2, 5)


def test_long_text_raises_or_truncates():
    from open_clip import tokenizer as oc_tokenizer

    long_text = "a very long sentence about many different things " * 20
    with pytest.raises(RuntimeError, match="a very long sentence about.*too long for context length 77"):
        clip.tokenize(["short", long_text])
    truncated = clip.tokenize(["short", long_text], truncate=True)
    assert truncated[1, -1].item() == 49407 and truncated[1].argmax().item() == 76
    assert torch.equal(truncated, oc_tokenizer.tokenize(["short", long_text]))
    exact = "word " * 75  # 75 BPE tokens + SOT + EOT fill the 77 slots exactly
    assert clip.tokenize(exact)[0, -1].item() == 49407
    with pytest.raises(RuntimeError):
        clip.tokenize(exact + "word")
