"""Where CLIP weights are found (standard library only): OpenAI's model names and their download addresses, and
the places a name is looked up, so the runner's preflight resolves weights as ``clip.load_model`` does, without
torch."""
from __future__ import annotations

import os

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


def candidate_paths(name: str, download_root: str | None = None, cwd: str | None = None) -> list[str]:
    """Places searched for a named model, in order: ``<cwd>/clip/`` (default the working folder), $CLIP_WEIGHTS_DIR,
    ``download_root`` or ~/.cache/clip."""
    basename = os.path.basename(MODELS[name])
    dirs = [os.path.join(cwd or os.getcwd(), "clip")]
    if os.environ.get("CLIP_WEIGHTS_DIR"):
        dirs.append(os.environ["CLIP_WEIGHTS_DIR"])
    dirs.append(download_root or cache_dir())
    return [os.path.join(d, basename) for d in dirs]


def find_weights(name_or_path: str, download_root: str | None = None, cwd: str | None = None) -> str | None:
    """The weight file ``clip.load_model(name_or_path)`` would read without downloading (None: none yet, or an
    unknown name that is not a file)."""
    if os.path.isfile(name_or_path):
        return name_or_path
    if name_or_path not in MODELS:
        return None
    return next((p for p in candidate_paths(name_or_path, download_root, cwd) if os.path.isfile(p)), None)
