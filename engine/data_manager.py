"""Dassl's DataManager: builds the dataset, transforms and the train_x / train_u / val / test loaders."""
from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from functools import partial

import torch
from tabulate import tabulate
from torch.utils.data import DataLoader, Dataset, DistributedSampler, RandomSampler, Sampler, SequentialSampler
from torchvision import transforms as T

from .data_stream import SeededPassSampler, sample_context
from .dataset_base import DatasetBase, Datum, build_dataset
from .decoding import decoder_for, load_image
from .distributed import get_backend, get_rank, get_world_size, is_distributed
from .image_cache import ImageCache
from .image_cache import load_or_build as cached_images
from .preemption import worker_init_fn
from .transforms import INTERPOLATION_MODES, build_transform

SAMPLERS = ("RandomSampler", "SequentialSampler")
_PERSISTENT: weakref.WeakSet[DataLoader] = weakref.WeakSet()
"""The loaders with persistent workers that :func:`build_data_loader` built in this process (:func:`close_loaders`)."""


def build_sampler(sampler_type: str, data_source: Sequence[Datum]) -> Sampler:
    """torch's RandomSampler / SequentialSampler over ``data_source``; other names raise ValueError."""
    if sampler_type == "RandomSampler":
        return RandomSampler(data_source)
    if sampler_type == "SequentialSampler":
        return SequentialSampler(data_source)
    raise ValueError(f"Unknown sampler {sampler_type!r} (DATALOADER.*.SAMPLER); supported: {', '.join(SAMPLERS)}")


def build_distributed_sampler(sampler_type: str, data_source: Sequence[Datum], batch_size: int, is_train: bool,
                              drop_last: bool, seed: int) -> tuple[DistributedSampler, int]:
    """This process's shard of ``data_source`` under torchrun, and its per-process batch size.

    Training batch sizes are global: each of the N processes loads ``batch_size / N`` images, so a step sees the
    same global batch as one process (sequentially sampled: the very same images). Evaluation batch sizes are per
    process (they change no number). RandomSampler becomes a shuffled DistributedSampler (seeded with ``seed``,
    reshuffled through ``set_epoch``), SequentialSampler an unshuffled one. ``drop_last`` drops the tail that does
    not fill a global batch, as the single-process loader does; otherwise shards are padded to equal length.
    """
    if sampler_type not in SAMPLERS:
        build_sampler(sampler_type, data_source)  # the one unknown-sampler error
    world = get_world_size()
    if is_train:
        if batch_size % world:
            raise ValueError(f"The training batch size {batch_size} (DATALOADER.TRAIN_X / TRAIN_U .BATCH_SIZE) is the "
                             f"global batch over all processes and must be a multiple of the {world} processes "
                             "(torchrun --nproc_per_node); change the batch size or the number of processes")
        batch_size //= world
    sampler = DistributedSampler(data_source, num_replicas=world, rank=get_rank(),
                                 shuffle=sampler_type == "RandomSampler", seed=seed, drop_last=drop_last)
    return sampler, batch_size


class DatasetWrapper(Dataset):
    """Reads and transforms one ``Datum``; returns a dict with img, label, domain, impath, index (+ img0).

    Keys are dataset indices, or ``(index, sample seed)`` from a training loader's SeededPassSampler (the transforms
    then run with seeded RNGs: engine/data_stream.py). With ``images`` (an ``engine.image_cache.ImageCache`` of
    ``data_source``) the images come decoded from there instead of from their files."""

    def __init__(self, cfg, data_source: Sequence[Datum], transform=None, is_train: bool = False,
                 images: ImageCache | None = None) -> None:
        self.cfg = cfg
        self.data_source = data_source
        self.images = images
        self.transform = transform
        self.decoder = decoder_for(transform)
        self.is_train = is_train
        self.k_tfm = cfg.DATALOADER.K_TRANSFORMS if is_train else 1
        self.return_img0 = cfg.DATALOADER.RETURN_IMG0
        if self.k_tfm > 1 and transform is None:
            raise ValueError("DATALOADER.K_TRANSFORMS > 1 needs a transform (INPUT.NO_TRANSFORM is True)")
        size = tuple(cfg.INPUT.SIZE)
        tfm0 = [T.Resize(size, interpolation=INTERPOLATION_MODES[cfg.INPUT.INTERPOLATION]), T.ToTensor()]
        if "normalize" in cfg.INPUT.TRANSFORMS:
            tfm0.append(T.Normalize(mean=cfg.INPUT.PIXEL_MEAN, std=cfg.INPUT.PIXEL_STD))
        self.to_tensor = T.Compose(tfm0)

    def __len__(self) -> int:
        return len(self.data_source)

    def __getitem__(self, key) -> dict:
        idx, rng = sample_context(key)
        with rng:
            return self._load(idx)

    def _load(self, idx: int) -> dict:
        item = self.data_source[idx]
        output = {"label": item.label, "domain": item.domain, "impath": item.impath, "index": idx}
        img0 = load_image(item.impath, self.decoder) if self.images is None else self.images.image(idx, self.decoder)
        if self.transform is None:
            output["img"] = img0
        elif isinstance(self.transform, (list, tuple)):
            for i, tfm in enumerate(self.transform):
                output["img" if i == 0 else f"img{i + 1}"] = self._transform_image(tfm, img0)
        else:
            output["img"] = self._transform_image(self.transform, img0)
        if self.return_img0:
            output["img0"] = self.to_tensor(img0)
        return output

    def _transform_image(self, tfm: Callable, img0):
        views = [tfm(img0) for _ in range(self.k_tfm)]
        return views[0] if len(views) == 1 else views


def build_data_loader(
    cfg,
    sampler_type: str = "SequentialSampler",
    data_source: Sequence[Datum] | None = None,
    batch_size: int = 64,
    n_domain: int = 0,
    n_ins: int = 2,
    tfm=None,
    is_train: bool = True,
    dataset_wrapper: type | None = None,
) -> DataLoader:
    """A DataLoader with Dassl's settings (drop_last only for full training batches, pin_memory only on CUDA);
    ``DATALOADER.PERSISTENT_WORKERS`` keeps the worker processes alive across epochs and loader restarts. Under
    torchrun it loads this process's shard (``build_distributed_sampler``). Training loaders yield seeded passes
    (``SeededPassSampler``: exact step-level resume); workers ignore the preemption signals."""
    if not data_source:
        raise ValueError("build_data_loader: the data source is empty")
    drop_last = is_train and len(data_source) >= batch_size
    if is_distributed():
        sampler, batch_size = build_distributed_sampler(sampler_type, data_source, batch_size, is_train, drop_last,
                                                        seed=max(cfg.SEED, 0))
    else:
        sampler = build_sampler(sampler_type, data_source)
    if is_train:
        sampler = SeededPassSampler(sampler, rank=get_rank())
    wrapper = dataset_wrapper or DatasetWrapper
    loader = DataLoader(
        wrapper(cfg, data_source, transform=tfm, is_train=is_train),
        batch_size=batch_size,
        sampler=sampler,
        num_workers=cfg.DATALOADER.NUM_WORKERS,
        drop_last=drop_last,
        pin_memory=torch.cuda.is_available() and cfg.USE_CUDA,
        persistent_workers=cfg.DATALOADER.get("PERSISTENT_WORKERS", False) and cfg.DATALOADER.NUM_WORKERS > 0,
        worker_init_fn=worker_init_fn(),
    )
    assert len(loader) > 0
    if loader.persistent_workers:
        _PERSISTENT.add(loader)
    return loader


def close_loaders() -> None:
    """End the persistent worker processes of every loader :func:`build_data_loader` built in this process (a loader
    iterated again starts new ones). train.py calls it when a run ends: its trainer may outlive the run in a reference
    cycle (a routed trainer and its router), and collecting one closes the workers' queues before the iterator can
    tell them to stop, so they would stay until the process ends (a runner's warm worker serves many runs)."""
    for loader in list(_PERSISTENT):
        iterator, loader._iterator = loader._iterator, None  # torch's own test of "no workers yet"
        if iterator is not None:
            iterator._shutdown_workers()


class DataManager:
    """Dataset (built for the trainer's data ``role``) + loaders of one run (Dassl semantics); ``build_loader`` makes
    extra loaders for trainers."""

    def __init__(self, cfg, custom_tfm_train=None, custom_tfm_test=None, dataset_wrapper: type | None = None,
                 role: str | None = None) -> None:
        self.cfg = cfg
        self.dataset_wrapper = dataset_wrapper
        dataset = build_dataset(cfg, role)
        self.tfm_train = build_transform(cfg, is_train=True) if custom_tfm_train is None else custom_tfm_train
        self.tfm_test = build_transform(cfg, is_train=False) if custom_tfm_test is None else custom_tfm_test
        dl = cfg.DATALOADER
        if not dataset.train_x:
            raise ValueError(f"Dataset {cfg.DATASET.NAME} has an empty train_x split")
        self.train_loader_x = self._loader(dl.TRAIN_X.SAMPLER, dataset.train_x, dl.TRAIN_X.BATCH_SIZE,
                                           dl.TRAIN_X.N_DOMAIN, dl.TRAIN_X.N_INS, self.tfm_train, True)
        self.train_loader_u = None
        if dataset.train_u:
            u = dl.TRAIN_X if dl.TRAIN_U.SAME_AS_X else dl.TRAIN_U
            self.train_loader_u = self._loader(u.SAMPLER, dataset.train_u, u.BATCH_SIZE, u.N_DOMAIN, u.N_INS,
                                               self.tfm_train, True)
        self.val_loader = None
        if dataset.val:
            self.val_loader = self._loader(dl.TEST.SAMPLER, dataset.val, dl.TEST.BATCH_SIZE, 0, 0,
                                           self.tfm_test, False)
        if not dataset.test:
            raise ValueError(f"Dataset {cfg.DATASET.NAME} has an empty test split")
        self.test_loader = self._loader(dl.TEST.SAMPLER, dataset.test, dl.TEST.BATCH_SIZE, 0, 0, self.tfm_test, False)
        self._num_classes = dataset.num_classes
        self._num_source_domains = len(cfg.DATASET.SOURCE_DOMAINS)
        self._lab2cname = dataset.lab2cname
        self.dataset: DatasetBase = dataset
        self.images_cached = False
        if cfg.VERBOSE:
            self.show_dataset_summary()
        if is_distributed():
            world, batch = get_world_size(), dl.TRAIN_X.BATCH_SIZE
            print(f"Data parallel: {world} processes ({get_backend()}); global training batch {batch} = "
                  f"{batch // world} per process x {world}; evaluation batch {dl.TEST.BATCH_SIZE} per process")

    def _loader(self, sampler, source, batch_size, n_domain, n_ins, tfm, is_train,
                images: ImageCache | None = None) -> DataLoader:
        wrapper = self.dataset_wrapper if images is None else partial(self.dataset_wrapper or DatasetWrapper,
                                                                      images=images)
        return build_data_loader(self.cfg, sampler_type=sampler, data_source=source, batch_size=batch_size,
                                 n_domain=n_domain, n_ins=n_ins, tfm=tfm, is_train=is_train, dataset_wrapper=wrapper)

    def cache_images(self) -> bool:
        """With ``DATALOADER.IMAGE_CACHE_SIDE`` > 0: read or write the decoded images of the training splits
        (engine/image_cache.py) and rebuild their loaders on them (once); whether it did."""
        dl, dataset = self.cfg.DATALOADER, self.dataset
        if not dl.get("IMAGE_CACHE_SIDE", 0) or self.images_cached:
            return False
        self.images_cached = True
        self.train_loader_x = self._loader(dl.TRAIN_X.SAMPLER, dataset.train_x, dl.TRAIN_X.BATCH_SIZE,
                                           dl.TRAIN_X.N_DOMAIN, dl.TRAIN_X.N_INS, self.tfm_train, True,
                                           cached_images(self.cfg, "train_x", dataset.train_x))
        if self.train_loader_u is not None:
            u = dl.TRAIN_X if dl.TRAIN_U.SAME_AS_X else dl.TRAIN_U
            self.train_loader_u = self._loader(u.SAMPLER, dataset.train_u, u.BATCH_SIZE, u.N_DOMAIN, u.N_INS,
                                               self.tfm_train, True, cached_images(self.cfg, "train_u",
                                                                                   dataset.train_u))
        return True

    def build_loader(self, data_source: Sequence[Datum], is_train: bool, batch_size: int | None = None) -> DataLoader:
        """An extra loader: train settings + train transform, or test settings + test transform."""
        dl = self.cfg.DATALOADER
        if is_train:
            return self._loader(dl.TRAIN_X.SAMPLER, data_source, batch_size or dl.TRAIN_X.BATCH_SIZE,
                                dl.TRAIN_X.N_DOMAIN, dl.TRAIN_X.N_INS, self.tfm_train, True)
        return self._loader(dl.TEST.SAMPLER, data_source, batch_size or dl.TEST.BATCH_SIZE, 0, 0,
                            self.tfm_test, False)

    @property
    def num_classes(self) -> int:
        return self._num_classes

    @property
    def num_source_domains(self) -> int:
        return self._num_source_domains

    @property
    def lab2cname(self) -> dict[int, str]:
        return self._lab2cname

    def show_dataset_summary(self) -> None:
        """Print the split sizes as a table."""
        ds = self.dataset
        rows = [["Dataset", self.cfg.DATASET.NAME]]
        if self.cfg.DATASET.SOURCE_DOMAINS:
            rows.append(["Source", self.cfg.DATASET.SOURCE_DOMAINS])
        if self.cfg.DATASET.TARGET_DOMAINS:
            rows.append(["Target", self.cfg.DATASET.TARGET_DOMAINS])
        rows.append(["# classes", f"{self.num_classes:,}"])
        rows.append(["# train_x", f"{len(ds.train_x):,}"])
        if ds.train_u:
            rows.append(["# train_u", f"{len(ds.train_u):,}"])
        if ds.val:
            rows.append(["# val", f"{len(ds.val):,}"])
        rows.append(["# test", f"{len(ds.test):,}"])
        print(tabulate(rows))
