"""The three private APIs of libraries kernelbook uses, each behind one function: these tests fail when the library
changes them (the third, jupyter_client's `_async_interrupt_kernel`, is checked by test_book's
`test_chapter_kernels_are_shut_down_without_an_interrupt`)."""
import pandas as pd
import plotly.graph_objects as go


def test_pandas_styler_computed_cell_styles():
    from kernelbook.display import styled_cells, styler_table

    df = pd.DataFrame({"a": [1.0, 5.0], "b": [2.0, 0.5]})
    styler = df.style.map(lambda v: "background-color: #fdd" if v > 4 else ("color: #999" if v < 1 else ""))
    cells = styled_cells(styler)
    assert cells[(1, 0)] == {"background-color": "#fdd"} and cells[(1, 1)] == {"color": "#999"}
    assert (0, 0) not in cells or cells[(0, 0)] == {}
    import re

    cells = re.findall(r"<td([^>]*)>", styler_table(styler).html)  # row by row: a, b
    assert ['bad' in c for c in cells] == [False, False, True, False]
    assert ['class="na"' in c for c in cells] == [False, False, False, True]


def test_plotly_renderer_base_emits_the_figure_json_and_html():
    from kernelbook.notebook import PLOTLY_MIME, FigureRenderer

    fig = go.Figure(go.Bar(x=["a"], y=[1]), layout={"title": {"text": "t"}})
    bundle = FigureRenderer().to_mimebundle(fig.to_dict())
    assert PLOTLY_MIME in bundle and bundle[PLOTLY_MIME]["data"][0]["type"] == "bar"
    assert bundle["text/plain"] == "<plotly figure: t>" and "Plotly.newPlot" in bundle["text/html"]
