"""benchmarks/results_table.py: rows pooled over seeds, split by the settings that differ, and
the final accuracies' bar chart (the VOGN thesis's figure 5)."""

import json

import numpy as np
import pytest

from pyro_cl.app.plotting import plot_final_accuracies
from pyro_cl.app.result import RunResult
from tests.helpers import load_benchmark_script


def _run(method, seed, final, settings=None, scratch=None):
    """A two-task run whose accuracy after the last task is ``final``."""
    first = final[0] + 0.1  # task 1 right after it was learnt, before forgetting
    run = RunResult(
        method=method,
        stream="toy",
        step_names=["1", "2"],
        seed=seed,
        wall_time_s=60.0,
        settings={"seed": seed, "fitter": {"penalty": {"strength": 1.0}}, **(settings or {})},
        matrices={"accuracy": np.array([[first, np.nan], list(final)])},
    )
    if scratch is not None:
        run.details["scratch_accuracy"] = scratch
    return run.to_json()


def test_rows_pool_seeds_and_split_by_the_settings_that_differ(tmp_path, capsys):
    script = load_benchmark_script("results_table")
    strong = {"fitter": {"penalty": {"strength": 100.0}}}
    runs = [
        _run("finetune", 0, [0.6, 0.9], scratch=[0.9, 0.9]),
        _run("finetune", 1, [0.7, 0.9], scratch=[0.8, 0.9]),
        _run("ewc", 0, [0.8, 0.8]),
        _run("ewc", 0, [0.9, 0.8], settings=strong),
    ]
    for i, run in enumerate(runs):  # one folder a run, as seeds run separately are
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "results.json").write_text(json.dumps({"runs": [run]}))
    folders = [str(tmp_path / str(i)) for i in range(len(runs))]
    script.main([*folders, "--plot", str(tmp_path / "final.png")])
    rows = {line.split(" | ")[1]: line for line in capsys.readouterr().out.splitlines()[2:-1]}
    assert set(rows) == {"finetune", "ewc (strength=1.0)", "ewc (strength=100.0)"}
    # 75% and 80%: the sample sd (ddof 1) is 3.54, the population one 2.5
    assert "| 77.5 ± 3.5% |" in rows["finetune"] and "| 0,1 |" in rows["finetune"]
    assert "| 87.5% |" in rows["finetune"]  # the scratch accuracies' mean over tasks and seeds
    assert "| 85.0 ± 0.0% |" in rows["ewc (strength=100.0)"]
    assert (tmp_path / "final.png").stat().st_size > 1000


def test_the_final_accuracies_chart_refuses_runs_of_other_steps(tmp_path):
    a = RunResult.from_json(_run("vcl", 0, [0.9, 0.9]))
    b = RunResult.from_json(_run("vcl", 1, [0.9, 0.9]))
    b.step_names = ["1", "3"]
    with pytest.raises(ValueError, match="same steps"):
        plot_final_accuracies([a, b], tmp_path / "final.png")
    assert plot_final_accuracies([a], tmp_path / "one.png").stat().st_size > 1000
