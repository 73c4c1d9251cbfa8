"""The book's one glossary (issue 43, point 3): every term and symbol the chapters use, defined once, as data.

`ENTRIES` is ordered as a reader meets the terms: the run's times (chapter 01), ncu's counters (02), the roofline
(04), the bottleneck classes and their checks (05), the what-if's fitted symbols (06), the run as deployed and its
levers (07). Each entry: an anchor (`g-<key>`), the term, its symbol where the book writes one (φ, b, L, S_min: shown
as written in every language), a one- or two-sentence definition that says what the code computes, and the chapter
where it matters most. Terms and definitions are catalog keys (`i18n.N_`), translated where the page is written
(`tr`); a definition may name the book's thresholds (`{high:.0f}`, `{low:.0f}`: chapter 05's `Rules`; `{latency:.0f}`:
its assumed memory latency), filled in by `values`.

The runner writes the page (`page`) as glossary.html beside index.html and links it from the index and from the top
of every chapter (`LINK`).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import escape
from .narrate.classify import CLASS_DEFINITIONS
from .i18n import HTML_LANG, N_, catalog, language, tr

FILE = "glossary.html"
LINK = N_("Glossary")


@dataclass(frozen=True)
class Entry:
    key: str          # the anchor on the page: id="g-<key>"
    term: str         # catalog key
    symbol: str       # as the book writes it ("" where the term has none); never translated
    definition: str   # catalog key, may hold {high} {low} {latency}
    chapter: str      # the chapter (stem) where it matters most

    @property
    def anchor(self) -> str:
        return f"g-{self.key}"


ENTRIES: tuple[Entry, ...] = (
    # --- the run's times (chapter 01) ---
    Entry("plain-generate", N_("plain generate, plain step"), "", N_(
        "A generate call timed with no profiler attached: the capture times it several times apart from the profiled "
        "pass and keeps the median. The plain step is a phase's wall time per step in it (per decode step; per call for "
        "vision encode and prefill): the time a reader pays."), "01_timeline"),
    Entry("profiled-pass", N_("profiled pass"), "", N_(
        "The generate call recorded under the profiler (torch.profiler or nsys), which gives every kernel's start, end, "
        "phase and step. The profiler stretches the host's gaps between kernels, not the kernels, so its wall time is "
        "longer than the plain generate's (the overhead ratio)."), "01_timeline"),
    Entry("gpu-busy", N_("GPU-busy time"), "", N_(
        "The time at least one kernel, copy or memset of a phase runs on the GPU in the profiled pass: the union of "
        "their intervals, overlap counted once."), "01_timeline"),
    Entry("host-time", N_("host time"), "", N_(
        "The part of a step in which no kernel runs: the plain step minus its GPU-busy time, spent by the host between "
        "kernel launches (eager) or between graph replays (CUDA graphs)."), "07_summary"),
    Entry("decode-step", N_("decode step"), "", N_(
        "One top-level forward of the model after the first in a generate call: it produces the next token, reading "
        "every active weight and the KV cache. Decode steps are numbered 1 to N."), "01_timeline"),
    Entry("prefill", N_("prefill"), "", N_(
        "The first top-level forward of a generate call, over the whole prompt (image tokens included), which fills "
        "the KV cache; the vision encode ranges nested in it are counted apart."), "01_timeline"),
    Entry("vision-encode", N_("vision encode"), "", N_(
        "Every forward of a vision module (the vision tower or its projector), wherever the model runs it: the image "
        "turned into the tokens the language model reads."), "01_timeline"),
    # --- ncu's counters (chapter 02) ---
    Entry("cache-control", N_("cache control all"), "", N_(
        "ncu's --cache-control all: the caches are flushed before every replay pass of every kernel, so each profiled "
        "kernel starts cold and its DRAM bytes include what, in the loop, it might find in L2. It changes no GPU "
        "setting; none would leave later passes a warm L2 and falsify DRAM bytes."), "02_ncu"),
    Entry("in-loop-bytes", N_("in-loop bytes"), "", N_(
        "The DRAM bytes a kernel reads in the generate loop, measured by ncu's range pass: its op call together with "
        "the op call before it (its producer) as one range, minus the producer alone, caches flushed before each range "
        "but not between the kernels inside it. The same pass measures one whole decode step as one range."),
        "02_ncu"),
    # --- the roofline (chapter 04) ---
    Entry("roofline", N_("roofline"), "", N_(
        "A chart of the FLOP/s a kernel achieved against its arithmetic intensity: the attainable FLOP/s at an "
        "intensity on a memory level is min(compute roof, bandwidth × intensity), drawn for DRAM, L2 and L1. Each "
        "profiled kernel is a point; its distance below the roof is the share of the hardware it leaves unused."),
        "04_roofline"),
    Entry("intensity", N_("arithmetic intensity"), "", N_(
        "The FLOPs a kernel does per byte it moves at one memory level (DRAM, L2 or L1): ncu's counted FLOPs ÷ that "
        "level's bytes. Left of the ridge a kernel is on the memory side, right of it on the compute side."),
        "04_roofline"),
    Entry("ridge", N_("ridge point"), "", N_(
        "The arithmetic intensity where a compute roof meets the DRAM roof: compute peak ÷ DRAM bandwidth (FLOP/B), "
        "the bf16 tensor-core peak unless named otherwise. A kernel whose intensity lies below it cannot reach that "
        "compute peak, however well it runs."), "04_roofline"),
    Entry("dram-roof", N_("DRAM roof"), "", N_(
        "The roofline's DRAM bandwidth line: the GPU's DRAM peak as ncu measured it on the GPU itself (DRAM peak per "
        "cycle × DRAM clock) where the run holds those counters, else devices.yaml's spec."), "04_roofline"),
    Entry("tensor-flops", N_("tensor-core FLOPs (MMA padding counted)"), "", N_(
        "The FLOPs ncu counts on the tensor cores, which include MMA padding: a matrix-vector product or a one-query "
        "attention runs on tiles wider than its small dimension, so the count can be several times the useful "
        "2·M·N·K. The roofline's points use the counted FLOPs, the work the unit does."), "04_roofline"),
    # --- bottleneck classes and their checks (chapter 05) ---
    Entry("bound-class", N_("bound class"), "", N_(
        "A profiled kernel's class from ncu's SM throughput (the busiest SM pipe) and memory throughput (the busiest "
        "of DRAM, L2 and L1), each as % of peak, with high ≥ {high:.0f} % and low < {low:.0f} %: memory-bound, "
        "compute-bound, latency-bound or balanced. The rules are the project's own heuristic, not an NVIDIA "
        "category."), "05_classification"),
    Entry("memory-bound", N_("memory-bound"), "", CLASS_DEFINITIONS["memory-bound"], "05_classification"),
    Entry("compute-bound", N_("compute-bound"), "", CLASS_DEFINITIONS["compute-bound"], "05_classification"),
    Entry("latency-bound", N_("latency-bound"), "", CLASS_DEFINITIONS["latency-bound"], "05_classification"),
    Entry("balanced", N_("balanced"), "", CLASS_DEFINITIONS["balanced"], "05_classification"),
    Entry("occupancy", N_("occupancy"), "", N_(
        "Achieved occupancy: the warps active on an SM, averaged by ncu over the kernel, as % of the warps an SM can "
        "hold (64 on Hopper). Theoretical occupancy is the most the launch's registers, shared memory and block size "
        "allow."), "05_classification"),
    Entry("waves", N_("waves, wave quantization"), "", N_(
        "Waves: a launch's blocks ÷ (SMs × the blocks one SM holds at once, the tightest of ncu's occupancy limits). "
        "Wave quantization is the cost of the last, part-full wave, in which SMs sit idle: tail efficiency = waves ÷ "
        "waves rounded up; under one wave some SMs get no block at all."), "05_classification"),
    Entry("tile-intensity", N_("tile intensity"), "", N_(
        "The arithmetic intensity a GEMM's tile shape allows, from the BM×BN×BK tile in the kernel's name: 2·BM·BN·BK "
        "FLOPs per (BM+BN)·BK operand elements loaded, BM·BN/(BM+BN) FLOP/B at 2-byte inputs. Below the ridge, the "
        "tile shape alone keeps the kernel on the memory side."), "05_classification"),
    Entry("littles-law", N_("Little's law"), "", N_(
        "Bytes in flight = bandwidth × latency. To reach the DRAM roof an SM needs its share of DRAM bandwidth × the "
        "memory latency ({latency:.0f} cycles assumed) in flight; chapter 05 sets this against what each memory-bound "
        "kernel achieved and what its resident warps or stage buffers can hold."), "05_classification"),
    Entry("s-min", N_("minimum pipeline stages"), "S_min", N_(
        "The stages a tiled GEMM needs in flight to cover memory latency: S_min = ceil(latency ÷ stage cycles) + 1, "
        "with {latency:.0f} cycles of latency assumed and a stage taking the longer of its tile's compute and its "
        "tile's load at the SM's share of DRAM bandwidth. A kernel with fewer stages is bound by latency, not "
        "bandwidth."), "05_classification"),
    # --- the what-if (chapter 06) ---
    Entry("ideal", N_("ideal time"), "", N_(
        "A launch's time at a design's peaks: the slowest of tensor FLOPs ÷ matrix peak, CUDA-core FLOPs ÷ vector "
        "peak, DRAM bytes ÷ DRAM bandwidth and on-chip bytes ÷ SRAM bandwidth. The what-if prices a launch as L + b × "
        "ideal."), "06_npu"),
    Entry("latency-l", N_("kernel latency"), "L", N_(
        "The fixed time a launch of a kernel class pays whatever its work: the launch-weighted median time of the "
        "class's launches that do almost no work (ideal under 10 % of their time), at most the class's shortest median "
        "launch time; a class without such launches takes the pooled latency. Fitted on the run's own kernels."),
        "06_npu"),
    Entry("slowdown-b", N_("slowdown"), "b", N_(
        "How far a kernel class runs from its ideal: the launch-weighted median of (measured time − L) ÷ ideal over "
        "its launches that do work (the slope of a robust line through them where they lie on a line with an "
        "intercept), at least 1. A design that states an efficiency uses 1 ÷ efficiency instead."), "06_npu"),
    Entry("phi", N_("DRAM scaling share"), "φ", N_(
        "The share of a kernel class's DRAM time that moves with another design's DRAM bandwidth: ncu's DRAM "
        "throughput as a fraction of peak, time-weighted over the class's profiled kernels (1 for a run without ncu "
        "counters). The rest keeps the fitting GPU's time per byte: a kernel limited by bytes in flight does not speed "
        "up with a higher peak."), "06_npu"),
    Entry("kernel-floor", N_("kernel floor"), "", N_(
        "The fixed cost of a launch on a GPU as a run measured it: the 5th percentile of its kernel durations in vision "
        "encode, prefill and decode. A design measured on another GPU scales the fitted L by the ratio of the two "
        "floors; a design that states a kernel floor uses it as L."), "06_npu"),
    Entry("held-out", N_("held out"), "", N_(
        "How the what-if is checked: each phase is predicted with L and b fitted on the other phases only, so no phase "
        "is predicted from its own kernel times; the held-out error is that prediction against the phase's measured "
        "time."), "06_npu"),
    # --- the run as deployed (chapter 07) ---
    Entry("physical-limit", N_("physical limit"), "", N_(
        "The time a decode step would take if it moved only the bytes it must: the weights its matrix products read "
        "plus the KV cache its attention reads, ÷ the run's measured device-to-device copy bandwidth (the spec sheet's "
        "where none was measured). The book states a step as a multiple of it."), "07_summary"),
    Entry("bytes-ledger", N_("bytes ledger"), "", N_(
        "One decode step per module type: its kernel time, the bytes it must move (weights and KV cache), the bytes "
        "its kernels moved (ncu's, their in-loop reads where measured, else what the op shapes imply) and its floor, "
        "the must-move bytes ÷ DRAM bandwidth."), "07_summary"),
    Entry("cuda-graphs", N_("CUDA graphs, as deployed"), "", N_(
        "A CUDA graph records a decode step's kernels once and replays them with one launch. As deployed is the "
        "workload run that way (static KV cache, compiled step, decode as graph replays), as serving stacks run it: "
        "the book's conclusions are about that run where one was captured."), "07_summary"),
    Entry("eager", N_("eager"), "", N_(
        "Hugging Face's generate loop as written: the host launches every kernel of every op from Python, one at a "
        "time, with no CUDA graphs. No serving stack runs decode this way; the book sets it beside the run as "
        "deployed to show what it adds."), "07_summary"),
    Entry("levers", N_("levers"), "", N_(
        "Changes to the decode step as deployed, priced on one scale (decode ms per token). Hardware levers (kernel "
        "floor, efficiency, DRAM bandwidth, on-chip SRAM, weight precision) are the what-if model's predictions with "
        "its error; software levers (MoE experts read in place, the KV cache without cat, fused norms) are priced by "
        "the measured kernel time they remove."), "07_summary"),
)

SYMBOLS = {e.symbol: e for e in ENTRIES if e.symbol}


def values(rules=None) -> dict:
    """The numbers a definition may name: chapter 05's class thresholds and assumed memory latency (`Rules`)."""
    from .analyze.classify import Rules

    r = rules or Rules()
    return {"high": r.high_pct, "low": r.low_pct, "latency": r.mem_latency_cycles}


def term(e: Entry) -> str:
    return tr(e.term)


def definition(e: Entry, vals: dict | None = None) -> str:
    """The entry's definition in the current language, its numbers filled in."""
    return tr(e.definition, **(vals or values()))


def link(code: str | None = None) -> str:
    """The glossary link a page carries near its top, in language `code` (default: the current one). Given
    explicitly where chapters are converted side by side in threads, which must not switch the process's language."""
    code = code or language()
    shown = LINK if code == "en" else catalog(code).get(LINK, LINK)
    return (f'<nav class="kb-glossary-link" style="margin:.5rem 0"><a href="{FILE}">'
            f'{escape.html(shown)}</a></nav>')


def page(titles: dict[str, str], run_id: str = "", vals: dict | None = None) -> str:
    """glossary.html in the current language: one row per entry (anchor `g-<key>`), its chapter linked where the
    book has it (`titles`: stem → the chapter's title as the index shows it)."""
    esc = escape.html
    vals = vals or values()
    rows = []
    for e in ENTRIES:
        title = titles.get(e.chapter)
        where = f'<a href="{esc(e.chapter)}.html">{esc(title)}</a>' if title else esc(e.chapter)
        rows.append(f'<tr id="{esc(e.anchor)}"><td><b>{esc(term(e))}</b></td>'
                    f'<td>{f"<code>{esc(e.symbol)}</code>" if e.symbol else ""}</td>'
                    f'<td>{esc(definition(e, vals))}</td><td>{where}</td></tr>')
    lang = HTML_LANG[language()]
    head = tr(LINK)
    return f"""<!doctype html><html lang="{lang}"><head><meta charset="utf-8">
<title>kernelbook — {esc(head)}{" — " + esc(run_id) if run_id else ""}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;color:#222}}
table{{border-collapse:collapse;width:100%}}td,th{{border-bottom:1px solid #ddd;padding:.5rem;text-align:left;vertical-align:top}}
tr:target{{background:#fff3cd}}</style></head><body>
<p><a href="index.html">{esc(tr("Back to the index"))}</a></p>
<h1>{esc(head)}</h1>
<table><tr><th>{esc(tr("term"))}</th><th>{esc(tr("symbol"))}</th><th>{esc(tr("definition"))}</th>
<th>{esc(tr("chapter"))}</th></tr>
{chr(10).join(rows)}
</table></body></html>
"""
