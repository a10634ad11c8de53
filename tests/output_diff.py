"""Compare two analysis outputs (analysis.json trees, report.md texts) the way a reproduction should be judged.

Re-analysing the same runs.parquet on another CPU kind changes floats: OpenBLAS picks a kernel per CPU
(Haswell, SkylakeX, ... sum in other orders) and numpy dispatches its own SIMD loops (exp and log differ in
their last bit between the AVX2 and AVX-512 paths). Each float is compared at the precision of the
computation that produced it (docs/reproducibility.md gives the table, and
tests/test_reference_results.py re-analyses references under forced other kernels to check it):

- strings, booleans, integers, None, keys and list lengths must be equal;
- closed-form statistics (means, SDs, t and rank tests, least-squares slopes, DeLong, a bootstrap with a
  fixed seed): `math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)`. Their kernels differ by rounding
  in a summation order, 1e-16 to 1e-12 relative; REL_TOL = 1e-9 is three orders above that and far below
  any change of an input (a metric moved by 1e-6 moves the outputs by more). ABS_TOL = 1e-12 covers
  quantities that cancel to about zero (a difference of two equal means);
- what an iterative optimiser fits (`analysis.fits.forms.ITERATIVE_FORMS`: the saturating curve and the
  loss surface): the subtree of any entry whose `form` is one, and of a form check whose `forms` include
  one. An optimiser fixes the objective, not the parameters: near the minimum the objective changes with
  the square of a parameter's error, so parameters are fixed to about the square root of the objective's
  relative precision (1e-14 for least_squares' tolerances, float rounding for L-BFGS-B, which runs until it
  cannot decrease the objective) times the fit's conditioning: 1e-8 to 1e-7 before conditioning, and
  at most 4.4e-6 measured across forced kernels (a nearly flat saturating fit). ITERATIVE_REL_TOL = 1e-4 is
  a factor 20 above that measurement. Inside such a subtree an entry that holds a `predicted` value (a
  held-out cell) compares its floats on the prediction's scale: its `error` is the prediction minus an
  observation, so its absolute precision is the prediction's, not a share of the (small) difference;
- in a report text, non-numeric text must be equal, and a number printed with d decimals may differ by
  one unit in its last printed place (a value within 1e-13 of a rounding boundary can round either
  way); numbers printed without decimals must be equal.

Each function returns the differences as readable lines (path, both values); an empty list means "same".
"""
from __future__ import annotations

import math
import re
from typing import Any

from analysis.fits.forms import ITERATIVE_FORMS

REL_TOL = 1e-9
ABS_TOL = 1e-12
ITERATIVE_REL_TOL = 1e-4
#: A number as a report prints it: optional sign, digits, optional decimals, optional exponent.
_NUMBER = re.compile(r"[-+]?\d+(?:\.(\d+))?(?:[eE][-+]?\d+)?")


def json_differences(a: Any, b: Any, *, rel_tol: float = REL_TOL, abs_tol: float = ABS_TOL,
                     path: str = "") -> list[str]:
    """Every place where the JSON values `a` and `b` differ, floats within tolerance counting as equal."""
    where = path or "(top)"
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None or isinstance(a, str) \
            or isinstance(b, str):
        return [] if a == b and type(a) is type(b) else [f"{where}: {a!r} != {b!r}"]
    if isinstance(a, dict) and isinstance(b, dict):
        if _holds_an_iterative_fit(a):
            rel_tol = max(rel_tol, ITERATIVE_REL_TOL)
        if rel_tol >= ITERATIVE_REL_TOL:
            abs_tol = max(abs_tol, rel_tol * _prediction_scale(a, b))
        out = [f"{path}/{k}: only in the {side}" for side, x, y in (("first", a, b), ("second", b, a))
               for k in sorted(set(x) - set(y), key=str)]
        for k in sorted(set(a) & set(b), key=str):
            out += json_differences(a[k], b[k], rel_tol=rel_tol, abs_tol=abs_tol, path=f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items != {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b))
                for d in json_differences(x, y, rel_tol=rel_tol, abs_tol=abs_tol, path=f"{path}[{i}]")]
    if isinstance(a, int) and isinstance(b, int):
        return [] if a == b else [f"{where}: {a} != {b}"]
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        fa, fb = float(a), float(b)
        if (math.isnan(fa) and math.isnan(fb)) or math.isclose(fa, fb, rel_tol=rel_tol, abs_tol=abs_tol):
            return []
        return [f"{where}: {a!r} != {b!r} (relative difference {abs(fa - fb) / max(abs(fa), abs(fb)):.2g})"]
    return [f"{where}: {a!r} ({type(a).__name__}) != {b!r} ({type(b).__name__})"]


def _holds_an_iterative_fit(entry: dict) -> bool:
    """An iteratively fitted curve (`form` is one), or a form check comparing one with others."""
    forms = entry.get("forms")
    return entry.get("form") in ITERATIVE_FORMS or (
        isinstance(forms, list) and any(isinstance(f, dict) and f.get("form") in ITERATIVE_FORMS for f in forms))


def _prediction_scale(a: dict, b: dict) -> float:
    """The largest |predicted| or |observed| of a held-out entry in either tree (0 for any other entry)."""
    values = [x.get(k) for x in (a, b) for k in ("predicted", "observed")] if "predicted" in a else []
    return max((abs(float(v)) for v in values if isinstance(v, (int, float)) and math.isfinite(v)), default=0.0)


def text_differences(a: str, b: str, *, rel_tol: float = REL_TOL) -> list[str]:
    """Lines of two report texts that differ beyond a last-printed-digit rounding of their numbers."""
    la, lb = a.splitlines(), b.splitlines()
    if len(la) != len(lb):
        return [f"(text): {len(la)} lines != {len(lb)} lines"]
    return [f"line {i + 1}: {x!r} != {y!r}" for i, (x, y) in enumerate(zip(la, lb), start=0)
            if x != y and not _same_line(x, y, rel_tol)]


def _same_line(x: str, y: str, rel_tol: float) -> bool:
    nx, ny = list(_NUMBER.finditer(x)), list(_NUMBER.finditer(y))
    if len(nx) != len(ny) or _NUMBER.sub("#", x) != _NUMBER.sub("#", y):
        return False
    for mx, my in zip(nx, ny):
        if mx.group(0) == my.group(0):
            continue
        decimals = mx.group(1)
        if decimals is None or my.group(1) is None or len(decimals) != len(my.group(1)):
            return False  # integers (counts) and numbers printed to other precisions must match exactly
        fx, fy = float(mx.group(0)), float(my.group(0))
        exponent = re.search(r"[eE]([-+]?\d+)", mx.group(0))
        unit = 10.0 ** (-len(decimals) + (int(exponent.group(1)) if exponent else 0))
        if abs(fx - fy) > unit * (1 + 1e-6) + rel_tol * max(abs(fx), abs(fy)):
            return False
    return True
