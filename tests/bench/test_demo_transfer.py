"""The transfer study's arithmetic (bench.demo_transfer): the teacher's lead and the share of it each seed's student
recovers, from the runs' results.json files, against hand-computed values."""
import os

from bench.demo_transfer import VARIANTS, TransferStudy
from demo.pipeline import Paths
from demo.pretrain import SHIPPED, default_params
from demo.study import FULL
from engine.utils import write_json


def _write(folder: str, accuracy: float) -> None:
    write_json({"accuracy": accuracy}, os.path.join(folder, "results.json"))


def test_row_reports_the_lead_and_the_share_recovered_per_seed(tmp_path):
    variant = VARIANTS[1]
    study = TransferStudy([variant], [1, 2], Paths(str(tmp_path / "data"), str(tmp_path / "out"), ""), 1, 1)
    for part, zs, teacher in (("base", 50.0, 70.0), ("novel", 40.0, 60.0)):
        _write(study.shared_dir(variant, f"zeroshot_{part}"), zs)
        _write(study.shared_dir(variant, f"teacher_{part}"), teacher)
    for seed, base, novel in ((1, 60.0, 45.0), (2, 64.0, 55.0)):
        _write(os.path.join(study.student_dir(variant, seed), "val_base"), base)
        _write(os.path.join(study.student_dir(variant, seed), "val_novel"), novel)
    row = study.row(variant, probes=False)
    # lead 20 on novel; seeds recover 5/20 = 25 % and 15/20 = 75 % (mean 50, sample std 35.36);
    # base: 10/20 = 50 % and 14/20 = 70 % (mean 60, std 14.14)
    assert row[1:4] == ["50.00 / 40.00", "70.00 / 60.00", "20.00"]
    assert row[4] == "50.00 ± 7.07"
    assert row[5] == "50.00 ± 35.36 %"
    assert row[6] == "60.00 ± 14.14 %"


def test_the_first_variant_is_the_shipped_design_and_variants_of_one_pair_of_clips_share_their_runs():
    assert VARIANTS[0].name == "shipped" and (VARIANTS[0].student, VARIANTS[0].teacher) == (
        SHIPPED["student"], SHIPPED["teacher"])
    assert dict(zip(VARIANTS[0].promptkd[::2], VARIANTS[0].promptkd[1::2])) == {
        "DATASET.NUM_SHOTS": "200", "OPTIM.MAX_EPOCH": "2"}  # every train image of the demo data, as the demo
    old_demo = (default_params("student"), default_params("teacher"))
    narrow = [v for v in VARIANTS if (v.student, v.teacher) == old_demo]
    assert len(narrow) >= 2 and len({v.world() for v in narrow}) == 1
    assert len({v.student_key() for v in narrow}) == len(narrow)
    assert VARIANTS[0].world() != narrow[0].world()


def test_probes_are_fitted_again_when_what_they_read_changes(tmp_path, monkeypatch, capsys):
    variant = VARIANTS[1]
    study = TransferStudy([variant], [1], Paths(str(tmp_path / "data"), str(tmp_path / "out"), ""), 1, 1)
    inputs = {"student_clip": "a", "teacher": ["b"], "shots": 32}
    fits = []

    def fit(*args) -> dict:
        fits.append(args)
        return {"teacher_labels": 40.0 + len(fits), "true_labels": 50.0}

    monkeypatch.setattr(study, "probe_inputs", lambda v: dict(inputs))
    monkeypatch.setattr(study, "demo", lambda v: type("D", (), {"student_clip": "s", "teacher_clip": "t",
                                                               "plan": FULL})())
    monkeypatch.setattr(study, "teacher_dir", lambda v: "run")
    monkeypatch.setattr("bench.demo_transfer.linear_probes", fit)
    assert study.probes(variant)["teacher_labels"] == 41.0
    assert study.probes(variant)["teacher_labels"] == 41.0 and len(fits) == 1
    assert "fitting the probes again" not in capsys.readouterr().out
    inputs["teacher"] = ["c"]
    assert study.probes(variant)["teacher_labels"] == 42.0 and len(fits) == 2
    assert "fitting the probes again" in capsys.readouterr().out
    inputs["shots"] = 200  # other distillation images: probes of their own, the 32-image ones kept
    assert study.probes(variant)["teacher_labels"] == 43.0 and fits[-1][3].student_shots == 200
    assert "fitting the probes again" not in capsys.readouterr().out
    inputs["shots"] = 32
    assert study.probes(variant)["teacher_labels"] == 42.0 and len(fits) == 3


def test_a_variant_distils_on_its_own_number_of_images():
    by_name = {v.name: v for v in VARIANTS}
    assert by_name["narrow student"].shots(FULL) == FULL.student_shots == 32
    assert by_name["wide, all images, 4 epochs"].shots(FULL) == 200
    assert by_name["wide, 96 images per class"].shots(FULL) == 96
