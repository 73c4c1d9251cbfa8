"""The display layer on numbers and names taken from the bundled run."""
import json
import re

import pandas as pd
import pytest

from conftest import REPO
from kernelbook import display as D
from kernelbook.params import CAPTURE, SCHEMA


def test_engineering_prefixes_with_three_significant_digits(run):
    # raw cells of a bundled-run capture (as literals: a re-capture changes the run's last digits):
    # p000's achieved FLOP/s (the prefill MoE grouped GEMM), the H200 bf16 roof, the lm_head GEMV's DRAM
    # bytes (the 129280 x 1280 bf16 matrix) and d000's duration
    assert D.cell(348_161_503_333_333, "flop_per_s") == "348 TFLOP/s"
    assert D.eng(989_400_000_000_000, "FLOP/s") == "989 TFLOP/s"
    assert D.cell(333_709_312.0, "bytes") == "334 MB"
    assert D.cell(5_920.0, "ns") == "5.92 µs"
    # the same cells of the run as it is now keep three significant digits and their unit
    k = run.ncu_kernels().set_index("kernel_id")
    assert D.cell(k.loc["p000", "flops_per_s"], "flop_per_s").endswith(" TFLOP/s")
    assert len(D.cell(k.loc["p000", "flops_per_s"], "flop_per_s").split()[0].replace(".", "")) == 3
    assert D.cell(960e-3, "us") == "960 ns" and D.cell(1348.0, "ms") == "1.35 s"
    assert D.eng(999_700, "B") == "1.00 MB" and D.sig(9.996) == "10.0" and D.sig(0.00745) == "0.00745"
    assert D.count(45675) == "45,675" and D.count(2_647_654_400) == "2.65 G"
    assert D.pct(0.002) == "< 0.1" and D.pct(0) == "0.0" and D.pct(87.6) == "87.6"
    # a small negative share keeps the hyphen-minus every other negative in its column has (-0.2)
    assert D.pct(-0.0006) == "> -0.1" and D.pct(-0.2) == "-0.2"


def test_missing_prints_as_a_dash_and_quantities_carry_their_unit():
    for v in (float("nan"), None, pd.NA):
        assert D.cell(v, "pct") == D.MISSING and D.cell(v, "text") == D.MISSING
    assert D.quantity(989.4, "TFLOP/s") == "989 TFLOP/s" and D.quantity(4800, "GB/s") == "4.80 TB/s"


def test_aten_shapes_in_one_readable_form():
    assert D.shapes("1x10x1x128;1x10x1130x128;;;;;;;;;") == "1×10×1×128 · 1×10×1130×128"
    assert D.shapes("[1, 10, 1160, 128]x[1, 10, 1, 128];") == "1×10×1160×128 · 1×10×1×128"
    assert D.shapes(";;;") == D.MISSING


def test_table_has_no_index_human_headers_and_a_sticky_kernel_column(run):
    from kernelbook.analyze import ncu_report as N

    m = N.metric_table(run.ncu_kernels(), run.timeline)
    html = D.table(m, "caption").html
    assert "<tbody><tr><th" not in html and "NaN" not in html
    assert ">Kernel<" in html and ">SM %<" in html and "friendly_name" not in html
    assert 'class="t sticky">d000 ' in html  # kernel id + friendly name, first and sticky


def test_empty_result_is_one_sentence():
    shown = D.table(pd.DataFrame(columns=["kernel_id", "pct_of_roof"]), "Points above a roof",
                    empty="No point lies more than 5 % above its roof.")
    assert "<table" not in shown.html and "No point lies more than 5 % above its roof." in shown.html


def test_plural_and_share_phrases_at_the_edges():
    assert [D.plural(n, "kernel") for n in (0, 1, 3)] == ["no kernels", "one kernel", "3 kernels"]
    assert D.share_phrase(0, "the time") == "none of the time" and D.share_phrase(100, "it") == "all of it"


@pytest.mark.parametrize("run_id", ["h100-deepseek-ocr-2"])
def test_bundled_manifests_record_capture_parameters_only(run_id):
    params = json.loads((REPO / "data" / "runs" / run_id / "manifest.json").read_text())["params"]
    assert params and all(CAPTURE in SCHEMA[k].feeds for k in params), params


def test_capture_writes_capture_parameters_only(monkeypatch, tmp_path):
    """capture() records for_consumer(params, 'capture'): stopped at its first step, the partial
    manifest it writes holds no book parameter."""
    from kernelbook.capture import run as C
    from kernelbook.contract.config import CaptureConfig
    from kernelbook.params import validate

    seen = {}

    def stopped(_lock_clocks):
        raise RuntimeError("stopped by the test")

    monkeypatch.setattr(C, "require_gpu", lambda: None)
    monkeypatch.setattr(C, "clock_lock", stopped)
    from kernelbook.capture import common

    for where in (C, common):  # capture writes the manifest itself, and `land` does when the capture stops
        monkeypatch.setattr(where, "write_manifest", lambda run_dir, manifest: seen.update(manifest))
    with pytest.raises(RuntimeError, match="stopped by the test"):
        C.capture(CaptureConfig.of(validate({"top_n": 30, "phase": "prefill"})), tmp_path / "run")
    assert seen["status"] == "partial" and seen["params"]["model"] == "deepseek-ocr-2"
    assert not [k for k in seen["params"] if CAPTURE not in SCHEMA[k].feeds]


def test_a_kernel_id_with_a_card_links_to_it_and_sorts_as_before(run):
    """Kernel ids of the chapter's run link to their card in chapter 05 (`kernel-d004`); an id without a card
    (another run's, or none registered) stays text. The cell's text is what it was, so sorting and filtering, which
    read the text, see the same rows."""
    from kernelbook.notebook import _link_cards

    k = run.ncu_kernels()[["kernel_id", "name"]].head(3).assign(friendly_name=["a", "b", "c"])
    plain = D.table(k).html
    try:
        _link_cards(run)
        # every profiled kernel of the bundled run: 20 each of vision encode, prefill and decode
        assert {"d004", "p012", "v000"} <= D._CARDS and len(D._CARDS) == 60 == (run.ncu_kernels().status == "profiled").sum()
        linked = D.table(k).html
        other = D.table(pd.DataFrame({"kernel_id": ["x001"], "value": [1.0]})).html
    finally:
        D.link_kernels(())
    # the table's first row: the ncu table opens with the vision encode kernels (v000, v001, v002)
    assert list(k.kernel_id) == ["v000", "v001", "v002"]
    assert '<a class="kb-k" href="05_classification.html#kernel-v000" data-card="kernel-v000"' in linked
    assert 'class="kb-k"' not in plain + other and D.table(k).html == plain
    strip = lambda h: re.sub(r"<a [^>]*>|</a>", "", h)  # noqa: E731 - the cell text without the link
    assert strip(linked.split("<tbody>")[1]) == strip(plain.split("<tbody>")[1])
    assert D.card_anchor("d004") == "kernel-d004"


def test_a_studys_pivot_by_batch_is_headed_in_the_readers_language():
    """Chapter 08's tables by batch (`analyze.serving.by_batch`: columns batch_<b>_<unit>) read "Batch 8" in English
    and 批大小 8 in Chinese (the zh book showed "Batch 1 … Batch 32" in English)."""
    from kernelbook import display, i18n

    assert display.label("batch_8_ms") == "Batch 8"
    with i18n.in_language("zh"):
        assert display.label("batch_32_pct") == "批大小 32"
    assert display.label("batch_size") == "Batch size"  # a named column keeps its label


def test_the_limit_table_heads_its_multiples_with_what_they_divide():
    """Chapter 07's table of the decode step against its limit headed its multiples 'Plain x' and 'Busy x' (the
    columns' machine names): they are each step ÷ the limit."""
    from kernelbook import i18n
    from kernelbook.display import label

    assert (label("plain_x"), label("busy_x")) == ("Plain step ÷ limit", "GPU busy ÷ limit")
    with i18n.in_language("zh"):
        assert label("plain_x") == "普通步 ÷ 极限"
