"""The store and the calibration read path under bad input (fuzz report A5, A6, A7, D8, D11): one
GpuplanError line, never a traceback, never a file made by reading, never a factor out of range."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.profile.calibrate import calibrate
from gpuplan.profile.store import Store, calibration_factors


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _store_with_run(path: Path, gpu: str = "h100-sxm", mem: float = 55e9, tps: float = 1.1e5) -> Path:
    s = Store(path)
    s.add_run(kind="profile", gpu=gpu, model="m", layout={}, scenario={},
              measured={"memory": {"total": mem}, "time": {"tokens_per_s": tps}},
              predicted={"memory": {"total": 50e9}, "time": {"tokens_per_s": 1e5}})
    s.close()
    return path


def _calibration_rows(path: Path) -> list[tuple]:
    con = sqlite3.connect(path)
    try:
        return con.execute("select * from calibration").fetchall()
    finally:
        con.close()


# ---- A5: a path that cannot be made ---------------------------------------------------------------

def test_a_store_below_a_file_is_one_clear_error(tmp_path):
    (tmp_path / "afile").write_text("x")
    for create in (False, True):
        with pytest.raises(GpuplanError, match="afile is a file, not a folder"):
            Store(tmp_path / "afile" / "x.sqlite3", create=create)
        with pytest.raises(GpuplanError, match="afile is a file"):
            Store(tmp_path / "afile" / "deeper" / "x.sqlite3", create=create)


def test_xdg_cache_home_on_a_file_is_named(tmp_path, monkeypatch):
    (tmp_path / "hostname").write_text("x")
    monkeypatch.delenv("GPUPLAN_STORE", raising=False)
    monkeypatch.delenv("GPUPLAN_CACHE_DIR", raising=False)  # it comes before XDG_CACHE_HOME
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "hostname"))
    with pytest.raises(GpuplanError, match="XDG_CACHE_HOME.*hostname is a file"):
        Store()
    monkeypatch.setenv("GPUPLAN_STORE", str(tmp_path / "hostname" / "x"))
    with pytest.raises(GpuplanError, match="GPUPLAN_STORE"):
        Store()


def test_cli_calibrate_on_a_bad_path_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("afile").write_text("x")
    assert main(["calibrate", "--store", "afile/x.sqlite3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "afile is a file" in err and "Traceback" not in err


# ---- D11: reading creates nothing -------------------------------------------------------------------

@pytest.mark.parametrize("off", [None, False, "", "false", "FALSE", "no", "No", "off", "none", "None", " false "])
def test_false_no_off_none_mean_no_calibration(off, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert calibration_factors(off, "h100-sxm") is None
    assert _listing(tmp_path) == []


@pytest.mark.parametrize("ref", ["5", "false.sqlite3", "nonexistent/dir/x.sqlite3"])
def test_reading_a_missing_store_fails_and_creates_nothing(ref, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(GpuplanError, match="hardware.calibration: there is no gpuplan store at"):
        calibration_factors(ref, "h100-sxm")
    with pytest.raises(GpuplanError, match="no gpuplan store"):
        Store(ref).calibration("h100-sxm")
    with pytest.raises(GpuplanError, match="no store at"):
        calibrate(Store(ref))
    assert _listing(tmp_path) == []


def test_a_scenario_naming_a_missing_store_creates_nothing(tmp_path, monkeypatch):
    from conftest import make

    monkeypatch.chdir(tmp_path)
    for ref in ("5", "no_such_dir/x.sqlite3"):
        with pytest.raises(GpuplanError, match="no gpuplan store"):
            make("llama-3.1-8b", hardware={"calibration": ref})
    assert _listing(tmp_path) == []


@pytest.mark.parametrize("ref", [5, 1.5, ["a"], {"a": 1}])
def test_a_calibration_that_is_not_a_path_is_refused(ref, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(GpuplanError, match="must be default, false or the path"):
        calibration_factors(ref, "h100-sxm")
    assert _listing(tmp_path) == []


def test_default_and_true_read_the_default_store(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPLAN_STORE", str(tmp_path / "runs.sqlite3"))
    s = Store()
    s.set_calibration("h100-sxm", 1.2, 0.8, 1)
    s.close()
    for ref in ("default", "DEFAULT", "true", "yes", True):
        assert calibration_factors(ref, "h100-sxm") == pytest.approx((1.2, 0.8))


def test_an_empty_file_is_not_turned_into_a_store(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    with pytest.raises(GpuplanError, match="empty file, not a gpuplan store"):
        Store(empty)
    with pytest.raises(GpuplanError, match="empty file"):
        calibration_factors(str(empty), "h100-sxm")
    with pytest.raises(GpuplanError, match="empty file"):
        Store(empty, create=True)
    assert empty.read_bytes() == b"" and _listing(tmp_path) == ["empty.json"]


def test_reading_an_existing_store_changes_nothing(tmp_path):
    path = _store_with_run(tmp_path / "runs.sqlite3")
    s = Store(path)
    s.set_calibration("h100-sxm", 1.1, 0.9, 1)
    s.close()
    before, listing = path.read_bytes(), _listing(tmp_path)
    os.chmod(path, 0o444)  # a read-only file (as any user) must still be readable
    try:
        s = Store(path)
        assert len(s.runs()) == 1 and s.calibration("h100-sxm") == pytest.approx((1.1, 0.9))
        assert s.calibration("a100-80gb-sxm") is None
        s.close()
        assert calibration_factors(str(path), "h100-sxm") == pytest.approx((1.1, 0.9))
    finally:
        os.chmod(path, 0o644)
    assert path.read_bytes() == before and _listing(tmp_path) == listing


def test_writing_makes_the_folder_and_the_store(tmp_path):
    path = tmp_path / "new" / "dir" / "runs.sqlite3"
    s = Store(path)
    assert not path.parent.exists()  # opening alone makes nothing
    _store_with_run(path)
    assert len(Store(path).runs()) == 1
    made = tmp_path / "eager" / "runs.sqlite3"
    Store(made, create=True).close()
    assert made.is_file() and Store(made).runs() == []
    s.close()


# ---- A6: malformed rows -----------------------------------------------------------------------------

BAD_ROWS = {
    "measured not JSON": ("update runs set measured = 'not json'", "measured is not JSON"),
    "measured NULL": ("update runs set measured = NULL, predicted = NULL", "measured is NULL"),
    "gpu NULL": ("update runs set gpu = NULL", "gpu is None"),
    "measured {}": ("update runs set measured = '{}'", "measured has no memory"),
    "measured a list": ("update runs set measured = '[1]'", "measured is not a mapping"),
    "predicted total 0": ("""update runs set predicted = '{"memory": {"total": 0}, "time": {"tokens_per_s": 0}}'""",
                          "predicted memory.total is 0"),
    "measured total abc": ("""update runs set measured = '{"memory": {"total": "abc"}, "time": {}}'""",
                           "measured memory.total is 'abc'"),
    "measured total -5": ("""update runs set measured = '{"memory": {"total": -5}, "time": {"tokens_per_s": -1}}'""",
                          "measured memory.total is -5"),
    "predicted tps a string": (
        """update runs set predicted = '{"memory": {"total": 5e10}, "time": {"tokens_per_s": "x"}}'""",
        "predicted time.tokens_per_s is 'x'"),
    "measured total true": ("""update runs set measured = '{"memory": {"total": true}, "time": {}}'""",
                            "measured memory.total is True"),
}


@pytest.mark.parametrize("case", list(BAD_ROWS))
def test_calibrate_refuses_a_malformed_run_with_one_line_and_stores_nothing(case, tmp_path):
    path = _store_with_run(tmp_path / "runs.sqlite3")
    _store_with_run(path, gpu="h200")  # a good GPU type: nothing stored for it either
    sql, message = BAD_ROWS[case]
    con = sqlite3.connect(path)
    with con:
        con.execute(sql + " where id = 1")
    con.close()
    with pytest.raises(GpuplanError, match="run 1 is malformed") as err:
        calibrate(Store(path))
    assert message in str(err.value) and "delete from runs where id = 1" in str(err.value)
    assert "\n" not in str(err.value)
    assert _calibration_rows(path) == []


def test_a_run_without_a_predicted_throughput_is_not_a_division_by_none(tmp_path):
    path = tmp_path / "runs.sqlite3"
    s = Store(path)
    s.add_run(kind="profile", gpu="h200", model="m", layout={}, scenario={},
              measured={"memory": {"total": 55e9}, "time": {"tokens_per_s": 1e5}},
              predicted={"memory": {"total": 50e9}, "time": {"tokens_per_s": None}})  # a GPU without a peak
    res = calibrate(s)["gpus"]["h200"]
    assert res["memory_factor"] == pytest.approx(1.1) and res["compute_factor"] == 1.0


def test_a_runs_table_of_another_schema_is_refused(tmp_path):
    path = tmp_path / "metaonly.sqlite3"
    con = sqlite3.connect(path)
    with con:
        con.execute("create table gpuplan_meta (key text primary key, value text)")
        con.execute("insert into gpuplan_meta values ('app', 'gpuplan'), ('schema', '1')")
        con.execute("create table runs (x int)")
        con.execute("insert into runs values (1)")
    con.close()
    with pytest.raises(GpuplanError, match="runs table has no id"):
        calibrate(Store(path))


def test_a_store_of_another_schema_version_is_refused(tmp_path):
    path = _store_with_run(tmp_path / "runs.sqlite3")
    con = sqlite3.connect(path)
    with con:
        con.execute("update gpuplan_meta set value = '99' where key = 'schema'")
    con.close()
    with pytest.raises(GpuplanError, match="schema '99'"):
        Store(path)


def test_cli_calibrate_on_a_malformed_store_is_one_line_exit_2(tmp_path, capsys):
    path = _store_with_run(tmp_path / "runs.sqlite3")
    con = sqlite3.connect(path)
    with con:
        con.execute("update runs set measured = 'not json'")
    con.close()
    for extra in ([], ["--json"]):
        assert main(["calibrate", "--store", str(path), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "run 1 is malformed" in err


# ---- A7 / D8: factors out of range ------------------------------------------------------------------

@pytest.mark.parametrize(("mem", "comp", "shown"), [
    (-1.0, 0.0, "memory_factor = -1.0"), (1.0, 0.0, "compute_factor = 0.0"), ("abc", None, "memory_factor = 'abc'"),
    (1.0, None, "compute_factor = None"), (float("nan"), 1.0, "memory_factor = None"),  # SQLite keeps NaN as NULL
    (1.0, 1e300, "compute_factor = 1e+300"), (1e-300, 1e-300, "memory_factor = 1e-300"),
    (float("inf"), 1.0, "memory_factor = inf"), (-1.25e-10, 1.0, "memory_factor = -1.25e-10"),
    (10.5, 1.0, "memory_factor = 10.5"), (1.0, 0.05, "compute_factor = 0.05"), (1, b"\x01", "compute_factor = b"),
])
def test_a_stored_factor_out_of_range_is_one_clear_error(mem, comp, shown, tmp_path):
    from conftest import make

    path = tmp_path / "badcal.sqlite3"
    Store(path, create=True).close()
    con = sqlite3.connect(path)
    with con:
        con.execute("insert into calibration values ('h100-sxm', ?, ?, 1, 0)", (mem, comp))
    con.close()
    with pytest.raises(GpuplanError, match="bad calibration for h100-sxm") as err:
        Store(path).calibration("h100-sxm")
    msg = str(err.value)
    assert str(path) in msg and shown in msg and "0.1 to 10" in msg and "\n" not in msg
    with pytest.raises(GpuplanError, match="bad calibration"):  # evaluate/plan read it here
        make("llama-3.1-8b", gpus=8, hardware={"calibration": str(path)})
    with pytest.raises(GpuplanError, match="hardware.calibration: the store .* bad calibration"):
        calibration_factors(str(path), "h100-sxm")


def test_range_ends_are_inclusive(tmp_path):
    s = Store(tmp_path / "runs.sqlite3")
    s.set_calibration("h100-sxm", 0.1, 10, 1)
    assert s.calibration("h100-sxm") == (0.1, 10.0)


@pytest.mark.parametrize(("mem", "comp"), [(-1e-10, 1.0), (1.0, 0.0), (float("nan"), 1.0), (1.0, float("inf")),
                                           (1e-300, 1.0), (1.0, 1e300), ("1.2", 1.0), (True, 1.0)])
def test_set_calibration_never_writes_a_bad_factor(mem, comp, tmp_path):
    path = tmp_path / "runs.sqlite3"
    s = Store(path, create=True)
    with pytest.raises(GpuplanError, match="not a number from 0.1 to 10"):
        s.set_calibration("h100-sxm", mem, comp, 1)
    s.close()
    assert _calibration_rows(path) == []


def test_calibrate_refuses_to_store_a_factor_out_of_range(tmp_path):
    path = _store_with_run(tmp_path / "runs.sqlite3", mem=1.0)  # 1 byte measured, 50 GB predicted
    with pytest.raises(GpuplanError, match=r"memory factor of 2e-11 .*outside 0.1 to 10") as err:
        calibrate(Store(path))
    assert "nothing was stored" in str(err.value)
    assert _calibration_rows(path) == []


def test_calibrate_still_stores_sane_factors(tmp_path):
    path = _store_with_run(tmp_path / "runs.sqlite3", gpu="b200", mem=55e9, tps=0.9e5)
    res = calibrate(Store(path))
    assert res["gpus"]["b200"]["memory_factor"] == pytest.approx(1.1)
    assert Store(path).calibration("b200") == pytest.approx((1.1, 0.9))
    assert json.loads(json.dumps(res))  # plain JSON (no NaN, no objects)
