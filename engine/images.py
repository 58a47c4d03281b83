"""What counts as an unreadable image file, and how it is said: one rule for the engine's image reader
(``engine.utils.read_image``) and the data-root check (``datasets.check``). Pillow and the standard library only, so
the check and the runner's preflight use it without torch."""
from __future__ import annotations

from PIL import Image

UNREADABLE = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)
"""What Pillow raises for a file it cannot decode in full: no image (``UnidentifiedImageError`` is an OSError), cut
off or corrupt, or more pixels than its limit allows (``DecompressionBombError``, above twice
``Image.MAX_IMAGE_PIXELS``)."""


def unreadable_reason(error: BaseException) -> str:
    """Why an image could not be read, in one line: the error's type and message."""
    message = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
