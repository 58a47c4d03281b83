"""Hand-crafted CLIP prompt templates per dataset: CoOp's single template and CLIP's published ensembles.

Data only (plus three look-up functions). ``CUSTOM_TEMPLATES`` is CoOp's one-template table (keyed by
``DATASET.NAME``); ``ENSEMBLE_TEMPLATES`` holds CLIP's per-dataset template lists (openai/CLIP ``data/prompts.md``;
ImageNet and its variants use the 80 templates of CLIP's ImageNet prompt-engineering notebook), the lists the PETR
paper's appendix uses for PETR+CoOp's unseen branch. ``IMAGENET_TEMPLATES_SELECT`` is CoOp's 7-template subset
used by its ``ZeroshotCLIP2`` baseline. The built-in demo datasets use "a photo of a {}." and, as their ensemble,
ZeroshotCLIP2's set (the 7 SELECT templates + that one). Every template has one ``{}`` for the class name.
"""
from __future__ import annotations

_PHOTO = "a photo of a {}."
_IMAGENET_FAMILY = ("ImageNet", "ImageNetSketch", "ImageNetV2", "ImageNetA", "ImageNetR")
_DEMO = ("DemoShapes", "DemoShapesHard")  # the built-in demo (demo/captions.py: these are held out of pretraining)

CUSTOM_TEMPLATES: dict[str, str] = {
    "OxfordPets": "a photo of a {}, a type of pet.",
    "OxfordFlowers": "a photo of a {}, a type of flower.",
    "FGVCAircraft": "a photo of a {}, a type of aircraft.",
    "DescribableTextures": "{} texture.",
    "EuroSAT": "a centered satellite photo of {}.",
    "StanfordCars": _PHOTO,
    "Food101": "a photo of {}, a type of food.",
    "SUN397": _PHOTO,
    "Caltech101": _PHOTO,
    "UCF101": "a photo of a person doing {}.",
    **{name: _PHOTO for name in _IMAGENET_FAMILY},
    **{name: _PHOTO for name in _DEMO},
}

IMAGENET_TEMPLATES_SELECT: list[str] = [
    "itap of a {}.",
    "a bad photo of the {}.",
    "a origami {}.",
    "a photo of the large {}.",
    "a {} in a video game.",
    "art of the {}.",
    "a photo of the small {}.",
]

# CLIP's 80 ImageNet templates (notebooks/Prompt_Engineering_for_ImageNet.ipynb), in CLIP's order.
IMAGENET_TEMPLATES: list[str] = [
    "a bad photo of a {}.",
    "a photo of many {}.",
    "a sculpture of a {}.",
    "a photo of the hard to see {}.",
    "a low resolution photo of the {}.",
    "a rendering of a {}.",
    "graffiti of a {}.",
    "a bad photo of the {}.",
    "a cropped photo of the {}.",
    "a tattoo of a {}.",
    "the embroidered {}.",
    "a photo of a hard to see {}.",
    "a bright photo of a {}.",
    "a photo of a clean {}.",
    "a photo of a dirty {}.",
    "a dark photo of the {}.",
    "a drawing of a {}.",
    "a photo of my {}.",
    "the plastic {}.",
    "a photo of the cool {}.",
    "a close-up photo of a {}.",
    "a black and white photo of the {}.",
    "a painting of the {}.",
    "a painting of a {}.",
    "a pixelated photo of the {}.",
    "a sculpture of the {}.",
    "a bright photo of the {}.",
    "a cropped photo of a {}.",
    "a plastic {}.",
    "a photo of the dirty {}.",
    "a jpeg corrupted photo of a {}.",
    "a blurry photo of the {}.",
    "a photo of the {}.",
    "a good photo of the {}.",
    "a rendering of the {}.",
    "a {} in a video game.",
    "a photo of one {}.",
    "a doodle of a {}.",
    "a close-up photo of the {}.",
    "a photo of a {}.",
    "the origami {}.",
    "the {} in a video game.",
    "a sketch of a {}.",
    "a doodle of the {}.",
    "a origami {}.",
    "a low resolution photo of a {}.",
    "the toy {}.",
    "a rendition of the {}.",
    "a photo of the clean {}.",
    "a photo of a large {}.",
    "a rendition of a {}.",
    "a photo of a nice {}.",
    "a photo of a weird {}.",
    "a blurry photo of a {}.",
    "a cartoon {}.",
    "art of a {}.",
    "a sketch of the {}.",
    "a embroidered {}.",
    "a pixelated photo of a {}.",
    "itap of the {}.",
    "a jpeg corrupted photo of the {}.",
    "a good photo of a {}.",
    "a plushie {}.",
    "a photo of the nice {}.",
    "a photo of the small {}.",
    "a photo of the weird {}.",
    "the cartoon {}.",
    "art of the {}.",
    "a drawing of the {}.",
    "a photo of the large {}.",
    "a black and white photo of a {}.",
    "the plushie {}.",
    "a dark photo of a {}.",
    "itap of a {}.",
    "graffiti of the {}.",
    "a toy {}.",
    "itap of my {}.",
    "a photo of a cool {}.",
    "a photo of a small {}.",
    "a tattoo of the {}.",
]

# CLIP's lists from data/prompts.md, keyed by our DATASET.NAME (CLIP's "Flowers102" is OxfordFlowers).
_CLIP_DATASET_TEMPLATES: dict[str, list[str]] = {
    "Caltech101": [
        "a photo of a {}.",
        "a painting of a {}.",
        "a plastic {}.",
        "a sculpture of a {}.",
        "a sketch of a {}.",
        "a tattoo of a {}.",
        "a toy {}.",
        "a rendition of a {}.",
        "a embroidered {}.",
        "a cartoon {}.",
        "a {} in a video game.",
        "a plushie {}.",
        "a origami {}.",
        "art of a {}.",
        "graffiti of a {}.",
        "a drawing of a {}.",
        "a doodle of a {}.",
        "a photo of the {}.",
        "a painting of the {}.",
        "the plastic {}.",
        "a sculpture of the {}.",
        "a sketch of the {}.",
        "a tattoo of the {}.",
        "the toy {}.",
        "a rendition of the {}.",
        "the embroidered {}.",
        "the cartoon {}.",
        "the {} in a video game.",
        "the plushie {}.",
        "the origami {}.",
        "art of the {}.",
        "graffiti of the {}.",
        "a drawing of the {}.",
        "a doodle of the {}.",
    ],
    "DescribableTextures": [
        "a photo of a {} texture.",
        "a photo of a {} pattern.",
        "a photo of a {} thing.",
        "a photo of a {} object.",
        "a photo of the {} texture.",
        "a photo of the {} pattern.",
        "a photo of the {} thing.",
        "a photo of the {} object.",
    ],
    "EuroSAT": [
        "a centered satellite photo of {}.",
        "a centered satellite photo of a {}.",
        "a centered satellite photo of the {}.",
    ],
    "FGVCAircraft": [
        "a photo of a {}, a type of aircraft.",
        "a photo of the {}, a type of aircraft.",
    ],
    "Food101": [
        "a photo of {}, a type of food.",
    ],
    "OxfordFlowers": [
        "a photo of a {}, a type of flower.",
    ],
    "OxfordPets": [
        "a photo of a {}, a type of pet.",
    ],
    "StanfordCars": [
        "a photo of a {}.",
        "a photo of the {}.",
        "a photo of my {}.",
        "i love my {}!",
        "a photo of my dirty {}.",
        "a photo of my clean {}.",
        "a photo of my new {}.",
        "a photo of my old {}.",
    ],
    "SUN397": [
        "a photo of a {}.",
        "a photo of the {}.",
    ],
    "UCF101": [
        "a photo of a person {}.",
        "a video of a person {}.",
        "a example of a person {}.",
        "a demonstration of a person {}.",
        "a photo of the person {}.",
        "a video of the person {}.",
        "a example of the person {}.",
        "a demonstration of the person {}.",
        "a photo of a person using {}.",
        "a video of a person using {}.",
        "a example of a person using {}.",
        "a demonstration of a person using {}.",
        "a photo of the person using {}.",
        "a video of the person using {}.",
        "a example of the person using {}.",
        "a demonstration of the person using {}.",
        "a photo of a person doing {}.",
        "a video of a person doing {}.",
        "a example of a person doing {}.",
        "a demonstration of a person doing {}.",
        "a photo of the person doing {}.",
        "a video of the person doing {}.",
        "a example of the person doing {}.",
        "a demonstration of the person doing {}.",
        "a photo of a person during {}.",
        "a video of a person during {}.",
        "a example of a person during {}.",
        "a demonstration of a person during {}.",
        "a photo of the person during {}.",
        "a video of the person during {}.",
        "a example of the person during {}.",
        "a demonstration of the person during {}.",
        "a photo of a person performing {}.",
        "a video of a person performing {}.",
        "a example of a person performing {}.",
        "a demonstration of a person performing {}.",
        "a photo of the person performing {}.",
        "a video of the person performing {}.",
        "a example of the person performing {}.",
        "a demonstration of the person performing {}.",
        "a photo of a person practicing {}.",
        "a video of a person practicing {}.",
        "a example of a person practicing {}.",
        "a demonstration of a person practicing {}.",
        "a photo of the person practicing {}.",
        "a video of the person practicing {}.",
        "a example of the person practicing {}.",
        "a demonstration of the person practicing {}.",
    ],
}

ENSEMBLE_TEMPLATES: dict[str, list[str]] = {
    **_CLIP_DATASET_TEMPLATES,
    **{name: IMAGENET_TEMPLATES for name in _IMAGENET_FAMILY},
    **{name: [*IMAGENET_TEMPLATES_SELECT, _PHOTO] for name in _DEMO},
}


def single_template(dataset_name: str) -> str:
    """CoOp's template for ``dataset_name``; "a photo of a {}." (with a printed note) for unlisted datasets."""
    if dataset_name not in CUSTOM_TEMPLATES:
        print(f"Note: no prompt template for dataset {dataset_name!r} in trainers/prompting/templates.py; using "
              f"{_PHOTO!r}")
    return CUSTOM_TEMPLATES.get(dataset_name, _PHOTO)


def select_templates(dataset_name: str) -> list[str]:
    """CoOp's ZeroshotCLIP2 set: the 7 SELECT templates, plus the dataset's single template outside ImageNet."""
    if dataset_name in _IMAGENET_FAMILY:
        return list(IMAGENET_TEMPLATES_SELECT)
    return [*IMAGENET_TEMPLATES_SELECT, single_template(dataset_name)]


def ensemble_templates(dataset_name: str) -> list[str]:
    """CLIP's template list for ``dataset_name``; unlisted datasets fall back to :func:`select_templates` (noted)."""
    if dataset_name not in ENSEMBLE_TEMPLATES:
        print(f"Note: no CLIP template list for dataset {dataset_name!r} in trainers/prompting/templates.py; using the "
              "7 IMAGENET_TEMPLATES_SELECT templates plus its single template")
        return select_templates(dataset_name)
    return list(ENSEMBLE_TEMPLATES[dataset_name])
