"""YAML text -> plain Python data plus the position of every key and value.

We compose the node graph with ruamel.yaml (YAML 1.2, so ``on``/``yes`` stay strings) and
convert it ourselves instead of loading it: nodes carry exact marks, and walking them
lets us report *every* duplicate key instead of stopping at the first one.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, ReusedAnchorWarning, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from taugrid.errors import SpecError, SpecProblem
from taugrid.spec.yamlwords import explain

Loc = tuple[str | int, ...]
_STD_TAG = "tag:yaml.org,2002:"


@dataclass(frozen=True)
class Pos:
    line: int  # 1-based
    col: int  # 1-based


@dataclass
class Document:
    """Converted data with positions keyed by path (``("resources", "gpus")``)."""

    data: Any
    values: dict[Loc, Pos] = field(default_factory=dict)  # where each value starts
    keys: dict[Loc, Pos] = field(default_factory=dict)  # where each mapping key starts
    raw: dict[Loc, str] = field(default_factory=dict)  # scalar text as written
    rejected: set[Loc] = field(default_factory=set)  # values already reported as bad YAML
    incomplete: set[Loc] = field(default_factory=set)  # mappings that lost a merge key


def _pos(node: Node) -> Pos:
    return Pos(node.start_mark.line + 1, node.start_mark.column + 1)


def _plain(value: object) -> object:
    # ruamel returns str/int/float subclasses that carry formatting; the models want
    # plain types (bool first: it is an int).
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value  # timestamps, bytes: left for validation to reject with a type message


class _Converter:
    def __init__(self, yaml: YAML, file: str) -> None:
        self._yaml = yaml
        self._file = file
        self.doc = Document(data=None)
        self.problems: list[SpecProblem] = []
        self._active: set[int] = set()  # nodes on the current path, to stop alias cycles

    def _problem(self, pos: Pos, loc: Loc, message: str) -> None:
        self.problems.append(SpecProblem(self._file, pos.line, pos.col, format_loc(loc), message))

    def _reject(self, pos: Pos, loc: Loc, message: str) -> None:
        self._problem(pos, loc, message)
        self.doc.rejected.add(loc)  # its placeholder None must not also fail validation

    def convert(self, node: Node, loc: Loc) -> object:
        pos = _pos(node)
        self.doc.values[loc] = pos
        if not str(node.tag).startswith(_STD_TAG):
            self._reject(pos, loc, f"custom YAML tag {node.tag} is not supported")
            return None
        if id(node) in self._active:
            self._reject(pos, loc, "recursive YAML alias")
            return None
        self._active.add(id(node))
        try:
            if isinstance(node, MappingNode):
                return self._mapping(node, loc)
            if isinstance(node, SequenceNode):
                return [self.convert(item, (*loc, i)) for i, item in enumerate(node.value)]
            assert isinstance(node, ScalarNode)
            self.doc.raw[loc] = str(node.value)
            return _plain(self._yaml.constructor.construct_object(node, deep=True))
        finally:
            self._active.discard(id(node))

    def _mapping(self, node: MappingNode, loc: Loc) -> dict[str, object]:
        result: dict[str, object] = {}
        for key_node, value_node in node.value:
            key_pos = _pos(key_node)
            if key_node.tag == _STD_TAG + "merge":
                self._problem(key_pos, loc, "YAML merge keys (<<) are not supported")
                self.doc.incomplete.add(loc)  # fields it would have given are not "missing"
                continue
            if not (isinstance(key_node, ScalarNode) and key_node.tag == _STD_TAG + "str"):
                shown = key_node.value if isinstance(key_node, ScalarNode) else "?"
                self._problem(key_pos, loc, f"key {shown} must be a string; quote it")
                continue
            key = str(key_node.value)
            if key in result:
                first = self.doc.keys[(*loc, key)]
                self._problem(
                    key_pos, (*loc, key), f"duplicate key {key!r} (first at line {first.line})"
                )
                continue
            self.doc.keys[(*loc, key)] = key_pos
            result[key] = self.convert(value_node, (*loc, key))
            if value_node.tag == _STD_TAG + "null" and value_node.value == "":
                # An empty value's mark is wherever the next token starts (often the next
                # line); the key is where the user will look.
                self.doc.values[(*loc, key)] = key_pos
        return result


def format_loc(loc: Loc) -> str:
    """``("resources", "gpus")`` -> ``resources.gpus``; ``("outputs", 1)`` -> ``outputs[1]``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def read_yaml(text: str, file: str) -> tuple[Document | None, list[SpecProblem]]:
    """Parse one YAML document; ``(None, problems)`` when it is not YAML at all.

    An empty document gives a Document whose data is None. Duplicate keys and unsupported
    constructs are reported while the rest is still converted, so the caller can keep
    collecting problems.
    """
    yaml = YAML(typ="rt")  # one per call: YAML objects are not thread-safe
    try:
        with warnings.catch_warnings():
            # A reused &anchor silently shadows the first; ruamel only warns (on stderr).
            warnings.simplefilter("error", ReusedAnchorWarning)
            root = yaml.compose(text)
    except MarkedYAMLError as exc:
        said = explain(exc.problem, exc.context)
        first, second = (
            (exc.context_mark, exc.problem_mark)
            if said.at_context
            else (exc.problem_mark, exc.context_mark)
        )
        mark = first or second
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        return None, [SpecProblem(file, line, col, "", f"invalid YAML: {said.message}")]
    except ReusedAnchorWarning as exc:
        anchor = re.search(r"anchor '([^']*)'", str(exc))
        name = f"&{anchor.group(1)}" if anchor else "an anchor"
        where = re.findall(r"line (\d+), column (\d+)", str(exc))
        line, col = (int(where[-1][0]), int(where[-1][1])) if where else (1, 1)
        message = f"invalid YAML: {name} is defined twice; each anchor may be defined once"
        return None, [SpecProblem(file, line, col, "", message)]
    except YAMLError as exc:
        return None, [
            SpecProblem(file, 1, 1, "", f"invalid YAML: {explain(str(exc), None).message}")
        ]
    if root is None:
        return Document(data=None), []
    converter = _Converter(yaml, file)
    try:
        converter.doc.data = converter.convert(root, ())
    except MarkedYAMLError as exc:  # a scalar the constructor rejects, e.g. bad !!binary
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        reason = explain(exc.problem, exc.context).message
        return None, [SpecProblem(file, line, col, "", f"invalid YAML: {reason}")]
    return converter.doc, converter.problems


def read_text(path: Path) -> str:
    """A spec or policy file's text, or a :class:`SpecError` naming the file."""
    source = str(path)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError([SpecProblem(source, None, None, "", "is not UTF-8 text")]) from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise SpecError([SpecProblem(source, None, None, "", f"cannot read: {reason}")]) from None
