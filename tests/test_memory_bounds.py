"""Issue 39.7: memory bounded by what is shown. A kernel name is cut once, at load, to `NAME_LIMIT` characters
(its head, '…' and a hash of the whole name), in the timeline and in the ncu tables alike, and the rows that
share a name share one string. The memory and time figures are bench/render_memory.py's (bench/measured/
render_memory_cpu.json): timing and memory limits do not belong in unit tests.

The run: a copy of the bundled run whose two decode kernels with the most time (ncu kernels d000 and d001) are
renamed, in the timeline and in every ncu table, to 100 kB names that differ only in their last characters."""
import shutil

import pandas as pd
import pytest

from conftest import RUN

NAME_BYTES = 100_000


def _long(tag: str) -> str:
    """A C++ template name of NAME_BYTES characters; two of them differ only in `tag`, at the very end."""
    head = "void cutlass::device_kernel<kb::Gemm<" + "".join(f"cute::C<{i}>, " for i in range(NAME_BYTES // 12))
    tail = f">::{tag}>(kb::Params)"
    return head[: NAME_BYTES - len(tail)] + tail


@pytest.fixture(scope="module")
def long_names(tmp_path_factory):
    """(run folder, {kernel id: its 100 kB name}, {kernel id: the bundled run's rows of it})."""
    run = tmp_path_factory.mktemp("long-names") / "h100-long-names"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("raw"))
    k = pd.read_parquet(run / "ncu" / "kernels.parquet").set_index("kernel_id")
    old = {kid: k.loc[kid, "name"] for kid in ("d000", "d001")}
    new = {kid: _long(kid) for kid in old}
    tl = pd.read_parquet(RUN / "timeline.parquet", columns=["name"])
    rows = {kid: int((tl.name == old[kid]).sum()) for kid in old}
    for f in [run / "timeline.parquet", *sorted((run / "ncu").glob("*.parquet"))]:
        df = pd.read_parquet(f)
        for c in ("name", "ncu_name", "function", "short_name", "friendly_name"):
            if c in df:
                df[c] = df[c].replace({old[kid]: new[kid] for kid in old})
        df.to_parquet(f, index=False)
    return run, new, rows


def test_cut_name_keeps_real_names_and_tells_long_ones_apart():
    from kernelbook.load.run import NAME_LIMIT, cut_name

    assert cut_name("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT") == "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"
    assert cut_name("x" * NAME_LIMIT) == "x" * NAME_LIMIT
    a, b = _long("A"), _long("B")
    ca, cb = cut_name(a), cut_name(b)
    assert len(ca) == len(cb) == NAME_LIMIT
    assert ca != cb and ca[:-12] == cb[:-12]  # the same head and marker, then each name's own hash
    assert ca[: NAME_LIMIT - 13] == a[: NAME_LIMIT - 13] and ca[-13] == "…"
    assert cut_name(a) == ca  # the same name cuts the same wherever it is read


def test_real_names_stay_whole():
    """No name of the bundled run is cut: its longest are 1270 (timeline) and 2932 characters (ncu_name)."""
    from kernelbook.load.run import NAME_LIMIT, read_table

    for rel in ("timeline.parquet", "ncu/kernels.parquet", "ncu/results.parquet"):
        got, want = read_table(RUN / rel), pd.read_parquet(RUN / rel)
        pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert pd.read_parquet(RUN / "ncu/kernels.parquet").ncu_name.str.len().max() == 2932 < NAME_LIMIT


def test_long_names_are_cut_once_at_load_in_every_table(long_names):
    from kernelbook.contract.kernels import with_identity
    from kernelbook.load.run import NAME_LIMIT, cut_name, load_run

    run, names, rows = long_names
    r = load_run(run)
    cut = {kid: cut_name(n) for kid, n in names.items()}
    assert r.timeline.name.str.len().max() == NAME_LIMIT
    for kid, c in cut.items():
        mine = r.timeline.name[r.timeline.name == c]
        assert len(mine) == rows[kid]  # every launch kept, under its own name: d000 5922 rows, d001 3024
        assert len({id(v) for v in mine}) == 1  # the rows share one string: 4 kB for the name, not 4 kB a row
    k = r.ncu_kernels().set_index("kernel_id")
    assert {kid: k.loc[kid, "name"] for kid in cut} == cut  # cut as in the timeline: the join by name meets
    ident = with_identity(r.ncu_kernels(), r.timeline)
    assert ident.set_index("kernel_id").loc[list(cut), "category"].notna().all()
    assert r.ncu_results().name.str.len().max() <= NAME_LIMIT


def test_the_chapter_shows_the_two_kernels_apart(long_names, tmp_path):
    """Chapter 01's name appendix lists both kernels, each under its cut name (the hash tells them apart)."""
    from kernelbook import params as P
    from kernelbook.load.run import cut_name
    from kernelbook.runner import render_book

    run, names, _ = long_names
    out = render_book(P.validate({"run_dir": str(run), "capture": "never"}, consumer="book"), tmp_path / "report",
                      chapters=["01_timeline"], log=lambda *_: None)
    html = (out / "01_timeline.html").read_text(encoding="utf-8")
    for n in names.values():
        assert cut_name(n)[-12:] in html
    assert "kb::Params" not in html  # the names' ends (past the limit) reached no page
