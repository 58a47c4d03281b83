"""Byte-level BPE of OpenAI CLIP, taken from the installed open_clip package (vocabulary not vendored)."""
from __future__ import annotations

from functools import lru_cache

SOT_TOKEN = 49406
EOT_TOKEN = 49407


@lru_cache(maxsize=1)
def _bpe():
    """open_clip's SimpleTokenizer (lower-casing, ftfy + html cleanup, OpenAI's merges); imported on first use."""
    from open_clip.tokenizer import SimpleTokenizer, default_bpe

    tokenizer = SimpleTokenizer(default_bpe(), clean="lower")
    if (tokenizer.sot_token_id, tokenizer.eot_token_id) != (SOT_TOKEN, EOT_TOKEN):
        raise RuntimeError(f"open_clip's tokenizer has SOT/EOT ids {tokenizer.sot_token_id}/{tokenizer.eot_token_id}"
                           f", expected {SOT_TOKEN}/{EOT_TOKEN}; install open_clip_torch as in requirements.txt")
    return tokenizer


def encode(text: str) -> list[int]:
    """BPE ids of ``text`` without the start/end tokens."""
    return _bpe().encode(text)

