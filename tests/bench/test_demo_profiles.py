"""The toy world's profile study (bench/demo_profiles.py): each variant's overrides are the runner's profile overrides
(written out by hand here), the graph variant's skip notes, the step-time reading and the table's statistics."""
import statistics

import numpy as np
import pytest

from bench.demo_profiles import VARIANTS, median_step_ms, profile_table, skipped_variants

VARIANT = {v.name: v for v in VARIANTS}


def test_paper_variant_adds_nothing(tmp_path):
    assert VARIANT["paper"].opts("PETR", str(tmp_path), has_bf16=True) == []
    assert VARIANT["paper"].opts("PromptKD", str(tmp_path), has_bf16=False) == []


def test_the_data_path_variants_add_crops_then_the_tensor_decoder(tmp_path):
    crops = ["INPUT.TRANSFORMS", "['random_resized_crop', 'random_flip', 'normalize']"]
    assert VARIANT["paper + crops"].opts("PETR", str(tmp_path), has_bf16=True) == crops
    assert VARIANT["paper + crops + tensor decoder"].opts("PromptKD", str(tmp_path), has_bf16=False) == [
        *crops, "INPUT.DECODER", "tensor"]


@pytest.mark.parametrize("has_bf16", [True, False])
def test_fast_variants_are_the_runners_fast_profile(tmp_path, has_bf16):
    cache = str(tmp_path / "teacher_cache")
    for trainer, ns in (("PETR", "PETR"), ("PromptKD", "PROMPTKD")):
        fast = (["TRAINER." + ns + ".PREC", "bf16"] if has_bf16 else []) + [
            "DATALOADER.PERSISTENT_WORKERS", "True", "INPUT.DECODER", "tensor", "TRAIN.COMPILE", "compile",
            f"TRAINER.{ns}.TEACHER_CACHE", "views", f"TRAINER.{ns}.TEACHER_CACHE_DIR", cache]
        assert VARIANT["fast"].opts(trainer, str(tmp_path), has_bf16) == fast
        graph = VARIANT["fast + CUDA graph"].opts(trainer, str(tmp_path), has_bf16)
        assert graph == fast + ["TRAIN.COMPILE", "none", "TRAIN.CUDA_GRAPH", "True"]


def test_the_graph_variant_is_skipped_with_its_reason():
    assert skipped_variants("cpu") == {"fast + CUDA graph": "TRAIN.CUDA_GRAPH needs a CUDA GPU (run with --device "
                                                            "cuda)"}
    # the demo configs train with Adam (configs/trainers/{PromptKD,PETR}/demo.yaml), which the graph captures
    assert skipped_variants("cuda") == {}


def test_median_step_ms_reads_train_py_progress_lines():
    log = ("epoch [1/2] batch [12/40] time 0.050 (0.900) data 0.001 (0.002) loss 1.0 lr 1e-3 eta 0:00:03\n"
           "Evaluate on the *test* set\n"
           "epoch [1/2] batch [24/40] time 0.030 (0.500) data 0.001 (0.002) loss 1.0 lr 1e-3 eta 0:00:02\n"
           "epoch [2/2] batch [12/40] time 2.000 (0.400) data 0.001 (0.002) loss 1.0 lr 1e-3 eta 0:00:01\n")
    assert median_step_ms(log) == pytest.approx(50.0)
    assert np.isnan(median_step_ms("no progress line"))


def test_table_means_and_sample_stds():
    values = {("PETR", "paper", 1): [80.0, 60.0, 68.57, 12.0], ("PETR", "paper", 2): [82.0, 64.0, 71.89, 14.0],
              ("PETR", "paper", 3): [81.0, 59.0, 68.27, 19.0], ("PETR", "fast", 1): [79.5, 61.25, 69.19, 7.5]}
    lines = profile_table(values).splitlines()
    rows = [line.split("  ") for line in lines[2:]]
    mean_row = next(line for line in lines if "paper" in line and "mean ± std" in line)
    cells = [c.strip() for c in mean_row.split("  ") if c.strip()]
    for column, index in ((3, 0), (4, 1), (5, 2)):
        numbers = [values["PETR", "paper", s][index] for s in (1, 2, 3)]
        expected = f"{np.mean(numbers):.2f} ± {np.std(numbers, ddof=1):.2f}"
        assert cells[column] == expected
    steps = [12.0, 14.0, 19.0]
    assert cells[6] == f"{statistics.mean(steps):.1f} ± {statistics.stdev(steps):.1f}" == "15.0 ± 3.6"
    assert not any("fast" in line and "mean" in line for line in lines)  # one seed: no mean row
    assert len(rows) == 5  # 3 + 1 seeds and the mean row of the three


def test_table_reads_the_finished_runs_only(tmp_path):
    """A failed or missing run leaves its row out; the others show with HM and step read from their files."""
    import json

    from bench.demo_profiles import ProfileStudy
    from demo.pipeline import Paths
    from demo.study import PLAN, Demo

    demo = Demo(PLAN, Paths(str(tmp_path / "data"), str(tmp_path / "out"), str(tmp_path / "cache")))
    study = ProfileStudy(demo, VARIANTS[:1], [1, 2], "cpu", False, {})
    for trainer in ("PromptKD", "PETR"):
        run = tmp_path / "out" / "paper" / trainer / "seed1"
        for part, accuracy in (("train_base", 80.0), ("test_new", 60.0)):
            (run / part).mkdir(parents=True)
            (run / part / "results.json").write_text(json.dumps({"accuracy": accuracy}))
        (run / "train_base" / "log.txt").write_text(
            "epoch [1/1] batch [12/24] time 0.020 (0.020) data 0.001 (0.001) loss 1.0\n")
    (tmp_path / "out" / "paper" / "PETR" / "seed2" / "train_base").mkdir(parents=True)  # a run that failed
    lines = study.table().splitlines()[2:]
    assert [line.split()[:3] for line in lines] == [["PromptKD", "paper", "1"], ["PETR", "paper", "1"]]
    assert lines[1].split()[3:] == ["80.00", "60.00", f"{2 * 80 * 60 / 140:.2f}", "20.0"]
