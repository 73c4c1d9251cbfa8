"""The zh book's chapter 01 (timeline), its summary headline and the catalog's terms: the step-by-step section,
its tables and figure legends, and the headline of chapter 07 / the index are Chinese, with the book's terms
(解码 for decode, 内核 for kernel, 普通 for plain, 分析器 for the profiler), not English words left inside Chinese."""
import collections
import re

import pytest
import yaml

from kernelbook import i18n
from test_i18n import visible_text  # the text a reader sees: no script, style or code

# English words a reader must not meet in the zh chapter's text (kernel names hold "kernel" only after "_")
ENGLISH = re.compile(r"\b(decode|kernels?|plain|profiled?|profiler|First|Last|Change|steps)\b")
# fragments the review found, in the visible text or in a figure's legend
FRAGMENTS = ["plain decode", "plain 墙钟", "profiled 墙钟", "plain wall", "profiled wall", "GPU 忙碌（profiled）",
             "63.0 steps", "被 profile", "KV cache 长度", "decode 步"]


@pytest.fixture(scope="module")
def zh(rendered_book):
    return rendered_book("zh")


def test_zh_chapter_01_has_no_english_words_or_mixed_fragments(zh):
    html = (zh / "01_timeline.html").read_text(encoding="utf-8")
    text = visible_text(html)
    assert not ENGLISH.findall(text), sorted(set(ENGLISH.findall(text)))
    left = [f for f in FRAGMENTS if f in html]  # the figures' legends and titles sit in the page's scripts
    assert not left, left
    # the check table counts steps as a count, and the growth table's headers are translated
    assert "解码步数（普通 generate）" in text and "被分析的解码步数" in text
    # the bundled 64-token run has no kernel that grew by 5 % or more: the growth table says so in Chinese; its
    # headers (shown on a run with growth) are in the catalog
    assert "没有任何解码内核的每步时间增长" in text
    zh_catalog = i18n.catalog("zh")
    assert [zh_catalog[h] for h in ("First", "Last", "Change %")] == ["最先几步", "最后几步", "变化 %"]
    assert all(s in html for s in ("墙钟时间（普通）", "墙钟时间（带分析器）", "GPU 忙碌（带分析器）"))


@pytest.mark.parametrize("page", ["index.html", "07_summary.html"])
def test_zh_headline_has_no_plain_eager_decode(zh, page):
    text = visible_text((zh / page).read_text(encoding="utf-8"))
    assert "按部署方式（CUDA graphs" in text and "一个普通解码步耗时" in text and "HF 的 eager 循环耗时" in text
    assert not re.search(r"plain|一个 plain|decode 步", text), re.findall(r".{20}(?:plain|decode 步).{20}", text)


def test_zh_catalog_has_no_duplicate_keys():
    """A key written twice: YAML keeps the last, so an edit to the first is silently lost."""
    dups = []

    class Loader(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        seen = collections.Counter(loader.construct_object(k) for k, _ in node.value)
        dups.extend(k for k, n in seen.items() if n > 1)
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    yaml.load((i18n.LOCALE / "zh.yaml").read_text(encoding="utf-8"), Loader=Loader)
    assert not dups, dups


def test_zh_step_check_counts_without_unit_word(run):
    from kernelbook.analyze import steps as S
    from kernelbook.display import table

    with i18n.in_language("zh"):
        shown = table(S.step_check(run))._repr_html_()
    assert "steps" not in visible_text(shown) and "63.0" not in shown
    assert re.search(r"<td[^>]*>63</td>", shown)


def test_zh_catalog_says_decode_kernel_plain_profiler_in_chinese():
    """Every zh entry whose English speaks of decode, kernels, plain or profiled runs says 解码 / 内核 / 普通 /
    分析器 (the book's terms), not the English word inside Chinese; code, options and placeholders aside."""
    cat = i18n.catalog("zh")
    keys = [k for k in cat if re.search(r"\b(decode|plain|profiled|profiler|kernels?)\b", k)]
    words = re.compile(r"\b(decode|kernels?|plain|profiled?|profiler|run)\b")
    bad = {k: cat[k] for k in keys
           if words.search(re.sub(r"`[^`]*`|\{[^}]*\}|steps\.parquet|run_dir|variant_runs|deployed_run|torch\.profiler"
                                  r"|--kernel-name|（profiled）", "", cat[k]))}
    assert not bad, "\n".join(f"{k!r}: {v!r}" for k, v in bad.items())
