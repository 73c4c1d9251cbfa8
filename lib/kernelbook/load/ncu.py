"""Read an `.ncu-rep` with NVIDIA's `ncu_report` package (works on a CPU-only machine).

`read_ncu_report` returns the long metric table (one row per profiled result and metric, with unit)
and a result table (one row per profiled launch: demangled name, grid, block). Derived per-kernel
columns live in `kernelbook.capture.ncu_tables`.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from ..contract.layout import READER_METRICS, READER_RESULTS


class NcuReportError(ValueError):
    """The file is not a readable Nsight Compute report."""


WHEEL_HELP = ("install NVIDIA's reader from PyPI: pip install ncu-report (on a machine without registry access, "
              "carry the wheel: bash bench/gpu_wheels.sh here, then install .whl/*.whl there)")


def import_ncu_report():
    """NVIDIA's reader: the `ncu-report` wheel; the copy inside an Nsight Compute install only as a last
    resort, with a warning (on an H100, that copy of ncu 2025.3.1 crashed with signal 11 reading a report
    its own ncu wrote, while the wheel read it)."""
    try:
        import ncu_report

        return ncu_report
    except ImportError:
        pass
    import shutil
    import sys
    import warnings

    exe = shutil.which("ncu")
    candidates = [Path(exe).resolve().parent / "extras" / "python"] if exe else []
    candidates += sorted(Path("/opt/nvidia").glob("nsight-compute/*/extras/python"))
    for c in candidates:
        if (c / "ncu_report.py").exists():
            sys.path.append(str(c))
            import ncu_report

            warnings.warn(f"ncu-report wheel not installed; using the reader inside Nsight Compute ({c}), which "
                          f"has crashed on real reports: {WHEEL_HELP}", stacklevel=2)
            return ncu_report
    raise NcuReportError(f"NVIDIA's ncu_report reader is missing: {WHEEL_HELP}")


def reader_origin() -> str:
    """Where `ncu_report` is imported from: 'wheel', 'nsight-compute install' or 'missing'."""
    try:
        mod = import_ncu_report()
    except NcuReportError:
        return "missing"
    return "nsight-compute install" if "extras" in Path(mod.__file__).parts else "wheel"


def _load(path: Path):
    ncu_report = import_ncu_report()
    if not path.exists():
        raise NcuReportError(f"{path} does not exist")
    if path.stat().st_size == 0:
        raise NcuReportError(f"{path} is empty: the ncu capture wrote nothing (see ncu/ncu.log)")
    try:
        ctx = ncu_report.load_report(str(path))
    except Exception as e:
        raise NcuReportError(f"{path} is not a readable .ncu-rep (corrupt or truncated?): {e}") from e
    if ctx is None:
        raise NcuReportError(f"{path} is not a readable .ncu-rep (corrupt or truncated?)")
    return ncu_report, ctx


def read_ncu_report(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(metrics, results) from an .ncu-rep.

    metrics: result_id, metric, unit, value (float) for every numeric metric.
    results: result_id, name (demangled), function, grid, block, rules (NVIDIA's own rule results for the
    kernel, JSON, see `rule_results`).
    """
    path = Path(path)
    nr, ctx = _load(path)
    rows_r, cols = [], {"result_id": [], "metric": [], "unit": [], "value": []}
    rid = 0
    try:
        n_ranges = ctx.num_ranges()
    except Exception as e:
        raise NcuReportError(f"{path} could not be read: {e}") from e
    for ri in range(n_ranges):
        rng = ctx.range_by_idx(ri)
        for ai in range(rng.num_actions()):
            act = rng.action_by_idx(ai)
            names = act.metric_names()
            grid = block = None
            for m in names:
                metric = act.metric_by_name(m)
                if metric is None:
                    continue
                kind = metric.kind()
                if kind in (nr.IMetric.ValueKind_STRING, nr.IMetric.ValueKind_UNKNOWN):
                    continue
                try:
                    v = metric.as_double()
                except Exception:
                    continue
                cols["result_id"].append(rid)
                cols["metric"].append(m)
                cols["unit"].append(metric.unit() or "")
                cols["value"].append(v)
            grid = _dim(act, "launch__grid_dim_x", "launch__grid_dim_y", "launch__grid_dim_z")
            block = _dim(act, "launch__block_dim_x", "launch__block_dim_y", "launch__block_dim_z")
            rows_r.append({"result_id": rid, "name": act.name(nr.IAction.NameBase_DEMANGLED),
                           "function": act.name(nr.IAction.NameBase_FUNCTION), "grid": grid, "block": block,
                           "rules": json.dumps(rule_results(act))})
            rid += 1
    if rid == 0:
        raise NcuReportError(f"{path} holds no profiled kernels")
    metrics = pd.DataFrame(cols)
    metrics["value"] = metrics["value"].astype("float64")
    return metrics, pd.DataFrame(rows_r)


_RULE_LINK = re.compile(r"@[a-z]+:[A-Za-z0-9_]+:([^@]*)@")
RULE_TYPES = {0: "ok", 1: "warning", 2: "optimization", 3: "note", 4: "error"}


def rule_results(act) -> list[dict]:
    """NVIDIA's rule results for one profiled kernel (what the Nsight Compute UI shows under each section):
    rule, section, title, message (its `@section:...@` links reduced to their text), type (optimization,
    warning, note, ...) and the estimated speedup in % of the kernel's time where the rule gives one. Empty
    where the reader has no rule results."""
    try:
        raw = act.rule_results_as_dicts()
    except Exception:
        return []
    out = []
    for r in raw or []:
        msg = r.get("rule_message") or {}
        est = r.get("speedup_estimation") or {}
        out.append({"rule": r.get("rule_identifier"), "name": r.get("name"), "section": r.get("section_identifier"),
                    "title": msg.get("title") or "", "message": _RULE_LINK.sub(r"\1", msg.get("message") or ""),
                    "type": RULE_TYPES.get(msg.get("type"), str(msg.get("type"))),
                    "speedup_pct": float(est["speedup"]) if "speedup" in est else None})
    return out


def _dim(act, *names) -> str | None:
    vals = []
    for n in names:
        m = act.metric_by_name(n)
        if m is None:
            return None
        vals.append(str(int(m.as_uint64())))
    return "x".join(vals)


READER_TIMEOUT_S = 900  # the reader took seconds for 100+ launches; a hang in native code must end


def read_ncu_report_isolated(path: str | Path, work_dir: str | Path,
                             timeout_s: float = READER_TIMEOUT_S) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`read_ncu_report` in a child process, so a crash inside NVIDIA's native reader (seen as a
    segfault when it shared a process with torch) becomes an error with a reason, not a lost run; and
    one that does not return within `timeout_s` seconds is ended, with that reason."""
    import subprocess
    import sys

    from ..proc import TimeLimitExceeded, run_limited

    work_dir = Path(work_dir)
    out_m, out_r = work_dir / READER_METRICS, work_dir / READER_RESULTS
    code = ("import sys; from kernelbook.load.ncu import read_ncu_report as r; m, k = r(sys.argv[1]); "
            "m.to_parquet(sys.argv[2]); k.to_parquet(sys.argv[3])")
    try:
        proc = run_limited([sys.executable, "-c", code, str(path), str(out_m), str(out_r)], timeout_s,
                           f"the ncu report reader on {Path(path).name}", stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    except TimeLimitExceeded as e:
        raise NcuReportError(str(e)) from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        origin = reader_origin()
        fix = (f"; the reader was the copy inside the Nsight Compute install, which crashes on such reports: "
               f"{WHEEL_HELP}" if origin == "nsight-compute install" else "")
        raise NcuReportError(f"reading {Path(path).name} failed ({how}): {last}{fix}")
    m, r = pd.read_parquet(out_m), pd.read_parquet(out_r)
    out_m.unlink()
    out_r.unlink()
    return m, r
