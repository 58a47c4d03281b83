"""Stanford Cars (196 models): ``stanford_cars/{cars_train,cars_test}/<id>.jpg``, ``devkit/`` +
``split_zhou_StanfordCars.json`` (paths relative to the dataset folder)."""
from __future__ import annotations

import os
import random

from engine.dataset_base import Datum
from engine.registry import DATASET_REGISTRY

from .protocols import ProtocolDataset
from .splits import SplitData, make_datum, native_file, read_or_create_split, split_trainval, year_first


@DATASET_REGISTRY.register()
class StanfordCars(ProtocolDataset):
    """Stanford Cars reader; a missing split is made from the devkit's .mat annotations, class names year first."""

    dataset_dir = "stanford_cars"

    @classmethod
    def read(cls, dataset_dir: str) -> SplitData:
        name = cls.__name__
        split_path = os.path.join(dataset_dir, "split_zhou_StanfordCars.json")

        def read_annotations(image_folder: str, anno_file: str) -> list[Datum]:
            from scipy.io import loadmat  # only for the native-file fallback (no split file)

            anno_path = native_file(os.path.join(dataset_dir, anno_file), split_path, name)
            meta_path = native_file(os.path.join(dataset_dir, "devkit", "cars_meta.mat"), split_path, name)
            class_names = loadmat(meta_path)["class_names"][0]
            items = []
            for anno in loadmat(anno_path)["annotations"][0]:
                label = int(anno["class"][0, 0]) - 1
                impath = os.path.join(dataset_dir, image_folder, str(anno["fname"][0]))
                items.append(make_datum(impath, label, year_first(str(class_names[label][0])), anno_path, name))
            return items

        def create(rng: random.Random):
            trainval = read_annotations("cars_train", os.path.join("devkit", "cars_train_annos.mat"))
            test = read_annotations("cars_test", "cars_test_annos_withlabels.mat")
            return (*split_trainval(trainval, rng, name), test)

        return read_or_create_split(name, dataset_dir, split_path, dataset_dir, create)
