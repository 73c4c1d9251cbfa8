"""The typed manifest (kernelbook.contract.manifest): every committed run reads through `read_manifest`, an older
shape migrates, and analysis reads the manifest by attribute, not by key."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kernelbook.contract.manifest import SCHEMA_VERSION, Manifest, ManifestError, read_manifest

ROOT = Path(__file__).resolve().parents[1]
RUNS = sorted((ROOT / "data" / "runs").glob("*/manifest.json"))
BUNDLED = ROOT / "data" / "runs" / "h100-deepseek-ocr-2"


def test_committed_runs_are_found():
    # 15 since the same-host twin h100-deepseek-ocr-2-host-s14 was removed (the graph run's host baseline is now the
    # bundled eager run, captured on the same lease)
    assert len(RUNS) >= 15


@pytest.mark.parametrize("path", RUNS, ids=[p.parent.name for p in RUNS])
def test_every_committed_run_reads(path):
    raw = json.loads(path.read_text())
    m = read_manifest(path.parent)
    assert m == read_manifest(raw) and m.schema_version == SCHEMA_VERSION
    assert m.run_id == raw["run_id"] and m.status == raw["status"] and m.device == raw["device"]
    assert m.environment.gpu.name == raw["environment"]["gpu"]["name"]
    assert m.measured_peaks.bf16_gemm_tflops == raw["measured_peaks"]["bf16_gemm_tflops"]
    assert m.overhead_ratio == raw["timeline_info"]["overhead_ratio"]
    assert (m.ncu is None) == ("ncu" not in raw)
    for ph, v in (raw.get("ncu") or {}).get("phases", {}).items():  # the phase keys coverage_prose reads
        typed = m.ncu.phases[ph]
        assert typed.graph_replay == bool(v.get("graph_replay"))
        assert [(d.name, d.share) for d in typed.left_out] == [(d["name"], d["share"]) for d in v.get("left_out") or []]
    assert m.params["model"] == raw["params"]["model"]
    assert read_manifest(m) is m


def test_bundled_run_typed_values():
    m = read_manifest(BUNDLED)
    # the numbers as manifest.json records them
    assert m.environment.gpu.sm_count == 132 and m.environment.gpu.l2_bytes == 52428800
    assert m.environment.clocks.sm_clock_max_mhz == 1980
    assert m.measured_peaks.d2d_copy.trials == 10 and len(m.measured_peaks.d2d_copy.samples_s) == 10
    assert m.timeline_info.plain_phases["decode"].steps == 63
    # the median of the three plain-generate timings, as recorded (12.66 ms on the re-capture's lease)
    samples = m.timeline_info.plain_phases["decode"].samples_ms_per_step
    assert m.plain_ms_per_step()["decode"] == pytest.approx(12.663245238095152) == sorted(samples)[1]
    assert m.timeline_info.prompt_tokens == 1129
    assert m.ncu.cache_control == "all" and m.ncu.phases["decode"].selected == 20
    assert m.ncu.phases["decode"].error is None
    assert m.clock_state.locked is False and m.timeline_backend.backend == "torch"


def test_hostile_and_partial_runs_read(tmp_path, partial_run):
    from untrusted import PAYLOAD, hostile_run

    m = read_manifest(hostile_run(BUNDLED, tmp_path))
    assert m.environment.gpu.name.endswith(PAYLOAD) and m.ncu.mode.endswith(PAYLOAD)
    p = read_manifest(partial_run)
    assert p.status == "partial" and p.reason.startswith("ncu: NcuError") and "ncu" not in p.timings_s
    assert p.ncu.phases["decode"].profiled == 0 and p.ncu.phases["decode"].error


def _oldest(bundled: dict) -> dict:
    """The bundled manifest cut to the shape of the first committed run (2026-11-22, 2ecc891: no plain phases,
    shapes pass, sampling, ncu mode/command/counts, produced_by, peak_rss_gb, host baseline)."""
    m = {k: bundled[k] for k in ("kernelbook_run", "run_id", "status", "params_source", "git_revision", "timings_s",
                                 "created", "clock_state", "environment", "device", "measured_peaks",
                                 "timeline_backend", "params")}
    keep = ("generate_kwargs", "ingest_s", "inputs", "kernels", "model_class", "model_load_s", "n_params",
            "overhead_ratio", "plain_generate", "profiled_generate_s", "routing_note", "trace_export_s", "weights")
    m["timeline_info"] = {k: bundled["timeline_info"][k] for k in keep}
    m["ncu"] = {k: bundled["ncu"][k] for k in ("cache_control", "clock_control", "phases")}
    return m


def test_oldest_shape_takes_defaults():
    m = read_manifest(_oldest(json.loads((BUNDLED / "manifest.json").read_text())))
    assert m.schema_version == 1 and m.timeline_info.plain_phases == {} and m.plain_ms_per_step() == {}
    assert m.timeline_info.sampling is None and m.timeline_info.shapes == {}
    assert m.ncu.mode is None and m.ncu.processes is None and m.ncu.results is None
    # the phases' walls, summed: vision_encode, prefill and decode, each the one process's wall
    assert m.ncu.total_wall_s == pytest.approx(86.692554439 * 3)
    assert m.produced_by == {} and m.peak_rss_gb == {} and m.host_baseline is None


def test_unnumbered_manifest_migrates():
    old = _oldest(json.loads((BUNDLED / "manifest.json").read_text()))
    del old["kernelbook_run"]
    old["environment"] = {**old["environment"], "gpu": "NVIDIA H100 80GB HBM3"}  # version 0: the name alone
    m = read_manifest(old)
    assert m.schema_version == 1 and m.gpu_name == "NVIDIA H100 80GB HBM3" and m.environment.gpu.sm_count is None
    assert old["environment"]["gpu"] == "NVIDIA H100 80GB HBM3"  # the input is left as it was


def test_newer_manifest_is_refused():
    with pytest.raises(ManifestError, match="newer kernelbook"):
        read_manifest({"kernelbook_run": SCHEMA_VERSION + 1, "status": "complete", "params": {}})


def test_manifest_is_frozen():
    m = read_manifest(BUNDLED)
    with pytest.raises(AttributeError):
        m.status = "partial"
    with pytest.raises(TypeError):
        m.params["model"] = "x"
    assert isinstance(m, Manifest)


KEY_READ = re.compile(r"manifest(\.get\(|\[)|params(\.get\(|\[)")


def test_no_manifest_reads_by_key():
    """Neither the manifest nor its parameters are read by key where the book reads a run (Run.info, its
    `workload`; the two parameter diffs, compare.changed_params and whatif's cross-device pairing, compare
    mappings by design; checks.Asked.of is where a chapter's asked parameters become typed)."""
    lib = ROOT / "lib" / "kernelbook"
    files = [*sorted((lib / "analyze").glob("*.py")), *sorted((ROOT / "notebooks").glob("*.py")),
             lib / "devices.py"]
    found = {}
    for f in files:
        n = len(KEY_READ.findall(f.read_text()))
        if n:
            found[str(f.relative_to(ROOT))] = n
    assert found == {}, f"manifest or params read by key (use Run.info / read_manifest): {found}"


def test_workload_view():
    w = read_manifest(BUNDLED).workload
    assert (w.model, w.batch_size, w.max_new_tokens, w.graph_decode) == ("deepseek-ocr-2", 1, 64, False)
    g = read_manifest(ROOT / "data" / "runs" / "h100-variant-static-graphs").workload
    assert g.static_cache and g.graph_decode and g.differs(w) == []
    old = read_manifest({"status": "complete", "params": {"model": "m"}}).workload  # an older run: defaults
    assert (old.batch_size, old.dtype, old.cache_implementation, old.graph_decode) == (1, "bfloat16", "dynamic", False)
    assert old.differs(w) == ["model", "weights", "max_new_tokens"]
