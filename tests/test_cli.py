import json

from pyro_cl.cli import main


def test_cli_runs_a_short_benchmark_and_writes_results(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "run",
            "--benchmark",
            "split-digits",
            "--hidden",
            "16",
            "--epochs",
            "2",
            "--particles",
            "2",
            "--predictive-samples",
            "4",
            "--no-progress",
            "--forward-transfer",
            "--output",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "vcl: ACC" in printed and "finetune: ACC" in printed
    results = json.loads((out / "results.json").read_text())
    assert [r["method"] for r in results] == ["vcl", "finetune"]
    matrix = results[0]["accuracy_matrix"]
    assert len(matrix) == 5 and matrix[0][1] is None and 0 <= matrix[4][0] <= 1
    assert len(results[0]["scratch_accuracy"]) == 5 and results[0]["FWT"] is not None
    assert (out / "accuracy.png").stat().st_size > 1000
