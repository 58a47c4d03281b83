"""Where CLIP weights are found (standard library only): OpenAI's model names and their download addresses,
open_clip's names (``open_clip:MODEL/TAG``, ``open_clip:MODEL=FILE``, ``open_clip:local-dir:FOLDER``) and the places
a name is looked up, so the runner's preflight resolves weights as ``clip.load_model`` does, without torch."""
from __future__ import annotations

import os
from dataclasses import dataclass

from engine.errors import ConfigError
from engine.inputs import read_input_json, read_input_text

from .openclip_registry import ARCHITECTURES, OPENAI_MEAN, OPENAI_STD, PRETRAINED, REFUSED

# OpenAI's public checkpoints; the second-to-last path segment is the file's SHA-256.
MODELS = {
    "RN50": "https://openaipublic.azureedge.net/clip/models/"
            "afeb0e10f9e5a86da6080e35cf09123aca3b358a0c3e3b6c78a7b63bc04b6762/RN50.pt",
    "RN101": "https://openaipublic.azureedge.net/clip/models/"
             "8fa8567bab74a42d41c5915025a8e4538c3bdbe8804a470a72f30b0d94fab599/RN101.pt",
    "RN50x4": "https://openaipublic.azureedge.net/clip/models/"
              "7e526bd135e493cef0776de27d5f42653e6b4c8bf9e0f653bb11773263205fdd/RN50x4.pt",
    "RN50x16": "https://openaipublic.azureedge.net/clip/models/"
               "52378b407f34354e150460fe41077663dd5b39c54cd0bfd2b27167a4a06ec9aa/RN50x16.pt",
    "RN50x64": "https://openaipublic.azureedge.net/clip/models/"
               "be1cfb55d75a9666199fb2206c106743da0f6468c9d327f3e0d0a543a9919d9c/RN50x64.pt",
    "ViT-B/32": "https://openaipublic.azureedge.net/clip/models/"
                "40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af/ViT-B-32.pt",
    "ViT-B/16": "https://openaipublic.azureedge.net/clip/models/"
                "5806e77cd80f8b59890b7e101eabd078d9fb84e6937f9e85e4ecb61988df416f/ViT-B-16.pt",
    "ViT-L/14": "https://openaipublic.azureedge.net/clip/models/"
                "b8cca3fd41ae0c99ba7e8951adf17d267cdb84cd88be6f7c2e0eca1737a03836/ViT-L-14.pt",
    "ViT-L/14@336px": "https://openaipublic.azureedge.net/clip/models/"
                      "3035c92b350959924f9f00213499208652fc7ea050643e8b385c2dac08641f02/ViT-L-14-336px.pt",
}
"""Model name -> download address."""


def url_sha256(url: str) -> str:
    """The SHA-256 an OpenAI weight URL carries (its second-to-last path segment)."""
    return url.split("/")[-2]


def cache_dir() -> str:
    """The default download folder, ~/.cache/clip."""
    return os.path.join(os.path.expanduser("~"), ".cache", "clip")


def default_dir() -> str:
    """Where weights are placed by hand and ``python -m clip.download`` puts OpenAI's: $CLIP_WEIGHTS_DIR, else
    ~/.cache/clip."""
    return os.environ.get("CLIP_WEIGHTS_DIR") or cache_dir()


def weight_dirs(download_root: str | None = None, cwd: str | None = None) -> list[str]:
    """The folders weights are placed in, in the order they are searched: ``<cwd>/clip/`` (default the working
    folder), $CLIP_WEIGHTS_DIR, ``download_root`` or ~/.cache/clip."""
    dirs = [os.path.join(cwd or os.getcwd(), "clip")]
    if os.environ.get("CLIP_WEIGHTS_DIR"):
        dirs.append(os.environ["CLIP_WEIGHTS_DIR"])
    dirs.append(download_root or cache_dir())
    return dirs


def candidate_paths(name: str, download_root: str | None = None, cwd: str | None = None) -> list[str]:
    """Places searched for a named model: its file name in each of :func:`weight_dirs`; for an open_clip tag, the
    hub cache's snapshot first (:func:`hub_snapshot`), then ``<dir>/<hub repository>/<file>`` in each folder."""
    spec = open_clip_name(name)
    if spec is None:
        return [os.path.join(d, os.path.basename(MODELS[name])) for d in weight_dirs(download_root, cwd)]
    entry = spec.pretrained
    snapshot = hub_snapshot(entry.hub, download_root)
    by_hand = [os.path.join(d, *entry.hub.split("/")) for d in weight_dirs(None, cwd)]
    return [os.path.join(folder, f) for folder in ([snapshot] if snapshot else []) + by_hand for f in entry.files]


def find_weights(name_or_path: str, download_root: str | None = None, cwd: str | None = None) -> str | None:
    """The weight file ``clip.load_model(name_or_path)`` would read without downloading (None: none yet, or an
    unknown name that is not a file). A malformed or unknown ``open_clip:`` name is a ConfigError."""
    if os.path.isfile(name_or_path):
        return name_or_path
    spec = open_clip_name(name_or_path)
    if spec is not None and spec.file:
        return spec.file if os.path.isfile(spec.file) else None
    if spec is not None and spec.folder:
        return folder_checkpoint(spec.folder)
    if spec is None and name_or_path not in MODELS:
        return None
    return next((p for p in candidate_paths(name_or_path, download_root, cwd) if os.path.isfile(p)), None)


OPEN_CLIP = "open_clip:"
LOCAL_DIR = "local-dir:"
CONFIG_FILE = "open_clip_config.json"
"""open_clip's local-dir layout: this config (``model_cfg``, ``preprocess_cfg``) beside the weight file."""
FOLDER_CHECKPOINTS = ("open_clip_model.safetensors", "open_clip_pytorch_model.safetensors",
                      "open_clip_pytorch_model.bin", "open_clip_pytorch_model.pth")
"""Weight files of a local-dir folder, in the order open_clip prefers them."""
NAME_FORMS = (f"{OPEN_CLIP}MODEL/TAG (a pretrained tag, e.g. open_clip:ViT-B-16/laion2b_s34b_b88k), "
              f"{OPEN_CLIP}MODEL=FILE (a checkpoint of a built-in architecture) or {OPEN_CLIP}{LOCAL_DIR}FOLDER "
              f"(open_clip's local-dir layout: {CONFIG_FILE} and {FOLDER_CHECKPOINTS[0]})")


@dataclass(frozen=True)
class Pretrained:
    """One pretrained tag of open_clip's registry (``clip/openclip_registry.py``)."""

    hub: str
    """Its Hugging Face hub repository."""
    files: tuple[str, ...]
    """Its weight file names, in the order open_clip tries them."""
    mean: tuple[float, ...]
    std: tuple[float, ...]
    resize: str
    """open_clip's evaluation resize (``shortest``: resize and centre crop, as the trainers; ``squash``)."""

    def page(self) -> str:
        """The hub repository's address ($HF_ENDPOINT, else huggingface.co)."""
        return f"{os.environ.get('HF_ENDPOINT', 'https://huggingface.co').rstrip('/')}/{self.hub}"

    def url(self, file: str = "") -> str:
        """Where the hub serves ``file`` (default: the first of :attr:`files`)."""
        return f"{self.page()}/resolve/main/{file or self.files[0]}"


@dataclass(frozen=True)
class OpenClipName:
    """An ``open_clip:`` CLIP name: a pretrained ``model/tag``, a checkpoint ``file`` of the built-in architecture
    ``model``, or a ``folder`` in open_clip's local-dir layout."""

    name: str
    model: str = ""
    tag: str = ""
    file: str = ""
    folder: str = ""

    @property
    def pretrained(self) -> Pretrained | None:
        entry = PRETRAINED.get(f"{self.model}/{self.tag}")
        return Pretrained(*entry) if entry else None


def open_clip_name(name: str) -> OpenClipName | None:
    """The parts of an ``open_clip:`` name (None for any other name); a malformed one, an unknown tag or an
    architecture that does not fit is one ConfigError naming it."""
    if not name.startswith(OPEN_CLIP):
        return None
    rest = name[len(OPEN_CLIP):]
    if rest.startswith(LOCAL_DIR) and rest[len(LOCAL_DIR):]:
        return OpenClipName(name, folder=rest[len(LOCAL_DIR):])
    model, sep, tail = rest.partition("=") if "=" in rest else rest.partition("/")
    if not (model and sep and tail):
        raise ConfigError(f"CLIP name {name!r} is not an open_clip name; give {NAME_FORMS}")
    if model in REFUSED:
        raise ConfigError(f"{name}: open_clip model {model} does not fit the prompt-aware CLIP: {REFUSED[model]}; "
                          "use an open_clip ViT of OpenAI's structure (`python -m clip.openclip` lists them)")
    if model not in ARCHITECTURES:
        raise ConfigError(f"{name}: open_clip has no model {model!r}; `python -m clip.openclip` lists the supported "
                          "pretrained names")
    if sep == "=":
        return OpenClipName(name, model=model, file=tail)
    spec = OpenClipName(name, model=model, tag=tail)
    if spec.pretrained is None:
        quick = f"{model}-quickgelu/{tail}"
        hint = (f"its weights were trained with QuickGELU: name open_clip:{quick}" if quick in PRETRAINED else
                "tags of this model: " + (", ".join(k.split("/", 1)[1] for k in PRETRAINED
                                                    if k.startswith(model + "/")) or "none"))
        raise ConfigError(f"{name}: open_clip has no pretrained tag {tail!r} of {model} that fits; {hint}")
    return spec


def folder_checkpoint(folder: str) -> str | None:
    """The weight file open_clip reads from a local-dir ``folder`` (None: none of :data:`FOLDER_CHECKPOINTS`)."""
    return next((p for p in (os.path.join(folder, f) for f in FOLDER_CHECKPOINTS) if os.path.isfile(p)), None)


def hub_cache(download_root: str | None = None) -> str:
    """The Hugging Face hub's download folder, where open_clip's pretrained files go: ``download_root``, else
    $HF_HUB_CACHE, $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub or $XDG_CACHE_HOME/huggingface/hub (~/.cache by default), as
    huggingface_hub decides it."""
    if download_root:
        return download_root
    home = os.getenv("HF_HOME", os.path.join(os.getenv("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                             "huggingface"))
    folder = os.getenv("HF_HUB_CACHE", os.getenv("HUGGINGFACE_HUB_CACHE", os.path.join(home, "hub")))
    return os.path.expandvars(os.path.expanduser(folder))


def hub_folder(repo: str, download_root: str | None = None) -> str:
    """The hub cache's folder of the model repository ``repo`` (``models--<org>--<name>``)."""
    return os.path.join(hub_cache(download_root), "models--" + repo.replace("/", "--"))


def hub_snapshot(repo: str, download_root: str | None = None) -> str | None:
    """The snapshot folder of ``repo``'s main revision in the hub cache (what the hub client reads offline), None
    when there is none; its ref file is read through the inputs ledger, as it decides which file a run reads."""
    ref = os.path.join(hub_folder(repo, download_root), "refs", "main")
    if not os.path.isfile(ref):
        return None
    return os.path.join(hub_folder(repo, download_root), "snapshots", read_input_text(ref, "clip").strip())


def open_clip_by_hand(spec: OpenClipName, download_root: str | None = None) -> str:
    """How to place the weights of an ``open_clip:`` name by hand: the file, where it goes (the hub cache
    ``download_root``, default the hub's own) and how to check it."""
    if spec.file:
        return f"put the checkpoint at {spec.file} or name another file"
    if spec.folder:
        return f"put {CONFIG_FILE} and one of {', '.join(FOLDER_CHECKPOINTS)} in {spec.folder}"
    entry = spec.pretrained
    other = f" (or {entry.files[1]}, where the hub has no {entry.files[0]})" if len(entry.files) > 1 else ""
    other_root = download_root and os.path.abspath(download_root) != os.path.abspath(hub_cache())
    fetch = f"python -m clip.download {spec.name}" + (f" --dir {download_root}" if other_root else "")
    return (f"on a machine with internet run `{fetch}` and copy {hub_folder(entry.hub, download_root)} to the same "
            f"place here, or download {entry.url()}{other} into {os.path.join(default_dir(), entry.hub)}/ "
            f"(sha256sum must print the SHA256 listed at {entry.url().replace('/resolve/', '/blob/')})")


def declared_normalisation(name: str) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """The image mean and std the CLIP ``name`` was trained with, where the name says it: OpenAI's models, an
    open_clip tag (its registry entry), an open_clip checkpoint of a built-in architecture (open_clip's default,
    OpenAI's) or local-dir folder (its config's ``preprocess_cfg``); None for a bare weight file."""
    if name in MODELS:
        return OPENAI_MEAN, OPENAI_STD
    spec = open_clip_name(name)
    if spec is None:
        return None
    if spec.pretrained is not None:
        return spec.pretrained.mean, spec.pretrained.std
    if spec.folder:
        config = os.path.join(spec.folder, CONFIG_FILE)
        if not os.path.isfile(config):
            return None
        record = read_input_json(config, "clip")
        preprocess = record.get("preprocess_cfg") or {} if isinstance(record, dict) else {}
        return tuple(preprocess.get("mean", OPENAI_MEAN)), tuple(preprocess.get("std", OPENAI_STD))
    return OPENAI_MEAN, OPENAI_STD
