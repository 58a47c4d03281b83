"""The unit wrappers (``scripts/<method>/<command>.sh``) are rendered from the catalog (``units/wrappers.py``): the
checked-in ones are the rendered ones, each execs an existing command of its method's family, ``--check`` names what
differs and ``make scripts``'s writer repairs it, and a new row of an existing family is a method with wrappers and
run folders of its own."""
from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys

import pytest

from tests.helpers_run import HANG_GUARD_S
from trainers import catalog
from trainers.catalog import Method
from units.call import UnitCall
from units.commands import COMMANDS
from units.wrappers import main, render

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXEC = re.compile(r'exec bash "\$\(dirname "\$0"\)/\.\./unit\.sh" "\$0" (\w+) (\w+) "\$@"')
PROGRAD = Method("ProGrad", "ProGrad", "trainers.prograd", "learner", "prograd", "vit_b16_pg_ep5",
                 learner_xd_config="vit_b16_pg_xd", shots=8, learns="the gradient-aligned context")
"""A prompt learner that the shipped catalog does not hold (ProGrad, another CoOp variant)."""


def sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def scripts_files(root: str) -> dict[str, str]:
    """Every ``scripts/*/*.sh`` under ``root`` (path under scripts/ -> its SHA-256), as the OS lists them."""
    return {os.path.relpath(p, os.path.join(root, "scripts")): sha256(p)
            for p in glob.glob(os.path.join(root, "scripts", "*", "*.sh"))}


def test_the_checked_in_wrappers_are_the_rendered_ones():
    """Fails when a header is edited by hand or a catalog row is added without ``make scripts``."""
    done = subprocess.run([sys.executable, "-m", "units.wrappers", "--check"], cwd=REPO, capture_output=True,
                          text=True, timeout=HANG_GUARD_S)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    rendered = render(catalog.METHODS.values())
    on_disk = scripts_files(REPO)
    assert sorted(rendered) == sorted(on_disk)
    assert {path: hashlib.sha256(text.encode()).hexdigest() for path, text in rendered.items()} == on_disk
    assert set(rendered) == {f"{m.scripts}/{command}.sh" for m in catalog.METHODS.values()
                             for command in COMMANDS[m.commands]}  # every row's family's commands, no other


def test_every_wrapper_execs_an_existing_family_command():
    """Each wrapper is a shebang, comment lines and one exec line naming its own folder and command, which its
    method's family has."""
    wrappers = sorted(scripts_files(REPO))
    assert {path.split("/")[0] for path in wrappers} == {m.scripts for m in catalog.METHODS.values()}
    for path in wrappers:
        with open(os.path.join(REPO, "scripts", path), encoding="utf-8") as f:
            lines = f.read().splitlines()
        code = [line for line in lines if not line.startswith("#")]
        assert lines[0] == "#!/usr/bin/env bash" and len(code) == 1, path
        match = EXEC.fullmatch(code[0])
        assert match and f"{match[1]}/{match[2]}.sh" == path, path
        assert match[2] in COMMANDS[catalog.by_scripts(match[1]).commands], path
        assert UnitCall(match[1], match[2]).known(), path
        assert os.stat(os.path.join(REPO, "scripts", path)).st_mode & stat.S_IXUSR, path


def test_check_names_each_wrapper_not_as_rendered_and_writing_repairs_them(tmp_path, capsys):
    shutil.copytree(os.path.join(REPO, "scripts"), tmp_path / "scripts")
    shipped = scripts_files(REPO)
    maple = tmp_path / "scripts" / "maple" / "xd_train.sh"
    maple.write_text(maple.read_text().replace("learn the coupled prompts", "learn prompts"))
    os.remove(tmp_path / "scripts" / "petr" / "xd_test.sh")
    os.chmod(tmp_path / "scripts" / "coop" / "main.sh", 0o644)
    os.makedirs(tmp_path / "scripts" / "old")
    (tmp_path / "scripts" / "old" / "base2new_train.sh").write_text(
        '#!/usr/bin/env bash\nexec bash "$(dirname "$0")/../unit.sh" "$0" old base2new_train "$@"\n')
    by_hand = tmp_path / "scripts" / "petr" / "by_hand.sh"  # no unit wrapper: neither named nor removed
    by_hand.write_text("#!/usr/bin/env bash\necho written by hand\n")
    os.chmod(by_hand, 0o755)

    assert main(["--check"], root=str(tmp_path)) == 1
    assert capsys.readouterr() == ("", "error: unit wrappers not as rendered from the catalog: scripts/coop/main.sh "
                                       "(not executable), scripts/maple/xd_train.sh (differs), scripts/petr/xd_test.sh "
                                       "(missing), scripts/old/base2new_train.sh (stray); run make scripts\n")
    assert main([], root=str(tmp_path)) == 0
    assert capsys.readouterr().out.splitlines() == [
        "wrote scripts/coop/main.sh (not executable)", "wrote scripts/maple/xd_train.sh (differs)",
        "wrote scripts/petr/xd_test.sh (missing)", "removed scripts/old/base2new_train.sh (stray)"]
    assert scripts_files(str(tmp_path)) == {**shipped, "petr/by_hand.sh": sha256(str(by_hand))}
    assert not os.path.exists(tmp_path / "scripts" / "old")
    assert all(os.stat(p).st_mode & stat.S_IXUSR for p in glob.glob(str(tmp_path / "scripts" / "*" / "*.sh")))
    assert main(["--check"], root=str(tmp_path)) == 0


def test_a_new_row_of_the_learner_family_gets_its_wrappers_and_run_folders(tmp_path, monkeypatch):
    scripts = render([PROGRAD])
    assert sorted(scripts) == [f"prograd/{c}.sh" for c in
                               ("base2new_test", "base2new_train", "dg_test", "xd_test", "xd_train")]
    assert scripts["prograd/base2new_train.sh"] == (
        "#!/usr/bin/env bash\n"
        "# ProGrad base-to-novel: learn the gradient-aligned context on the 8-shot base classes of DATASET (SEED), "
        "then test\n"
        "# them.\n"
        "# Usage: DATA=/path/to/datasets bash scripts/prograd/base2new_train.sh eurosat 1\n"
        "# Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_8/ProGrad/<cfg>/seed<S> (finished runs are "
        "skipped,\n"
        "# interrupted ones resume). CFG defaults to vit_b16_pg_ep5; other knobs: SHOTS, BACKBONE, EXTRA_OPTS "
        "(docs/usage.md).\n"
        'exec bash "$(dirname "$0")/../unit.sh" "$0" prograd base2new_train "$@"\n')
    xd_train = " ".join(scripts["prograd/xd_train.sh"].replace("\n# ", " ").split())
    assert "$OUTPUT_ROOT/xd/train/<source>/shots_8/ProGrad/<cfg>/seed<S>. CFG defaults to vit_b16_pg_xd (its " \
           "cross-dataset config; configs/trainers/ProGrad/ has its settings)" in xd_train
    assert PROGRAD.ns == "PROGRAD"

    out = str(tmp_path / "out")
    knobs = {"OUTPUT_ROOT": out}
    assert not UnitCall("prograd", "base2new_train", ("eurosat", "1"), knobs).known()
    monkeypatch.setitem(catalog.METHODS, "ProGrad", PROGRAD)
    assert UnitCall("prograd", "base2new_train", ("eurosat", "1"), knobs).runs() == (
        f"{out}/base2new/train_base/eurosat/shots_8/ProGrad/vit_b16_pg_ep5/seed1",)
    assert UnitCall("prograd", "base2new_test", ("eurosat", "1"), knobs).runs() == (
        f"{out}/base2new/test_new/eurosat/shots_8/ProGrad/vit_b16_pg_ep5/seed1",)
    assert UnitCall("prograd", "xd_train", ("2",), knobs).runs() == (
        f"{out}/xd/train/imagenet/shots_8/ProGrad/vit_b16_pg_xd/seed2",)
    assert UnitCall("prograd", "dg_test", ("imagenet_r", "2"), knobs).runs() == (
        f"{out}/dg/test/imagenet_r/shots_8/ProGrad/vit_b16_pg_xd/seed2",)
    assert catalog.TRAINERS.get("ProGrad") is None  # the test's row is not a shipped trainer


def test_a_row_its_headers_cannot_describe_is_one_error_line(tmp_path, monkeypatch, capsys):
    with pytest.raises(ValueError, match="ProGrad prograd/base2new_train.sh: the header needs the catalog field "
                                         "'learns', which the row leaves empty"):
        render([Method("ProGrad", "ProGrad", "trainers.prograd", "learner", "prograd", "vit_b16_pg_ep5")])
    with pytest.raises(ValueError, match="scripts/prograd/xd_train.sh: two catalog rows of folder 'prograd' render it "
                                         "differently"):
        render([PROGRAD, Method("ProGrad", "ProGrad", "trainers.prograd", "learner", "prograd", "vit_b16_pg_ep5",
                               learner_xd_config="vit_b16_pg_ep5", shots=8, learns="the gradient-aligned context")])
    monkeypatch.setitem(catalog.METHODS, "ProGrad", Method("ProGrad", "ProGrad", "trainers.prograd", "kg", "prograd",
                                                           "x"))
    assert main([], root=str(tmp_path)) == 2
    assert capsys.readouterr() == ("", "error: ProGrad: family 'kg' needs its commands in units/commands.py and one "
                                       "header per command in units/headers.py\n")
    assert os.listdir(tmp_path) == []


def test_an_unknown_command_lists_every_folder_and_its_commands():
    """The usage line of an unknown command, family by family (unchanged since the commands were keyed by folder)."""
    done = subprocess.run([sys.executable, "-m", "units", "petr", "no_such_command"], cwd=REPO, capture_output=True,
                          text=True, timeout=HANG_GUARD_S)
    assert (done.returncode, done.stdout) == (2, "")
    prefix = "error: usage: python -m units [--print-argv] METHOD COMMAND ARGS ("
    assert done.stderr.startswith(prefix) and done.stderr.endswith(")\n")
    listed = [part.split(": ") for part in done.stderr[len(prefix):-2].split("; ")]
    assert len(listed) == len({folder for folder, _ in listed})
    assert dict(listed) == {m.scripts: " ".join(COMMANDS[m.commands]) for m in catalog.METHODS.values()}
    assert dict(listed)["petr_x"] == "base2new xd dg"
    assert dict(listed)["coop"] == "base2new_train base2new_test main eval"
