"""The narrative language: one catalog per language (`lib/kernelbook/locale/<code>.yaml`), keyed by the
English text. Every `tr("...")` literal in lib/ and notebooks/, every label of the display layer's
registries and every markdown cell of every chapter must have a zh entry with the same placeholders."""
import ast
import json
import re
import string
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from conftest import CHAPTERS, REPO
from kernelbook import i18n

# calls whose first argument is a catalog key: tr(template, ...), N_(label), Col(label, kind), and the analysis'
# phrase(template, ...) (contract.phrase: English the narration layer shows in the reader's language)
KEY_CALLS = {"tr", "N_", "Col", "phrase"}
SOURCES = sorted((REPO / "lib" / "kernelbook").rglob("*.py")) + sorted((REPO / "notebooks").glob("[0-9][0-9]_*.py"))


def _called(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def code_keys() -> tuple[dict[str, str], list[str]]:
    """Every literal first argument of a key call (→ where it is), and the calls that pass an f-string
    (a template must be a literal: its numbers go in as values)."""
    keys, fstrings = {}, []
    for path in SOURCES:
        where = path.relative_to(REPO)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and _called(node) in KEY_CALLS and node.args):
                continue
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                keys.setdefault(arg.value, f"{where}:{node.lineno}")
            elif isinstance(arg, ast.JoinedStr):
                fstrings.append(f"{where}:{node.lineno}")
    return keys, fstrings


def markdown_keys() -> dict[str, str]:
    import jupytext

    keys = {}
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.py")):
        for i, cell in enumerate(jupytext.read(path).cells):
            if cell.cell_type == "markdown":
                keys.setdefault(cell.source.strip(), f"{path.relative_to(REPO)} markdown cell {i}")
    return keys


def registry_keys() -> dict[str, str]:
    """Labels kept in tables (not literal tr calls): parameter meanings shown by chapter 00, and the
    `source` of each design in params/npus.yaml (chapter 06's design table shows it)."""
    from kernelbook import params as P
    from kernelbook.analyze import whatif as W

    keys = {spec.doc: f"params.SCHEMA[{k!r}].doc" for k, spec in P.SCHEMA.items()}
    keys.update({d.source: f"params/npus.yaml {k}.source" for k, d in W.load_designs().items()})
    return keys


def all_keys() -> dict[str, str]:
    return {**registry_keys(), **markdown_keys(), **code_keys()[0]}


def fields(template: str) -> set[tuple[str, str]]:
    return {(name, spec or "") for _, name, spec, _ in string.Formatter().parse(template) if name is not None}


def test_templates_are_literals():
    assert code_keys()[1] == [], "tr()/N_() given an f-string: pass the numbers as values instead"


@pytest.mark.parametrize("code", [c for c in i18n.LANGUAGES if c != "en"])
def test_catalog_has_every_string(code):
    cat = i18n.catalog(code)
    missing = {k: where for k, where in all_keys().items() if k not in cat}
    assert not missing, f"{len(missing)} string(s) without a {code} entry in locale/{code}.yaml:\n" + "\n".join(
        f"  {where}: {k!r}" for k, where in sorted(missing.items(), key=lambda kv: kv[1]))


@pytest.mark.parametrize("code", [c for c in i18n.LANGUAGES if c != "en"])
def test_catalog_placeholders_match(code):
    """A translation formats with exactly the values its English template takes, with the same formats."""
    bad = [f"{k!r}: en {sorted(fields(k))} vs {code} {sorted(fields(v))}"
           for k, v in i18n.catalog(code).items() if fields(k) != fields(v)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("code", [c for c in i18n.LANGUAGES if c != "en"])
def test_catalog_has_no_stale_entries(code):
    """Every entry is still used: an English text that changed leaves its old entry behind."""
    used = all_keys()
    stale = [k for k in i18n.catalog(code) if k not in used]
    assert not stale, f"{len(stale)} entries of locale/{code}.yaml no longer used:\n" + "\n".join(map(repr, stale))


def test_tr_formats_numbers_into_either_language():
    i18n.catalog.cache_clear()
    with i18n.in_language("zh"):
        assert i18n.language() == "zh"
        zh = i18n.tr("Not shown: {note}", note="x")
    assert i18n.language() == "en" and i18n.tr("Not shown: {note}", note="x") == "Not shown: x"
    assert zh != "Not shown: x" and zh.endswith("x")
    with pytest.raises(ValueError, match="unknown language 'fr'"):
        i18n.use_language("fr")


# --- the bundled run's book rendered in zh --------------------------------------------------------
CJK = re.compile(r"[\u4e00-\u9fff]")


class _Visible(HTMLParser):
    """The text a reader sees: no script, style or code."""

    def __init__(self):
        super().__init__()
        self.skip, self.parts = 0, []

    def handle_starttag(self, tag, attrs):
        self.skip += tag in ("script", "style", "code")

    def handle_endtag(self, tag):
        self.skip -= tag in ("script", "style", "code") and self.skip > 0

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(data)


def visible_text(html: str) -> str:
    p = _Visible()
    p.feed(html)
    return " ".join(" ".join(p.parts).split())


def english_sentences() -> list[str]:
    """The catalog's English text, cut at placeholders and lines, markdown markup dropped: the pieces
    long enough (over 40 characters) that finding one verbatim means a sentence was left in English."""
    out = set()
    for key in i18n.catalog("zh"):
        for line in key.splitlines():
            for piece in re.split(r"\{[^{}]*\}", line):
                piece = " ".join(re.sub(r"[*`#]", "", piece).split())
                if len(piece) > 40:
                    out.add(piece)
    return sorted(out)


@pytest.fixture(scope="module")
def zh(rendered_book):
    return rendered_book("zh")


@pytest.mark.parametrize("stem", CHAPTERS)
def test_zh_chapter_is_written_in_chinese(zh, stem):
    html = (zh / f"{stem}.html").read_text(encoding="utf-8")
    assert '<html lang="zh-CN"' in html
    text = visible_text(html)
    assert len(CJK.findall(text)) > 500, f"{stem}: only {len(CJK.findall(text))} CJK characters"
    plain = re.sub(r"[*`#]", "", text)
    left = [s for s in english_sentences() if s in plain]
    assert not left, f"{stem}: English left in the zh chapter: {left[:5]}"
    assert "Traceback" not in html


def test_zh_index_and_report_md(zh, rendered_book):
    index = (zh / "index.html").read_text(encoding="utf-8")
    assert '<html lang="zh-CN"' in index and "性能分析器输出约定" in index
    timings = json.loads((zh / "timings.json").read_text(encoding="utf-8"))
    assert all(t["ok"] and CJK.search(t["summary"]) and CJK.search(t["title"]) for t in timings), timings
    report = (zh / "report.md").read_text(encoding="utf-8")
    en = (rendered_book("en") / "report.md").read_text(encoding="utf-8")
    header = "| Stage | Duration (us) | TC% | DRAM% | Occ% | Bottleneck | Key Issue |"
    assert header in report and header in en  # the contract's table header is the same in both
    assert "根本原因" in report and "Root cause" not in report and len(CJK.findall(report)) > 200
    # the stage rows are machine-read: the same in either language up to the Key Issue column (prose)
    rows = [ln.split("|")[1:7] for ln in report.splitlines() if ln.startswith(("| decode", "| prefill", "| vision"))]
    rows_en = [ln.split("|")[1:7] for ln in en.splitlines() if ln.startswith(("| decode", "| prefill", "| vision"))]
    assert rows == rows_en and len(rows) == 3


def test_language_reaches_the_book_from_cli_and_params_file(tmp_path):
    """`--language zh` and `language: zh` in a params file both render chapter 00 in zh; a bad value
    is a parameter error (exit 2)."""
    (tmp_path / "p.yaml").write_text("language: zh\n")
    for args in (["--language", "zh"], ["--params", str(tmp_path / "p.yaml")]):
        out = tmp_path / f"out{len(args[0])}"
        proc = subprocess.run([sys.executable, "-m", "kernelbook", "book", "--out", str(out), "--chapters",
                               "00_setup", *args], capture_output=True, text=True, cwd=REPO, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr
        assert '<html lang="zh-CN"' in (out / "00_setup.html").read_text(encoding="utf-8")
    (tmp_path / "bad.yaml").write_text("language: fr\n")
    proc = subprocess.run([sys.executable, "-m", "kernelbook", "book", "--params", str(tmp_path / "bad.yaml"),
                           "--out", str(tmp_path / "bad")], capture_output=True, text=True, cwd=REPO,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "language: 'fr' is not one of ['en', 'zh']" in proc.stderr


def test_capture_line_notes_and_status_column_in_zh(run):
    """In the zh book the capture line of chapters 00–02, chapter 02's notes on how a kernel was identified
    (p000, p015) and its status column stayed English: they are capture data, now shown through the catalog."""
    from kernelbook.analyze import ncu_report as N
    from kernelbook.capture.chapters import decide
    from kernelbook.narrate import ncu_report as NN

    k = run.ncu_kernels()
    ids = k.set_index("kernel_id").identity
    with i18n.in_language("zh"):
        why = decide(REPO / "data" / "runs" / "h100-deepseek-ocr-2", "timeline", "auto")[1]
        notes = {kid: NN.status_text(ids[kid]) for kid in ("p000", "p015")}
        status = NN.metric_table(N.metric_table(k, run.timeline)).status
    assert why == "capture：auto — 该运行已包含时间线部分，因此本章直接读取"
    assert notes["p000"] == "按位置识别；ncu 给出的名称不同"
    assert notes["p015"].startswith("同一内核在解码中被分析（grid 2x66x1") and "shapes pass" not in notes["p015"]
    assert set(status) == {"已分析"}
    assert NN.status_text("something new") == "something new"  # a text no template knows is shown as written


def test_stored_capture_text_of_every_bundled_run_is_shown_in_zh():
    """The timeline backend's reason, how ncu picked its launches, the warmup and the sampling method are English
    the capture stored in each manifest: every form the bundled runs hold is shown through the catalog in zh, a
    text no template knows as written."""
    from kernelbook.analyze import provenance as P
    from kernelbook.narrate import provenance as VN

    seen = {}
    for path in sorted((REPO / "data" / "runs").glob("*/manifest.json")):
        m = json.loads(path.read_text())
        ti = m.get("timeline_info") or {}
        for v in ((m.get("timeline_backend") or {}).get("why"), (m.get("ncu") or {}).get("mode"),
                  ti.get("warmup"), (ti.get("sampling") or {}).get("method")):
            if isinstance(v, str):
                seen.setdefault(v, path.parent.name)
    assert {"auto: nsys unusable (nsys is not on PATH)", "1 generate(s)"} <= set(seen)
    with i18n.in_language("zh"):
        shown = {v: i18n.text(VN.stored(v)) for v in seen}
        account = VN.table(P.timeline_account(json.loads((REPO / "data" / "runs" / "h100-long-generation-2048" /
                                                 "manifest.json").read_text())))
        assert VN.stored("auto: nsys unusable (nsys is not on PATH)") == "auto：nsys 不可用（PATH 中没有 nsys）"
        assert VN.stored("something new; asked for in params") == "something new；参数中指定"
        assert VN.stored("something new") == "something new"
    english = {v: seen[v] for v, s in shown.items() if not CJK.search(s)}
    assert not english, f"stored text shown in English in zh: {english}"
    assert "torch.profiler 按窗口调度" in " ".join(account.value.astype(str))  # a long generation's sampling row
