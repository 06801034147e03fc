"""The ``tau.yaml`` models (DESIGN 3.2).

Every model forbids unknown keys and validates strictly: YAML already gives typed values,
so coercion would only hide mistakes (``gpus: true`` is not one GPU, ``LR: 3e-4`` is a
float that would be printed back as ``0.0003``). Values the user wrote as text, such as
durations and quantities, are kept as written; properties turn them into numbers.
"""

from __future__ import annotations

import posixpath
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
)

from taugrid.spec.units import (
    CPU_HELP,
    DURATION_HELP,
    QUANTITY_HELP,
    cpu_millis,
    parse_duration,
    quantity_bytes,
)

NAME_MAX = 57  # a run id is "<name>-<5 chars>" and must fit a 63-char DNS label
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
RESERVED_ENV_PREFIX = "TAU_"
_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_DURATION_PATTERN = r"^(\d+|(\d+(\.\d+)?(ms|s|m|h|d))+)$"
_QUANTITY_PATTERN = r"^\+?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[kMGTPE]|[eE][+-]?\d+)?$"
_CPU_PATTERN = r"^\+?(\d+(\.\d*)?|\.\d+)(m|Ki|Mi|Gi|Ti|Pi|Ei|[kMGTPE]|[eE][+-]?\d+)?$"

RestartReason = Literal["error", "preemption", "hardware"]
Launcher = Literal["command", "torchrun", "ray"]
_ALL_REASONS: tuple[RestartReason, ...] = ("error", "preemption", "hardware")


def _check_name(value: str) -> str:
    if len(value) > NAME_MAX:
        raise ValueError(f"must be at most {NAME_MAX} characters (got {len(value)})")
    if not re.fullmatch(NAME_PATTERN, value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 name: lowercase letters, digits and '-', "
            "starting with a letter and ending with a letter or digit"
        )
    return value


def _check_subdomain(value: str) -> str:
    if len(value) > 253 or not re.fullmatch(_SUBDOMAIN_PATTERN, value):
        raise ValueError(
            f"{value!r} is not a valid name: lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit"
        )
    return value


def _check_env_name(value: str) -> str:
    if not re.fullmatch(ENV_NAME_PATTERN, value):
        raise ValueError("is not a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
    if value.startswith(RESERVED_ENV_PREFIX):
        raise ValueError(f"names starting with {RESERVED_ENV_PREFIX} are reserved for TauGrid")
    return value


def _check_not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _int_seconds_as_text(value: object) -> object:
    # `timeout: 90` (or "90" from --set) is seconds; store "90s" so the unit is explicit.
    if isinstance(value, str):
        return f"{int(value)}s" if value.isascii() and value.isdigit() else value
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"must not be negative; use {DURATION_HELP}")
        return f"{value}s"
    raise ValueError(f"must be {DURATION_HELP}, got {value!r}")


def _check_duration(value: str) -> str:
    parse_duration(value)
    return value


def _check_positive_duration(value: str) -> str:
    if parse_duration(value) <= 0:
        raise ValueError("must be longer than zero")
    return value


def _int_bytes_as_text(value: object) -> object:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"must be {QUANTITY_HELP}, got {value!r}")


def _check_quantity(value: str) -> str:
    quantity_bytes(value)
    return value


def _check_cpus(value: object) -> object:
    """A number of cores or a Kubernetes CPU quantity (``500m``, ``"2"``, ``1.5``), as the
    policy's ``cpu`` quotas take; more than zero. A string is kept as written, a number
    as a float (what records of before quantities hold, so their hashes stay)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        kinds = {bool: "a boolean", list: "a list", dict: "a mapping"}
        raise ValueError(f"must be {CPU_HELP}, got {kinds.get(type(value), 'null')}")
    if cpu_millis(value) <= 0:  # ValueError with the user's message for anything else
        raise ValueError(f"must be more than zero; {CPU_HELP}")
    return float(value) if isinstance(value, int) else value


def _check_relative_path(value: str) -> str:
    _check_not_blank(value)
    if value.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", value):
        raise ValueError(f"{value!r} must be a path relative to the workdir")
    if posixpath.normpath(value.replace("\\", "/")).split("/")[0] == "..":
        raise ValueError(f"{value!r} must stay inside the workdir (no '..')")
    return value


def _check_command(value: object) -> object:
    # Validated by hand rather than as `str | list[str]` so a mistake gives one clear
    # message instead of one per union branch.
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("must not be empty")
        return value
    if isinstance(value, list):
        if not value:
            raise ValueError("must not be an empty list")
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise ValueError(
                    f"item {index} must be a string, got {item!r}; quote it in a list command"
                )
        if not value[0].strip():
            raise ValueError("the program (first item) must not be empty")
        return value
    kind = "null" if value is None else type(value).__name__
    raise ValueError(f"must be a string (run with a shell) or a list of strings (argv), got {kind}")


def _text(pattern: str, max_length: int | None = None) -> WithJsonSchema:
    # The schema states the rule for editors; the validator gives the user the message.
    schema: dict[str, Any] = {"type": "string", "pattern": pattern}
    if max_length is not None:
        schema["maxLength"] = max_length
    return WithJsonSchema(schema)


RunName = Annotated[str, AfterValidator(_check_name), _text(NAME_PATTERN, NAME_MAX)]
KubeName = Annotated[str, AfterValidator(_check_subdomain), _text(_SUBDOMAIN_PATTERN, 253)]
EnvName = Annotated[str, AfterValidator(_check_env_name), _text(ENV_NAME_PATTERN)]
NonBlank = Annotated[str, AfterValidator(_check_not_blank)]
RelativePath = Annotated[str, AfterValidator(_check_relative_path)]
_DURATION_SCHEMA = {
    "anyOf": [
        {"type": "string", "pattern": _DURATION_PATTERN},
        {"type": "integer", "minimum": 0},
    ]
}
Duration = Annotated[
    str,
    BeforeValidator(_int_seconds_as_text),
    AfterValidator(_check_duration),
    WithJsonSchema(_DURATION_SCHEMA),
]
PositiveDuration = Annotated[
    str,
    BeforeValidator(_int_seconds_as_text),
    AfterValidator(_check_positive_duration),
    WithJsonSchema(_DURATION_SCHEMA),
]
Quantity = Annotated[
    str,
    BeforeValidator(_int_bytes_as_text),
    AfterValidator(_check_quantity),
    WithJsonSchema(
        {"anyOf": [{"type": "string", "pattern": _QUANTITY_PATTERN}, {"type": "integer"}]}
    ),
]
CpuAmount = Annotated[
    float | str,
    BeforeValidator(_check_cpus),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "exclusiveMinimum": 0},
                {"type": "string", "pattern": _CPU_PATTERN},
            ]
        }
    ),
]
Command = Annotated[
    str | list[str],
    BeforeValidator(_check_command),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
            ]
        }
    ),
]


# Env keys: the pattern alone would let other keys through, and TAU_ is reserved.
_ENV_KEYS_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "propertyNames": {"not": {"pattern": "^" + RESERVED_ENV_PREFIX}},
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Experiment(_Strict):
    """Experiment tracking labels."""

    name: NonBlank | None = Field(None, description="Experiment the run belongs to.")
    group: NonBlank | None = Field(None, description="Group of runs inside the experiment.")
    tags: dict[str, str] = Field(
        default_factory=dict, description="Free-form string tags; quote numbers."
    )


class Resources(_Strict):
    """Resources per node."""

    gpus: int = Field(0, ge=0, description="GPUs per node.")
    gpu_type: NonBlank | None = Field(
        None, description="GPU type (a flavor from the platform policy), e.g. h100."
    )
    cpus: CpuAmount | None = Field(
        None, description=f"CPU cores per node: {CPU_HELP}; the scheduler counts millicores."
    )
    memory: Quantity | None = Field(None, description=f"Memory per node: {QUANTITY_HELP}.")
    disk: Quantity | None = Field(
        None,
        description="Disk space the run's files may take (workdir, checkpoints, outputs, "
        f"logs): {QUANTITY_HELP}. Over it the run is stopped (reason DiskLimitExceeded).",
    )
    procs_per_node: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="Processes per node for launcher: torchrun; default: one per GPU, or 1.",
    )

    @property
    def cpus_millis(self) -> int | None:
        """Millicores, as the scheduler and the policy's ``cpu`` quotas count."""
        return None if self.cpus is None else cpu_millis(self.cpus)

    @property
    def memory_bytes(self) -> int | None:
        return None if self.memory is None else quantity_bytes(self.memory)

    @property
    def disk_bytes(self) -> int | None:
        return None if self.disk is None else quantity_bytes(self.disk)


class Checkpoint(_Strict):
    """Checkpoint retention; checkpoints go to $TAU_CHECKPOINT_DIR."""

    keep: int = Field(3, ge=1, description="How many checkpoints to keep; older are pruned.")


class Restart(_Strict):
    """Automatic restart after a failure, resuming from the last good checkpoint."""

    max: int = Field(0, ge=0, description="Automatic restarts allowed; 0 disables them.")
    on: list[RestartReason] = Field(
        default_factory=lambda: list(_ALL_REASONS),
        description="Failures that trigger an automatic restart.",
    )
    backoff: Duration = Field("30s", description=f"Wait before restarting: {DURATION_HELP}.")

    @property
    def backoff_seconds(self) -> float:
        return parse_duration(self.backoff)


class TauSpec(_Strict):
    """A TauGrid workload: what to run, with what, and how to treat it."""

    model_config = ConfigDict(title="tau.yaml")

    name: RunName | None = Field(
        None,
        description=(
            f"Run name (DNS-1123, at most {NAME_MAX} chars); becomes part of the run id. "
            "Default: the spec file's directory name."
        ),
    )
    workspace: KubeName = Field("default", description="Workspace the run belongs to.")
    queue: KubeName | None = Field(
        None,
        description="Queue in the workspace. Default: the workspace's default_queue in the "
        "policy in force (the server fills it in; `default` under the built-in policy).",
    )
    priority: KubeName | None = Field(
        None, description="Priority class from the platform policy; default: the policy's."
    )
    experiment: Experiment | None = Field(None, description="Experiment tracking labels.")
    workdir: NonBlank = Field(
        ".", description="Code snapshot root, relative to the spec file; must exist."
    )
    exclude: list[NonBlank] = Field(
        default_factory=list,
        description="Patterns left out of the snapshot, on top of .gitignore and .tauignore.",
    )
    image: NonBlank | None = Field(
        None, description="Container image (cluster mode; local mode uses your environment)."
    )
    setup: NonBlank | None = Field(None, description="Shell command run before `command`.")
    command: Command = Field(
        description="What to run: a string (run with a shell) or a list of strings (argv)."
    )
    env: dict[EnvName, str] = Field(
        default_factory=dict,
        description="Environment variables; values are strings (quote numbers and booleans).",
        json_schema_extra=_ENV_KEYS_SCHEMA,
    )
    secrets: dict[EnvName, NonBlank] = Field(
        default_factory=dict,
        description="Environment variable name -> secret reference; never stored in clear.",
        json_schema_extra=_ENV_KEYS_SCHEMA,
    )
    resources: Resources = Field(default_factory=Resources, description="Resources per node.")
    nodes: int = Field(1, ge=1, description="Number of nodes.")
    launcher: Launcher = Field(
        "command", description="How the command starts: command, torchrun or ray."
    )
    checkpoint: Checkpoint = Field(
        default_factory=Checkpoint,
        description="Checkpoint retention; write checkpoints to $TAU_CHECKPOINT_DIR.",
    )
    restart: Restart = Field(default_factory=Restart, description="Automatic restart policy.")
    stop_grace: Duration = Field(
        "60s", description=f"Time between SIGTERM and SIGKILL: {DURATION_HELP}."
    )
    timeout: PositiveDuration | None = Field(
        None, description=f"Stop the run after this long: {DURATION_HELP}."
    )
    outputs: list[RelativePath] = Field(
        default_factory=list,
        description="Paths relative to the workdir collected as artifacts.",
    )

    @property
    def uses_shell(self) -> bool:
        """True when ``command`` is a string, run with ``sh -c``."""
        return isinstance(self.command, str)

    @property
    def stop_grace_seconds(self) -> float:
        return parse_duration(self.stop_grace)

    @property
    def timeout_seconds(self) -> float | None:
        return None if self.timeout is None else parse_duration(self.timeout)


def cross_field_problems(spec: TauSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """Problems that involve two fields, as (path, message); the loader adds positions."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    for name in spec.secrets:
        if name in spec.env:
            problems.append((("secrets", name), f"{name!r} is also set in env; keep one"))
    return problems
