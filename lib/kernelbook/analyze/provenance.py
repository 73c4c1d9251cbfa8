"""How a run's data were taken, from its manifest: the capture chapters' own account (steps and their
wall time, commands, versions, the timeline's profiled/plain overhead, ncu's coverage and cost).

Pure functions of the manifest dict; tables in long format (`item`, `value`) where rows differ in kind.
"""
from __future__ import annotations

import pandas as pd

STEPS = {"measure_peaks": "measure peaks (bf16 GEMM, device copy)", "timeline": "timeline capture",
         "ncu": "Nsight Compute capture"}


def steps(manifest: dict) -> pd.DataFrame:
    """One row per capture step: what it did, which chapter (or the CLI) ran it, its wall time (s)."""
    produced = manifest.get("produced_by", {})
    rows = []
    for key, wall in (manifest.get("timings_s") or {}).items():
        by = produced.get(key, {})
        rows.append({"step": STEPS.get(key, key), "by": by.get("chapter") or "python -m kernelbook capture",
                     "wall_s": float(wall)})
    if rows:
        rows.append({"step": "total", "by": "", "wall_s": sum(r["wall_s"] for r in rows)})
    return pd.DataFrame(rows, columns=["step", "by", "wall_s"])


def versions(manifest: dict) -> pd.DataFrame:
    """The software and hardware the run was taken with."""
    env = manifest.get("environment", {})
    gpu = env.get("gpu", {}) if isinstance(env.get("gpu"), dict) else {}
    items = [("GPU", gpu.get("name")), ("driver", env.get("driver")), ("CUDA", env.get("cuda")),
             ("torch", env.get("torch")), ("transformers", env.get("transformers")),
             ("Nsight Compute", env.get("ncu")), ("Nsight Systems", env.get("nsys")),
             ("kernelbook revision", manifest.get("git_revision")), ("captured", manifest.get("created")),
             ("parameters from", manifest.get("params_source"))]
    return pd.DataFrame([{"item": k, "value": v} for k, v in items if v is not None])


def timeline_account(manifest: dict) -> pd.DataFrame:
    """How the timeline was taken: backend, model, inputs, plain vs profiled generate, the shapes pass."""
    ti = manifest.get("timeline_info") or {}
    tb = manifest.get("timeline_backend") or {}
    plain = ti.get("plain_generate") or {}
    shapes = ti.get("shapes") or {}
    items = [
        ("backend", f"{tb.get('backend')} ({tb.get('why')})" if tb else None),
        ("model", f"{ti.get('model_class')}, {ti.get('n_params', 0) / 1e9:.2f} B parameters, weights "
                  f"{ti.get('weights')}" if ti.get("model_class") else None),
        ("model build + inputs", _s(ti.get("model_load_s"))),
        ("plain generate (median of trials)", f"{_s(plain.get('median_s'))} over {plain.get('trials')} trials, "
         f"spread {100 * plain.get('spread', 0):.0f} %" + (" (noisy)" if plain.get("noisy") else "")
         if plain else None),
        ("profiled generate", _s(ti.get("profiled_generate_s"))),
        ("profiled ÷ plain", f"{ti['overhead_ratio']:.2f}" if ti.get("overhead_ratio") else None),
        ("trace export + ingest", f"{_s(ti.get('trace_export_s'))} + {_s(ti.get('ingest_s'))}"
         if ti.get("ingest_s") is not None else None),
        ("kernels in the timeline", f"{ti['kernels']:,}" if ti.get("kernels") else None),
        ("aten shapes", shapes.get("method")),
        ("shapes joined", f"{shapes['kernels_matched']:,} of {shapes['kernels']:,} kernels "
                          f"({shapes['matched_pct']:.2f} %), {shapes['instances_identical']} of "
                          f"{shapes['instances']} phase steps launched identically; shapes pass "
                          f"{_s(shapes.get('pass_generate_s'))}" if "kernels_matched" in shapes else None),
        ("vision forwards marked", ti.get("vision_forwards_marked")),
    ]
    return pd.DataFrame([{"item": k, "value": v} for k, v in items if v is not None])


def ncu_account(manifest: dict) -> pd.DataFrame:
    """How the ncu stage ran: mode, controls, command, launches profiled per selected kernel, cost."""
    n = manifest.get("ncu") or {}
    if not n:
        return pd.DataFrame(columns=["item", "value"])
    results = n.get("results")
    wall = n.get("wall_s") or sum(v.get("wall_s", 0) for v in n.get("phases", {}).values())
    items = [("selection", n.get("mode")), ("clock control", n.get("clock_control")),
             ("cache control", n.get("cache_control")), ("command", n.get("command")),
             ("ncu processes", n.get("processes", len(n.get("phases", {})))),
             ("profiled launches", f"{results} of {n.get('expected_launches')} expected" if results is not None
              else None),
             ("per selected kernel", f"{n['results_per_selected']:.2f}" if n.get("results_per_selected") else None),
             ("ncu wall time", _s(wall)),
             ("per profiled launch", _s(wall / results) if results else None)]
    for ph, v in n.get("phases", {}).items():
        items.append((f"{ph}: profiled / selected", f"{v.get('profiled')}/{v.get('selected')} "
                                                    f"(step {v.get('step')})" + (f"; {v['error']}" if v.get("error")
                                                                                else "")))
    return pd.DataFrame([{"item": k, "value": v} for k, v in items if v is not None])


def _s(v) -> str | None:
    return None if v is None else f"{float(v):.1f} s"


def decision(took: dict, part: str) -> str:
    """The capture chapter's own decision for this rendering, as one sentence."""
    done = f" ({part} captured in {took['wall_s']:.1f} s)." if took.get("captured") else "."
    return f"This rendering: {took['why']}{done}"
