"""The catalogue of bad inputs: each is refused up front, in one line, with its exit code.

The tests in this file are the cases a user met on a fresh clone (a new user's report); the
bad-input tests written before it live beside the code they check and are listed in
``ELSEWHERE`` below (a test checks that every name there still exists), so this file is the
one place to read the whole catalogue. The command line's exit codes: 2 usage, 3 bad data,
4 resources; the library raises ``DataError`` (a ``ValueError``), ``ResourceError`` or
scikit-learn's ``ValueError``. "Up front" is checked by making training itself fail loudly
(``no_training``): a refusal that came after the fit would show that error instead.
"""

import json
import os
import stat

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import snapfit
from snapfit.cli import cli
from snapfit.data import Dataset
from snapfit.datasets import convert, make_criteo_like_parquet
from snapfit.errors import DataError

# -- helpers --------------------------------------------------------------------------------


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def one_line_error(res, code: int, *texts: str) -> str:
    """The command ended with exit ``code`` and exactly one ``Error:`` line holding
    ``texts``, no traceback (click's usage errors add their two usage lines above it)."""
    assert res.exit_code == code, res.output
    assert isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    errors = [line for line in res.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1, res.output
    for text in texts:
        assert text in errors[0], errors[0]
    return errors[0]


@pytest.fixture
def no_training(monkeypatch):
    """Training raises: a refusal must come before it."""

    def boom(*args, **kwargs):
        raise AssertionError("training started before the input was refused")

    monkeypatch.setattr("snapfit.estimator.train", boom)


@pytest.fixture(scope="module")
def d(tmp_path_factory):
    """Criteo-like rows, and one CSV converted two ways (with a cross, and one cross fewer)
    into the same 2^12 features."""
    d = tmp_path_factory.mktemp("bad")
    make_criteo_like_parquet(d / "train.parquet", 1200, seed=0, hash_bits=12)
    rng = np.random.default_rng(0)
    n = 300
    rows = zip(rng.choice(["news", "shop"], n), rng.choice(["a1", "a2", "a3"], n),
               rng.random(n) * 10, (rng.random(n) < 0.3).astype(int), strict=True)  # fmt: skip
    (d / "events.csv").write_text(
        "site,ad,price,clicked\n" + "".join(f"{s},{a},{p:.3f},{c}\n" for s, a, p, c in rows)
    )
    convert(d / "events.csv", d / "crossed.parquet", format="table", label="clicked",
            crosses=[("site", "ad")], hash_bits=12)  # fmt: skip
    convert(d / "events.csv", d / "plain.parquet", format="table", label="clicked", hash_bits=12)
    return d


# -- wrong or misleading results ------------------------------------------------------------


def test_train_refuses_test_data_converted_another_way_before_the_first_epoch(
    d, tmp_path, no_training
):
    out, js = tmp_path / "m.npz", tmp_path / "r.json"
    res = run("train", d / "crossed.parquet", "--test", d / "plain.parquet", "--out", out,
              "--json", js)  # fmt: skip
    line = one_line_error(res, 3, "plain.parquet (test): converted another way than the "
                          "training data: crosses [] here but [['site', 'ad']]")  # fmt: skip
    assert len(line) < 300  # the fields that differ, not both maps in full
    assert not out.exists() and not js.exists()


def test_train_refuses_validation_data_converted_another_way_before_the_first_epoch(
    d, tmp_path, no_training
):
    res = run("train", d / "crossed.parquet", "--validation", d / "plain.parquet",
              "--early-stopping-rounds", 2, "--out", tmp_path / "m.npz")  # fmt: skip
    one_line_error(res, 3, "plain.parquet (validation): converted another way")
    with pytest.raises(DataError, match=r"plain.parquet \(validation\): converted another way"):
        snapfit.LogisticRegression().fit(d / "crossed.parquet", validation=d / "plain.parquet")


def test_a_directory_of_files_converted_different_ways_is_refused(d, tmp_path, no_training):
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for name in ("crossed", "plain"):
        (mixed / f"{name}.parquet").write_bytes((d / f"{name}.parquet").read_bytes())
    assert Dataset(d / "crossed.parquet").n_features == Dataset(d / "plain.parquet").n_features
    with pytest.raises(DataError, match=r"plain.parquet: converted another way than .*crossed"):
        Dataset(mixed)
    res = run("train", mixed, "--out", tmp_path / "m.npz")
    one_line_error(res, 3, "plain.parquet: converted another way than", "crossed.parquet",
                   "crosses")  # fmt: skip
    # files converted the same way still make one dataset
    same = tmp_path / "same"
    same.mkdir()
    for name in ("a", "b"):
        (same / f"{name}.parquet").write_bytes((d / "plain.parquet").read_bytes())
    assert Dataset(same).n_rows == 2 * Dataset(d / "plain.parquet").n_rows


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_svmlight_non_finite_values_are_refused_at_convert_naming_the_line(tmp_path, value):
    src = tmp_path / "train.svm"
    src.write_text(f"1 1:1 2:1\n0 2:1\n# a comment\n1 1:{value} 3:1\n")
    res = run("convert", src, tmp_path / "train.parquet")
    one_line_error(res, 3, "train.svm, line 4: feature 1 has value", "finite")
    assert not (tmp_path / "train.parquet").exists()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_class_weight_naming_a_class_y_does_not_have_raises_like_scikit_learn():
    X, y = np.eye(4), np.array([0, 1, 0, 1])
    with pytest.raises(ValueError, match=r"The classes, \[1\], are not in class_weight"):
        snapfit.LogisticRegression(class_weight={0: 1, 7: 2}).fit(X, y)
    # what scikit-learn accepts, accepted: a class left out (weight 1), or every class named
    snapfit.LogisticRegression(class_weight={0: 2}).fit(X, y)
    snapfit.LogisticRegression(class_weight={0: 1, 1: 2, 7: 3}).fit(X, y)
    from sklearn.linear_model import LogisticRegression as SkLR

    with pytest.raises(ValueError, match=r"The classes, \[1\], are not in class_weight"):
        SkLR(class_weight={0: 1, 7: 2}).fit(X, y)


# -- tracebacks and late failures -----------------------------------------------------------


def test_tol_zero_trains_to_max_iter_without_a_traceback(d, tmp_path):
    res = run("train", d / "train.parquet", "--out", tmp_path / "m.npz", "--tol", 0,
              "--max-iter", 2)  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "NOT converged" in res.output and "Traceback" not in res.output
    res = run("train", d / "train.parquet", "--out", tmp_path / "q.npz", "--tol", 0,
              "--max-iter", 2, "-q")  # fmt: skip
    assert res.exit_code == 0, res.output


def test_n_jobs_zero_is_a_usage_error(d, tmp_path, no_training):
    res = run("train", d / "train.parquet", "--out", tmp_path / "m.npz", "--n-jobs", 0)
    one_line_error(res, 2, "--n-jobs", "give N >= 1, or -1")


def _unwritable_dir(tmp_path):
    """A directory no new file can be made in: read-only for a user, /proc for root."""
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
        return ro
    if not os.path.isdir("/proc"):
        pytest.skip("root without /proc: no directory refuses new files")
    return "/proc"


def test_an_unwritable_out_or_json_is_refused_before_training(d, tmp_path, no_training):
    where = _unwritable_dir(tmp_path)
    res = run("train", d / "train.parquet", "--out", os.path.join(where, "m.npz"))
    one_line_error(res, 4, "m.npz: cannot write in", "choose a writable directory")
    res = run("train", d / "train.parquet", "--out", tmp_path / "m.npz", "--json",
              os.path.join(where, "r.json"))  # fmt: skip
    one_line_error(res, 4, "r.json: cannot write in")
    res = run("convert", d / "events.csv", os.path.join(where, "e.parquet"), "--format", "table",
              "--label", "clicked")  # fmt: skip
    one_line_error(res, 4, "e.parquet: cannot write in")


def test_a_scheduler_that_does_not_answer_is_one_line_naming_it(d, tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setattr("snapfit.cli.train.CONNECT_TIMEOUT_S", 0.5)
    res = run("train", d / "train.parquet", "--out", tmp_path / "m.npz", "--scheduler",
              "tcp://127.0.0.1:1")  # fmt: skip
    one_line_error(res, 4, "tcp://127.0.0.1:1: no Dask scheduler answered within 0.5 s")
    assert not (tmp_path / "m.npz").exists()


def test_every_command_takes_a_glob_and_names_one_that_matches_nothing(d, tmp_path):
    parts = tmp_path / "parts"
    parts.mkdir()
    for name in ("day_0", "day_1"):
        (parts / f"{name}.parquet").write_bytes((d / "train.parquet").read_bytes())
    glob = str(parts / "day_*.parquet")
    res = run("train", glob, "--out", tmp_path / "m.npz", "--max-iter", 3, "-q")
    assert res.exit_code == 0, res.output
    for args in (["evaluate", tmp_path / "m.npz", glob],
                 ["predict", tmp_path / "m.npz", glob, "--out", tmp_path / "p.parquet"],
                 ["info", glob]):  # fmt: skip
        res = run(*args)
        assert res.exit_code == 0, res.output
    res = run("train", str(parts / "nothing_*.parquet"), "--out", tmp_path / "n.npz")
    one_line_error(res, 2, "matches no files")


def test_svmlight_test_files_get_the_training_width_and_one_rule_scores_them(tmp_path):
    """a9a.t's largest index is one short of a9a's: --n-features gives it the same width; and
    without it, `train --test` and `evaluate` apply the same rule (svmlight: fewer is fine)."""
    train, test = tmp_path / "a.svm", tmp_path / "a.t"
    train.write_text("1 1:1 2:1 9:1\n0 2:1 3:1\n1 1:1 5:1\n0 3:1 9:1\n")
    test.write_text("1 1:1 2:1\n0 2:1 3:1\n")
    assert run("convert", train, tmp_path / "a.parquet").exit_code == 0
    res = run("convert", test, tmp_path / "t.parquet", "--format", "svmlight",
              "--n-features", 9)  # fmt: skip
    assert res.exit_code == 0, res.output
    assert Dataset(tmp_path / "t.parquet").n_features == 9
    assert run("convert", test, tmp_path / "narrow.parquet", "--format", "svmlight").exit_code == 0
    assert Dataset(tmp_path / "narrow.parquet").n_features == 3
    for test_file in ("t.parquet", "narrow.parquet"):
        res = run("train", tmp_path / "a.parquet", "--test", tmp_path / test_file, "--out",
                  tmp_path / f"m-{test_file}.npz", "-q")  # fmt: skip
        assert res.exit_code == 0, res.output
        res = run("evaluate", tmp_path / f"m-{test_file}.npz", tmp_path / test_file)
        assert res.exit_code == 0, res.output
    res = run("convert", test, tmp_path / "x.parquet", "--format", "svmlight", "--n-features", 2)
    one_line_error(res, 3, "beyond", "raise --n-features")
    make_criteo_like_parquet(tmp_path / "c.parquet", 100, seed=0, hash_bits=10)
    res = run("convert", tmp_path / "c.parquet", tmp_path / "y.parquet", "--n-features", 9)
    one_line_error(res, 2, "--n-features: for svmlight input only")


def test_errors_speak_the_command_lines_flags(d, tmp_path):
    # an unlabelled file to evaluate
    table = pq.read_table(d / "train.parquet").drop(["label"])
    pq.write_table(table, tmp_path / "unlabelled.parquet")
    res = run("train", d / "train.parquet", "--out", tmp_path / "m.npz", "--max-iter", 2, "-q")
    assert res.exit_code == 0
    res = run("evaluate", tmp_path / "m.npz", tmp_path / "unlabelled.parquet")
    line = one_line_error(res, 3, "has no 'label' column", "`snapfit predict` scores it")
    assert "require_labels" not in line
    # an output that exists
    res = run("train", d / "train.parquet", "--out", tmp_path / "m.npz")
    line = one_line_error(res, 3, "already exists; pass --force to overwrite it")
    assert "force=True" not in line
    # a memory budget too small: --memory-budget, and no "0.0 MB"
    res = run("train", d / "train.parquet", "--out", tmp_path / "b.npz", "--memory-budget", "2kB")
    line = one_line_error(res, 4, "--memory-budget of 2.0 kB is too small")
    assert "0.0 MB" not in line and "chunk_rows" not in line


def test_summaries_count_in_words(d, tmp_path):
    res = run("convert", d / "events.csv", tmp_path / "e.parquet", "--format", "table",
              "--label", "clicked")  # fmt: skip
    assert res.exit_code == 0 and "1 row group in" in res.output, res.output
    # no carriage-return progress lines where stderr is not a terminal (logs, pipes)
    res = run("train", d / "train.parquet", "--out", tmp_path / "m.npz", "--max-iter", 2)
    assert res.exit_code == 0 and "\r" not in res.output and "epoch 1/2" not in res.output


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_outputs_follow_the_umask(d, tmp_path, umask):
    old = os.umask(umask)
    try:
        res = run("convert", d / "events.csv", tmp_path / "e.parquet", "--format", "table",
                  "--label", "clicked")  # fmt: skip
        assert res.exit_code == 0, res.output
        res = run("train", tmp_path / "e.parquet", "--out", tmp_path / "m.npz", "--json",
                  tmp_path / "r.json", "--max-iter", 2, "-q")  # fmt: skip
        assert res.exit_code == 0, res.output
    finally:
        os.umask(old)
    for name in ("e.parquet", "m.npz", "r.json"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o666 & ~umask, name


def test_report_draws_the_validation_curve_of_an_early_stopped_run(d, tmp_path):
    from snapfit.report import held_out_curves

    res = run("train", d / "train.parquet", "--out", tmp_path / "m.npz", "--validation",
              d / "train.parquet", "--early-stopping-rounds", 1, "--early-stopping-gap", "inf",
              "--json", tmp_path / "r.json", "-q")  # fmt: skip
    assert res.exit_code == 0, res.output
    history = json.loads((tmp_path / "r.json").read_text())["history"]
    assert held_out_curves(history) == ["validation_logloss"]
    pytest.importorskip("matplotlib")
    res = run("report", tmp_path / "r.json", "--out", tmp_path / "curve.png")
    assert res.exit_code == 0 and (tmp_path / "curve.png").stat().st_size > 0, res.output


# -- the rest of the catalogue --------------------------------------------------------------

#: Bad-input tests beside the code they check: file -> tests (each a refusal, one line, its
#: exit code or exception, and no output left behind).
ELSEWHERE = {
    "tests/test_cli_train.py": [
        "test_train_usage_errors_exit_2", "test_train_missing_out_and_missing_data",
        "test_train_bad_data_exit_3_one_line", "test_train_refuses_existing_output",
        "test_train_gpu_unavailable_exit_4", "test_predict_errors_leave_no_output",
        "test_evaluate_errors", "test_report_errors_leave_no_output",
        "test_dask_option_conflicts", "test_predict_passes_an_id_column_through",
    ],
    "tests/test_cli_data.py": [
        "test_bad_files_exit_3_with_one_line", "test_bad_flags_exit_2",
        "test_truncated_gzip_and_missing_directory_are_one_line_errors",
    ],
    "tests/test_table_convert.py": [
        "test_missing_columns_are_named_with_the_columns_there_are",
        "test_bad_csv_is_a_one_line_error_naming_the_line",
        "test_a_bad_value_deep_in_a_file_is_named_by_its_line",
        "test_bad_parquet_values_name_the_row", "test_empty_inputs",
        "test_options_that_cannot_go_together", "test_cli_usage_errors_exit_2",
        "test_cli_bad_data_exit_3_with_one_line", "test_cli_truncated_gzip_csv_is_one_line",
    ],
    "tests/test_featuremap.py": [
        "test_data_hashed_to_fewer_bits_is_refused_everywhere",
        "test_a_different_transform_or_format_is_refused",
    ],
    "tests/test_featurize.py": [
        "test_raw_rows_missing_a_column_are_refused_naming_the_columns",
        "test_a_bad_criteo_row_is_refused_naming_its_line",
    ],
    "tests/test_early_stopping.py": ["test_bad_validation_arguments"],
    "tests/test_model.py": [
        "test_truncated_file_is_a_clear_error", "test_tampered_array_fails_its_checksum",
        "test_foreign_npz_and_missing_file",
    ],
    "tests/test_report.py": ["test_load_history_rejects_other_files"],
    "tests/test_export.py": ["test_export_errors"],
    "tests/test_remote.py": ["test_truncated_remote_gzip_is_a_one_line_error"],
    "tests/data/test_reader.py": [
        "test_files_with_different_n_features_are_refused",
        "test_unlabelled_files_need_require_labels_false", "test_check_two_classes",
    ],
    "tests/data/test_validate.py": [
        "test_empty_dataset", "test_write_parquet_refuses_bad_arrays_and_leaves_nothing",
        "test_existing_output_and_output_equal_to_input_are_refused",
    ],
    "tests/data/test_svmlight.py": [
        "test_bad_lines_are_named_and_nothing_is_left", "test_n_features_too_small_and_empty_file",
    ],
    "tests/data/test_criteo.py": [
        "test_a_bad_row_is_named_by_line_and_nothing_is_left", "test_skip_budget_is_a_limit",
    ],
    "tests/stream/test_source.py": [
        "test_reader_error_names_the_row_group", "test_too_small_budget_is_a_resource_error",
    ],
    "tests/stream/test_budget.py": ["test_too_small_names_the_minimum"],
    "tests/stream/test_direct.py": ["test_decoder_error_names_the_row_group"],
    "tests/test_dask.py": ["test_gpu_on_workers_without_one_is_a_clear_error"],
}  # fmt: skip


def test_the_catalogue_names_tests_that_exist():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for path, names in ELSEWHERE.items():
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = f.read()
        for name in names:
            assert f"def {name}(" in text, f"{path}: no test {name}; update ELSEWHERE"
