"""Strict offline validation of rendered Kubernetes objects (no cluster needed).

Custom resources are checked against the ``openAPIV3Schema`` of the matching version of
their CustomResourceDefinition, made strict the way ``kubectl --validate=strict`` is
(shared/reference/kubernetes-testing.md §2):

- objects that list ``properties`` reject unknown fields, unless the schema keeps unknown
  fields (``x-kubernetes-preserve-unknown-fields``);
- ``nullable`` admits null, ``x-kubernetes-int-or-string`` admits both, ``int32`` and
  ``int64`` formats are range-checked;
- ``apiVersion`` and ``kind`` are pinned; ``metadata`` is a strict subset of ObjectMeta
  with a required name, valid label keys and values, and a namespace exactly when the
  kind is namespaced;
- ``x-kubernetes-list-type`` ``map`` and ``set`` lists must not repeat keys or items;
- every ``x-kubernetes-validations`` CEL rule is evaluated with cel-python where its node
  is present, with ``self`` bound to that node, after the schema defaults have been
  applied as the API server does. Transition rules (``oldSelf``) are not evaluated: the
  API server runs them only on update. Rules calling functions cel-python lacks (the
  Kubernetes CEL libraries: ``quantity``, ``isSorted``, ``url``, ...) are not evaluated
  either; :attr:`CrdValidator.skipped` says which and why, for tests to report.

Built-in kinds go to kubernetes-validate (strict, bundled schemas, no network).
Reusable for any CRD: Kueue today, KubeRay and JobSet later.
"""

from __future__ import annotations

import copy
import functools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import yaml

from servicecheck import require_service

K8S_VERSION = "1.32"
_REPO = Path(__file__).resolve().parents[1]


def _schemas_dir() -> Path:
    """The upstream schemas: TAU_K8S_SCHEMAS, else shared/k8s-schemas beside or inside the
    repository (a user's clone has neither; tests that need them then skip, CI fails)."""
    if os.environ.get("TAU_K8S_SCHEMAS"):
        return Path(os.environ["TAU_K8S_SCHEMAS"])
    found = (p / "k8s-schemas" for p in (_REPO / "shared", _REPO.parent / "shared"))
    return next((p for p in found if p.is_dir()), _REPO.parent / "shared" / "k8s-schemas")


SCHEMAS = _schemas_dir()


def require_schemas() -> None:
    require_service(
        (SCHEMAS / "kueue").is_dir(),
        f"the upstream Kubernetes schemas are not at {SCHEMAS} "
        "(set TAU_K8S_SCHEMAS to a copy of shared/k8s-schemas)",
    )


# CEL macros and the functions cel-python provides; any other call is a Kubernetes
# extension (or a typo) that cel-python cannot evaluate.
_CEL_MACROS = {"has", "all", "exists", "exists_one", "map", "filter"}
_CEL_SUPPORTED = _CEL_MACROS | {
    name for name in celpy.evaluation.base_functions if name[:1].isalpha()
}
_CALL = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(")
_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")

_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_OBJECT_META: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "maxLength": 253, "pattern": f"^{_DNS_SUBDOMAIN}$"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string", "maxLength": 63, "pattern": f"^{_DNS_LABEL}$"},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
        "ownerReferences": {"type": "array", "items": {"type": "object"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
    },
    "anyOf": [{"required": ["name"]}, {"required": ["generateName"]}],
}

_FORMATS = jsonschema.FormatChecker(formats=())


@_FORMATS.checks("int32")
def _int32(value: object) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


@_FORMATS.checks("int64")
def _int64(value: object) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


def cel_functions(rule: str) -> set[str]:
    """Names of the functions and macros a CEL rule calls (string literals ignored)."""
    return set(_CALL.findall(_STRING.sub("''", rule)))


def skip_reason(rule: str) -> str | None:
    """Why a rule is not evaluated offline, or None when it is."""
    if re.search(r"\boldSelf\b", _STRING.sub("''", rule)):
        return "transition rule (oldSelf): the API server evaluates it only on update"
    missing = sorted(cel_functions(rule) - _CEL_SUPPORTED)
    if missing:
        return f"uses {', '.join(missing)}, which cel-python lacks"
    return None


def _tighten(node: Any) -> Any:
    """A CRD structural schema as a strict JSON Schema (in place)."""
    if isinstance(node, dict):
        if node.get("nullable") and "type" in node:
            node["type"] = [node["type"], "null"]
        if node.get("x-kubernetes-int-or-string") and "anyOf" not in node:
            node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        if (
            node.get("type") == "object"
            and "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        for value in node.values():
            _tighten(value)
    elif isinstance(node, list):
        for value in node:
            _tighten(value)
    return node


def _apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Fill schema defaults into a copy of ``value``, as the API server does on create."""
    if isinstance(value, dict):
        props = schema.get("properties", {})
        out = dict(value)
        for key, sub in props.items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
        for key, item in out.items():
            sub = props.get(key)
            if sub is None and isinstance(schema.get("additionalProperties"), dict):
                sub = schema["additionalProperties"]
            if sub is not None:
                out[key] = _apply_defaults(sub, item)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_apply_defaults(schema["items"], item) for item in value]
    return value


def _where(path: tuple[str | int, ...]) -> str:
    return ".".join(str(p) for p in path) or "<root>"


@dataclass
class CrdValidator:
    """Validates objects of one version of one CRD; keeps which CEL rules ran."""

    crd: dict[str, Any]
    version: str
    skipped: dict[str, str] = field(default_factory=dict)  # rule -> why not evaluated
    evaluated: set[str] = field(default_factory=set)  # rules evaluated at least once

    def __post_init__(self) -> None:
        spec = self.crd["spec"]
        versions = {v["name"]: v for v in spec["versions"]}
        if self.version not in versions:
            raise ValueError(f"{spec['names']['kind']} has no version {self.version}")
        self.kind = spec["names"]["kind"]
        self.namespaced = spec["scope"] == "Namespaced"
        self.raw_schema: dict[str, Any] = versions[self.version]["schema"]["openAPIV3Schema"]
        strict = _tighten(copy.deepcopy(self.raw_schema))
        props = strict.setdefault("properties", {})
        props["apiVersion"] = {"const": f"{spec['group']}/{self.version}"}
        props["kind"] = {"const": self.kind}
        props["metadata"] = copy.deepcopy(_OBJECT_META)
        strict["required"] = sorted({*strict.get("required", []), "apiVersion", "kind", "metadata"})
        strict["additionalProperties"] = False
        self._schema = jsonschema.Draft202012Validator(strict, format_checker=_FORMATS)
        self._programs: dict[str, Any] = {}
        self._env = celpy.Environment()
        for _, rule in self.rules():
            reason = skip_reason(rule["rule"])
            if reason is None:
                try:
                    self._programs[rule["rule"]] = self._env.program(
                        self._env.compile(rule["rule"])
                    )
                except celpy.CELParseError as exc:
                    reason = f"cel-python cannot parse it: {exc}"
            if reason is not None:
                self.skipped[rule["rule"]] = reason

    def rules(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every CEL rule in the schema, with the schema path it sits at."""

        def walk(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
            if isinstance(node, dict):
                for rule in node.get("x-kubernetes-validations", []):
                    yield path or "<root>", rule
                for key, value in node.items():
                    if key != "x-kubernetes-validations":
                        yield from walk(value, f"{path}/{key}")
            elif isinstance(node, list):
                for i, value in enumerate(node):
                    yield from walk(value, f"{path}[{i}]")

        yield from walk(self.raw_schema, "")

    def validate(self, obj: dict[str, Any]) -> list[str]:
        errors = [
            f"{_where(tuple(e.absolute_path))}: {e.message}"
            for e in sorted(self._schema.iter_errors(obj), key=lambda e: list(map(str, e.path)))
        ]
        errors += self._metadata(obj.get("metadata"))
        if not errors:  # CEL assumes a structurally valid object, as the API server does
            self._walk(self.raw_schema, _apply_defaults(self.raw_schema, obj), (), errors)
        return errors

    def _metadata(self, meta: object) -> list[str]:
        if not isinstance(meta, dict):
            return []
        errors = []
        if self.namespaced and "namespace" not in meta:
            errors.append(f"metadata.namespace: required: {self.kind} is namespaced")
        if not self.namespaced and "namespace" in meta:
            errors.append(f"metadata.namespace: {self.kind} is cluster-scoped")
        for kind in ("labels", "annotations"):
            for key, value in (meta.get(kind) or {}).items():
                errors += [f"metadata.{kind}.{key}: {p}" for p in label_problems(key, value, kind)]
        return errors

    def _walk(
        self, schema: dict[str, Any], value: Any, path: tuple[str | int, ...], errors: list[str]
    ) -> None:
        for rule in schema.get("x-kubernetes-validations", []):
            self._evaluate(rule, value, path, errors)
        if isinstance(value, dict):
            props = schema.get("properties", {})
            extra = schema.get("additionalProperties")
            for key, item in value.items():
                sub = props.get(key, extra if isinstance(extra, dict) else None)
                if sub is not None:
                    self._walk(sub, item, (*path, key), errors)
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            errors += _list_type_problems(schema, value, path)
            for i, item in enumerate(value):
                self._walk(schema["items"], item, (*path, i), errors)

    def _evaluate(
        self, rule: dict[str, Any], value: Any, path: tuple[str | int, ...], errors: list[str]
    ) -> None:
        program = self._programs.get(rule["rule"])
        if program is None:
            return
        message = rule.get("message") or f"failed rule: {rule['rule']}"
        try:
            result = program.evaluate({"self": celpy.json_to_cel(value)})
        except celpy.CELEvalError as exc:
            result = exc
        if isinstance(result, celpy.CELEvalError):
            text = str(result.args[0]).split(" (in activation")[0]
            if text.startswith("undeclared reference to"):  # a function we did not spot
                self.skipped[rule["rule"]] = f"cel-python: {text}"
                return
            errors.append(f"{_where(path)}: {message} (rule could not be evaluated: {text})")
        elif not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            errors.append(f"{_where(path)}: {message} (rule: {rule['rule']})")
        self.evaluated.add(rule["rule"])


def label_problems(key: str, value: str, kind: str = "labels") -> list[str]:
    """What is wrong with one label (or annotation) key and value, by Kubernetes rules."""
    problems = []
    prefix, _, name = key.rpartition("/")
    if (
        len(name) > 63
        or not re.fullmatch(_LABEL_NAME, name)
        or (prefix and (len(prefix) > 253 or not re.fullmatch(_DNS_SUBDOMAIN, prefix)))
    ):
        problems.append(f"invalid key {key!r}")
    if kind == "labels" and (len(value) > 63 or not re.fullmatch(f"({_LABEL_NAME})?", value)):
        problems.append(f"invalid label value {value!r}")
    return problems


def _list_type_problems(
    schema: dict[str, Any], value: list[Any], path: tuple[str | int, ...]
) -> list[str]:
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys", [])
        seen = [tuple(item.get(k) for k in keys) for item in value if isinstance(item, dict)]
    elif list_type == "set":
        seen = [repr(item) for item in value]
    else:
        return []
    dupes = sorted({repr(k) for k in seen if seen.count(k) > 1})
    return (
        [f"{_where(path)}: duplicate entries {', '.join(dupes)} in a {list_type} list"]
        if dupes
        else []
    )


@functools.cache
def load_crd(path: str) -> dict[str, Any]:
    require_schemas()
    with open(path, encoding="utf-8") as f:
        crd: dict[str, Any] = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return crd


@functools.cache
def validator_for(crd_path: str, version: str) -> CrdValidator:
    return CrdValidator(load_crd(crd_path), version)


def validate_custom_resource(crd_path: Path | str, obj: dict[str, Any]) -> list[str]:
    """Every problem with ``obj`` against the CRD at ``crd_path`` (empty when valid).

    The CRD version is the one ``obj``'s apiVersion names.
    """
    version = str(obj.get("apiVersion", "")).rpartition("/")[2]
    return validator_for(str(crd_path), version).validate(obj)


@functools.cache
def _crd_index(directory: str) -> dict[tuple[str, str], str]:
    require_schemas()
    index = {}
    for path in sorted(Path(directory).glob("*.yaml")):
        spec = load_crd(str(path))["spec"]
        index[(spec["group"], spec["names"]["kind"])] = str(path)
    return index


def crd_path_for(obj: dict[str, Any], directory: Path | str) -> str | None:
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    return _crd_index(str(directory)).get((group, str(obj.get("kind"))))


def validate_builtin(obj: dict[str, Any], k8s_version: str = K8S_VERSION) -> list[str]:
    """kubernetes-validate, strict, for built-in kinds (it reports the first problem)."""
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    if "." in group:  # kubernetes-validate passes unknown kinds silently: never send a CR
        return [f"{obj.get('apiVersion')} {obj.get('kind')} is not a built-in kind"]
    try:
        kubernetes_validate.validate(obj, k8s_version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{_where(tuple(exc.path))}: {exc.message}"]
    errors = []
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    pattern = _DNS_LABEL if obj.get("kind") == "Namespace" else _DNS_SUBDOMAIN
    if not re.fullmatch(pattern, name) or len(name) > (63 if pattern == _DNS_LABEL else 253):
        errors.append(f"metadata.name: {name!r} is not a valid {obj.get('kind')} name")
    for kind in ("labels", "annotations"):
        for key, value in (meta.get(kind) or {}).items():
            errors += [f"metadata.{kind}.{key}: {p}" for p in label_problems(key, value, kind)]
    return errors


def validate_object(obj: dict[str, Any], crd_dirs: tuple[Path, ...]) -> list[str]:
    """A custom resource against its CRD from ``crd_dirs``; anything else as built-in."""
    for directory in crd_dirs:
        path = crd_path_for(obj, directory)
        if path is not None:
            return validate_custom_resource(path, obj)
    return validate_builtin(obj)
