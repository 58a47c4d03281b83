"""demo.jobs: dependency order, several jobs at once, skipping finished jobs, failures with the log's tail."""
from __future__ import annotations

import os
import sys
import time

import pytest

from demo.jobs import Job, JobError, command_line, run_jobs, stage_times


def writer(tmp_path, name: str, text: str, sleep: float = 0.0, deps: tuple[str, ...] = (), stage: str = "s") -> Job:
    """A job that waits ``sleep`` s, records its start and end times and writes ``text`` to its result file."""
    out = tmp_path / f"{name}.txt"
    code = (f"import time, pathlib; t0 = time.time(); time.sleep({sleep}); "
            f"pathlib.Path({str(out)!r}).write_text({text!r} + f' {{t0}} {{time.time()}}')")
    return Job(name, stage, (sys.executable, "-c", code), str(out), deps=deps)


def span(tmp_path, name: str) -> tuple[float, float]:
    _, start, end = (tmp_path / f"{name}.txt").read_text().split()
    return float(start), float(end)


def run(jobs, tmp_path, workers: int = 2):
    t0 = time.time()
    return run_jobs(jobs, workers, 1, str(tmp_path / "logs"), lambda: time.time() - t0, str(tmp_path))


def test_dependencies_run_first_and_independent_jobs_overlap(tmp_path):
    jobs = [writer(tmp_path, "a", "A", sleep=1.0), writer(tmp_path, "b", "B", sleep=1.0),
            writer(tmp_path, "c", "C", deps=("a", "b"))]
    timings = run(jobs, tmp_path)
    a, b, c = (span(tmp_path, n) for n in "abc")
    assert c[0] >= max(a[1], b[1])  # c started after both of its dependencies ended
    assert b[0] < a[1] and a[0] < b[1]  # a and b ran at the same time (2 workers)
    assert not any(t.skipped for t in timings.values())


def test_one_worker_runs_jobs_one_after_another(tmp_path):
    run([writer(tmp_path, "a", "A", sleep=0.5), writer(tmp_path, "b", "B", sleep=0.5)], tmp_path, workers=1)
    a, b = span(tmp_path, "a"), span(tmp_path, "b")
    assert b[0] >= a[1] or a[0] >= b[1]


def test_finished_job_is_skipped_and_its_dependants_run(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("old 0 0")
    timings = run([writer(tmp_path, "a", "new"), writer(tmp_path, "b", "B", deps=("a",))], tmp_path)
    assert (tmp_path / "a.txt").read_text() == "old 0 0"
    assert timings["a"].skipped and not timings["b"].skipped
    assert "finished before, skipped: a" in capsys.readouterr().out


def test_failure_names_the_job_and_shows_its_log_and_stops_dependants(tmp_path):
    bad = Job("bad", "s", (sys.executable, "-c", "print('the reason'); raise SystemExit(3)"), str(tmp_path / "x"))
    with pytest.raises(JobError, match=r"bad \(exit 3; log .*bad.log\):\nthe reason"):
        run([bad, writer(tmp_path, "after", "A", deps=("bad",))], tmp_path)
    assert not (tmp_path / "after.txt").exists()


def test_job_without_its_result_file_fails(tmp_path):
    quiet = Job("quiet", "s", (sys.executable, "-c", "pass"), str(tmp_path / "never.json"))
    with pytest.raises(JobError, match="quiet"):
        run([quiet], tmp_path)


def test_environment_and_threads_reach_the_job(tmp_path):
    out = tmp_path / "env.txt"
    code = f"import os, pathlib; pathlib.Path({str(out)!r}).write_text(os.environ['X'] + os.environ['OMP_NUM_THREADS'])"
    run([Job("env", "s", (sys.executable, "-c", code), str(out), {"X": "x"})], tmp_path)
    assert out.read_text() == "x1"


def test_unknown_dependency_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown jobs"):
        run([writer(tmp_path, "a", "A", deps=("nope",))], tmp_path)


def test_command_line_and_stage_times(tmp_path):
    job = Job("j", "s", (sys.executable, "train.py", "--x", "a b"), "r", {"DATA": "/d e"})
    assert command_line(job) == "DATA='/d e' python train.py --x 'a b'"
    timings = run([writer(tmp_path, "a", "A", stage="one"), writer(tmp_path, "b", "B", stage="one", deps=("a",)),
                   writer(tmp_path, "c", "C", stage="two")], tmp_path)
    rows = {r[0]: r for r in stage_times(timings)}
    one = [timings["a"], timings["b"]]
    assert rows["one"][1:3] == [2, 0]
    assert rows["one"][3] == pytest.approx(max(t.end for t in one) - min(t.start for t in one))
    assert rows["one"][4] == pytest.approx(sum(t.end - t.start for t in one))
    assert os.path.isdir(tmp_path / "logs")


def test_train_py_jobs_run_in_warm_workers_with_their_output_in_the_log(tmp_path):
    """``python train.py`` jobs run as train.cli in a worker process: output (fd level) goes to the job's log, exit
    codes and user errors come back."""
    log_dir = tmp_path / "logs"
    ok = Job("help", "s", (sys.executable, "train.py", "--help"), str(log_dir / "help.log"))
    t0 = time.time()
    run_jobs([ok], 1, 1, str(log_dir), lambda: time.time() - t0, os.getcwd())
    assert "usage: train.py" in (log_dir / "help.log").read_text()
    bad = Job("bad", "s", (sys.executable, "train.py", "--trainer", "NoSuchTrainer", "--output-dir",
                           str(tmp_path / "run")), str(tmp_path / "never.json"))
    with pytest.raises(JobError, match=r"bad \(exit 2; .*\n(.|\n)*error: Unknown trainer"):
        run_jobs([bad], 1, 1, str(log_dir), lambda: time.time() - t0, os.getcwd())
