"""bench/measure_costs.py on the tiny CLIPs (CPU): the measurements run, and the block printed for runner/costs.py
holds the JSON's numbers."""
import json

from bench.measure_costs import main
from runner.costs import StepTime


def test_measure_costs_paste_block_parses_back_to_the_json(tmp_path, capsys):
    out = tmp_path / "costs.json"
    assert main(["--device", "cpu", "--model", "tiny", "--iters", "1", "--warmup", "0", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    # the shipped CoOp base-to-novel config: batch 32 (vit_b16_ctxv1.yaml); EuroSAT's base classes: the first 5 of 10
    assert result["coop"] == {"config": "CoOp/vit_b16_ctxv1", "batch": 32, "prec": "fp32", "classes": 5}
    assert set(result["eval_ms_per_image"]) == {"ViT-B/16", "ViT-B/16 x2", "ViT-L/14"}
    assert all(ms > 0 for ms in result["eval_ms_per_image"].values())
    assert result["coop_step_ms"] > 0 and result["startup_s"] > 0
    block = printed.split("Paste over runner/costs.py's measured block:\n", 1)[1]
    assert all(len(line) <= 120 for line in block.splitlines())  # fits runner/costs.py's line length
    names: dict = {"StepTime": StepTime}
    exec(block, names)  # the block as runner/costs.py would run it
    assert names["COOP_STEP"].ms == result["coop_step_ms"]
    assert "python -m bench.measure_costs --device cpu --model tiny on CPU" in names["COOP_STEP"].source
    assert names["EVAL_MS_PER_IMAGE"] == result["eval_ms_per_image"]
    assert names["JOB_OVERHEAD_S"] == result["startup_s"]
    assert names["EVAL_SOURCE"].startswith("measured (python -m bench.measure_costs")
    assert names["JOB_OVERHEAD_SOURCE"].endswith("PETR/vit_b16_ep40_batch8_4ctx")
    for row, value in (("CoOp training step", f"{result['coop_step_ms']} ms"),
                       ("start-up", f"{result['startup_s']} s")):
        assert any(line.startswith(row) and value in line for line in printed.splitlines())
