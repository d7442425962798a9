"""LaTeX leaves to sympy through latex2sympy (the parser math-verify uses), reading juxtaposition as a product.

latex2sympy2_extended (1.11) reads an integer followed by any positive rational as a mixed number and adds them,
whatever its ``interpret_as_mixed_fractions`` setting: ``3(4)`` is 7, ``(2)(3)`` is 5, ``2\\binom{4}{2}`` is 8,
``\\frac{1}{2}(6)(4)`` is 5. That accepts wrong answers (``3(4)`` for a gold 7). :func:`latex_to_sympy` converts
with the setting off and makes the converter honour it: side by side is a product. Mixed numbers written as
such (``2\\frac{1}{2}``) are rewritten to one fraction before parsing (:mod:`rlvr.verifiers.math_normalize`).
The converter is changed only where the setting is off, so math-verify's own calls (setting on) read as before.
Two numbers side by side with nothing between them but space (``3 2``, ``3\\ 2``) are no product and no answer: they
are more likely two answers, or digits of one, than ``6`` (a thousands grouping such as ``1 000`` is read as one
number earlier, in :mod:`rlvr.verifiers.math_normalize`).
"""

from __future__ import annotations

import sympy

_PATCHED = False


def latex_to_sympy(latex: str, convert_degrees: bool = False) -> sympy.Basic | list:
    """latex2sympy's reading of ``latex`` (case kept, no normalization, juxtaposition a product).

    Raises:
        Exception: whatever latex2sympy raises on text it cannot parse (the ANTLR parser raises plain Exception).
    """
    from latex2sympy2_extended import latex2sympy
    from latex2sympy2_extended.latex2sympy2 import ConversionConfig

    _patch_once()
    return latex2sympy(
        latex,
        convert_degrees=convert_degrees,
        normalization_config=None,
        conversion_config=ConversionConfig(lowercase_symbols=False, interpret_as_mixed_fractions=False),
    )


def _patch_once() -> None:
    global _PATCHED
    if _PATCHED:
        return
    from latex2sympy2_extended.latex2sympy2 import _Latex2Sympy

    original = _Latex2Sympy.convert_postfix_list

    def convert_postfix_list(self, arr, i=0):  # noqa: ANN001, ANN202 - the library's signature
        if self.config.interpret_as_mixed_fractions:
            return original(self, arr, i)
        if i >= len(arr):
            raise Exception("Index out of bounds")  # noqa: TRY002 - as the library raises
        res = self.convert_postfix(arr[i])
        if isinstance(res, (sympy.Expr, sympy.MatrixBase)):
            if i == len(arr) - 1:
                return res
            if arr[i + 1].getText()[:1].isdigit() or arr[i + 1].getText().startswith("."):
                raise Exception("a number side by side with another is not a product")  # noqa: TRY002
            rh = convert_postfix_list(self, arr, i + 1)
            if getattr(res, "is_Matrix", False) or getattr(rh, "is_Matrix", False):
                return self.mat_mul_flat(res, rh)
            return self.mul_flat(res, rh)  # side by side: a product, never a mixed number
        if isinstance(res, list) and len(res) == 1:  # a derivative d/dx
            if i == len(arr) - 1:
                raise Exception("Expected expression for derivative")  # noqa: TRY002
            return sympy.Derivative(convert_postfix_list(self, arr, i + 1), res[0])
        return res

    _Latex2Sympy.convert_postfix_list = convert_postfix_list
    _PATCHED = True
