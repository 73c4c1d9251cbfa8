import fcntl
import os
from pathlib import Path

import pytest

# Under pytest-xdist (the README's test command runs two workers) each worker has its own profiling lock, so
# one worker's lock tests never meet the other's captures; set before any test imports kernelbook.clocks.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("KERNELBOOK_LOCK", f"/tmp/kernelbook-profiling-{os.getpid()}.lock")

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "data" / "runs" / "h100-deepseek-ocr-2"
FIXTURE_REP = REPO / "tests" / "fixtures" / "h200-decode-3kernels.ncu-rep"
CHAPTERS = [p.stem for p in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.py"))]
# plotly figures each chapter draws from the bundled run
FIGURES = {"00_setup": 0, "01_timeline": 8, "02_ncu": 1, "03_histograms": 1, "04_roofline": 3,
           "05_classification": 0, "06_npu": 1, "07_summary": 2, "08_serving": 3}


def earlier_report(out: Path, text: str, run_id: str = RUN.name) -> Path:
    """An earlier report in `out` (made when missing): an index holding `text`, with the runner's marker."""
    from kernelbook import outdir

    out.mkdir(parents=True, exist_ok=True)
    (out / "index.html").write_text(text)
    outdir.mark(out, run_id, "en")
    return out


@pytest.fixture(scope="session")
def run():
    from kernelbook.load.run import load_run

    return load_run(RUN)


@pytest.fixture(scope="session")
def partial_run(tmp_path_factory):
    """A real partial run: the bundled H100 run as its capture lands when reading the ncu report fails.

    The timeline, phases and manifest are the H100 run's; the ncu stage is redone with the capture's own
    code on a report cut short (the first 64 bytes of the committed .ncu-rep fixture): the isolated
    reader fails, every selected kernel gets that reason as its status, no metrics table is written,
    and the manifest is marked partial with the reason the capture writes (`capture.run.capture`)."""
    import json
    import shutil

    import pandas as pd

    from kernelbook.capture.ncu_tables import kernel_table
    from kernelbook.capture.ncu import select_kernels
    from kernelbook.load.ncu import NcuReportError, read_ncu_report_isolated

    src = REPO / "data" / "runs" / "h100-deepseek-ocr-2"
    run = tmp_path_factory.mktemp("runs") / "h100-partial"
    shutil.copytree(src, run, ignore=shutil.ignore_patterns("kernels.parquet", "metrics.parquet", "results.parquet"))
    rep = run / "ncu" / "decode.ncu-rep"
    rep.write_bytes(FIXTURE_REP.read_bytes()[:64])
    with pytest.raises(NcuReportError) as e:
        read_ncu_report_isolated(rep, run / "ncu")
    error = str(e.value)
    timeline = pd.read_parquet(run / "timeline.parquet")
    manifest = json.loads((run / "manifest.json").read_text())
    sel = select_kernels(timeline, "decode", manifest["params"]["ncu_top_n"])
    kernels = kernel_table(sel, None, None, timeline, error)
    kernels.insert(0, "phase", "decode")
    kernels.to_parquet(run / "ncu" / "kernels.parquet", index=False)
    manifest["ncu"]["phases"]["decode"].update(error=error, profiled=0, results=0)
    manifest["timings_s"].pop("ncu", None)
    manifest.update(run_id=run.name, status="partial", reason=f"ncu: NcuError: decode: {error}")
    (run / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return run


@pytest.fixture(scope="session")
def rendered_book(tmp_path_factory):
    """The bundled run's book rendered once per language per test session: `rendered_book("zh")`."""
    from kernelbook import params as P
    from kernelbook.runner import render_book

    done = {}
    # one rendering per test session, also across pytest-xdist workers: they share the base temp folder's parent,
    # and the first worker to ask renders there under a lock while the other waits and reads it
    shared = tmp_path_factory.getbasetemp().parent if os.environ.get("PYTEST_XDIST_WORKER") else None

    def render(language: str = "en"):
        if language in done:
            return done[language]
        if shared is None:
            out = tmp_path_factory.mktemp(f"book-{language}") / "report"
            done[language] = render_book(P.validate({"language": language}, consumer="book"), out,
                                         log=lambda *_: None)
            return done[language]
        out = shared / f"book-{language}" / "report"
        with open(shared / f"book-{language}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (out / "index.html").exists():
                done[language] = render_book(P.validate({"language": language}, consumer="book"), out,
                                             log=lambda *_: None)
        done[language] = out
        return out

    return render
