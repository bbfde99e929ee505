"""Numbers a user can rely on (issue 68): choices on validation that cannot read a test label,
runs kept as records, pages rendered from them and checked against them."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import pytest
import torch

from pyro_cl.app import records
from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.continual_run import file_slug
from pyro_cl.app.selection import (
    choose,
    choose_and_test,
    fitter_option_grid,
    select_then_test,
    with_learning_rate,
)
from pyro_cl.infer.divergence import DivergenceError

ROOT = Path(__file__).resolve().parents[1]
#: Pages whose tables are rendered from committed records.
PAGES = [
    ROOT / "benchmarks" / "RESULTS.md",
    ROOT / "docs" / "results.md",
    ROOT / "docs" / "which_method.md",
    ROOT / "docs" / "guide" / "drift.md",
    ROOT / "README.md",
]


class _Unreadable(torch.Tensor):
    """Labels that raise on any use: what the selection step is handed for test labels."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise AssertionError("a test label was read")


def _tiny_run() -> BenchmarkRun:
    return BenchmarkRun(
        num_tasks=2,
        training={"epochs": 1, "num_particles": 1, "num_predictive_samples": 2},
        hidden_sizes=[8],
        progress=False,
    )


def _unreadable_test_labels(monkeypatch) -> None:
    """Every task's test labels raise when read (:class:`_Unreadable`)."""
    original = BenchmarkRun.task_stream

    def unreadable_tests(self, seed):
        stream = original(self, seed)
        tasks = [
            dataclasses.replace(task, y_test=task.y_test.clone().as_subclass(_Unreadable))
            for task in stream.tasks
        ]
        return dataclasses.replace(stream, tasks=tasks)

    monkeypatch.setattr(BenchmarkRun, "task_stream", unreadable_tests)


def test_the_selection_step_never_reads_a_test_label_and_the_test_step_does(monkeypatch):
    _unreadable_test_labels(monkeypatch)
    grid = {
        "lr 1e-3": {
            "methods": ["vcl"],
            "training": {**_tiny_run().training, "learning_rate": 1e-3},
        },
        "lr 1e-2": {
            "methods": ["vcl"],
            "training": {**_tiny_run().training, "learning_rate": 1e-2},
        },
    }
    scored = []
    real_choose = choose

    def recording_choose(scores):
        scored.append(scores)
        return real_choose(scores)

    monkeypatch.setattr("pyro_cl.app.selection.choose", recording_choose)
    with pytest.raises(AssertionError, match="a test label was read"):
        select_then_test(_tiny_run(), {"vcl": grid}, seeds=[0, 1])
    # every setting was scored on validation for both seeds before the test sets were touched
    assert scored and set(scored[0]) == set(grid)
    assert all(set(per) == {0, 1} for per in scored[0].values())


def test_the_chosen_setting_is_the_best_mean_validation_score_first_on_a_tie():
    assert choose({"a": {0: 1.0, 1: 3.0}, "b": {0: 2.5, 1: 2.0}}) == "b"
    assert choose({"a": {0: 2.0}, "b": {0: 2.0}}) == "a"


def test_a_tiny_protocol_run_records_its_grid_scores_choice_and_test_numbers(tmp_path):
    grid = {
        "lr 1e-3": {"methods": ["vcl"]},
        "lr 1e-2": {
            "methods": ["vcl"],
            "training": {**_tiny_run().training, "learning_rate": 1e-2},
        },
    }
    measured, selection = select_then_test(_tiny_run(), {"vcl": grid}, seeds=[0, 1])
    chosen = selection["vcl"]["chosen"]
    assert chosen == choose(
        {s: {int(k): v for k, v in p.items()} for s, p in selection["vcl"]["validation"].items()}
    )
    record = records.make_record(
        "tiny",
        command="select_then_test(...)",
        seeds=[0, 1],
        schedule={"epochs": 1},
        data="permuted digits, 2 tasks",
        rows=measured,
        metrics=["ACC", "BWT"],
        selection=selection,
        storage_bytes={"vcl": 0},
    )
    records.write_record(record, tmp_path)
    table = records.render_table(records.load_record("tiny", tmp_path))
    values = [measured["vcl"][s]["ACC"] for s in (0, 1)]
    cell = f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"  # ddof 1
    assert f"| vcl | {chosen} | {cell} |" in table
    assert "seeds 0, 1" in table and "ddof 1" in table


def test_a_record_without_a_seed_or_a_metric_is_refused():
    with pytest.raises(ValueError, match="has seeds"):
        records.make_record(
            "x", command="", seeds=[0, 1], schedule={}, data="", rows={"a": {0: {"ACC": 1}}},
            metrics=["ACC"],
        )  # fmt: skip
    with pytest.raises(ValueError, match="no \\['BWT'\\]"):
        records.make_record(
            "x", command="", seeds=[0], schedule={}, data="", rows={"a": {0: {"ACC": 1}}},
            metrics=["ACC", "BWT"],
        )  # fmt: skip


def test_a_page_block_is_rendered_from_its_record_and_a_typed_number_is_caught(tmp_path):
    record = records.make_record(
        "demo", command="c", seeds=[0, 1, 2], schedule={}, data="d",
        rows={"vcl": {0: {"ACC": 80.0}, 1: {"ACC": 82.0}, 2: {"ACC": 84.0}}}, metrics=["ACC"],
    )  # fmt: skip
    records.write_record(record, tmp_path)
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- record: demo -->\nstale\n<!-- /record -->\nend\n")
    assert records.check_pages([page], tmp_path) == [str(page)]
    page.write_text(records.render_page(page.read_text(), tmp_path))
    assert "| vcl | 82.00 ± 2.00 |" in page.read_text()
    assert records.check_pages([page], tmp_path) == []
    page.write_text(page.read_text().replace("82.00 ± 2.00", "83.00 ± 2.00"))  # typed by hand
    assert records.check_pages([page], tmp_path) == [str(page)]


def test_every_committed_page_agrees_with_its_records():
    """The rendering check of ``make results``: fast, no run."""
    assert records.check_pages(PAGES) == []


def test_no_page_types_a_recorded_number_in_its_prose():
    assert [typed for page in PAGES for typed in records.typed_numbers(page)] == []
    guides = [*sorted((ROOT / "docs" / "guide").glob("*.md")), ROOT / "docs" / "architecture.md"]
    quoted = [records.typed_numbers(page, every_record=True) for page in [*PAGES, *guides]]
    assert [typed for page in quoted for typed in page] == []


def test_the_results_pages_hold_no_table_typed_by_hand():
    """RESULTS.md is a page rendered from records; the lab notes live under docs/lab/."""
    assert [table for page in PAGES[:2] for table in records.hand_written_tables(page)] == []


def test_a_table_outside_the_record_blocks_is_found(tmp_path):
    page = tmp_path / "page.md"
    rendered = "<!-- record: demo -->\n| a | b |\n| --- | ---: |\n| 1 | 2 |\n<!-- /record -->\n"
    page.write_text("Prose.\n\n" + rendered)
    assert records.hand_written_tables(page) == []
    page.write_text("Prose.\n\n" + rendered + "\n| row | ACC |\n| :-- | --: |\n| vcl | 81 |\n")
    assert records.hand_written_tables(page) == ["page.md:9"]


def test_a_table_of_quoted_cells_is_rendered_and_a_number_typed_beside_them_is_found(tmp_path):
    page = tmp_path / "page.md"
    cell = "<!-- cell: demo / vcl / ACC -->81.00 ± 1.41<!-- /cell -->"
    page.write_text(f"| stream (5 tasks) | ours |\n| --- | --- |\n| digits (8x8) | {cell} |\n")
    assert records.hand_written_tables(page) == []  # a row's name may hold digits
    page.write_text(f"| stream | ours | paper |\n| --- | --- | --- |\n| digits | {cell} | 79 |\n")
    assert records.hand_written_tables(page) == ["page.md:1"]
    page.write_text(f"| a | b | c |\n| --- | --- | --- |\n| x | 1,000 points: {cell} | at 95.1 |\n")
    assert records.hand_written_tables(page) == ["page.md:1"]  # a decimal typed within prose


def _write_demo_record(folder):
    """A record ``demo`` with VCL at 80 and 82 over seeds 0 and 1 (mean 81, sd 1.41)."""
    record = records.make_record(
        "demo", command="c", seeds=[0, 1], schedule={}, data="d",
        rows={"vcl": {0: {"ACC": 80.0}, 1: {"ACC": 82.0}}}, metrics=["ACC"],
    )  # fmt: skip
    records.write_record(record, folder)


def test_a_recorded_number_typed_in_prose_is_found(tmp_path):
    _write_demo_record(tmp_path)
    page = tmp_path / "page.md"
    page.write_text("VCL reaches 81.00% here.\n<!-- record: demo -->\n<!-- /record -->\n")
    assert records.typed_numbers(page, tmp_path) == ["page.md: 81.00 (record demo)"]
    page.write_text("VCL reaches 181.002% here.\n<!-- record: demo -->\n<!-- /record -->\n")
    assert records.typed_numbers(page, tmp_path) == []
    page.write_text("<!-- record: demo -->\n<!-- /record -->\n<!-- lab notes -->\nonce 81.00%\n")
    assert records.typed_numbers(page, tmp_path) == []  # the lab notes are other runs
    page.write_text("A guide says VCL reaches 81.00% without rendering the record.\n")
    assert records.typed_numbers(page, tmp_path) == []
    assert records.typed_numbers(page, tmp_path, every_record=True) == [
        "page.md: 81.00 (record demo)"
    ]
    code = "```python\nbank(strengths=(81.00, 0.1))\n```\n"
    page.write_text(code + "<!-- record: demo -->\n<!-- /record -->\n")
    assert records.typed_numbers(page, tmp_path) == []  # an example's settings, not a quote
    page.write_text("Set `bank(strengths=(81.00,))`.\n<!-- record: demo -->\n<!-- /record -->\n")
    assert records.typed_numbers(page, tmp_path) == []  # inline code is a setting too
    page.write_text(code + "and 81.00% after it\n<!-- record: demo -->\n<!-- /record -->\n")
    assert records.typed_numbers(page, tmp_path) == ["page.md: 81.00 (record demo)"]
    paper = "a paper's <!-- paper: Doe 2020, table 1 -->81.00 ± 0.1<!-- /paper --> beside "
    page.write_text(paper + "<!-- record: demo -->\n<!-- /record -->\n")
    assert records.typed_numbers(page, tmp_path) == []  # quoted with its source
    page.write_text(paper + "ours, 81.00\n<!-- record: demo -->\n<!-- /record -->\n")
    assert records.typed_numbers(page, tmp_path) == ["page.md: 81.00 (record demo)"]
    page.write_text(
        "<!-- paper: -->81.00<!-- /paper -->\n<!-- record: demo -->\n<!-- /record -->\n"
    )
    assert records.typed_numbers(page, tmp_path) == ["page.md: 81.00 (record demo)"]  # no source


def test_a_grid_of_one_setting_is_not_scored_on_validation(monkeypatch):
    ran = []
    real = BenchmarkRun.task_stream

    def counting(self, seed):
        ran.append(self.validation)
        return real(self, seed)

    monkeypatch.setattr(BenchmarkRun, "task_stream", counting)
    measured, selection = select_then_test(
        _tiny_run(), {"vcl": {"only": {"methods": ["vcl"]}}}, [0]
    )
    assert ran == [None] and selection["vcl"]["chosen"] == "only"
    assert selection["vcl"]["validation"] == {} and selection["vcl"]["scored at"] == []


def test_one_setting_runs_on_a_validation_share_without_reading_a_test_label(monkeypatch):
    """``run_setting`` (a timing's run, say): on a validation share no test label is read and
    the numbers are the share's; on the test sets they are read."""
    from pyro_cl.app.selection import run_setting

    _unreadable_test_labels(monkeypatch)
    numbers = run_setting(_tiny_run(), {"methods": ["vcl"]}, seed=0, validation=0.5)
    assert 0 <= numbers["ACC"] <= 100 and numbers["seconds"] > 0
    with pytest.raises(AssertionError, match="a test label was read"):
        run_setting(_tiny_run(), {"methods": ["vcl"]}, seed=0)


def test_kept_runs_are_read_back_and_a_changed_setting_is_refused(tmp_path, monkeypatch):
    grid = {
        "lr 1e-3": {"methods": ["vcl"]},
        "lr 1e-2": {
            "methods": ["vcl"],
            "training": {**_tiny_run().training, "learning_rate": 1e-2},
        },
    }
    first = select_then_test(_tiny_run(), {"vcl": grid}, [0], folder=tmp_path, selection_seeds=[0])
    kept = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.glob("*/*/*.json"))
    chosen = file_slug(first[1]["vcl"]["chosen"])
    assert kept == sorted(
        ["vcl/lr_1e-2/validation-seed0.json", "vcl/lr_1e-3/validation-seed0.json",
         f"vcl/{chosen}/test-seed0.json"]
    )  # fmt: skip

    def no_run(run):
        raise AssertionError("a kept run was run again")

    monkeypatch.setattr("pyro_cl.app.selection.run_benchmark", no_run)
    again = select_then_test(_tiny_run(), {"vcl": grid}, [0], folder=tmp_path, selection_seeds=[0])
    assert again == first
    changed = {**grid, "lr 1e-2": {**grid["lr 1e-2"], "methods": ["finetune"]}}
    with pytest.raises(ValueError, match="remove it to run again"):
        select_then_test(_tiny_run(), {"vcl": changed}, [0], folder=tmp_path)


def test_kept_bytes_are_the_memorys_points_and_the_context_sources_state():
    from pyro_cl import VCL, FunctionSpaceFitter
    from pyro_cl.app.task_benchmark import kept_bytes
    from pyro_cl.fitters.context_points import GaussianInputs
    from pyro_cl.memory import RandomCoreset
    from pyro_cl.nn import BayesianMLP

    torch.manual_seed(0)
    x, y = torch.randn(30, 5), torch.randint(0, 2, (30,))
    for_points = VCL(BayesianMLP(5, [4], 2), memory=RandomCoreset(7), epochs=1)
    assert kept_bytes(for_points) == 0
    for_points.observe((x, y), task_id=0)
    for_points.observe((x, y), task_id=1)
    points = for_points.memory_points
    per_point = 5 * 4 + 8 + 8 + (0 if points.times is None else points.times.element_size())
    assert kept_bytes(for_points) == 14 * per_point
    moments = VCL(
        BayesianMLP(5, [4], 2),
        fitter=FunctionSpaceFitter(GaussianInputs(3, covariance="low_rank", rank=2)),
        epochs=1,
    )
    moments.observe((x, y), task_id=0)
    # count, mean, W, σ², range, and the source's bookkeeping (task ids, input shape)
    numbers = 1 + 5 + 5 * 2 + 1 + 2
    assert numbers * 4 <= kept_bytes(moments) <= numbers * 4 + 64


def test_any_runner_goes_through_the_protocol_and_the_test_sets_come_last():
    """``choose_and_test`` over a runner of another library's methods: every setting scored
    on validation first, the test sets read once per seed for the chosen setting only."""
    calls = []

    def run_one(row, setting, options, seed, validation):
        calls.append((setting, seed, validation))
        return {"ACC": options["score"] + seed + (0 if validation else 100)}

    grid = {"a": {"score": 1.0}, "b": {"score": 2.0}}
    measured, selection = choose_and_test({"peer": grid}, [0, 1], run_one)
    assert calls[:4] == [("a", 0, 0.1), ("a", 1, 0.1), ("b", 0, 0.1), ("b", 1, 0.1)]
    assert calls[4:] == [("b", 0, None), ("b", 1, None)]
    assert selection["peer"]["chosen"] == "b" and measured["peer"][1]["ACC"] == 103.0


def test_a_setting_that_diverges_on_validation_is_not_chosen_and_the_record_says_so(capsys):
    """A bad learning rate that blows a fit up is a bad setting, not a failed protocol: the
    others are chosen among, its score is kept as ``None``; every setting diverging, or the
    chosen one diverging on the test sets, is an error."""

    def run_one(row, setting, options, seed, validation):
        if options["diverges"] and (validation or options.get("on test")) and seed in options["at"]:
            raise DivergenceError(f"{setting} blew up\nmore detail")
        return {"ACC": options["score"] + seed}

    grid = {
        "lr big": {"score": 9.0, "diverges": True, "at": [1]},  # best where it does not diverge
        "lr small": {"score": 2.0, "diverges": False},
        "lr smaller": {"score": 1.0, "diverges": False},
    }
    measured, selection = choose_and_test({"row": grid}, [0, 1], run_one)
    assert selection["row"]["chosen"] == "lr small"
    assert selection["row"]["validation"]["lr big"] == {"0": 9.0, "1": None}
    assert measured["row"][1]["ACC"] == 3.0
    assert "row, lr big, seed 1, diverged on validation" in capsys.readouterr().out
    every = {k: {**v, "diverges": True, "at": [0, 1]} for k, v in grid.items()}
    with pytest.raises(ValueError, match="every setting diverged"):
        choose_and_test({"row": every}, [0, 1], run_one)
    test_fails = {"only": {"score": 1.0, "diverges": True, "at": [0], "on test": True}}
    with pytest.raises(DivergenceError):  # one setting: no validation run, the test run fails
        choose_and_test({"row": test_fails}, [0], run_one)


def test_a_number_quoted_from_a_record_is_rendered_and_checked(tmp_path):
    _write_demo_record(tmp_path)
    page = tmp_path / "page.md"
    page.write_text("| VCL | <!-- cell: demo / vcl / ACC -->?<!-- /cell --> | why |\n")
    assert records.check_pages([page], tmp_path) == [str(page)]
    page.write_text(records.render_page(page.read_text(), tmp_path))
    assert "-->81.00 ± 1.41<!--" in page.read_text()  # mean ± sample sd (ddof 1)
    assert records.check_pages([page], tmp_path) == []
    assert records.typed_numbers(page, tmp_path) == []  # rendered, not typed
    page.write_text("<!-- cell: demo / vcl + coreset / ACC -->?<!-- /cell -->")
    with pytest.raises(KeyError, match="no row 'vcl \\+ coreset'.*\\['vcl'\\]"):
        records.render_page(page.read_text(), tmp_path)
    page.write_text("<!-- cell: demo / vcl / BWT -->?<!-- /cell -->")
    with pytest.raises(KeyError, match="no metric 'BWT'"):
        records.render_page(page.read_text(), tmp_path)


def test_a_record_names_the_commits_that_ran_its_seeds():
    rows = {"vcl": {0: {"ACC": 80.0, "commit": "aaa"}, 1: {"ACC": 82.0, "commit": "bbb"}}}
    record = records.make_record(
        "demo", command="c", seeds=[0, 1], schedule={}, data="d", rows=rows, metrics=["ACC"],
        commit="ccc",
    )  # fmt: skip
    assert record["commit"] == "aaa, bbb"  # the runs', not the one that wrote the record
    rows["vcl"][1].pop("commit")  # a run kept before runs kept their commit
    record = records.make_record(
        "demo", command="c", seeds=[0, 1], schedule={}, data="d", rows=rows, metrics=["ACC"],
        commit="ccc",
    )  # fmt: skip
    assert record["commit"] == "aaa, ccc"
    assert "(commit aaa, ccc," in records.render_table(record)
    # a run from a tree with changes not committed says so in the table too
    clean, dirty = "a" * 40, "a" * 40 + "+dirty"
    rows = {"vcl": {0: {"ACC": 80.0, "commit": clean}, 1: {"ACC": 82.0, "commit": dirty}}}
    record = records.make_record(
        "demo", command="c", seeds=[0, 1], schedule={}, data="d", rows=rows, metrics=["ACC"]
    )
    assert f"(commit {'a' * 12}, {'a' * 12}+dirty," in records.render_table(record)


def test_rows_run_apart_then_recorded_together_without_running_again(tmp_path, monkeypatch):
    """Two processes run different rows into one folder (``--rows``); the record of every row
    reads both back and runs nothing."""
    from pyro_cl.app.selection import protocol_parser, record_rows, rows_named

    table = {
        "vcl": {"only": {"methods": ["vcl"]}},
        "fine-tuning": {"only": {"methods": ["finetune"]}},
    }
    parser = protocol_parser("a check", str(tmp_path / "runs"), "check")
    monkeypatch.setattr(
        "pyro_cl.app.selection.write_record", lambda r: records.write_record(r, tmp_path)
    )
    for index in (1, 0):
        args = parser.parse_args(["--seeds", "0", "--rows", str(index)])
        assert record_rows(args, "x.py", [], _tiny_run(), table, {}, "", [0]) is None
    assert sorted(
        p.parent.parent.name for p in (tmp_path / "runs").glob("*/*/test-seed0.json")
    ) == ["fine-tuning", "vcl"]

    def no_run(run):
        raise AssertionError("a kept run was run again")

    monkeypatch.setattr("pyro_cl.app.selection.run_benchmark", no_run)
    args = parser.parse_args(["--seeds", "0"])
    path = record_rows(args, "x.py", ["--seeds", "0"], _tiny_run(), table, {}, "notes.", [0])
    record = records.load_record("check", tmp_path)
    assert path == tmp_path / "check.json" and list(record["rows"]) == ["vcl", "fine-tuning"]
    assert record["command"] == "python benchmarks/x.py --seeds 0"
    assert list(rows_named(table, [1])) == ["fine-tuning"]
    with pytest.raises(ValueError, match="no row 2: the rows are 0-1"):
        rows_named(table, [2])
    with pytest.raises(SystemExit):  # the command line's one-line error
        rows_named(table, [-1], parser)


def test_a_protocol_resumes_from_its_committed_record_without_running_its_runs(
    tmp_path, monkeypatch, capsys
):
    """A record of some rows, committed, then the whole protocol on a machine without its kept
    runs (``--resume-from``): only the rows the record lacks run; the record's choice, its
    validation scores and its test numbers carry over unchanged."""
    from pyro_cl.app import selection
    from pyro_cl.app.selection import parse_protocol, protocol_parser, record_rows

    grid = {
        "lr 1e-3": {"methods": ["vcl"]},
        "lr 1e-2": {
            "methods": ["vcl"],
            "training": {**_tiny_run().training, "learning_rate": 1e-2},
        },
    }
    table = {"vcl": grid, "fine-tuning": {"only": {"methods": ["finetune"]}}}
    parser = protocol_parser("a check", str(tmp_path / "first"), "check")
    monkeypatch.setattr(selection, "write_record", lambda r: records.write_record(r, tmp_path))
    monkeypatch.setattr(selection, "load_record", lambda n: records.load_record(n, tmp_path))
    args = parse_protocol(parser, ["--seeds", "0", "--rows", "0", "--record", "--name", "alone"])
    record_rows(args, "x.py", [], _tiny_run(), table, {}, "", [0])
    alone = records.load_record("alone", tmp_path)
    for numbers in alone["rows"]["vcl"].values():  # a record from before runs kept their bytes
        del numbers["kept bytes"]
    records.write_record(alone, tmp_path)

    ran = []
    real = selection.run_benchmark
    monkeypatch.setattr(
        selection, "run_benchmark", lambda run: ran.append(run.methods) or real(run)
    )
    elsewhere = ["--folder", str(tmp_path / "elsewhere"), "--resume-from", "alone"]
    args = parse_protocol(parser, ["--seeds", "0", *elsewhere])
    assert "kept 3 runs" in capsys.readouterr().out  # two validation scores and a test run
    record_rows(args, "x.py", [], _tiny_run(), table, {}, "", [0])
    assert ran == [["finetune"]]
    both = records.load_record("check", tmp_path)
    assert both["selection"]["vcl"] == alone["selection"]["vcl"]
    for metric in ("ACC", "BWT", "ECE", "final per task"):
        assert both["rows"]["vcl"]["0"][metric] == alone["rows"]["vcl"]["0"][metric]
    assert set(alone["commit"].split(", ")) <= set(both["commit"].split(", "))
    assert both["storage_bytes"]["vcl"] == alone["storage_bytes"]["vcl"]
    assert parse_protocol(parser, ["--seeds", "0", *elsewhere]).resume_from == "alone"
    assert "kept 0 runs" in capsys.readouterr().out  # what is kept already stays as it is
    with pytest.raises(SystemExit):  # a record that is not there: the one-line error
        parse_protocol(parser, ["--resume-from", "nowhere"])
    drift = {**alone, "name": "drift", "selection": {"vcl": {"grid": ["a", "b"], "chosen": "a"}}}
    with pytest.raises(ValueError, match="not written by the selection protocol"):
        selection.restore_kept_runs(drift, tmp_path / "third")
    assert not (tmp_path / "third").exists()  # nothing written


def test_validation_only_scores_the_grid_and_reads_no_test_set(tmp_path, monkeypatch):
    """``--validation-only``: a second process's share of a long row's validation runs; it runs
    no test set and writes no record, and the full run then reads its scores back."""
    from pyro_cl.app import selection
    from pyro_cl.app.selection import parse_protocol, protocol_parser, record_rows

    grid = {
        "lr 1e-3": {"methods": ["vcl"]},
        "lr 1e-2": {
            "methods": ["vcl"],
            "training": {**_tiny_run().training, "learning_rate": 1e-2},
        },
    }
    parser = protocol_parser("a check", str(tmp_path / "runs"), "check")
    real = selection.run_benchmark
    splits = []

    def validation_only(run):
        splits.append(run.validation)
        assert run.validation is not None, "a test set was read"
        return real(run)

    monkeypatch.setattr(selection, "run_benchmark", validation_only)
    monkeypatch.setattr(selection, "write_record", lambda r: records.write_record(r, tmp_path))
    args = parse_protocol(parser, ["--seeds", "0", "--validation-only"])
    assert record_rows(args, "x.py", [], _tiny_run(), {"vcl": grid}, {}, "", [1]) is None
    assert splits == [0.1, 0.1] and not list(tmp_path.glob("*.json"))  # no record
    kept = sorted(p.parent.name for p in (tmp_path / "runs").glob("*/*/validation-seed1.json"))
    assert kept == ["lr_1e-2", "lr_1e-3"]
    splits.clear()
    monkeypatch.setattr(
        selection, "run_benchmark", lambda run: splits.append(run.validation) or real(run)
    )
    record_rows(
        parse_protocol(parser, ["--seeds", "0"]),
        "x.py",
        [],
        _tiny_run(),
        {"vcl": grid},
        {},
        "",
        [1],
    )
    assert splits == [None]  # the kept scores read back; the chosen setting's test set, once
    assert records.load_record("check", tmp_path)["selection"]["vcl"]["scored at"] == [1]


def test_a_grid_at_a_second_rate_keeps_its_settings_and_adds_each_at_that_rate():
    """``with_learning_rate``: the settings as they were (their labels, so kept runs serve), then
    each again with only Adam's rate changed, the run's other training settings kept."""
    grid = fitter_option_grid(
        "fsvi", "function_kl_scale", ("sum", "per_point"), "KL", {"epochs": 3}
    )
    both = with_learning_rate(grid, 0.003)
    assert list(both) == ["KL sum", "KL per_point", "KL sum, lr 0.003", "KL per_point, lr 0.003"]
    assert both["KL sum"] == grid["KL sum"] and "learning_rate" not in both["KL sum"]["training"]
    faster = both["KL per_point, lr 0.003"]
    assert faster["training"] == {"epochs": 3, "learning_rate": 0.003}
    assert faster["fitter_options"] == {"function_kl_scale": "per_point"}
    assert faster["methods"] == ["fsvi"]
