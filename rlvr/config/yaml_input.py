"""YAML as a recipe may hold it: a safe load that refuses, with one line each, what would hang or crash the loader or
silently change the recipe: nesting deeper than :data:`MAX_DEPTH`, aliases that expand past :data:`MAX_NODES` nodes
(a "billion laughs" document), and a key given twice in one mapping (YAML keeps the last one silently)."""

from __future__ import annotations

from typing import Any

import yaml

MAX_DEPTH = 64
"""Deepest nesting of mappings and lists a recipe may have (real recipes use 4-5 levels)."""
MAX_NODES = 100_000
"""Most nodes a recipe may expand to once its aliases are followed (real recipes: a few hundred)."""


class RecipeYAMLError(ValueError):
    """A recipe document refused by :func:`load_yaml` (one line, with the line number)."""


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "somewhere"


class _Loader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise RecipeYAMLError(f"nested more than {MAX_DEPTH} levels deep at "
                                      f"{_where(self.peek_event().start_mark)}")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            if key in first:
                raise RecipeYAMLError(f"key {key!r} appears twice in one mapping (line {first[key]} and line "
                                      f"{key_node.start_mark.line + 1}): YAML would keep the second silently; "
                                      "merge the two into one")
            first[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def _expanded_size(root: Any) -> int:
    """Nodes of the document with every alias followed (shared nodes counted each time), capped just past
    :data:`MAX_NODES`; linear in the composed graph."""
    memo: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in memo:
            continue
        kids = ([k for pair in node.value for k in pair] if isinstance(node, yaml.MappingNode)
                else list(node.value) if isinstance(node, yaml.SequenceNode) else [])
        if children_done or not kids:
            memo[id(node)] = min(1 + sum(memo[id(k)] for k in kids), MAX_NODES + 1)
        else:
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in memo)
    return memo[id(root)]


def load_yaml(text: str) -> Any:
    """``yaml.safe_load(text)``, with the refusals of this module.

    Raises:
        RecipeYAMLError: too deep, too large once aliases are followed, a duplicated key, or not YAML at all (the
            parser's problem and its line, on one line).
    """
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node)
        if size > MAX_NODES:
            raise RecipeYAMLError(f"expands to more than {MAX_NODES:,} values once its aliases (*name) are followed: "
                                  "a recipe that large is a mistake or an attack")
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        problem = exc.problem or exc.context or "not valid YAML"
        raise RecipeYAMLError(f"not valid YAML: {problem} at {_where(exc.problem_mark)}") from None
    except yaml.YAMLError as exc:
        raise RecipeYAMLError(f"not valid YAML: {' '.join(str(exc).split())}") from None
    finally:
        loader.dispose()
