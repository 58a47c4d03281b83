"""Teacher: plain-CLIP teacher vs open_clip zero-shot logits, PromptKD import round trip without running pickled code,
and the clear errors of build_teacher and the import tool."""
from __future__ import annotations

import os
import pickle

import pytest
import torch
import torch.nn.functional as F

import clip
from tests.helpers_clip import IMAGE_SIZE
from tests.helpers_upstream import fp16_prompts, promptkd_checkpoint
from tools.import_promptkd_teacher import default_output_dir
from tools.import_promptkd_teacher import main as import_main
from trainers.distillation.teacher import Teacher, build_teacher

NAMES = ["Annual Crop Land", "Forest", "Herbaceous Vegetation Land", "Highway or Road", "Industrial Buildings"]


def _images(n: int = 3) -> torch.Tensor:
    return torch.randn(n, 3, IMAGE_SIZE, IMAGE_SIZE, generator=torch.Generator().manual_seed(0))


@pytest.fixture
def promptkd_file(tmp_path, tiny_teacher_clip):
    learner = fp16_prompts(tiny_teacher_clip)
    marker = str(tmp_path / "pickled_code_ran")
    path = tmp_path / "teacher_model" / "EuroSAT" / "VLPromptLearner" / "model-best.pth.tar"
    path.parent.mkdir(parents=True)
    torch.save(promptkd_checkpoint(learner, tiny_teacher_clip, marker), path)
    return str(path), learner, marker


def test_plain_teacher_equals_zero_shot_clip(tiny_teacher_clip_file, tiny_teacher_openclip_model):
    teacher = build_teacher(tiny_teacher_clip_file, "", NAMES, "cpu", dataset_name="EuroSAT")
    oc, images = tiny_teacher_openclip_model, _images()
    with torch.no_grad():
        tokens = clip.tokenize([f"a centered satellite photo of {n}." for n in NAMES])
        text = F.normalize(oc.encode_text(tokens), dim=-1)
        image = F.normalize(oc.encode_image(images), dim=-1)
        expected = oc.logit_scale.exp() * image @ text.t()
        torch.testing.assert_close(teacher(images), expected, rtol=0, atol=1e-4)
        torch.testing.assert_close(teacher.text_features, text, rtol=0, atol=1e-5)
        torch.testing.assert_close(teacher.text_features_for(NAMES[:2]), text[:2], rtol=0, atol=1e-5)
    assert teacher.logit_scale == pytest.approx(float(oc.logit_scale.detach().exp()))
    assert teacher.embed_dim == 64 and teacher.text_features.shape == (5, 64)
    teacher.train()
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())


def test_import_round_trip_runs_no_pickled_code(tmp_path, promptkd_file, tiny_teacher_clip_file, tiny_teacher_clip):
    src, learner, marker = promptkd_file
    with pytest.raises(pickle.UnpicklingError):  # the file really holds non-tensor globals
        torch.load(src, weights_only=True)
    out = str(tmp_path / "teachers" / "EuroSAT")
    written = import_main([src, "--clip", tiny_teacher_clip_file, "--output-dir", out])
    assert not os.path.exists(marker), "the import unpickled the file's code"
    assert written == os.path.join(out, "VLPromptLearner", "model.pth.tar-20")
    saved = torch.load(written, weights_only=True)
    assert all(v.dtype == torch.float32 for k, v in saved["state_dict"].items() if k != "_extra_state")
    assert saved["state_dict"]["_extra_state"]["num_classes"] == 3

    imported = build_teacher(tiny_teacher_clip_file, out, NAMES, "cpu", dataset_name="EuroSAT")
    direct = Teacher(tiny_teacher_clip, NAMES, prompts=learner)
    plain = Teacher(clip.load_model(tiny_teacher_clip_file), NAMES)
    images = _images()
    torch.testing.assert_close(imported(images), direct(images), rtol=0, atol=1e-5)
    torch.testing.assert_close(imported.text_features_for(NAMES[1:]), direct.text_features_for(NAMES[1:]))
    assert (imported(images) - plain(images)).abs().max() > 1e-2  # the imported prompts matter

    trusted_out = str(tmp_path / "trusted")
    import_main([src, "--clip", tiny_teacher_clip_file, "--output-dir", trusted_out, "--trust"])
    assert os.path.isdir(marker)  # plain unpickling does run the file's code: the check above can fail
    trusted = build_teacher(tiny_teacher_clip_file, trusted_out, NAMES, "cpu", dataset_name="EuroSAT")
    torch.testing.assert_close(trusted(images), direct(images), rtol=0, atol=1e-5)
    assert default_output_dir(src) == os.path.join("teachers", "EuroSAT")


def test_upstream_teacher_file_and_tree_load_directly_without_running_code(tmp_path, promptkd_file, capsys,
                                                                           tiny_teacher_clip_file, tiny_teacher_clip):
    """TEACHER_CKPT=<PromptKD's file> and TEACHER_DIR=<its teacher_model/ tree> need no import step."""
    src, learner, marker = promptkd_file
    direct = Teacher(tiny_teacher_clip, NAMES, prompts=learner)
    images = _images()
    tree = os.path.dirname(os.path.dirname(os.path.dirname(src)))  # teacher_model/
    for ckpt in (src, os.path.join(tree, "EuroSAT")):  # the file, and <TEACHER_DIR>/<DATASET.NAME>
        teacher = build_teacher(tiny_teacher_clip_file, ckpt, NAMES, "cpu", dataset_name="EuroSAT")
        torch.testing.assert_close(teacher(images), direct(images), rtol=0, atol=1e-5)
        assert teacher.source == src
    assert not os.path.exists(marker), "loading the upstream teacher ran its pickled code"
    out = capsys.readouterr().out
    assert "kept state_dict, epoch" in out and f"ignored scheduler ({os.mkdir.__module__}.mkdir, " in out
    xd = tmp_path / "teacher_model" / "ImageNet-xd" / "VLPromptLearner_large"  # the cross-dataset teacher's place
    xd.mkdir(parents=True)
    os.replace(src, xd / "model.pth.tar-20")
    teacher = build_teacher(tiny_teacher_clip_file, str(xd.parent), NAMES, "cpu", dataset_name="DescribableTextures")
    torch.testing.assert_close(teacher(images), direct(images), rtol=0, atol=1e-5)
    assert "trained on ImageNet" in capsys.readouterr().out and not os.path.exists(marker)


def test_import_errors(tmp_path, promptkd_file, tiny_clip_file, tiny_teacher_clip_file):
    src, _, marker = promptkd_file
    with pytest.raises(SystemExit, match=r"--clip .* pass the teacher's backbone"):
        import_main([src, "--clip", tiny_clip_file, "--output-dir", str(tmp_path / "a")])
    checkpoint = torch.load(src, weights_only=False)
    state = checkpoint["state_dict"]
    frozen = [k for k in state if k.startswith(("image_encoder.", "text_encoder.")) and "VPT" not in k]
    for key in frozen:
        del state[key]
    no_frozen = str(tmp_path / "no_frozen.pth.tar")
    torch.save(checkpoint, no_frozen)
    with pytest.raises(SystemExit, match=r"vision width 128, but --clip=.* has 64"):
        import_main([no_frozen, "--clip", tiny_clip_file, "--output-dir", str(tmp_path / "b")])
    del state["image_encoder.VPT"]
    torch.save(checkpoint, no_frozen)
    with pytest.raises(SystemExit, match=r"lacks required key.*image_encoder\.VPT"):
        import_main([no_frozen, "--clip", tiny_teacher_clip_file, "--output-dir", str(tmp_path / "c")])


def test_build_teacher_errors(tmp_path, promptkd_file, tiny_clip_file, tiny_teacher_clip_file):
    src, _, marker = promptkd_file
    with pytest.raises(FileNotFoundError, match=r"not found: .*missing.*base2new_train\.sh.*teacher_model/"):
        build_teacher(tiny_teacher_clip_file, str(tmp_path / "missing"), NAMES, "cpu")
    with pytest.raises(ValueError, match=r"vision width 128, but TEACHER_NAME=.* has 64; set TEACHER_NAME"):
        build_teacher(tiny_clip_file, src, NAMES, "cpu")  # upstream file read directly, same size check
    assert not os.path.exists(marker)
    out = str(tmp_path / "teacher")
    written = import_main([src, "--clip", tiny_teacher_clip_file, "--output-dir", out])
    with pytest.raises(ValueError, match=r"vision width 128, but TEACHER_NAME=.* has 64; set TEACHER_NAME"):
        build_teacher(tiny_clip_file, written, NAMES, "cpu")
    many = [f"class {i}" for i in range(9)]  # 9 classes → 5 base; the teacher was trained on 3 EuroSAT classes
    with pytest.raises(ValueError, match=r"trained on 3 classes of EuroSAT, but the dataset here has 9 classes"):
        build_teacher(tiny_teacher_clip_file, out, many, "cpu", dataset_name="EuroSAT")
    build_teacher(tiny_teacher_clip_file, out, many, "cpu", dataset_name="DescribableTextures")  # cross-dataset: ok
