"""How a number prints, in any language: three significant digits, an engineering prefix, a grouped count, "—" for
a missing value. The display layer's cells and the analysis' English phrases (`contract.phrase`) both print numbers
so; nothing here depends on the reader's language."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

MISSING = "—"

_PREFIX = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, ""), (1e-3, "m"), (1e-6, "µ"),
           (1e-9, "n"), (1e-12, "p")]


def missing(v) -> bool:
    if v is None or v is pd.NA or v is pd.NaT:
        return True
    try:
        return bool(isinstance(v, (float, np.floating)) and math.isnan(v))
    except TypeError:
        return False


def sig(v: float, digits: int = 3) -> str:
    """`v` with `digits` significant digits, trailing zeros kept (3.30, 38.6, 512); no exponent form:
    values of 10^6 and up take an engineering prefix (1.29 M)."""
    if missing(v):
        return MISSING
    v = float(v)
    if v == 0:
        return "0"
    if not math.isfinite(v):
        return "∞" if v > 0 else "−∞"
    if abs(v) >= 1e6:
        return eng(v, "")
    if abs(v) >= 10 ** digits:
        return f"{v:,.0f}"
    return _digits(v, digits, grouped=True)


def _digits(x: float, digits: int, grouped: bool = False) -> str:
    """`x` (non-zero, finite) with `digits` significant digits in fixed notation."""
    e = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - e)
    if decimals and abs(round(x, decimals)) >= 10 ** (e + 1):  # 9.996 rounds to 10.0, not 10.00
        decimals -= 1
    return f"{x:,.{decimals}f}" if grouped else f"{x:.{decimals}f}"


def eng(v: float, unit: str, digits: int = 3) -> str:
    """`v` (in the base unit) with an engineering prefix: eng(3.3e6, "B") == "3.30 MB",
    eng(5.4e-6, "s") == "5.40 µs", eng(3.855e13, "FLOP/s") == "38.6 TFLOP/s"."""
    if missing(v):
        return MISSING
    v = float(v)
    if v == 0:
        return f"0 {unit}".strip()
    if not math.isfinite(v):
        return sig(v)
    a = abs(v)
    for scale, p in _PREFIX:
        if a >= scale * 0.9995:  # 999.6 k prints as 1.00 M, not 1,000 k
            break
    else:
        scale, p = _PREFIX[-1]
    s = _digits(v / scale, digits)
    if abs(float(s)) >= 1000 and scale < 1e15:  # rounding crossed into the next prefix
        return eng(math.copysign(1000 * scale, v), unit, digits)
    return f"{s} {p}{unit}".strip()


def count(v) -> str:
    if missing(v):
        return MISSING
    v = float(v)
    if abs(v) >= 1e6:
        return eng(v, "")
    if v != round(v):
        return sig(v)
    return f"{int(round(v)):,}"
