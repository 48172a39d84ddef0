"""Pictures (--plot), design-doc reports (--report) and the progress bar."""

from __future__ import annotations

import io
import sys

import pytest
from conftest import make

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.api import plan_scenario as plan
from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.report.progress import ProgressBar, for_command

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def planned() -> dict:
    return plan(make("llama-3.1-8b", training={"tokens": 1e12, "seq_len": 4096}), max_gpus=256).to_json()


@pytest.fixture(scope="module")
def estimate() -> dict:
    return evaluate(make("llama-3.1-70b", gpus=64, training={"seq_len": 8192, "global_batch": 512, "tokens": 1.4e12},
                         layout={"tp": 4, "pp": 4, "zero": 2, "recompute": "selective-op"})).to_json()


@pytest.mark.parametrize("kind", ["plan", "evaluate"])
@pytest.mark.parametrize("ext", [".png", ".svg", ".html"])
def test_plot_files_have_the_right_format(kind: str, ext: str, planned: dict, estimate: dict, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from gpuplan.report import plots

    paths = plots.write([planned if kind == "plan" else estimate], tmp_path / f"fig{ext}", kind)
    data = paths[0].read_bytes()
    assert len(data) > 5000
    if ext == ".png":
        assert data.startswith(PNG_MAGIC)
    elif ext == ".svg":
        assert b"<svg" in data[:2000] and data.rstrip().endswith(b"</svg>")
    else:
        assert data.startswith(b"<!DOCTYPE html>") and b"<svg" in data and b"</html>" in data


def test_plot_several_results_numbered(planned: dict, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from gpuplan.report import plots

    paths = plots.write([planned, {"error": "bad item"}, planned], tmp_path / "p.png", "plan")
    assert [p.name for p in paths] == ["p-1.png", "p-2.png"]


def test_plot_bad_extension(planned: dict, tmp_path) -> None:
    from gpuplan.report import plots

    with pytest.raises(GpuplanError, match=".png, .svg or .html"):
        plots.write([planned], tmp_path / "p.pdf", "plan")


def test_plot_without_matplotlib_says_how_to_install(planned: dict, tmp_path, monkeypatch) -> None:
    from gpuplan.report import plots

    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails as if absent
    with pytest.raises(GpuplanError, match=r"gpuplan\[plot\]"):
        plots.write([planned], tmp_path / "p.png", "plan")


@pytest.mark.parametrize("ext", [".md", ".html"])
def test_plan_report_sections(ext: str, planned: dict, tmp_path) -> None:
    from gpuplan.report import document as report_doc
    from gpuplan.validation import scores

    text = report_doc.write([planned], tmp_path / f"plan{ext}", "plan", scores()).read_text()
    for section in ("Inputs", "Recommendation", "Top alternatives", "Scaling curve", "Assumptions and their sources",
                    "How accurate the model is"):
        assert section in text
    assert "in sample" in text and "cuda_context_bytes" in text and "estimate" in text
    if ext == ".md":
        assert text.startswith("# Training plan: Llama-3.1-8B") and "| GPUs |" in text
    else:
        assert text.startswith("<!DOCTYPE html>") and "<table>" in text and "<strong>" in text


def test_evaluate_report(estimate: dict, tmp_path) -> None:
    from gpuplan.report import document as report_doc

    text = report_doc.write([estimate, {"error": "no such model"}], tmp_path / "e.md", "evaluate").read_text()
    assert "Memory per GPU" in text and "tp=4 pp=4" in text and "error: no such model" in text


def test_cli_plot_and_report(tmp_path, capsys) -> None:
    pytest.importorskip("matplotlib")
    png, md = tmp_path / "plan.png", tmp_path / "plan.md"
    assert main(["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens", "1T", "--max-gpus", "64",
                 "--plot", str(png), "--report", str(md)]) == 0
    err = capsys.readouterr().err
    assert png.read_bytes().startswith(PNG_MAGIC) and md.read_text().startswith("# Training plan")
    assert f"wrote {png}" in err and "[" not in err  # no progress bar when stderr is not a terminal
    assert main(["evaluate", "--example", "--report", str(tmp_path / "e.html")]) == 0
    assert (tmp_path / "e.html").read_text().startswith("<!DOCTYPE html>")


def test_cli_report_bad_extension(capsys) -> None:
    assert main(["evaluate", "--example", "--report", "x.pdf"]) == 2
    assert ".md or .html" in capsys.readouterr().err


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_draws_on_a_terminal_and_clears() -> None:
    s = _Tty()
    bar = ProgressBar("planning", stream=s)
    bar(0.0, "h100-sxm")
    bar(0.01, "skipped: within 0.1 s")
    bar(1.0, "done")
    bar.close()
    out = s.getvalue()
    assert "planning [" in out and "h100-sxm" in out and "done" in out and "skipped" not in out
    assert out.endswith("\r")


def test_progress_bar_quiet_off_terminal_and_with_json() -> None:
    s = io.StringIO()
    bar = ProgressBar("planning", stream=s)
    bar(0.5)
    bar.close()
    assert s.getvalue() == ""
    assert not for_command("planning", json_output=True).enabled


def test_plan_reports_progress_per_group_of_gpu_types() -> None:
    # GPU types of the same layout space (8-GPU nodes here) are searched together; a GB200 tray of 4 GPUs
    # in a 72-GPU NVLink domain is another space
    seen: list[tuple[float, str]] = []
    plan(make("llama-3.1-8b"), gpu_types=["h100-sxm", "a100-80gb-sxm", "gb200"], max_gpus=8,
         progress=lambda f, label: seen.append((f, label))).to_json()
    assert [label for _, label in seen] == ["h100-sxm, a100-80gb-sxm", "gb200"]
    assert seen[0][0] == 0.0 and abs(seen[1][0] - 2 / 3) < 1e-12
