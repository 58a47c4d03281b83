"""The runner's scheduling on the local executor with small test calls (tests/helpers_jobs.py): dependency order, a
failure skips only its dependents and is reported with its log's tail, a preempted job (exit 75) runs again,
finished jobs are not run, and the ETA from measured run times."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from engine.run_identity import read_identity
from engine.runs import run_state
from runner.jobs import Job, job_record, job_states, record_job
from runner.local import LocalExecutor
from runner.schedule import EXIT_PREEMPTED, MAX_REQUEUES, Eta, critical_paths, run_plan
from tests.helpers_jobs import Toy
from tests.helpers_run import HANG_GUARD_S, alive, default_sigint
from tests.helpers_upstream import UPSTREAM_TRAIN_LOG
from units.call import UnitCall
from units.facts import REPO


def finishing(name: str, run: str, deps: tuple[str, ...] = (), **toy) -> Job:
    """A job whose call (a :class:`Toy` with ``toy``) then marks ``run`` finished (a results.json), as a unit command
    would."""
    return Job(name=name, kind="train", method="M", dataset="d", call=Toy(finish=run, **toy), runs=(run,), deps=deps)


def job(name: str, call: Toy | None = None, **fields) -> Job:
    """A job of ``call`` (a Toy that does nothing when None) with the other fields given or the tests' defaults."""
    call = call or Toy()
    return Job(name=name, kind=fields.pop("kind", "train"), method=fields.pop("method", "M"),
               dataset=fields.pop("dataset", "d"), call=call, **fields)


def test_failure_skips_only_its_dependents(tmp_path, capsys):
    order = tmp_path / "order.txt"
    lines = "\n".join(f"line {i}" for i in range(1, 31))
    jobs = [finishing("a", str(tmp_path / "a"), say="a", count=str(order)),
            job("b", Toy(say=f"{lines}\nerror: bad thing", status=3), runs=(str(tmp_path / "b"),)),
            finishing("c", str(tmp_path / "c"), deps=("b",)),
            finishing("d", str(tmp_path / "d"), deps=("a",), say="d", count=str(order)),
            finishing("e", str(tmp_path / "e"), deps=("c", "a"))]
    report = run_plan(jobs, LocalExecutor([], cpu_jobs=2), str(tmp_path / "logs"))
    assert report.done == ["a", "d"] and order.read_text() == "a\nd\n"
    assert report.spans["a"][1] <= report.spans["d"][0]  # d started after a, which it needs, had ended
    assert report.skipped == {"c": "b", "e": "b"} and not (tmp_path / "c").exists()
    why = report.failed["b"]
    assert why.startswith(f"exit status 3; log {tmp_path / 'logs' / 'b.log'}\n")
    assert why.splitlines()[-1] == "error: bad thing" and "line 17" in why and "line 16" not in why  # 15-line tail
    log = (tmp_path / "logs" / "b.log").read_text().splitlines()
    assert log[0].startswith("=== ") and log[0].endswith("local CPU slot, warm worker") and log[1] == "$ toy 'line 1'"
    out = capsys.readouterr().out
    assert f"started a (log {tmp_path / 'logs' / 'a.log'})\n    $ toy a\n" in out  # the command a user can paste
    assert "FAILED b after " in out and "    | error: bad thing" in out


def test_echo_gets_one_line_per_event_with_the_counts(tmp_path):
    """What the demo shows on the terminal while the runner's detailed lines go to its log: per job that starts, ends
    or fails one line, its first line without the log path, with the counts and an ETA."""
    lines: list[str] = []
    jobs = [finishing("a", str(tmp_path / "a")), job("b", Toy(status=3), runs=(str(tmp_path / "b"),))]
    run_plan(jobs, LocalExecutor([], cpu_jobs=1), str(tmp_path / "logs"), echo=lines.append)
    events = [re.sub(r"^\[[0-9:]+\] ", "", line) for line in lines]
    counts = r" \(done \d/2, running \d, queued \d, failed \d, blocked 0, ETA [0-9:?]+\)$"
    patterns = ["started a", r"done a in [0-9:]+", "started b", r"FAILED b after [0-9:]+: exit status 3; log \S+b\.log"]
    assert len(events) == 4 and all(re.fullmatch(p + counts, e) for p, e in zip(patterns, events)), events
    assert events[1].startswith("done a in ") and "done 1/2" in events[1] and "failed 1" in events[3]


@pytest.mark.parametrize("slots", [1, 2])
def test_independent_jobs_share_the_slots(tmp_path, slots):
    """Two independent jobs run at the same time on two slots and one after the other on one."""
    jobs = [finishing(n, str(tmp_path / n), sleep_s=1.0) for n in "ab"]
    report = run_plan(jobs, LocalExecutor([], cpu_jobs=slots), str(tmp_path / "logs"))
    (a_start, a_end), (b_start, b_end) = report.spans["a"], report.spans["b"]
    overlap = b_start < a_end and a_start < b_end
    assert report.done and overlap == (slots == 2)


def test_critical_paths_add_up_the_longest_chain_of_waiting_jobs():
    """Per job: its cost plus the longest path of a job that needs it; a job without a cost counts as the mean of the
    known ones, and with no cost known every job counts 1 (the chain's length in jobs)."""
    jobs = [job("a"), job("b", deps=("a",)), job("c", deps=("b",)), job("d"), job("e", deps=("a",)), job("f")]
    costs = {"a": 2.0, "b": 10.0, "c": 1.0, "d": 6.0, "e": 4.0, "f": None}
    paths = critical_paths(jobs, lambda j: costs[j.name])
    assert paths == pytest.approx({"a": 13.0, "b": 11.0, "c": 1.0, "d": 6.0, "e": 4.0, "f": 23.0 / 5})
    assert critical_paths(jobs, lambda j: None) == {"a": 3.0, "b": 2.0, "c": 1.0, "d": 1.0, "e": 1.0, "f": 1.0}


def test_the_longest_chain_starts_first(tmp_path):
    """On one slot, of the jobs that may start, the one heading the longest chain runs first, whatever the plan's
    order: head (1 s, needed by tail, 10 s) before middle (5 s) before short (1 s); equal chains keep plan order."""
    order = tmp_path / "order.txt"
    names = ("short", "head", "middle", "tail", "twin")
    deps = {"tail": ("head",)}
    jobs = [finishing(n, str(tmp_path / n), deps=deps.get(n, ()), say=n, count=str(order)) for n in names]
    costs = {"short": 1.0, "head": 1.0, "middle": 5.0, "tail": 10.0, "twin": 1.0}
    report = run_plan(jobs, LocalExecutor([], cpu_jobs=1), str(tmp_path / "logs"), projected=lambda j: costs[j.name])
    assert report.ok and order.read_text().split() == ["head", "tail", "middle", "short", "twin"]


def test_preempted_job_runs_again_and_resumes(tmp_path):
    """Exit 75 = state saved, rerun to resume: the job starts again (bounded); any other failure is final."""
    count = tmp_path / "attempts"
    once = finishing("once", str(tmp_path / "once"), say="x", count=str(count), preempted=1)
    always = job("always", Toy(say="try", status=EXIT_PREEMPTED), runs=(str(tmp_path / "never"),))
    report = run_plan([once, always], LocalExecutor([], cpu_jobs=2), str(tmp_path / "logs"))
    assert report.done == ["once"] and count.read_text() == "x\nx\n"
    assert (tmp_path / "logs" / "once.log").read_text().count("=== ") == 2  # one header per attempt
    assert list(report.failed) == ["always"] and report.failed["always"].startswith(f"exit status {EXIT_PREEMPTED}")
    assert (tmp_path / "logs" / "always.log").read_text().splitlines().count("try") == MAX_REQUEUES + 1


def test_finished_jobs_are_not_run_and_exit_zero_needs_finished_runs(tmp_path):
    """A finished run that no job recorded (made by hand, or before the runner recorded jobs) is handed to its job
    once; then the job's record in the run folder makes the next command skip it, until its command changes (then
    the jobs that need it run again too)."""
    done_run = tmp_path / "done"
    done_run.mkdir()
    (done_run / "results.json").write_text(json.dumps({"accuracy": 1.0}))
    marker = tmp_path / "ran"
    jobs = [finishing("finished", str(done_run), say="x", count=str(marker)),
            job("liar", Toy(say="all good"), kind="test", runs=(str(tmp_path / "x"),)),
            finishing("after", str(tmp_path / "after"), deps=("finished",))]
    assert job_states(jobs) == {"finished": "check", "liar": "new", "after": "new"}
    report = run_plan(jobs, LocalExecutor([], cpu_jobs=1), str(tmp_path / "logs"))
    assert report.done == ["finished", "after"] and marker.read_text() == "x\n" and not report.finished_before
    assert report.failed["liar"].startswith("exited 0, but its runs are not finished")
    assert json.loads((done_run / "run.json").read_text()) == {"runner": {"finished": job_record(jobs[0])}}
    assert sorted(os.listdir(done_run)) == ["results.json", "run.json"]  # one record file per run folder
    report = run_plan(jobs, LocalExecutor([], cpu_jobs=1), str(tmp_path / "logs"))
    assert report.finished_before == ["finished", "after"] and marker.read_text() == "x\n"
    changed = replace(jobs[0], call=replace(jobs[0].call, knobs={"EXTRA_OPTS": "OPTIM.LR 0.1"}))
    assert job_states([changed, *jobs[1:]])["finished"] == "check"
    report = run_plan([changed, *jobs[1:]], LocalExecutor([], cpu_jobs=1), str(tmp_path / "logs"))
    assert report.done == ["finished", "after"] and marker.read_text() == "x\nx\n"  # and what needs it


def test_job_record_holds_the_command_less_its_data_root():
    job = Job(name="j", kind="train", method="CoOp", dataset="eurosat",
              call=UnitCall("coop", "x", ("1",), {"DATA": "/data", "CFG": "vit_b16_ctxv1"}), config="vit_b16_ctxv1",
              trainer="CoOp")
    assert job_record(job) == {"command": "CFG=vit_b16_ctxv1 bash scripts/coop/x.sh 1", "reads": {}}


def sha256(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def finished_run(path, inputs: dict | None = None) -> str:
    """A finished run folder; ``inputs``: the ledger its run.json records, ``{name: (role, file)}``."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "results.json"), "w") as f:
        json.dump({"accuracy": 50.0}, f)
    if inputs is not None:
        ledger = {name: {"role": role, "sha256": sha256(file)} for name, (role, file) in inputs.items()}
        with open(os.path.join(path, "run.json"), "w") as f:
            json.dump({"trainer": "CoOp", "config": {}, "inputs": ledger}, f)
    return str(path)


def test_changed_split_or_weights_are_not_finished(tmp_path):
    """A job is finished only while every file its runs read (their inputs ledger) holds the bytes they read: a split
    moved between train and test, a redrawn few-shot file or new weights make it run again (train.py then says what
    changed), while another seed's few-shot file, a few-shot file that is gone (drawn again the same) or a data root
    moved elsewhere (the ledger names split files relative to it) change nothing."""
    data = tmp_path / "data"
    (data / "eurosat" / "split_fewshot").mkdir(parents=True)
    split = data / "eurosat" / "split_zhou_EuroSAT.json"
    split.write_text(json.dumps({"train": [["a.jpg", 0, "x"]], "val": [], "test": [["b.jpg", 0, "x"]]}))
    fewshot = data / "eurosat" / "split_fewshot" / "shot_16-seed_1.json"
    fewshot.write_text("{}")
    weights = tmp_path / "clip.pt"
    weights.write_bytes(b"weights")
    run = finished_run(tmp_path / "run", {"${DATASET.ROOT}/eurosat/split_zhou_EuroSAT.json": ("split", split),
                                          "${DATASET.ROOT}/eurosat/split_fewshot/shot_16-seed_1.json":
                                              ("fewshot", fewshot), str(weights): ("clip", weights)})
    job = Job(name="CoOp train eurosat seed1", kind="train", method="CoOp", dataset="eurosat",
              call=Toy(knobs={"DATA": str(data), "SHOTS": "16"}), seed=1, runs=(run,))
    record_job(job)
    assert job_states([job]) == {job.name: "finished"}
    (data / "eurosat" / "split_fewshot" / "shot_16-seed_2.json").write_text("{}")  # another seed's sample
    assert job_states([job]) == {job.name: "finished"}
    original = split.read_text()
    split.write_text(json.dumps({"train": [], "val": [], "test": [["a.jpg", 0, "x"], ["b.jpg", 0, "x"]]}))
    assert job_states([job]) == {job.name: "check"}
    split.write_text(original)
    assert job_states([job]) == {job.name: "finished"}
    fewshot.write_text('{"train": []}')
    assert job_states([job]) == {job.name: "check"}
    fewshot.unlink()
    assert job_states([job]) == {job.name: "finished"}
    shutil.copytree(data, tmp_path / "moved")
    moved = replace(job, call=Toy(knobs={"DATA": str(tmp_path / "moved"), "SHOTS": "16"}))
    assert job_states([moved]) == {job.name: "finished"}  # the command less DATA is the same, and so are the files
    (tmp_path / "moved" / "eurosat" / "split_zhou_EuroSAT.json").write_text("{}")
    assert job_states([moved]) == {job.name: "check"}
    weights.write_bytes(b"other weights")
    assert job_states([job]) == {job.name: "check"}


def test_a_job_is_not_finished_over_a_new_run_of_a_job_it_needs(tmp_path):
    """Deleting the training run re-runs it, so its test and plug-in run again too; a training run replaced since the
    test was recorded (a new checkpoint, which the test's ledger names) makes the test run again even when the
    training job is finished."""
    model = tmp_path / "train" / "prompt_learner"
    model.mkdir(parents=True)
    (model / "checkpoint").write_text("model.pth.tar-5\n")
    (model / "model.pth.tar-5").write_bytes(b"first model")
    train_run = finished_run(tmp_path / "train")
    read = {str(model / "checkpoint"): ("checkpoint", model / "checkpoint"),
            str(model / "model.pth.tar-5"): ("checkpoint", model / "model.pth.tar-5")}
    train = job("train", method="CoOp", runs=(train_run,))
    test = job("test", kind="test", method="CoOp", deps=("train",), runs=(finished_run(tmp_path / "test", read),))
    plugin = job("plug-in", kind="plug-in", method="PETR+CoOp", deps=("train",),
                 runs=(finished_run(tmp_path / "plugin", read),))
    for each in (train, test, plugin):
        record_job(each)
    assert set(job_states([train, test, plugin]).values()) == {"finished"}
    shutil.rmtree(train_run)
    assert job_states([train, test, plugin]) == {"train": "new", "test": "check", "plug-in": "check"}
    finished_run(train_run)  # the training ran again: a new model
    model.mkdir()
    (model / "checkpoint").write_text("model.pth.tar-5\n")
    (model / "model.pth.tar-5").write_bytes(b"second model")
    record_job(train)
    assert job_states([train, test, plugin]) == {"train": "finished", "test": "check", "plug-in": "check"}


def test_slots_pin_gpus_and_threads(tmp_path):
    """Two jobs per GPU over GPUs 0 and 1, or one job over both; CPU slots set the torch threads."""
    four = LocalExecutor(["0", "1"], jobs_per_gpu=2)
    assert [s.devices for s in four.pool] == ["0", "0", "1", "1"]
    assert [s.devices for s in LocalExecutor(["0", "1", "2"], gpus_per_job=2).pool] == ["0,1"]
    out = tmp_path / "env.txt"
    pinned = finishing("env", str(tmp_path / "r"), environ=str(out), knobs={"X": "x"})
    assert run_plan([pinned], LocalExecutor(["3"], threads=2), str(tmp_path / "logs")).ok
    assert out.read_text() == "3|2|x\n"  # the job's own knobs too


def test_eta_from_measured_run_times():
    jobs = [job(f"{m} {k} {i}", kind=k, method=m)
            for m, k, i in (("PETR", "train", 1), ("PETR", "train", 2), ("PETR", "test", 1), ("CoOp", "train", 1))]
    projected = {"PETR train 1": 100.0, "PETR train 2": 100.0, "PETR test 1": 10.0, "CoOp train 1": 40.0}
    eta = Eta(lambda job: projected[job.name])
    assert eta.expected(jobs[2]) == 10.0  # nothing measured yet: the projection
    eta.observe(jobs[0], 300.0)  # PETR training took 3x its projection
    assert eta.expected(jobs[1]) == 300.0  # same method and kind: as measured
    assert eta.expected(jobs[3]) == pytest.approx(120.0)  # others: projection x 3
    assert eta.remaining([jobs[1], jobs[3]], {}, slots=2) == pytest.approx((300.0 + 120.0) / 2)
    assert Eta(lambda job: None).expected(jobs[0]) is None


def test_log_of_each_attempt_is_kept(tmp_path):
    run = str(tmp_path / "r")
    for attempt in (1, 2):
        report = run_plan([finishing("j", run, say=f"attempt {attempt}")], LocalExecutor([]), str(tmp_path / "logs"))
        assert report.ok
        os.remove(os.path.join(run, "results.json"))
    text = (tmp_path / "logs" / "j.log").read_text()
    assert "attempt 1" in text and "attempt 2" in text and text.count("=== ") == 2


STOPPED_RUNNER = """
import sys
from runner.jobs import Job
from runner.local import LocalExecutor
from runner.schedule import run_plan, stop_signal
from tests.helpers_jobs import Sleeper

job = Job(name="long", kind="train", method="M", dataset="d", runs=(sys.argv[2],), call=Sleeper(*sys.argv[3:5]))
try:
    run_plan([job], LocalExecutor([]), sys.argv[1])
except KeyboardInterrupt as e:
    sys.exit(128 + stop_signal(e))
"""
"""A runner (as runner.cli runs it) with one job: a call that runs until a signal stops it."""


@pytest.mark.parametrize("sig,status", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_a_signal_to_the_runner_stops_its_jobs(tmp_path, sig, status):
    """SIGTERM and SIGHUP stop the runner as Ctrl-C does: the process that runs the job's call (its slot's warm
    worker) gets the same signal, and the runner exits with 128 + the signal once it has ended."""
    pid_file, got = tmp_path / "pid", tmp_path / "got"
    runner = subprocess.Popen([sys.executable, "-c", STOPPED_RUNNER, str(tmp_path / "logs"), str(tmp_path / "run"),
                               str(pid_file), str(got)], cwd=REPO, preexec_fn=default_sigint, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not pid_file.exists() and runner.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(pid_file.read_text())
        assert child != runner.pid
        runner.send_signal(sig)
        assert runner.wait(timeout=HANG_GUARD_S) == status
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert got.read_text() == str(int(sig)) and not alive(child)


def test_the_job_record_joins_the_runs_identity_and_changes_no_state(tmp_path):
    """The runner's record goes into run.json beside the identity train.py wrote (which it keeps, and which train.py
    reads without it); an upstream run's folder (no identity) stays finished-upstream with the record in it."""
    ours = tmp_path / "ours"
    ours.mkdir()
    identity = {"mode": "train", "config": {"OPTIM.LR": 0.002}}
    (ours / "run.json").write_text(json.dumps(identity))
    (ours / "results.json").write_text("{}")
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    (upstream / "log.txt").write_text(UPSTREAM_TRAIN_LOG)
    assert run_state(str(upstream)) == "finished-upstream"
    both = job("j", method="CoOp", runs=(str(ours), str(upstream)))
    record_job(both)
    assert json.loads((ours / "run.json").read_text()) == {**identity, "runner": {"j": job_record(both)}}
    assert read_identity(str(ours)) == identity and read_identity(str(upstream)) is None
    assert run_state(str(upstream)) == "finished-upstream" and job_states([both]) == {"j": "finished"}
