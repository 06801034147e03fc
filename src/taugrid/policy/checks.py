"""Checks that span entries of a policy: names, references, and limits against cohorts.

They run on the raw YAML data, not on the validated models, so they still run when some
field elsewhere is malformed and the platform team sees every problem at once. Entries
of the wrong shape are skipped here: the model validation reports them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from taugrid.domain.quota import RESOURCES, Resource
from taugrid.policy.quantities import cpu_millis, memory_bytes
from taugrid.spec.paths import did_you_mean
from taugrid.spec.yamlsrc import Loc

Problem = tuple[Loc, str, bool]  # where, message, whether to point at the key
LineOf = Callable[[Loc], int | None]

LIMITS = ("borrowing_limit", "lending_limit")


def _entries(value: object) -> list[tuple[int, dict[str, Any]]]:
    if not isinstance(value, list):
        return []
    return [(i, item) for i, item in enumerate(value) if isinstance(item, dict)]


def _text(entry: dict[str, Any], key: str) -> str | None:
    value = entry.get(key)
    return value if isinstance(value, str) else None


def amount(resource: Resource, value: object) -> int | None:
    """The integer amount of a raw quota value, or None when it is malformed."""
    try:
        if resource == "gpu":
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
        elif resource == "cpu" and isinstance(value, (str, int, float)):
            return cpu_millis(value)
        elif resource == "memory" and isinstance(value, (str, int)):
            return memory_bytes(value)
    except ValueError:
        pass
    return None


def unknown(what: str, name: str, known: Iterable[str], section: str) -> str:
    options = list(dict.fromkeys(known))
    if not options:
        return f"unknown {what} {name!r}; none is declared under {section}:"
    return f"unknown {what} {name!r}{did_you_mean(name, options)} ({section}: {', '.join(options)})"


class _Checker:
    def __init__(self, data: dict[str, Any], line_of: LineOf) -> None:
        self.data = data
        self.line_of = line_of
        self.problems: list[Problem] = []

    def add(self, loc: Loc, message: str, *, on_key: bool = False) -> None:
        self.problems.append((loc, message, on_key))

    def first(self, loc: Loc) -> str:
        line = self.line_of(loc)
        return f"line {line}" if line is not None else "above"

    def names(self, section: Loc, entries: list[tuple[int, dict[str, Any]]], what: str) -> None:
        """Report every repeated name in one list; the first occurrence wins."""
        seen: dict[str, Loc] = {}
        for i, entry in entries:
            name = _text(entry, "name")
            if name is None:
                continue
            if name in seen:
                first = seen[name]
                self.add(
                    (*section, i, "name"),
                    f"duplicate {what} {name!r} (first at {self.first(first)})",
                )
            else:
                seen[name] = (*section, i, "name")

    def run(self) -> list[Problem]:
        flavors = _entries(self.data.get("flavors"))
        cohorts = _entries(self.data.get("cohorts"))
        queues = _entries(self.data.get("cluster_queues"))
        self.names(("flavors",), flavors, "flavor")
        self.names(("cohorts",), cohorts, "cohort")
        self.queue_names(queues)
        flavor_names = [n for _, e in flavors if (n := _text(e, "name")) is not None]
        cohort_names = [n for _, e in cohorts if (n := _text(e, "name")) is not None]
        for i, queue in queues:
            self.queue(i, queue, flavor_names, cohort_names)
        queue_names = [n for _, e in queues if (n := _text(e, "name")) is not None]
        self.workspaces(queue_names)
        self.priorities()
        return self.problems

    def queue_names(self, queues: list[tuple[int, dict[str, Any]]]) -> None:
        seen: dict[str, tuple[Loc, object]] = {}
        for i, queue in queues:
            name = _text(queue, "name")
            if name is None:
                continue
            cohort = queue.get("cohort")
            if name not in seen:
                seen[name] = (("cluster_queues", i, "name"), cohort)
                continue
            first, first_cohort = seen[name]
            if cohort != first_cohort:
                self.add(
                    ("cluster_queues", i, "name"),
                    f"cluster queue {name!r} is declared twice with different cohorts "
                    f"({_cohort_text(first_cohort)} at {self.first(first)}, "
                    f"{_cohort_text(cohort)} here); a queue belongs to one cohort",
                )
            else:
                self.add(
                    ("cluster_queues", i, "name"),
                    f"duplicate cluster queue {name!r} (first at {self.first(first)})",
                )

    def queue(
        self, i: int, queue: dict[str, Any], flavor_names: list[str], cohort_names: list[str]
    ) -> None:
        base: Loc = ("cluster_queues", i)
        name = _text(queue, "name") or f"#{i + 1}"
        cohort = queue.get("cohort")
        if isinstance(cohort, str) and cohort not in cohort_names:
            self.add((*base, "cohort"), unknown("cohort", cohort, cohort_names, "cohorts"))
        seen: dict[str, Loc] = {}
        covered: list[tuple[int, str | None, tuple[Resource, ...]]] = []
        for j, entry in _entries(queue.get("resources")):
            where: Loc = (*base, "resources", j)
            flavor = _text(entry, "flavor")
            if flavor is not None:
                if flavor not in flavor_names:
                    self.add((*where, "flavor"), unknown("flavor", flavor, flavor_names, "flavors"))
                if flavor in seen:
                    self.add(
                        (*where, "flavor"),
                        f"flavor {flavor!r} is listed twice in cluster queue {name!r} "
                        f"(first at {self.first(seen[flavor])})",
                    )
                else:
                    seen[flavor] = (*where, "flavor")
            quotas = entry.get("quotas")
            if not isinstance(quotas, dict):
                continue
            present = tuple(r for r in RESOURCES if quotas.get(r) is not None)
            if present:
                covered.append((j, flavor, present))
            for resource in present:
                self.quota((*where, "quotas", resource), resource, quotas[resource], cohort, name)
        self.same_resources(base, name, covered)

    def quota(self, loc: Loc, resource: Resource, raw: object, cohort: object, queue: str) -> None:
        if not isinstance(raw, dict):
            return  # a bare amount: nominal only
        if cohort is None:
            for limit in LIMITS:
                if raw.get(limit) is not None:
                    verb = "borrow from" if limit == "borrowing_limit" else "lend to"
                    self.add(
                        (*loc, limit),
                        f"{limit} needs a cohort: cluster queue {queue!r} has no cohort to "
                        f"{verb} (set its cohort, or remove the limit)",
                    )
        nominal = amount(resource, raw.get("nominal"))
        lending = amount(resource, raw.get("lending_limit"))
        if nominal is not None and lending is not None and lending > nominal:
            self.add(
                (*loc, "lending_limit"),
                f"lending_limit {raw['lending_limit']} is above the nominal quota "
                f"{raw['nominal']}; a queue can lend at most what it holds",
            )

    def same_resources(
        self, base: Loc, queue: str, covered: list[tuple[int, str | None, tuple[Resource, ...]]]
    ) -> None:
        union = {r for _, _, present in covered for r in present}
        for j, flavor, present in covered:
            missing = [r for r in RESOURCES if r in union and r not in present]
            if not missing:
                continue
            shown = " or ".join(missing)
            label = repr(flavor) if flavor is not None else f"#{j + 1}"
            self.add(
                (*base, "resources", j, "quotas"),
                f"flavor {label} sets no {shown} quota but other flavors of cluster queue "
                f"{queue!r} do; Kueue needs every flavor of a queue to cover the same "
                f"resources (write {missing[0]}: 0)",
            )

    def workspaces(self, queue_names: list[str]) -> None:
        workspaces = _entries(self.data.get("workspaces"))
        self.names(("workspaces",), workspaces, "workspace")
        for i, workspace in workspaces:
            base: Loc = ("workspaces", i)
            locals_ = _entries(workspace.get("local_queues"))
            self.names((*base, "local_queues"), locals_, "local queue")
            for j, local in locals_:
                target = _text(local, "cluster_queue")
                if target is not None and target not in queue_names:
                    self.add(
                        (*base, "local_queues", j, "cluster_queue"),
                        unknown("cluster queue", target, queue_names, "cluster_queues"),
                    )
            default = _text(workspace, "default_queue")
            local_names = [n for _, e in locals_ if (n := _text(e, "name")) is not None]
            if default is not None and local_names and default not in local_names:
                self.add(
                    (*base, "default_queue"),
                    unknown("local queue", default, local_names, "local_queues"),
                )

    def priorities(self) -> None:
        raw = self.data.get("priority_classes")
        classes = _entries(raw)
        self.names(("priority_classes",), classes, "priority class")
        if not classes:
            return  # absent: the standard classes; empty or malformed: the models say so
        defaults = [(i, e) for i, e in classes if e.get("default") is True]
        if not defaults:
            self.add(
                ("priority_classes",),
                "no priority class is the default; mark exactly one with `default: true`",
                on_key=True,
            )
        first_i, first = defaults[0] if defaults else (0, {})
        for i, _ in defaults[1:]:
            self.add(
                ("priority_classes", i, "default"),
                f"only one priority class can be the default; {_text(first, 'name')!r} "
                f"({self.first(('priority_classes', first_i, 'default'))}) already is",
            )


def _cohort_text(cohort: object) -> str:
    return f"cohort {cohort!r}" if isinstance(cohort, str) else "no cohort"


def cross_problems(data: dict[str, Any], line_of: LineOf) -> list[Problem]:
    """Every problem that involves more than one field of the policy's raw data."""
    return _Checker(data, line_of).run()
