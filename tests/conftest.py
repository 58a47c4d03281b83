"""Shared fixtures: tiny student/teacher CLIP weight files (OpenAI key names) built from open_clip, and a tiny GELU
open_clip CLIP in open_clip's own local-dir layout; no downloads."""
from __future__ import annotations

import os

# Every test runs on the CPU, GPU or not: hide CUDA from this process and the subprocesses it starts, before torch
# initialises CUDA (torch reads the variable lazily, at its first CUDA call). Set PETR_TEST_CUDA=1 to keep it visible.
if os.environ.get("PETR_TEST_CUDA") != "1":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
# Idle OpenMP threads sleep instead of spinning, so processes sharing a busy machine do not burn each other's CPU time
# while they wait; results are the same, only the waiting changes.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The tiny runs of the tests, in this process and in the processes it starts, use one torch thread: more cost more
# than they bring and oversubscribe the machine (pytest-xdist already runs one worker per core).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# No test reaches the network: the runner's preflight calls missing CLIP weights missing instead of probing OpenAI's
# server.
os.environ["PETR_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

# The tests run tiny models, for which torch's intra-op threads cost more than they bring (and contend badly
# when the machine is busy); one thread keeps the suite fast and its timings stable.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_openclip_model():
    """Seeded tiny open_clip student (vision 64x9, text 64x9, embed 32, 32px images, patch 8); do not modify."""
    from tests.helpers_clip import STUDENT_CFG, make_tiny_openclip

    return make_tiny_openclip(**STUDENT_CFG, seed=0)


@pytest.fixture(scope="session")
def tiny_teacher_openclip_model():
    """Seeded tiny open_clip teacher (vision 128x10, text 128x9, embed 64, 32px images, patch 16); do not modify."""
    from tests.helpers_clip import TEACHER_CFG, make_tiny_openclip

    return make_tiny_openclip(**TEACHER_CFG, seed=1)


@pytest.fixture(scope="session")
def tiny_clip_file(tmp_path_factory, tiny_openclip_model) -> str:
    """Path of a plain .pt state dict of the tiny student CLIP, readable by clip.load_model."""
    path = tmp_path_factory.mktemp("clip_weights") / "tiny-student.pt"
    torch.save(tiny_openclip_model.state_dict(), path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_teacher_clip_file(tmp_path_factory, tiny_teacher_openclip_model) -> str:
    """Path of the tiny teacher state dict, with OpenAI's extra integer keys as in the released checkpoints."""
    path = tmp_path_factory.mktemp("clip_weights") / "tiny-teacher.pt"
    state_dict = dict(tiny_teacher_openclip_model.state_dict())
    state_dict.update(input_resolution=32, context_length=77, vocab_size=49408)
    torch.save(state_dict, path)
    return str(path)


@pytest.fixture
def tiny_clip(tiny_clip_file):
    """A fresh frozen tiny student CLIP (clip.CLIP) loaded through clip.load_model."""
    import clip

    return clip.load_model(tiny_clip_file)


@pytest.fixture
def tiny_teacher_clip(tiny_teacher_clip_file):
    """A fresh frozen tiny teacher CLIP (clip.CLIP) loaded through clip.load_model."""
    import clip

    return clip.load_model(tiny_teacher_clip_file)


@pytest.fixture(scope="session")
def tiny_openclip_name(tmp_path_factory) -> str:
    """``open_clip:local-dir:`` name of a seeded tiny GELU open_clip CLIP (``helpers_clip.OPENCLIP_CFG``: widths,
    head width and MLP ratio other than OpenAI's), in open_clip's local-dir layout; do not modify."""
    from tests.helpers_clip import OPENCLIP_CFG, make_local_dir

    folder = tmp_path_factory.mktemp("open_clip") / "tiny-gelu"
    make_local_dir(folder, OPENCLIP_CFG, seed=2)
    return f"open_clip:local-dir:{folder}"
