"""Rewrite an extracted answer into one LaTeX dialect the parser understands.

Each rule fixes a way model answers (and dataset golds) spell the same thing differently:

* unicode: full-width digits (NFKC), ``−`` (U+2212), ``√2``, ``π``, ``°``, ``≤``, ``×``, superscripts;
* plain-text math: ``sqrt(2)``, ``exp(16)``, ``pi/2``, ``x**2``, ``6.02e23``, ``>=``;
* TeX shorthand: ``\\frac12``, ``\\frac94\\pi``, ``\\sqrt3`` (one-token arguments, as TeX reads them),
  ``\\dfrac``/``\\tfrac``/``\\cfrac``, ``\\left(``, spacing commands, ``\\displaystyle``;
* number formats: mixed numbers ``2\\frac{1}{2}`` and ``4 4/9``, ``1{,}000``, ``12,\\!000``, ``14 916``, repeating decimals ``0.\\overline{3}``, ``0.(3)``, ``0.1\\dot{6}``;
* intervals in ISO notation: ``]0, 1]`` -> ``(0, 1]``, ``[0, 1[`` -> ``[0, 1)``;
* wrappers: ``\\text{13}`` -> ``13``, ``\\mathrm{e}`` -> ``e``, ``\\text{ and }`` -> ``and``,
  ``\\begin{array}{cc}`` -> ``pmatrix``; degrees (``^\\circ``, ``°``, ``degrees``, ``\\text{ deg}``) -> ``^{\\circ}``;
  percent spellings (``percent``, ``pct``, ``%``) -> ``\\%``.

Nothing here decides equality; it only removes spelling differences.
"""

from __future__ import annotations

import re
import unicodedata
from fractions import Fraction

_UNICODE = {
    "\u2212": "-", "\u2013": "-", "\u2014": "-", "\u2010": "-", "\u2011": "-",
    "×": "\\times ", "÷": "\\div ", "·": "\\cdot ", "⋅": "\\cdot ",
    "≤": "\\leq ", "≥": "\\geq ", "≠": "\\neq ", "≈": "\\approx ", "⩽": "\\leq ", "⩾": "\\geq ",
    "∞": "\\infty ", "π": "\\pi ", "∪": "\\cup ", "∩": "\\cap ", "∈": "\\in ", "±": "\\pm ", "∓": "\\mp ",
    "°": "^{\\circ}", "∘": "^{\\circ}", "⁄": "/", "∅": "\\emptyset ", "θ": "\\theta ", "α": "\\alpha ",
    "²": "^{2}", "³": "^{3}", "¹": "^{1}", "⁰": "^{0}", "⁴": "^{4}", "⁻¹": "^{-1}",
    "\u00a0": " ", "\u2009": " ", "\u202f": " ", "，": ",", "；": ";", "：": ":", "（": "(", "）": ")",
}
_SQRT_UNICODE = re.compile(r"√\s*(\((?:[^()]|\([^()]*\))*\)|\{[^{}]*\}|[0-9.]+|[A-Za-z])")
_SPACING = re.compile(r"(?<!\\)\\(?:quad|qquad|,|;|:|!|\s)|~|\\hspace\*?\{[^{}]*\}|\\(?:displaystyle|textstyle|limits|nolimits)(?![A-Za-z])")
_SIZED = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)[lrm]?(?![A-Za-z])\s*(\.)?")
_TEXT_CMD = re.compile(r"\\(?:textbf|textit|textrm|textnormal|textsf|texttt|mbox|mathrm|mathit|mathsf|mathbf|boldsymbol|operatorname|rm)\s*\{")
_FRAC_VARIANTS = re.compile(r"\\[dtc]frac(?![A-Za-z])")
_BINOM_VARIANTS = re.compile(r"\\[dt]binom(?![A-Za-z])")
_ARG_COMMAND = re.compile(r"\\(frac|binom|sqrt)(?![A-Za-z])")
_PLAIN_FUNCS = re.compile(
    r"(?<![\\A-Za-z])(arcsin|arccos|arctan|sinh|cosh|tanh|sin|cos|tan|sec|csc|cot|exp|ln|log)(?=\s*\()"
)
_PLAIN_SQRT = re.compile(r"(?<![\\A-Za-z])sqrt\s*(?=\()")
_PLAIN_PI = re.compile(r"(?<![\\A-Za-z])pi(?![A-Za-z])")
_PLAIN_INF = re.compile(r"(?<![\\A-Za-z])(?:infinity|infty|inf)(?![A-Za-z])")
_SCIENTIFIC = re.compile(r"(?<![\w.\\])(\d+(?:\.\d+)?)[eE]([+-]?\d+)(?![\w.])")
_DEGREE = re.compile(r"\s*(?:\^\s*\{?\s*\\circ\s*\}?|\^\s*\{?\s*\\text\{\s*o\s*\}\s*\}?|\\circ|\\degree)(?![A-Za-z])")
_TEXT_DEGREE = re.compile(r"\s*\\text\s*\{\s*(?:degrees?|deg\.?|\^\{\\circ\})\s*\}", re.IGNORECASE)
_DEGREE_WORD = re.compile(r"(?<=[\d}])\s*(?:degrees|degree|deg)\b\.?", re.IGNORECASE)
_PERCENT = re.compile(r"\s*(?:\\%|%|\\text\{\s*(?:percent|percentage|pct)\s*\}|\b(?:percentage|percent|pct)\b)")
# "2\frac{1}{2}" is the mixed number 5/2 (latex2sympy's own rule also added 3(4) up to 7: it is off)
_TEX_MIXED = re.compile(r"(?<![\w.\\/{}^)])([-+]?)(\d+)\s*\\frac\{(\d+)\}\{(\d+)\}")
_PLAIN_MIXED = re.compile(r"(?<![\w.\\/{}^])([-+]?)(\d+) (\d+)/(\d+)(?![\w./])")
# A repeating decimal: the repetend overlined (\overline{3}, \overline3, \bar{3}), in parentheses (0.(3), 0.8(3)),
# or between dots (0.\dot{3}, 0.\dot{1}4\dot{2}: the digits from the first dot to the second repeat).
_REPEATING = re.compile(
    r"(?<![\w.])(-?)(\d*)\.(\d*)(?:\\overline\s*\{(\d+)\}|\\overline\s*(\d)|\\bar\s*\{(\d+)\}|\\bar\s*(\d)|"
    r"\((\d+)\)(?![\w.(^])|\\dot\s*\{?(\d)\}?(?:(\d*)\\dot\s*\{?(\d)\}?)?)"
)
_THOUSANDS_BRACE = re.compile(r"(?<=\d)\s*\{\s*,\s*\}\s*(?=\d)")
_THOUSANDS_BANG = re.compile(r"(?<=\d),\s*\\!\s*(?=\d)")
_THOUSANDS_THINSPACE = re.compile(r"(?<=\d)\\[,!](?=\d{3}(?!\d))")
# An interval in ISO 31-11 / French notation: a bracket turned outwards is open ("]0, 1]" is (0, 1], "[0, 1[" is
# [0, 1)). The opening bracket starts the answer or follows a separator (not "\sqrt[3]"), the closing one ends it.
_ISO_INTERVAL = re.compile(
    r"(?:^|(?<=[\s,;(=])|(?<=\\cup)|(?<=\\in))(?P<open>[\[\]])\s*(?P<a>[^\[\],;]+?)\s*(?P<sep>[,;])\s*"
    r"(?P<b>[^\[\],;]+?)\s*(?P<close>[\[\]])(?=\s*$|\s*[,;)]|\s*\\cup)"
)
_MAX_DECIMAL_DIGITS = 4000  # Python refuses to read longer integers from text
_SPACE_GROUPS = re.compile(r"(?<![\d.])(\d{1,3}(?: \d{3})+)(?![\d.])")


def normalize(answer: str) -> str:
    """Canonical LaTeX spelling of ``answer`` (see the module docstring). Never raises for a str."""
    s = _unicode(answer)
    if "matrix" not in s and "array" not in s:
        s = re.sub(r"\\\\(?=[A-Za-z])", r"\\", s)  # "\\\\frac" written with doubled backslashes
    if re.search(r"cents?\b|¢", s):  # "\$3 and 5 cents": the dollar sign names the first amount's unit
        s = re.sub(r"\\\$\s*(\d+(?:\.\d+)?)(?![\d.])", r" \1 dollars ", s)
    s = s.replace("\\$", " ").replace("$", " ")
    s = re.sub(r"[€£¥₹]", " ", s)
    s = _THOUSANDS_BRACE.sub("", s)
    s = _THOUSANDS_BANG.sub("", s)
    s = _THOUSANDS_THINSPACE.sub("", s)
    s = _SIZED.sub("", s)
    s = _ISO_INTERVAL.sub(_iso_interval, s)
    s = re.sub(r"\\varnothing(?![A-Za-z])", r"\\emptyset ", s)
    s = re.sub(r"\\mathbb\s*\{?\s*R\s*\}?|(?i:\ball\s+real\s+numbers\b)", r"(-\\infty, \\infty)", s)
    s = s.replace("\\lbrace", "\\{").replace("\\rbrace", "\\}").replace("\\lbrack", "[").replace("\\rbrack", "]")
    s = re.sub(r"\\[lr]?vert(?![A-Za-z])|\\mid(?![A-Za-z])", "|", s)
    s = re.sub(r"\\(?:backslash|smallsetminus)(?![A-Za-z])|(?<=[)\]])\s*-\s*(?=\\\{)", r" \\setminus ", s)  # "(-\infty, \infty) - \{0\}"
    s = _FRAC_VARIANTS.sub(r"\\frac", s)
    s = _BINOM_VARIANTS.sub(r"\\binom", s)
    s = _TEXT_CMD.sub(r"\\text{", s)
    s = _TEXT_DEGREE.sub(lambda _: "^{\\circ}", s)  # "60\text{ degrees}", "\mathrm{deg}", "\text{°}"
    s = _text_wrappers(s)
    s = _SPACING.sub(" ", s)
    s = _arrays_to_matrices(s)
    s = _REPEATING.sub(_repeating_to_fraction, s)
    s = _PLAIN_MIXED.sub(_mixed_to_fraction, s)
    s = _plain_text_math(s)
    s = _brace_tex_args(s)
    s = _TEX_MIXED.sub(_tex_mixed_to_fraction, s)
    s = _DEGREE.sub(lambda _: "^{\\circ}", s)
    s = _DEGREE_WORD.sub(lambda _: "^{\\circ}", s)
    s = _PERCENT.sub("\\\\%", s)
    s = " ".join(s.split())
    s = _SPACE_GROUPS.sub(lambda m: m.group(1).replace(" ", ""), s)
    s = re.sub(r"^(?:=|\\approx|\\simeq|:)\s*", "", s)
    if not re.search(r"\.\.\.\s*$|\\[lc]?dots\s*$", s):  # "1, 2, 3, ..." keeps its ellipsis
        s = re.sub(r"\s*[.,;:]+$", "", s).strip()
    return s


def _iso_interval(m: re.Match[str]) -> str:
    """``]a, b]`` -> ``(a, b]``, ``[a; b[`` -> ``[a, b)``; an interval with both brackets the usual way stays."""
    if m.group("open") == "[" and m.group("close") == "]":
        return m.group(0)
    opener = "(" if m.group("open") == "]" else "["
    closer = ")" if m.group("close") == "[" else "]"
    return f"{opener}{m.group('a')}, {m.group('b')}{closer}"


def _unicode(s: str) -> str:
    s = _SQRT_UNICODE.sub(lambda m: "\\sqrt{" + m.group(1).strip("(){}") + "}", s)
    s = "".join(_vulgar_fraction(ch) for ch in s)
    for old, new in _UNICODE.items():
        s = s.replace(old, new)
    return unicodedata.normalize("NFKC", s).replace("\u2044", "/")


def _vulgar_fraction(ch: str) -> str:
    """``½`` -> ``\\frac{1}{2}`` (so ``3½`` reads as the mixed number 3 1/2, not 31/2)."""
    if ch.isascii() or unicodedata.category(ch) != "No":
        return ch
    num, sep, den = unicodedata.normalize("NFKC", ch).partition("\u2044")
    return f"\\frac{{{num}}}{{{den}}}" if sep and num.isdigit() and den.isdigit() else ch


def _text_wrappers(s: str) -> str:
    """``\\text{13}`` -> ``13``, ``\\text{e}`` -> ``e``, ``\\text{ and }`` -> `` and ``, ``\\text{(C)}`` -> ``(C)``;
    other ``\\text{...}`` stay (units, text answers)."""

    def repl(m: re.Match[str]) -> str:
        inner = m.group(1)
        stripped = inner.strip()
        if re.fullmatch(r"[-+]?[\d.,]+", stripped) or re.fullmatch(r"\(?[A-Za-z]\)?", stripped):
            return stripped if inner == stripped else f" {stripped} "
        if stripped.lower() in {"and", "or", ", and", ",and", "and/or"}:
            return f" {stripped.lower().lstrip(',').strip()} "
        return m.group(0)

    return re.sub(r"\\text\s*\{([^{}]*)\}", repl, s)


def _arrays_to_matrices(s: str) -> str:
    s = re.sub(r"\\begin\{array\}\s*\{[^{}]*\}", r"\\begin{pmatrix}", s)
    s = s.replace("\\end{array}", "\\end{pmatrix}")
    s = re.sub(r"\\begin\{[bBvV]?matrix\}|\\begin\{smallmatrix\}", r"\\begin{pmatrix}", s)
    s = re.sub(r"\\end\{[bBvV]?matrix\}|\\end\{smallmatrix\}", r"\\end{pmatrix}", s)
    # "[\begin{pmatrix}..\end{pmatrix}]" and "(\begin{pmatrix}..)" are the matrix itself
    s = re.sub(r"^[\[(]\s*(\\begin\{pmatrix\}.*\\end\{pmatrix\})\s*[\])]$", r"\1", s.strip(), flags=re.DOTALL)
    return s


def _mixed_to_fraction(m: re.Match[str]) -> str:
    """Plain-text mixed number ``4 4/9`` -> ``\\frac{40}{9}``; an invalid one (``4 7/6``, ``4 4/0``) stays."""
    sign, whole, num, den = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
    if den == 0 or num >= den:
        return m.group(0)
    return f"{'-' if sign == '-' else ''}\\frac{{{whole * den + num}}}{{{den}}}"


def _tex_mixed_to_fraction(m: re.Match[str]) -> str:
    """``2\\frac{1}{2}`` -> ``\\frac{5}{2}`` (the sign before it kept); an improper one (``2\\frac{3}{2}``) is a product
    and stays."""
    sign, whole, num, den = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
    if den == 0 or num >= den:
        return m.group(0)
    return f"{sign}\\frac{{{whole * den + num}}}{{{den}}}"


def _repeating_to_fraction(m: re.Match[str]) -> str:
    sign, whole, fixed = m.group(1), m.group(2) or "0", m.group(3)
    repeat = next((g for g in m.groups()[3:8] if g is not None), None)
    if repeat is None:  # dot notation: from the first dotted digit to the second
        repeat = m.group(9) + (m.group(10) + m.group(11) if m.group(11) is not None else "")
    if len(whole) + len(fixed) + len(repeat) > _MAX_DECIMAL_DIGITS:
        return m.group(0)  # left for the parser to refuse
    value = Fraction(int(whole)) + (Fraction(int(fixed), 10 ** len(fixed)) if fixed else 0)
    value += Fraction(int(repeat), (10 ** len(repeat) - 1) * 10 ** len(fixed))
    return f"{sign}\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _plain_text_math(s: str) -> str:
    s = s.replace("**", "^")
    s = _paren_exponents(s)
    for plain, latex in ((">=", "\\geq "), ("<=", "\\leq "), ("!=", "\\neq "), ("=<", "\\leq "), ("=>", "\\geq ")):
        s = s.replace(plain, latex)
    s = _PLAIN_SQRT.sub(lambda m: "\\sqrt", s)
    s = _paren_sqrt(s)
    s = _PLAIN_FUNCS.sub(r"\\\1", s)
    s = _PLAIN_PI.sub(r"\\pi ", s)
    s = _PLAIN_INF.sub(r"\\infty ", s)
    s = _SCIENTIFIC.sub(r"\1\\times10^{\2}", s)
    return s


def _paren_exponents(s: str) -> str:
    """``e^(2x)`` -> ``e^{2x}`` (plain-text exponents in parentheses)."""
    return _brace_paren_argument(s, "^")


def _paren_sqrt(s: str) -> str:
    """``\\sqrt(x+1)`` -> ``\\sqrt{x+1}`` (plain-text square roots)."""
    return _brace_paren_argument(s, "\\sqrt")


def _brace_paren_argument(s: str, head: str) -> str:
    """``head(...)`` -> ``head{...}`` up to the matching parenthesis; an unclosed one is left as it is."""
    out = []
    i = 0
    while True:
        j = s.find(head + "(", i)
        if j < 0:
            out.append(s[i:])
            return "".join(out)
        depth, k = 0, j + len(head)
        while k < len(s):
            depth += {"(": 1, ")": -1}.get(s[k], 0)
            if depth == 0:
                break
            k += 1
        if k >= len(s):
            out.append(s[i:])
            return "".join(out)
        out.append(s[i:j] + head + "{" + s[j + len(head) + 1 : k] + "}")
        i = k + 1


def _brace_tex_args(s: str) -> str:
    """Give ``\\frac``, ``\\binom`` and ``\\sqrt`` braced arguments, reading a missing brace as TeX does:
    one token (``\\frac94`` -> ``\\frac{9}{4}``, ``\\sqrt 2`` -> ``\\sqrt{2}``)."""
    out: list[str] = []
    i = 0
    while True:
        m = _ARG_COMMAND.search(s, i)
        if m is None:
            out.append(s[i:])
            return "".join(out)
        out.append(s[i : m.start()])
        name = m.group(1)
        j = m.end()
        index = ""
        if name == "sqrt":
            k = j
            while k < len(s) and s[k] == " ":
                k += 1
            if k < len(s) and s[k] == "[":
                close = s.find("]", k)
                if close > 0:
                    index = s[k : close + 1]
                    j = close + 1
        args = []
        for _ in range(2 if name in ("frac", "binom") else 1):
            arg, j = _read_arg(s, j)
            if arg is None:
                break
            args.append(arg)
        if len(args) != (2 if name in ("frac", "binom") else 1):
            out.append(s[m.start() : j])
            i = j
            continue
        out.append(f"\\{name}{index}" + "".join("{" + _brace_tex_args(a) + "}" for a in args))
        i = j


def _read_arg(s: str, j: int) -> tuple[str | None, int]:
    while j < len(s) and s[j] == " ":
        j += 1
    if j >= len(s):
        return None, j
    if s[j] == "{":
        depth = 0
        k = j
        while k < len(s):
            if s[k] == "\\":
                k += 2
                continue
            depth += {"{": 1, "}": -1}.get(s[k], 0)
            if depth == 0:
                return s[j + 1 : k], k + 1
            k += 1
        return None, j
    if s[j] == "\\":
        m = re.match(r"\\(?:[A-Za-z]+|.)", s[j:])
        assert m is not None
        return m.group(), j + m.end()
    if s[j] in "}])":
        return None, j
    return s[j], j + 1
