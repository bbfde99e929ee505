import dataclasses
import json

import numpy as np
import pytest
import torch

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.cli import (
    HAND_WRITTEN_SETTINGS,
    _derived_settings,
    benchmark_run_from_args,
    build_parser,
    main,
)
from pyro_cl.app.part_options import given_part_options
from pyro_cl.app.runner import run_benchmark
from pyro_cl.fitters.elbo_fitter import ELBOFitter
from pyro_cl.infer.config import TrainingConfig
from pyro_cl.spec import REGISTRIES
from tests.helpers import load_benchmark_script


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
    matrix = results[0]["matrices"]["accuracy"]
    assert len(matrix) == 5 and matrix[0][1] is None
    details, summary = results[0]["details"], results[0]["summary"]
    assert len(details["scratch_accuracy"]) == 5 and details["scratch_wall_time_s"] > 0
    # the summary reads the matrix: ACC the last row, the plasticity columns its diagonal
    diagonal = np.array([matrix[i][i] for i in range(5)])
    assert summary["ACC"] == pytest.approx(np.mean(matrix[4]))
    assert summary["just_learnt"] == pytest.approx(diagonal.mean())
    scratch = np.array(details["scratch_accuracy"])
    assert summary["intransigence"] == pytest.approx((scratch - diagonal).mean())
    assert summary["FWT"] == pytest.approx((diagonal[1:] - scratch[1:]).mean())
    assert len(details["share_at_prior"]) == 5 and "units_in_use" in summary
    assert (out / "accuracy.png").stat().st_size > 1000
    assert (out / "final_accuracy.png").stat().st_size > 1000


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
    accs = [r["summary"]["ACC"] for r in report["runs"] if r["method"] == "vcl-kcenter"]
    assert summary["runs"] == 2 and abs(summary["ACC_mean"] - sum(accs) / 2) < 1e-12
    assert "mean ± std over seeds 0, 1" in capsys.readouterr().out


def test_cli_runs_natural_gradient_methods_with_their_settings(tmp_path):
    out = tmp_path / "vogn"
    argv = ["run", "--benchmark", "split-digits", "--hidden", "8", "--epochs", "2"]
    argv += ["--first-epochs", "3", "--predictive-samples", "2", "--no-progress"]
    argv += [
        "--methods",
        "vogn,ivon",
        "--fitter-num-samples",
        "2",
        "--fitter-learning-rate",
        "0.05",
    ]
    argv += ["--fitter-beta", "0.2", "--init-precision", "1e3"]
    assert main([*argv, "--output", str(out)]) == 0
    runs = json.loads((out / "results.json").read_text())["runs"]
    vogn, ivon = runs
    assert vogn["settings"]["fitter"] == {
        "kind": "fitter",
        "name": "vogn",
        "learning_rate": 0.05,
        "num_samples": 2,
        "data_scale": 1.0,
        "compiled": False,
        "spread_samples": False,
        "kl_weight": 1.0,
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
    assert "streams (pyro-cl stream NAME):" in out and "weather  " in out
    assert "online methods (pyro-cl stream --methods):" in out and "kcenter-grs  " in out


def test_cli_builds_a_transition_from_its_registered_options(tmp_path):
    out = tmp_path / "hibnn"
    argv = ["run", "--benchmark", "split-digits", "--hidden", "8", "--epochs", "1"]
    argv += ["--particles", "1", "--predictive-samples", "2", "--no-progress", "--methods", "vcl"]
    argv += ["--net", "hibnn", "--transition", "child_concentration_growth"]
    argv += ["--transition-factor", "2"]
    assert main([*argv, "--output", str(out)]) == 0
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert run["method"] == "vcl-hibnn"
    assert run["settings"]["transition"] == {
        "kind": "transition",
        "name": "child_concentration_growth",
        "factor": 2.0,
    }


@pytest.mark.parametrize(
    "options, message",
    [
        (["--methods", "vcl", "--fitter-beta", "0.1"], "--fitter-beta: not an option"),
        (["--methods", "ivon", "--fitter-momentum", "0.9"], "--fitter-momentum: not an option"),
        (["--transition-factor", "2"], "need --transition"),
        (["--transition", "child_concentration_growth"], "needs --transition-factor"),
        (["--transition", "child_concentration_growth", "--transition-factor", "2"], "H-IBP"),
        (["--methods", "vcl,nope"], "unknown methods ['nope']"),
        (["--benchmark", "split-digits", "--num-tasks", "9"], "split digits has 5 tasks"),
        (["--device", "nonsense"], "unknown device 'nonsense'"),
        (["--init-precision", "0"], "--init-precision must be positive"),
        (["--seeds", "0", "-1"], "seeds must be integers"),
        (["--coreset-size", "0"], "coreset_size must be a positive integer, got 0"),
        (["--num-tasks", "0"], "num_tasks must be a positive integer, got 0"),
        (["--methods", ","], "no methods given"),
        (["--hidden", "0"], "hidden sizes must be positive"),
        (["--output", "/proc/not-here/out"], "cannot write results to /proc/not-here/out"),
        (["--benchmark", "split-mnist", "--data-root", "/nonexistent"], "no MNIST IDX files"),
    ],
)
def test_cli_mistakes_are_one_line_errors(options, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--no-progress", *options])
    text = str(exit_.value.code)
    assert text.startswith("pyro-cl run: ") and message in text and "\n" not in text


def test_cli_device_without_a_gpu_and_damaged_data_are_one_line_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="torch sees no CUDA GPU"):
        main(["run", "--device", "cuda"])
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "train-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b\x08 truncated")
    argv = ["run", "--benchmark", "split-mnist", "--data-root", str(tmp_path)]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert "truncated or not a valid gzip" in str(exit_.value.code)
    with pytest.raises(ValueError, match="truncated"):  # --debug keeps the traceback
        main([*argv, "--debug"])


def test_fitter_options_come_from_constructor_signatures():
    class ScaledSGD(ELBOFitter):
        """A user fitter: one new float option appears as --fitter-step-scale."""

        name = "test_scaled_sgd"

        def __init__(self, step_scale: float = 1.0, warmup: int | None = None) -> None:
            self.step_scale, self.warmup = step_scale, warmup

    try:
        args = build_parser().parse_args(["run", "--fitter-step-scale", "0.5"])
        assert given_part_options(args, "fitter") == {"step_scale": 0.5}
        help_text = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
        assert "--fitter-step-scale FLOAT" in help_text and "--fitter-warmup INT" in help_text
    finally:
        del REGISTRIES["fitter"]["test_scaled_sgd"]


def test_benchmark_scripts_build_runs_in_python_and_command_line_options_win():
    run = load_benchmark_script("vcl_paper").build_run(
        ["--benchmark", "permuted-mnist", "--schedule", "short", "--epochs", "7", "--seeds", "4"]
    )
    assert run.training == {"epochs": 7, "refit_epochs": 100} and list(run.seeds) == [4]
    assert run.methods == ["vcl", "vcl-random", "vcl-kcenter", "coreset-only"]
    assert str(run.output) == "results/vcl_paper/permuted-mnist-short"
    vogn = load_benchmark_script("vogn_paper").build_run(
        ["--benchmark", "split-mnist", "--fitter-learning-rate", "0.1", "--hidden", "50"]
    )
    assert vogn.fitter_options == {"learning_rate": 0.1, "beta": 1e-3, "num_samples": 10}
    assert list(vogn.hidden_sizes) == [50] and vogn.training["batch_size"] == 256
    runs = load_benchmark_script("ibp_paper").build_runs(
        ["--benchmark", "split-mnist-ibp", "--widths", "10"]
    )
    assert {name: (r.net, r.hidden_sizes) for name, r in runs.items()} == {
        "ibnn": ("ibnn", None),
        "vcl-h10": ("mlp", [10]),
    }
    sizes = load_benchmark_script("coreset_sweep").build_runs(["--sizes", "5", "9"])
    assert [(r.benchmark, r.coreset_size) for r in sizes.values()] == [
        ("permuted-mnist", 5),
        ("permuted-mnist", 9),
    ]
    assert load_benchmark_script("vogn_cifar").build_run([]).fitter_options["momentum"] == 0.9
    with pytest.raises(SystemExit):
        load_benchmark_script("vcl_paper").build_run(["--benchmark", "split-digits"])


def test_benchmark_run_in_python_runs_and_rejects_unknown_options(tmp_path):
    run = BenchmarkRun(
        "split-digits",
        methods=["vcl"],
        hidden_sizes=[8],
        training={"epochs": 1, "num_particles": 1, "num_predictive_samples": 2},
        progress=False,
    )
    (result,) = run_benchmark(run)
    assert result.accuracy.shape == (5, 5) and result.settings["epochs"] == 1
    with pytest.raises(ValueError, match="not an option"):
        BenchmarkRun(fitter_options={"learning_rat": 0.1})
    with pytest.raises(ValueError, match="not fields of BenchmarkRun"):
        run.with_defaults(epochs=3)
    assert run.with_defaults(training={"epochs": 9, "batch_size": 4}).training["epochs"] == 1


# ---------------------------------------------------------------- online streams
TINY_STREAM = [
    "--num-steps",
    "3",
    "--iterations",
    "3",
    "--first-iterations",
    "10",
    "--train-samples",
    "2",
    "--term-samples",
    "8",
    "--predictive-samples",
    "4",
    "--no-progress",
]


def test_cli_runs_an_online_stream_and_writes_results_table_and_figures(tmp_path, capsys):
    out = tmp_path / "moons"
    argv = ["stream", "two_moons", "--methods", "grs,kcenter", "--memory-sizes", "5", "8"]
    assert main([*argv, *TINY_STREAM, "--output", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| 5 | grs |" in table and "| 8 | kcenter |" in table
    payload = json.loads((out / "results.json").read_text())
    assert payload["run"]["settings"]["memory_sizes"] == [5, 8]
    first = payload["results"][0]
    assert len(first["series"]["test_lml"]) == 3 and len(first["series"]["one_step_ahead"]) == 2
    for figure in ("test_lml_over_time.png", "test_lml_vs_memory_size.png", "memory_two_moons.png"):
        assert (out / figure).stat().st_size > 0


def test_stream_table_pools_seeds_and_pairs_each_method_with_the_baseline(tmp_path, capsys):
    out = tmp_path / "moons"
    argv = ["stream", "two_moons", "--methods", "grs,random,none", "--memory-sizes", "5"]
    assert main([*argv, "--seeds", "0", "1", "2", *TINY_STREAM, "--output", str(out)]) == 0
    capsys.readouterr()
    assert load_benchmark_script("stream_table").main([str(out), "--baseline", "random"]) == 0
    rows = {line.split(" | ")[1]: line for line in capsys.readouterr().out.splitlines()[2:]}
    lml = {
        (r["label"], r["seed"]): r["summary"]["test_lml"]
        for r in json.loads((out / "results.json").read_text())["results"]
    }
    differences = np.array([lml["grs", s] - lml["random", s] for s in range(3)])
    t = differences.mean() / (differences.std(ddof=1) / np.sqrt(3))
    ahead = int((differences > 0).sum())
    grs = np.array([lml["grs", s] for s in range(3)])
    assert f"| {grs.mean():.3f} ± {grs.std(ddof=1):.3f} |" in rows["grs"]
    assert f"{differences.mean():+.3f} (t = {t:.1f}, ahead in {ahead} of 3)" in rows["grs"]
    assert rows["random"].endswith("| 3 | – |")
    # a baseline without a memory (size 0) is paired with every memory size
    assert load_benchmark_script("stream_table").main([str(out), "--baseline", "none"]) == 0
    rows = {line.split(" | ")[1]: line for line in capsys.readouterr().out.splitlines()[2:]}
    differences = np.array([lml["random", s] - lml["none", s] for s in range(3)])
    assert f"{differences.mean():+.3f} (t = " in rows["random"]


@pytest.mark.parametrize(
    "options, message",
    [
        (["--methods", "grs,vcl"], "unknown online methods"),
        (["--memory-sizes", "0"], "memory size must be a positive integer"),
        (["--term-samples", "0"], "term samples must be a positive integer"),
        (["--data-root", "/nonexistent/pyro_cl"], "no UCI energy data.txt"),
        (
            ["--device", "cuda:7"] if not torch.cuda.is_available() else ["--lr", "-1"],
            "no CUDA GPU" if not torch.cuda.is_available() else "learning rate",
        ),
    ],
)
def test_stream_mistakes_are_one_line_errors(options, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["stream", "energy", *TINY_STREAM, *options])
    text = str(exit_info.value)
    assert text.startswith("pyro-cl stream:") and message in text and "\n" not in text


def test_online_benchmark_script_builds_one_run_per_stream():
    runs = load_benchmark_script("online_memory").build_runs(
        ["--streams", "energy", "yacht", "--seeds", "0", "1", "--term-samples", "100"]
    )
    assert [r.stream for r in runs] == ["energy", "yacht"]
    assert runs[0].seeds == (0, 1) and runs[0].term_samples == 100 and runs[0].iterations == 300
    assert runs[1].settings()["memory_sizes"] == [15]
    paper = load_benchmark_script("online_memory").build_runs(
        ["--streams", "mnist", "--schedule", "paper"]
    )
    assert paper[0].settings()["iterations"] == 10_000
    assert paper[0].settings()["term_samples"] == 50_000


def test_online_benchmark_record_rows_are_the_methods_with_their_memory_bytes(
    tmp_path, capsys, monkeypatch
):
    script = load_benchmark_script("online_memory")
    monkeypatch.setitem(script.PAPER_TABLE_1, "rotating", ((1.25, 0.5), (0.0, 0.1), (-1.5, 0.25)))
    argv = ["--streams", "rotating", "--methods", "none,random", "--seeds", "0", "1",
            "--num-steps", "3", "--term-samples", "20", "--memory-sizes", "5",
            "--no-progress", "--output", str(tmp_path)]  # fmt: skip
    (run,) = script.build_runs(argv)
    run = dataclasses.replace(run, first_iterations=5, iterations=2, train_samples=2)
    results = script.run_stream_benchmark(run)
    record = script.stream_record("scratch", run, results, "a command")
    assert list(record["rows"]) == ["online VB, no memory", "random memory"]
    assert sorted(record["rows"]["random memory"]) == ["0", "1"]
    point = 2 * 4 + 4 + 8 + 8  # two float32 inputs, a float32 target, its task id, its time
    assert record["storage_bytes"] == {"online VB, no memory": 0, "random memory": 5 * point}
    assert "random memory -1.500 ± 0.250" in record["notes"]  # the paper's number, its row
    with pytest.raises(SystemExit):
        script.build_runs(["--streams", "energy", "yacht", "--record", "two"])
    assert "one stream" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["stream", "rotating", "--transition", "wiener"],
            "pyro-cl stream: --transition wiener needs --transition-diffusion",
        ),
        (
            ["stream", "rotating", "--methods", "none", "--lr", "1e30"],
            "pyro-cl stream: training diverged (",
        ),
        (  # refused when given, before any work (it once started and diverged)
            ["stream", "rotating", "--methods", "none", "--lr", "inf"],
            "pyro-cl stream: learning_rate must lie in (0,",
        ),
        (
            ["run", "--epochs", "1", "--num-tasks", "2", "--methods", "vcl", "--lr", "0"],
            "pyro-cl run: learning_rate must lie in (0,",
        ),
        (
            ["run", "--epochs", "1", "--num-tasks", "2", "--methods", "vcl", "--lr", "1e30"],
            "pyro-cl run: training diverged (",
        ),
    ],
)
def test_training_failures_are_one_line_in_the_users_terms(argv, message, tmp_path):
    small = ["--no-progress", "--output", str(tmp_path)]
    if argv[0] == "stream":
        small += ["--num-steps", "3", "--iterations", "2", "--first-iterations", "2"]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, *small])
    text = str(exit_.value.code)
    assert text.startswith(message) and "\n" not in text


def test_every_training_setting_has_a_flag_that_reaches_the_config():
    derived = {name for name, *_ in _derived_settings()}
    assert derived | HAND_WRITTEN_SETTINGS == set(TrainingConfig().flat())
    argv = ["run", "--init-loc-std", "0.05", "--elbo", "pyro", "--loss-growth", "10"]
    run = benchmark_run_from_args(build_parser().parse_args(argv))
    assert run.training == {"init_loc_std": 0.05, "elbo": "pyro", "loss_growth": 10.0}
    config = TrainingConfig().replace(**run.training)
    assert config.initialisation.init_loc_std == 0.05 and config.divergence.loss_growth == 10.0


def test_single_head_shares_one_head_across_a_split_streams_tasks(tmp_path):
    from pyro_cl.app.benchmark_run import BenchmarkRun
    from pyro_cl.data import split_digits

    net = BenchmarkRun("split-digits", single_head=True).build_net(split_digits())
    assert net.num_heads == 1 and net.out_features == 2
    out = tmp_path / "single"
    argv = ["run", "--benchmark", "split-digits", "--hidden", "8", "--epochs", "1"]
    argv += ["--particles", "1", "--predictive-samples", "2", "--no-progress", "--methods", "ewc"]
    assert main([*argv, "--single-head", "--output", str(out)]) == 0
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert run["method"] == "ewc-single-head"


def test_cli_prints_its_version(capsys):
    from pyro_cl import __version__

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"pyro-cl {__version__}"


def test_a_coreset_size_for_methods_that_keep_no_points_is_refused_by_name():
    with pytest.raises(ValueError, match="none of the methods vcl, finetune keeps points"):
        BenchmarkRun(methods=["vcl", "finetune"], coreset_size=5)
    # a method that keeps points takes it, and so does a function-space fitter's context
    assert BenchmarkRun(methods=["vcl", "vcl-random"], coreset_size=5).resolved_coreset_size == 5
    assert BenchmarkRun(methods=["fsvi"], coreset_size=5).resolved_coreset_size == 5


def test_the_thread_count_leaves_busy_cores_alone(monkeypatch):
    from pyro_cl.app import cli

    monkeypatch.setattr(cli.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    for load, threads in ((0.1, 4), (1.2, 3), (2.6, 1), (9.0, 1)):
        monkeypatch.setattr(cli.os, "getloadavg", lambda load=load: (load, load, load))
        assert cli.chosen_threads(None) == threads
    assert cli.chosen_threads(3) == 3
    with pytest.raises(ValueError, match="--threads"):
        cli.chosen_threads(0)


def test_num_tasks_on_a_fixed_stream_runs_its_first_tasks(tmp_path, capsys):
    main(["run", "--benchmark", "split-digits", "--num-tasks", "2", "--methods", "finetune",
          "--epochs", "1", "--no-progress", "--output", str(tmp_path)])  # fmt: skip
    assert "split digits: 2 tasks" in capsys.readouterr().out
    (run,) = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert len(run["step_names"]) == 2 and len(run["matrices"]["accuracy"]) == 2


def test_cli_runs_function_space_beside_replay_keeping_both_sets_of_points(tmp_path):
    """``fsvi-er``: the coreset size a task in the buffer and as many as context points, each
    measured in the bytes the learner keeps (the two sets, two tasks of 5 points each)."""
    out = tmp_path / "fsvi-er"
    argv = ["run", "--benchmark", "split-digits", "--hidden", "8", "--epochs", "1"]
    argv += ["--particles", "1", "--predictive-samples", "2", "--no-progress", "--seeds", "0"]
    argv += ["--ml-init-epochs", "0"]
    argv += ["--methods", "fsvi-er,finetune-er", "--coreset-size", "5", "--num-tasks", "2"]
    argv += ["--output", str(out)]
    assert main(argv) == 0
    runs = json.loads((out / "results.json").read_text())["runs"]
    kept = {r["method"]: r["details"]["kept_bytes"] for r in runs}
    point = 64 * 4 + 3 * 8  # float32 inputs, an int64 label, task id and time
    assert kept == {"fsvi-er": 2 * 10 * point, "finetune-er": 10 * point}  # buffer and context
