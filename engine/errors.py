"""Errors that mean "the input is wrong", not "the code is wrong": train.py prints them as one ``error:`` line.

Each also derives from the built-in type callers already catch (ValueError, FileNotFoundError, OSError).
"""
from __future__ import annotations

import errno
import os


class UserError(Exception):
    """A mistake in the user's input (name, config value, path, file); the message names it and the fix."""


class ConfigError(UserError, ValueError):
    """An unknown name or an out-of-range value in the config (the message names the key)."""


class InputNotFoundError(UserError, FileNotFoundError):
    """A file or folder the run needs does not exist (the message names the paths tried)."""


class CorruptFileError(UserError, OSError):
    """An input file exists but cannot be read: truncated, corrupt or not of the expected kind."""


class InvalidInputError(UserError, ValueError):
    """An input file reads, but its content does not fit the run (split, few-shot, class list or checkpoint)."""


def first_line(error: BaseException) -> str:
    """The one-line message of ``error``; for an error re-raised from a DataLoader worker, the original's message."""
    text = str(error.args[0]) if error.args and isinstance(error.args[0], str) else str(error)
    if text.startswith("Caught ") and "Original Traceback" in text:  # torch's ExceptionWrapper.reraise()
        last = [line for line in text.strip().splitlines() if line.strip()][-1]
        text = last.split(": ", 1)[1] if ": " in last else last
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def is_user_error(error: BaseException) -> bool:
    """True for errors train.py reports in one line: UserError, and any missing file (its message names the path)."""
    return isinstance(error, (UserError, FileNotFoundError))


def output_dir_error(folder: str, error: OSError) -> ConfigError:
    """The one-line error for an output folder that cannot be used: it is a file, lies under one, or the OS refuses."""
    if os.path.isfile(folder):
        reason = "is a file"
    else:
        parent = os.path.dirname(os.path.abspath(folder))
        while parent != os.path.dirname(parent) and not os.path.exists(parent):
            parent = os.path.dirname(parent)
        reason = (f"lies under the file {parent}" if os.path.isfile(parent)
                  else f"cannot be written ({error.strerror or error})")
    return ConfigError(f"OUTPUT_DIR {folder} {reason}; choose another --output-dir")


def disk_full(error: BaseException) -> OSError | None:
    """The "no space left" (ENOSPC, EDQUOT) error behind ``error``: itself, or one it was raised from or while
    handling (torch's writer raises a RuntimeError while handling the OSError); None when there is none."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return error
        error = error.__cause__ or error.__context__
    return None


def disk_full_error(folder: str, error: OSError) -> ConfigError:
    """The one-line error for a write that found no space left in ``folder``."""
    return ConfigError(f"{folder}: {error.strerror or 'No space left on device'}; free space there or choose another "
                       "--output-dir, then rerun the same command (it goes on from the last state saved)")
