"""Which selected kernels an ncu `--kernel-name` filter lets ncu profile, and what each profiled launch
costs (GPU machine). Each variant runs ncu once on the same top-N decode selection of a run and lists
what ncu profiled, with the time at which each result finished (from ncu's `==PROF==` lines).

Variants, `<filter>:<sections>[:norules]`:
  filter   kb    = kernelbook's filter (`capture.ncu.name_regex`: instantiations + bare names);
           short = function short names (kernelbook's filter until 2026-11-22);
           inst  = instantiations alone (without the bare-name alternative);
           inst+lib = inst plus a plain `nvjet|cudnn` alternative; lib = `nvjet|cudnn` alone
           (which library kernels launch under ncu?)
  sections sol = SpeedOfLight alone; all = kernelbook's sections and metrics; time = duration alone
  norules  adds `--apply-rules no` (ncu skips its guided-analysis rules after each result)
Usage: python bench/ncu_filter_check.py data/runs/<run-id> <top_n> <variant> ...
       → bench/out/ncu_filter_check.json
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import save_json


def short_name_regex(names: list[str]) -> str:
    """The filter kernelbook used before: function short names, so every sibling instantiation of a
    selected function matched too (kept here to compare)."""
    from kernelbook.contract.kernels import short_name
    from kernelbook.capture.ncu import _REGEX_SPECIAL

    alts = [_REGEX_SPECIAL.sub(r"\\\1", short_name(n)) for n in names]
    return "regex:(^|[ :])(" + "|".join(dict.fromkeys(alts)) + ")([<(]|$)"


def instantiation_regex(names: list[str]) -> str:
    """kernelbook's filter without its bare-name alternative: exact instantiations only."""
    from kernelbook.capture.ncu import name_pattern

    return "regex:" + "|".join(f"({name_pattern(n)})" for n in dict.fromkeys(names))


def run_timed(cmd: list[str], timeout_s: int = 600) -> tuple[float, list[dict], str]:
    """Run ncu, stamping each output line; returns wall seconds, the profiled results and the text."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines, results = [], []
    for line in proc.stdout:
        t = time.perf_counter() - t0
        lines.append(f"{t:8.2f} {line.rstrip()}")
        m = re.search(r'==PROF== Profiling "([^"]+)".*?(\d+) pass', line)
        if m:
            results.append({"t_s": round(t, 2), "name": m.group(1), "passes": int(m.group(2))})
        if t > timeout_s:
            proc.kill()
    proc.wait()
    return time.perf_counter() - t0, results, "\n".join(lines)


def main(run: str, top_n: str, *variants: str) -> None:
    import pandas as pd

    from kernelbook.contract.kernels import name_key
    from kernelbook.capture import ncu as N

    params = {**json.loads((Path(run) / "manifest.json").read_text())["params"], "ncu_top_n": int(top_n)}
    sel = N.select_kernels(pd.read_parquet(Path(run) / "timeline.parquet"), "decode", int(top_n))
    names = sel.kernels.name.tolist()
    filters = {"kb": N.name_regex(names), "short": short_name_regex(names), "inst": instantiation_regex(names),
               "inst+lib": instantiation_regex(names) + "|(nvjet|cudnn)", "lib": "regex:nvjet|cudnn"}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        pf = Path(tmp) / "params.json"
        pf.write_text(json.dumps(params))
        for v in variants:
            filt, sections, *opt = v.split(":")
            rep = Path(tmp) / v.replace(":", "_").replace("+", "_")
            kw = {"all": {}, "sol": {"sections": ("SpeedOfLight",), "extra_metrics": ()},
                  "time": {"sections": (), "extra_metrics": ("gpu__time_duration.sum",)},
                  "launch": {"sections": ("LaunchStats",), "extra_metrics": ()}}[sections]
            cmd = N.ncu_command(rep, names, N.worker_command(pf, "decode", sel.step), **kw)
            cmd[cmd.index("--kernel-name") + 1] = filters[filt]
            if "norules" in opt:
                cmd[1:1] = ["--apply-rules", "no"]
            wall, got, text = run_timed(cmd)
            worker = [ln for ln in text.splitlines() if "kernelbook worker done" in ln]
            report = []
            if rep.with_suffix(".ncu-rep").exists():  # the report names each result correctly
                from kernelbook.load.ncu import read_ncu_report_isolated
                metrics, res = read_ncu_report_isolated(rep.with_suffix(".ncu-rep"), Path(tmp))
                launch = metrics[metrics.metric.str.startswith("launch__")].pivot_table(
                    index="result_id", columns="metric", values="value", aggfunc="first")
                for r in res.itertuples():
                    lr = launch.loc[r.result_id] if r.result_id in launch.index else {}
                    report.append({"name": r.name, "grid": r.grid, "block": r.block,
                                   "registers": lr.get("launch__registers_per_thread"),
                                   "smem": lr.get("launch__shared_mem_per_block")})
            # ncu's ==PROF== lines print some launches under a stale name: count from the report
            keys = {name_key(g["name"]) for g in report}
            missed = [n[:90] for n in names if name_key(n) not in keys]
            for g in [*got, *report]:
                g["name"] = g["name"][:90]
            first = got[0]["t_s"] if got else None
            rows.append({"variant": v, "wall_s": round(wall, 1), "results": len(got),
                         "selected_profiled": len(names) - len(missed), "missed": missed,
                         "first_result_s": first, "last_result_s": got[-1]["t_s"] if got else None,
                         "s_per_result": round((got[-1]["t_s"] - first) / (len(got) - 1), 2) if len(got) > 1 else None,
                         "worker": worker[-1][9:] if worker else None, "profiled": got, "report": report,
                         "errors": [ln for ln in text.splitlines() if "ERROR" in ln or "WARN" in ln][:10]})
            print({k: x for k, x in rows[-1].items() if k not in ("profiled", "report")}, flush=True)
            save_json("ncu_filter_check", {"top_n": int(top_n), "step": sel.step, "rows": rows})


if __name__ == "__main__":
    main(*sys.argv[1:])
