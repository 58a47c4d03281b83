"""Whether this node may download: the offline knobs, and one quick probe of a server.

``PETR_OFFLINE=1`` (or ``HF_HUB_OFFLINE=1``; ``true`` / ``yes`` too) says the node cannot download, so the fetch
commands and the runner's preflight ask no server and say at once what they would fetch. Without a knob, a fetch
probes its server once (:func:`unreachable`) instead of letting a client retry for half a minute. Standard library
only.
"""
from __future__ import annotations

import os
import urllib.error
import urllib.request

OFFLINE_KNOBS = ("PETR_OFFLINE", "HF_HUB_OFFLINE")
"""Either set to 1 (or true / yes) says this node cannot download: no network probe, missing files are missing."""
PROBE_TIMEOUT_S = 5.0
"""How long one probe waits for a server before calling it unreachable."""


def offline_knob() -> str:
    """The offline knob that is set (``PETR_OFFLINE=1``), or "" when none is."""
    for knob in OFFLINE_KNOBS:
        value = os.environ.get(knob, "")
        if value.lower() in ("1", "true", "yes"):
            return f"{knob}={value}"
    return ""


def offline() -> bool:
    """Whether an offline knob (:data:`OFFLINE_KNOBS`) is set."""
    return bool(offline_knob())


def unreachable(url: str) -> str:
    """Why ``url``'s server cannot be reached ("" when it answers one HEAD request within :data:`PROBE_TIMEOUT_S`,
    whatever its HTTP status): an offline knob is set, or the name, the connection or the wait failed."""
    knob = offline_knob()
    if knob:
        return f"{knob} is set: this node does not download"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=PROBE_TIMEOUT_S):
            return ""
    except urllib.error.HTTPError:  # the server answered
        return ""
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        return f"{url} does not answer: {reason}"
