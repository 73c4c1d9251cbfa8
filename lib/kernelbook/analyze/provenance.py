"""How a run's data were taken, from its manifest: the capture chapters' own account (steps and their
wall time, commands, versions, the timeline's profiled/plain overhead, ncu's coverage and cost).

Pure functions of the manifest (`contract.manifest`: a Manifest, or the dict it is read from); tables in long
format (`item`, `value`) where rows differ in kind. Their words are English phrases (`contract.phrase`):
`narrate.provenance` shows them in the reader's language.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

import pandas as pd

from ..contract.manifest import Manifest, read_manifest
from ..contract.phrase import Phrase, joined, phrase
from ..contract.phrase import column as phrase_column

WEIGHTS = {"random": phrase("random"), "pretrained": phrase("pretrained")}  # else a checkpoint's path, shown as written
STEPS = {"measure_peaks": phrase("measure peaks (bf16 GEMM, device copy)"), "timeline": phrase("timeline capture"),
         "ncu": phrase("Nsight Compute capture")}


def short_of_whole(pct: float, digits: int = 2) -> str:
    """A percentage with `digits` decimals, or as many more (up to 5) as it takes not to print a share short of
    100 % as 100 (52,221 of 52,223 kernels: 99.996, not 100.00)."""
    text = f"{pct:.{digits}f}"
    while pct < 100 and float(text) >= 100 and digits < 5:
        digits += 1
        text = f"{pct:.{digits}f}"
    return text


# Text the capture stores in the manifest in English (capture.torch_backend: the timeline backend's reason, the warmup and
# the sampling method; capture.nsys: why nsys is or is not usable; capture.ncu_stage: how ncu picked its launches).
# Each form the capture writes is a phrase here (its values the parts the pattern names), shown through the catalog;
# any other text is shown as written. The analysis does not import the capture code, so these repeat its wording
# (tests/test_i18n.py checks every stored text of the bundled runs against them).

def _literal(key: Phrase):
    """A stored text with no value in it: matched as written."""
    return re.compile("^" + re.escape(key) + "$"), lambda: key


_STORED = [
    _literal(phrase("asked for in params")),
    (re.compile(r"^auto: torch; nsys works here \((?P<why>.*)\) but its runs lack op shapes and modules$", re.S),
     lambda **v: phrase("auto: torch; nsys works here ({why}) but its runs lack op shapes and modules", **v)),
    (re.compile(r"^auto: torch; nsys works here \((?P<why>.*)\), its overhead against the torch profiler's not yet "
                r"measured$", re.S),
     lambda **v: phrase("auto: torch; nsys works here ({why}), its overhead against the torch profiler's not yet "
                        "measured", **v)),
    _literal(phrase("auto: torch; tensor-parallel ranks run under the torch profiler only")),
    _literal(phrase("auto: torch; tensor-parallel ranks under nsys take two torchruns (plain generates and the shapes "
                    "pass, then nsys), the torch profiler one: ask for timeline_backend: nsys to get it")),
    _literal(phrase("auto: torch; a sampled long generation or tensor-parallel ranks run under the torch profiler only")),
    _literal(phrase("auto: torch; decode replays a CUDA graph (static cache): measured on the H100, the torch profiler's "
                    "overhead there is no higher than nsys's (0.95-1.26x against 1.41x), and nsys's worker builds and "
                    "compiles the model a second time")),  # capture.nsys GRAPH_STEP_REASON before the one-process nsys
    _literal(phrase("auto: torch; decode replays a CUDA graph (static cache): measured on the H100, the torch profiler's "
                    "overhead there is no higher than nsys's (0.95-1.26x against 1.41x)")),  # GRAPH_STEP_REASON now
    (re.compile(r"^auto: nsys; on (?P<dev>.*) its overhead was measured lower: (?P<n>[\d.]+)x against (?P<t>[\d.]+)x "
                r"for the torch profiler \((?P<where>.*)\)$", re.S),
     lambda **v: phrase("auto: nsys; on {dev} its overhead was measured lower: {n}x against {t}x for the torch profiler "
                        "({where})", **v)),
    (re.compile(r"^auto: torch; on (?P<dev>.*) the torch profiler's overhead was measured lower: (?P<t>[\d.]+)x "
                r"against (?P<n>[\d.]+)x for nsys \((?P<where>.*)\)$", re.S),
     lambda **v: phrase("auto: torch; on {dev} the torch profiler's overhead was measured lower: {t}x against {n}x for "
                        "nsys ({where})", **v)),
    _literal(phrase("nsys is not on PATH nor inside an Nsight Compute or Nsight Systems install")),
    (re.compile(r"^(?P<version>.*) at (?P<path>\S+) cannot write its reports: its importer lacks (?P<libs>.*); install "
                r"(?P<pkgs>.*) \(apt-get install .*\), or unpack them \(dpkg -x\) and add their lib folder to "
                r"LD_LIBRARY_PATH$", re.S),
     lambda **v: phrase("{version} at {path} cannot write its reports: its importer lacks {libs}; install {pkgs} "
                        "(apt-get install {pkgs}), or unpack them (dpkg -x) and add their lib folder to LD_LIBRARY_PATH",
                        **v)),
    (re.compile(r"^(?P<path>\S+) --version failed: (?P<error>.*)$", re.S),
     lambda **v: phrase("{path} --version failed: {error}", **v)),
    (re.compile(r"^(?P<path>\S+) --version exited (?P<code>-?\d+)$"), lambda **v: phrase("{path} --version exited {code}", **v)),
    (re.compile(r"^(?P<version>.*) at (?P<path>\S*nsys)$", re.S), lambda **v: phrase("{version} at {path}", **v)),
    (re.compile(r"^auto: nsys unusable \((?P<why>.*)\)$", re.S), lambda **v: phrase("auto: nsys unusable ({why})", **v)),
    (re.compile(r"^auto: (?P<why>nsys .*)$", re.S), lambda **v: phrase("auto: {why}", **v)),
    _literal(phrase("nsys is not on PATH")),
    (re.compile(r"^nsys --version failed: (?P<error>.*)$", re.S), lambda **v: phrase("nsys --version failed: {error}", **v)),
    (re.compile(r"^nsys --version exited (?P<code>-?\d+)$"), lambda **v: phrase("nsys --version exited {code}", **v)),
    (re.compile(r"^nsys (?P<version>.*) found at (?P<path>.*)$", re.S),
     lambda **v: phrase("nsys {version} found at {path}", **v)),
    (re.compile(r"^(?P<n>\d+) generate\(s\)$"), lambda **v: phrase("{n} generate(s)", **v)),
    _literal(phrase("torch.profiler schedule over the windows; every step of the plain generates timed (steps.parquet)")),
    _literal(phrase("nsys capture ranges (cudaProfilerStart/Stop) over the windows, one report each; every step of the "
                    "plain generates timed (steps.parquet)")),
    _literal(phrase("by position: NVTX range around each selected kernel's op call, no name filter")),
    _literal(phrase("by name: --kernel-name filter per phase (timeline without op numbering)")),
    _literal(phrase("by graph node: the NVTX target range around the profiled step's graph replay, --graph-profiling "
                    "node, the first launch of every launch configuration in the step (no name filter: ncu's filter "
                    "sees graph nodes under stale names), tied by the report's names and launch configurations")),
    (re.compile(r"^per rank: one ncu around one rank's worker under torchrun \((?P<n>\d+) ranks\)$"),
     lambda **v: phrase("per rank: one ncu around one rank's worker under torchrun ({n} ranks)", **v)),
]
_PARTS = phrase("; ")  # between the parts of a stored text that holds several


def stored(value):
    """A text the capture stored in the manifest (English): a known form as its phrase (a reason nested in it too),
    parts joined by '; ' each on its own, anything else as written."""
    if not isinstance(value, str):
        return value
    for pattern, form in _STORED:
        m = pattern.match(value)
        if m:
            return form(**{k: stored(v) for k, v in m.groupdict().items()})
    parts = value.split("; ")
    if len(parts) > 1:
        shown = [stored(p) for p in parts]
        if any(isinstance(s, Phrase) for s in shown):  # the separators are parts too: an empty part keeps its two
            return joined(*[x for i, s in enumerate(shown) for x in ((_PARTS, s) if i else (s,))])
    return value


def _items(items) -> pd.DataFrame:
    """(item, value) pairs as the long table, the rows without a value left out; the phrases kept."""
    rows = [(k, v) for k, v in items if v is not None]
    return pd.DataFrame({"item": phrase_column(k for k, _ in rows), "value": phrase_column(v for _, v in rows)})


def steps(manifest: Manifest | dict) -> pd.DataFrame:
    """One row per capture step: what it did (a phrase; a step no phrase names by its key), which chapter (or the
    CLI) ran it, its wall time (s)."""
    m = read_manifest(manifest)
    produced = m.produced_by
    rows = []
    for key, wall in m.timings_s.items():
        by = produced.get(key, {})
        rows.append({"step": STEPS.get(key, key), "by": by.get("chapter") or "python -m kernelbook capture",
                     "wall_s": float(wall)})
    if rows:
        rows.append({"step": phrase("total"), "by": "", "wall_s": sum(r["wall_s"] for r in rows)})
    out = pd.DataFrame(rows, columns=["step", "by", "wall_s"])
    out["step"] = phrase_column((r["step"] for r in rows), out.index)
    return out


def versions(manifest: Manifest | dict) -> pd.DataFrame:
    """The software and hardware the run was taken with."""
    m = read_manifest(manifest)
    env = m.environment
    items = [("GPU", env.gpu.name), (phrase("driver"), env.driver), ("CUDA", env.cuda),
             ("torch", env.torch), ("transformers", env.transformers),
             ("Nsight Compute", env.ncu), ("Nsight Systems", env.nsys),
             (phrase("kernelbook revision"), m.git_revision), (phrase("captured"), m.created),
             (phrase("parameters from"), m.params_source)]
    return _items(items)


def timeline_account(manifest: Manifest | dict) -> pd.DataFrame:
    """How the timeline was taken: backend, model, inputs, plain vs profiled generate, the shapes pass."""
    m = read_manifest(manifest)
    ti, tb, plain = m.timeline_info, m.timeline_backend, m.timeline_info.plain_generate
    shapes = ti.shapes  # open-ended: the shapes pass's own account, its keys grown with it
    sampling = ti.sampling or {}
    items = [
        (phrase("backend"), phrase("{backend} ({why})", backend=tb.backend, why=stored(tb.why)) if tb else None),
        (phrase("model"), phrase("{model_class}, {billions:.2f} B parameters, weights {weights}",
                                 model_class=ti.model_class, billions=(ti.n_params or 0) / 1e9,
                                 weights=WEIGHTS.get(ti.weights, ti.weights))
         if ti.model_class else None),
        (phrase("model build + inputs"), _s(ti.model_load_s)),
        (phrase("plain generate (median of trials)"),
         joined(phrase("{time} over {trials} trials, spread {spread:.0f} %", time=_s(plain.median_s),
                       trials=plain.trials, spread=100 * (plain.spread or 0)),
                phrase(" (noisy)") if plain.noisy else "") if plain else None),
        (phrase("profiled generate"), _s(ti.profiled_generate_s)),
        (phrase("profiled ÷ plain"), f"{ti.overhead_ratio:.2f}" if ti.overhead_ratio else None),
        (phrase("trace export + ingest"), joined(_s(ti.trace_export_s), _s(ti.ingest_s), sep=" + ")
         if ti.ingest_s is not None else None),
        (phrase("kernels in the timeline"), f"{ti.kernels:,}" if ti.kernels else None),
        (phrase("warmup"), stored(ti.warmup) if ti.warmup else None),
        (phrase("aten shapes"), shapes["method"] if shapes.get("method") else None),  # a catalog key
        (phrase("kernels tied to a module"), f"{shapes['kernels_with_module']:,}" if shapes.get("kernels_with_module")
         else None),
        (phrase("shapes joined"), phrase("{matched:,} of {kernels:,} kernels ({pct} %), {identical} of "
                                         "{instances} phase steps launched identically; shapes pass {time}",
                                         matched=shapes["kernels_matched"], kernels=shapes["kernels"],
                                         pct=short_of_whole(shapes["matched_pct"]),
                                         identical=shapes["instances_identical"],
                                         instances=shapes["instances"], time=_s(shapes.get("pass_generate_s")))
         if "kernels_matched" in shapes else None),
        (phrase("vision forwards marked"), ti.vision_forwards_marked),
        (phrase("decode steps profiled"), phrase("{n} of {total} in {w} windows: {method}",
                                                 n=sampling["profiled_decode_steps"], total=sampling["decode_steps"],
                                                 w=len(sampling["windows"]), method=stored(sampling.get("method", "")))
         if sampling.get("windows") else None),
    ]
    return _items(items)


def ncu_account(manifest: Manifest | dict) -> pd.DataFrame:
    """How the ncu stage ran: mode, controls, command, launches profiled per selected kernel, cost."""
    n = read_manifest(manifest).ncu
    if n is None:
        return pd.DataFrame(columns=["item", "value"])
    results, wall = n.results, n.total_wall_s
    items = [(phrase("selection"), stored(n.mode)), (phrase("clock control"), n.clock_control),
             (phrase("cache control"), n.cache_control), (phrase("command"), n.command),
             # a run before `processes` was recorded ran one ncu process per phase
             (phrase("ncu processes"), n.processes if n.processes is not None else len(n.phases)),
             (phrase("profiled launches"), phrase("{results} of {expected} expected", results=results,
                                                  expected=n.expected_launches) if results is not None else None),
             (phrase("per selected kernel"), f"{n.results_per_selected:.2f}" if n.results_per_selected else None),
             (phrase("ncu worker"), _worker(n.worker) if n.worker else None),
             (phrase("ncu wall time"), _s(wall)),
             (phrase("per profiled launch"), _s(wall / results) if results else None)]
    for ph, v in n.phases.items():
        items.append((phrase("{phase}: profiled / selected", phase=ph),
                      joined(phrase("{profiled}/{selected} (step {step})", profiled=v.profiled, selected=v.selected,
                                    step=v.step), f"; {v.error}" if v.error else "")))
    return _items(items)


def _worker(w: Mapping[str, Any]) -> Phrase:
    """How the ncu worker ran the workload (capture.ncu_worker.worker): its warmup and the decode steps that led up
    to a profiled one without cuDNN attention (ncu's cost per launch grows with the modules loaded)."""
    warm = (phrase("{n} warmup generate of {tokens} token", n=w["warmup_generates"], tokens=w["warmup_tokens"])
            if w.get("warmup_generates") and w.get("warmup_tokens") else
            phrase("{n} warmup generate", n=w.get("warmup_generates") or 0))
    early = phrase("; started once the timeline's timed passes were over, its model built beside the shapes pass") \
        if w.get("started_early") else ""
    gate = phrase("; ncu profiled only while the worker had the profiler started, around each target op call") \
        if w.get("profile_gate") else ""
    return joined(warm, phrase("; {new} new tokens; {steps} decode steps that lead up to a profiled one ran attention "
                               "without cuDNN", new=w.get("max_new_tokens"), steps=w.get("cudnn_free_decode_steps", 0)),
                  early, gate)


def _s(v) -> Phrase | None:
    return None if v is None else phrase("{seconds:.1f} s", seconds=float(v))
