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
    results = json.loads((out / "results.json").read_text())["runs"]
    assert [r["method"] for r in results] == ["vcl", "finetune"]
    matrix = results[0]["accuracy_matrix"]
    assert len(matrix) == 5 and matrix[0][1] is None and 0 <= matrix[4][0] <= 1
    assert len(results[0]["scratch_accuracy"]) == 5 and results[0]["FWT"] is not None
    assert (out / "accuracy.png").stat().st_size > 1000


def test_cli_runs_coreset_methods_over_seeds_and_summarises(tmp_path, capsys):
    out = tmp_path / "coresets"
    argv = ["run", "--benchmark", "split-digits", "--hidden", "8", "--epochs", "1"]
    argv += ["--particles", "1", "--predictive-samples", "2", "--no-progress"]
    argv += ["--methods", "vcl-kcenter,coreset-only", "--coreset-size", "5", "--seeds", "0", "1"]
    assert main([*argv, "--output", str(out)]) == 0
    report = json.loads((out / "results.json").read_text())
    assert [(r["method"], r["settings"]["seed"]) for r in report["runs"]] == [
        ("vcl-kcenter", 0),
        ("coreset-only", 0),
        ("vcl-kcenter", 1),
        ("coreset-only", 1),
    ]
    assert all(r["settings"]["coreset_size"] == 5 for r in report["runs"])
    summary = report["summary"]["vcl-kcenter"]
    accs = [r["ACC"] for r in report["runs"] if r["method"] == "vcl-kcenter"]
    assert summary["runs"] == 2 and abs(summary["ACC_mean"] - sum(accs) / 2) < 1e-12
    assert "mean ± std over seeds 0, 1" in capsys.readouterr().out


def test_cli_runs_natural_gradient_methods_with_their_settings(tmp_path):
    out = tmp_path / "vogn"
    argv = ["run", "--benchmark", "split-digits", "--hidden", "8", "--epochs", "2"]
    argv += ["--first-epochs", "3", "--predictive-samples", "2", "--no-progress"]
    argv += ["--methods", "vogn,ivon", "--update-samples", "2", "--update-lr", "0.05"]
    argv += ["--update-beta", "0.2", "--init-precision", "1e3"]
    assert main([*argv, "--output", str(out)]) == 0
    runs = json.loads((out / "results.json").read_text())["runs"]
    vogn, ivon = runs
    assert vogn["settings"]["fitter"] == {
        "kind": "fitter",
        "name": "vogn",
        "learning_rate": 0.05,
        "num_samples": 2,
        "data_scale": 1.0,
        "beta": 0.2,
        "momentum": 0.0,
        "curvature": "fisher",
    }
    assert vogn["settings"]["between_tasks"] == "fresh" and vogn["settings"]["first_epochs"] == 3
    assert ivon["settings"]["fitter"]["name"] == "ivon"
    assert ivon["settings"]["fitter"]["learning_rate"] == 0.05


def test_cli_lists_benchmarks_methods_and_parts_with_their_options(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "split-mnist" in out and "vogn-ggn" in out
    assert "parts of kind 'transition':" in out and "no_propagation" in out
    assert "VOGN(learning_rate:'float'=0.001, beta:'float'=0.001" in out
