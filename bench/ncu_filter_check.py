"""Which selected kernels a `--kernel-name` filter lets ncu profile (GPU machine): kernelbook's filter
(function short names, `capture.ncu.name_regex`) against an experimental one pattern per selected
instantiation (below), each run on the same top-N decode selection, listing what ncu profiled.
Measured on an H100 (2026-11-22): the per-instantiation filter profiled 26 launches instead of 45 but
missed two nvjet GEMVs and the cuDNN attention kernel, which a filter of those names alone matched.
Usage: python bench/ncu_filter_check.py data/runs/<run-id> [top_n]  → bench/out/ncu_filter_check.json
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from _common import save_json


COMMON_TOKENS = {"at", "native", "c10", "std", "detail", "cuda", "binary_internal", "unnamed", "void", "operator",
                 "const"}


def name_pattern(name: str) -> str:
    """A regex that finds one kernel instantiation, named as Kineto prints it, in the name NVIDIA's
    demangler gives the same instantiation.

    The two disagree on spelling (`{lambda()#1}` vs `[lambda() (instance 1)]`, `(anonymous namespace)`
    vs `<unnamed>`, `2ul` vs `(unsigned long)2`, full parameter types vs `const T1 &`), but the tokens
    of `kernels.name_key` (function, namespaces, template arguments, lambda numbers) appear in both, in
    order. The pattern asks for those tokens in order, each standing alone, anything between: so it
    matches this instantiation and not its siblings (`MulFunctor` vs `AddFunctor`, `<8>` vs `<4>`).
    Only `.`, `*`, `?`, groups and bracket classes are used: no look-around or `\b`, which not every
    regex engine has. Namespace tokens (`at`, `native`, `std`, ...) are left out: they repeat in every
    name and make a failing match backtrack through each combination of their occurrences. A name
    without template or parameter list (nvjet, cuDNN) is the same in both tools and is matched whole.
    """
    from kernelbook.analyze.kernels import name_key
    from kernelbook.capture.ncu import _REGEX_SPECIAL

    if "<" not in name and "(" not in name:  # a C-linkage name (nvjet, cuDNN): the same in both tools
        return "(^|[ :])" + _REGEX_SPECIAL.sub(r"\\\1", name) + "([<(]|$)"
    nw = "[^A-Za-z0-9_]"
    toks = [_REGEX_SPECIAL.sub(r"\\\1", t) for t in name_key(name).split() if t not in COMMON_TOKENS]
    return f"(^|{nw})" + f"{nw}(.*{nw})?".join(toks) + f"({nw}|$)"


def instantiation_regex(names: list[str], c_names_grouped: bool = True) -> str:
    """ncu `--kernel-name` filter (with `--kernel-name-base demangled`): one `name_pattern` per selected
    templated kernel, and the C-linkage names (nvjet, cuDNN) as one group `(^|[ :])(a|b)([<(]|$)`, so
    ncu profiles the selected instantiations and no others of the same function; `--filter-mode
    per-launch-config` then bounds it to one launch per grid/block configuration, and the reader keeps
    the configuration holding the most time."""
    names = list(dict.fromkeys(names))
    plain = [n for n in names if "<" not in n and "(" not in n]
    from kernelbook.capture.ncu import _REGEX_SPECIAL

    alts = [name_pattern(n) for n in names if n not in plain or not c_names_grouped]
    if plain and c_names_grouped:
        alts.insert(0, "(^|[ :])(" + "|".join(_REGEX_SPECIAL.sub(r"\\\1", n) for n in plain) + ")([<(]|$)")
    return "regex:" + "|".join(f"({a})" for a in alts)


def main(run: str, top_n: str = "20") -> None:
    import pandas as pd

    from kernelbook.analyze.kernels import name_key
    from kernelbook.capture import ncu as N
    from kernelbook.load.ncu import read_ncu_report_isolated

    params = {**json.loads((Path(run) / "manifest.json").read_text())["params"], "ncu_top_n": int(top_n)}
    sel = N.select_kernels(pd.read_parquet(Path(run) / "timeline.parquet"), "decode", int(top_n))
    names = sel.kernels.name.tolist()
    forms = {"short names (kernelbook)": N.name_regex(names), "one pattern per instantiation": instantiation_regex(names)}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        pf = Path(tmp) / "params.json"
        pf.write_text(json.dumps(params))
        for label, rx in forms.items():
            rep = Path(tmp) / label.replace(" ", "_")
            cmd = N.ncu_command(rep, names, N.worker_command(pf, "decode", sel.step),
                                sections=("SpeedOfLight",), extra_metrics=())
            cmd[cmd.index("--kernel-name") + 1] = rx
            t = time.perf_counter()
            N.run_ncu(cmd, Path(tmp) / "log", 600)
            got = []
            if rep.with_suffix(".ncu-rep").exists():
                _, results = read_ncu_report_isolated(rep.with_suffix(".ncu-rep"), Path(tmp))
                got = results.name.tolist()
            keys = {name_key(g) for g in got}
            missed = [n[:80] for n in names if name_key(n) not in keys]
            rows.append({"form": label, "wall_s": time.perf_counter() - t, "results": len(got),
                         "selected_profiled": len(names) - len(missed), "missed": missed,
                         "profiled_names": sorted({g[:80] for g in got})})
            print({k: v for k, v in rows[-1].items() if k != "profiled_names"}, flush=True)
            save_json("ncu_filter_check", rows)


if __name__ == "__main__":
    main(*sys.argv[1:])
