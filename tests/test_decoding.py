"""INPUT.DECODER tensor (engine/decoding.py, engine/tensor_transforms.py): the same random crops and flips as the PIL
pipeline for the same seed (the boxes compared with torchvision's own draw, the RNG left in the same state), the
pixels within a stated tolerance of a PIL reference (draft-mode decoding of large JPEGs included), the same errors
for missing and corrupt images, and one error line for what the tensor decoder does not cover."""
from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms import InterpolationMode, v2

from engine import build_transform, get_cfg_default
from engine.data_stream import seeded_rngs
from engine.decoding import ImageFile, check_decoder, load_image
from engine.errors import ConfigError, CorruptFileError, InputNotFoundError
from engine.tensor_transforms import TensorTransform, resized_crop
from trainers.config import extend_cfg

MEAN, STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]  # the CLIP configs'
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)


def smooth_image(width: int, height: int, seed: int) -> Image.Image:
    """A photo-like RGB image: coarse random colours upsampled (bicubic) plus mild noise, no symmetry."""
    rng = np.random.default_rng(seed)
    coarse = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)).resize((width, height), Image.BICUBIC)
    noisy = np.asarray(coarse, dtype=np.int16) + rng.integers(-6, 7, (height, width, 3))
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, str]:
    """JPEGs of a small, a typical and a large size (the large one decodes in draft mode) and a PNG."""
    root = tmp_path_factory.mktemp("decoding")
    files = {}
    for name, (w, h), fmt in (("small", (64, 48), "JPEG"), ("typical", (500, 375), "JPEG"),
                              ("large", (1200, 900), "JPEG"), ("png", (96, 80), "PNG")):
        files[name] = str(root / f"{name}.{fmt.lower()}")
        smooth_image(w, h, seed=len(files)).save(files[name], format=fmt, quality=95)
    return files


def cfg_of(decoder: str, transforms=("random_resized_crop", "random_flip", "normalize"), size: int = 224):
    cfg = extend_cfg(get_cfg_default())
    cfg.merge_from_list(["INPUT.DECODER", decoder, "INPUT.SIZE", f"({size}, {size})", "INPUT.INTERPOLATION",
                         "bicubic", "INPUT.PIXEL_MEAN", str(MEAN), "INPUT.PIXEL_STD", str(STD),
                         "INPUT.TRANSFORMS", str(list(transforms))])
    return cfg


def transforms(decoder: str, **kw):
    """(train, test) transforms of ``decoder``, their log lines silenced."""
    cfg = cfg_of(decoder, **kw)
    with contextlib.redirect_stdout(io.StringIO()):
        return build_transform(cfg, is_train=True), build_transform(cfg, is_train=False)


class RecordingImage(ImageFile):
    """An image file that records each region a transform asks it for."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.boxes: list[tuple] = []

    def region(self, box, size, interpolation):
        self.boxes.append(tuple(int(v) for v in box))
        return super().region(box, size, interpolation)


def levels(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| of two normalised images in 8-bit grey levels."""
    return ((a - b) * torch.tensor(STD).view(3, 1, 1) * 255).abs()


def pil_reference(path: str, box, flipped: bool, size: int = 224) -> torch.Tensor:
    """The crop ``box`` of the image resized by PIL (bicubic), flipped, normalised: written out with PIL and
    torchvision's functional ops, not with the pipeline under test (crop first: the resize sees no pixel outside)."""
    top, left, h, w = box
    with Image.open(path) as img:
        crop = img.convert("RGB").crop((left, top, left + w, top + h)).resize((size, size), Image.BICUBIC)
    crop = crop.transpose(Image.FLIP_LEFT_RIGHT) if flipped else crop
    return T.functional.normalize(T.functional.to_tensor(crop), MEAN, STD)


@pytest.mark.parametrize("name", ["small", "typical", "large", "png"])
def test_tensor_decoder_draws_the_pil_pipelines_crops_and_flips(images, name):
    """For each seed: torchvision's own RandomResizedCrop / RandomHorizontalFlip draws on the PIL image give the box
    and flip; the PIL pipeline's output is exactly that crop (the reference is right), the tensor pipeline asks the
    image for exactly that box, leaves torch's RNG where the PIL pipeline leaves it, and its pixels are the PIL
    reference's within 4 grey levels (mean under 0.3) or, for the large JPEG (draft-mode decoding), mean under 1.5."""
    path = images[name]
    pil_train, _ = transforms("pil")
    tensor_train, _ = transforms("tensor")
    assert isinstance(tensor_train, TensorTransform)
    flips = set()
    for seed in range(12):
        with seeded_rngs(seed), Image.open(path) as img:
            box = T.RandomResizedCrop.get_params(img, list(SCALE), list(RATIO))
            flipped = bool(torch.rand(1) < 0.5)
            drawn = torch.get_rng_state()
        flips.add(flipped)
        reference = pil_reference(path, box, flipped)
        with seeded_rngs(seed):
            pil_out = pil_train(load_image(path, "pil"))
            assert torch.equal(torch.get_rng_state(), drawn)
        torch.testing.assert_close(pil_out, reference, rtol=0, atol=0)
        image = RecordingImage(path)
        with seeded_rngs(seed):
            tensor_out = tensor_train(image)
            assert torch.equal(torch.get_rng_state(), drawn)
        assert image.boxes == [tuple(box)]
        diff = levels(tensor_out, reference)
        assert tensor_out.shape == (3, 224, 224) and tensor_out.dtype == torch.float32
        if name == "large" and min(box[2], box[3]) >= 448:
            assert diff.mean() < 1.5, (seed, box, float(diff.mean()))
        else:
            assert diff.max() <= 4 and diff.mean() < 0.3, (seed, box, float(diff.max()), float(diff.mean()))
    assert flips == {False, True}


@pytest.mark.parametrize("name", ["small", "typical", "large", "png"])
def test_without_draft_mode_the_tensor_pixels_are_torchvisions_v2(images, name):
    """Decoded whole (no draft mode), the uint8 half of the tensor transforms is, bit for bit, what
    torchvision.transforms.v2's own steps make of the same decode, and leaves torch's RNG where they leave it: ours
    is v2's steps, its first one drawn on the file's size and read as a region (v2 takes the decoded image)."""
    train, test = transforms("tensor")
    bicubic = InterpolationMode.BICUBIC
    v2_train = v2.Compose([v2.RandomResizedCrop(224, list(SCALE), list(RATIO), bicubic, antialias=True),
                           v2.RandomHorizontalFlip()])
    v2_test = v2.Compose([v2.Resize(224, bicubic, antialias=True), v2.CenterCrop(224)])
    path = images[name]
    for seed in range(6):
        with seeded_rngs(seed):
            ours = train.pixels(ImageFile(path, draft=False))
            after = torch.get_rng_state()
        with seeded_rngs(seed):
            theirs = v2_train(ImageFile(path).decode())
            assert torch.equal(torch.get_rng_state(), after)
        assert torch.equal(ours, theirs), seed
    assert torch.equal(test.pixels(ImageFile(path, draft=False)), v2_test(ImageFile(path).decode()))


def test_draft_mode_reads_the_same_region_at_a_fraction_of_the_pixels(images):
    """A box of 800 x 1000 pixels of the large JPEG holds 3.6 times the 224 output: the JPEG is decoded at 1/2 (a
    path other than the full decode) and the box resampled from its position there, within 1.5 grey levels (mean) of
    PIL's crop of the full image; the same box shifted by 8 pixels is more than twice as far."""
    path = images["large"]
    box = (50, 100, 800, 1000)
    image = ImageFile(path)
    region = image.region(box, (224, 224), "bicubic")
    shifted = image.region((58, 108, 800, 1000), (224, 224), "bicubic")
    with Image.open(path) as img:
        full = img.convert("RGB")
        reference = torch.from_numpy(np.asarray(full.crop((100, 50, 1100, 850)).resize((224, 224), Image.BICUBIC)))
    reference = reference.permute(2, 0, 1).float()
    near, far = (region.float() - reference).abs().mean(), (shifted.float() - reference).abs().mean()
    assert region.dtype == torch.uint8 and region.shape == (3, 224, 224)
    assert not torch.equal(region, resized_crop(image.decode(), box, (224, 224), "bicubic"))
    assert near < 1.5 and far > 2 * near, (float(near), float(far))


@pytest.mark.parametrize("name", ["small", "typical", "large", "png"])
def test_tensor_test_transform_matches_the_pil_one(images, name):
    """Resize of the shorter side to 224 and the centre crop: the same geometry (shape), the pixels within 4 grey
    levels of PIL's (mean under 0.3; draft-mode decoding of the large JPEG: mean under 1.5)."""
    _, pil_test = transforms("pil")
    _, tensor_test = transforms("tensor")
    path = images[name]
    diff = levels(tensor_test(load_image(path, "tensor")), pil_test(load_image(path, "pil")))
    if name == "large":
        assert diff.mean() < 1.5
    else:
        assert diff.max() <= 4 and diff.mean() < 0.3, (float(diff.max()), float(diff.mean()))


def test_resize_without_crops_and_a_native_size_png_are_exact(images):
    """The demo configs' train transform (resize, flip, normalise) on a PNG already at the output size: nothing is
    resampled, so both decoders give the same tensor, bit for bit, and draw the same flip."""
    pil_train, _ = transforms("pil", transforms=("random_flip", "normalize"), size=96)
    tensor_train, _ = transforms("tensor", transforms=("random_flip", "normalize"), size=96)
    path = images["png"]
    with Image.open(path) as img:
        img.convert("RGB").resize((96, 96)).save(path.replace(".png", "_square.png"))
    square = path.replace(".png", "_square.png")
    for seed in range(4):
        with seeded_rngs(seed):
            a = pil_train(load_image(square, "pil"))
        with seeded_rngs(seed):
            b = tensor_train(load_image(square, "tensor"))
        assert torch.equal(a, b)


def test_missing_and_corrupt_images_are_the_same_errors(tmp_path):
    """The tensor decoder names a missing or corrupt image as the PIL reader does."""
    tensor_train, _ = transforms("tensor")
    with pytest.raises(InputNotFoundError, match="Image not found: .*missing.jpg"):
        load_image(str(tmp_path / "missing.jpg"), "tensor")
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    with pytest.raises(CorruptFileError, match="Cannot read image .*bad.jpg"):
        tensor_train(load_image(str(bad), "tensor"))
    truncated = tmp_path / "truncated.jpg"
    smooth_image(300, 200, 0).save(truncated, quality=95)
    truncated.write_bytes(truncated.read_bytes()[:400])
    with pytest.raises(CorruptFileError, match="Cannot read image .*truncated.jpg"):
        tensor_train(load_image(str(truncated), "tensor"))


@pytest.mark.parametrize("opts,message", [
    (["INPUT.TRANSFORMS", "['random_resized_crop', 'colorjitter']"],
     r"INPUT.DECODER tensor runs the transforms .*but INPUT.TRANSFORMS has \['colorjitter'\]; drop them or use "
     r"INPUT.DECODER pil"),
    (["DATALOADER.RETURN_IMG0", "True"], r"DATALOADER.RETURN_IMG0 True needs INPUT.DECODER pil"),
])
def test_what_the_tensor_decoder_does_not_cover_is_one_config_error(opts, message):
    cfg = cfg_of("tensor")
    cfg.merge_from_list(opts)
    with pytest.raises(ConfigError, match=message):
        check_decoder(cfg)
    cfg.INPUT.DECODER = "pil"
    check_decoder(cfg)
