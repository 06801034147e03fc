"""CLI contexts, like kubeconfig: which server ``tau`` talks to, with which token.

``~/.config/tau/config.yaml`` (``$XDG_CONFIG_HOME/tau``, or the file named by
``TAU_CONFIG``) holds named contexts and the current one::

    current-context: lab
    contexts:
      - name: lab
        server: https://gpu-box.lab:8443
        token: tau_xxx
        workspace: vision

The context ``local`` (the local server in ``$TAU_HOME``, started on demand) always
exists and is used when nothing else is selected. Precedence, first wins:
``TAU_SERVER`` (alias ``TAU_SERVER_URL``) with ``TAU_TOKEN``; ``tau --context NAME``;
``TAU_CONTEXT``; ``current-context`` in the file; ``local``.

Start-up budget: :func:`select` runs on every command, and ruamel.yaml costs ~30 ms, a
third of ``tau status`` (~90 ms). So every write of the YAML also writes ``config.json``
next to it (0600 too): the parsed contexts and the YAML text they came from. Reading
takes the JSON while that text matches the YAML byte for byte, and parses the YAML (and
refreshes the JSON) only after a hand edit. No file, ``--context local`` or a selection
by environment read nothing. Named tuples, not dataclasses: a dataclass costs ~1 ms to
define.
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from taugrid.errors import NotFound, UsageError

LOCAL = "local"
CACHE_VERSION = 1
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
CONTEXT_KEYS = ("name", "server", "token", "workspace")
TOP_KEYS = ("current-context", "contexts")

T = TypeVar("T")


class ConfigError(UsageError):
    """The config file cannot be read or is not a valid config (exit 2)."""


class Context(NamedTuple):
    name: str
    server: str | None = None  # None: the local server in $TAU_HOME
    token: str | None = None
    workspace: str | None = None

    @property
    def is_local(self) -> bool:
        return self.server is None

    def __repr__(self) -> str:  # never the token, not even in a traceback
        token = "..." if self.token else None
        return (
            f"Context(name={self.name!r}, server={self.server!r}, token={token}, "
            f"workspace={self.workspace!r})"
        )


LOCAL_CONTEXT = Context(LOCAL)


class Config(NamedTuple):
    current: str | None = None
    contexts: tuple[Context, ...] = ()  # from the file; ``local`` is implicit

    def get(self, name: str) -> Context | None:
        if name == LOCAL:
            return LOCAL_CONTEXT
        return next((c for c in self.contexts if c.name == name), None)

    def names(self) -> list[str]:
        return [LOCAL, *(c.name for c in self.contexts)]

    def all(self) -> list[Context]:
        return [LOCAL_CONTEXT, *self.contexts]


class Selection(NamedTuple):
    """The context commands use now, and what chose it (for ``tau context show``)."""

    context: Context
    source: str  # "TAU_SERVER", "--context", "TAU_CONTEXT", "current-context" or "default"


# -- where ---------------------------------------------------------------------------------
def config_path() -> Path:
    explicit = os.environ.get("TAU_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    return default_dir() / "config.yaml"


def default_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tau"


def cache_path(path: Path) -> Path:
    """``config.json`` beside ``config.yaml`` (never the YAML itself)."""
    cache = path.with_suffix(".json")
    return cache if cache != path else path.with_name(path.name + ".cache.json")


# -- selection (the hot path) --------------------------------------------------------------
def select(option: str | None = None) -> Selection:
    """The context in force, by the precedence in the module docstring.

    ``option`` is the global ``--context NAME``. Unknown names raise NotFound (exit 5)
    naming the known ones.
    """
    server = os.environ.get("TAU_SERVER") or os.environ.get("TAU_SERVER_URL")
    if server:
        env = Context("(environment)", server=server, token=os.environ.get("TAU_TOKEN"))
        return Selection(env, "TAU_SERVER")
    for name, source in ((option, "--context"), (os.environ.get("TAU_CONTEXT"), "TAU_CONTEXT")):
        if name:
            if name == LOCAL:  # needs no file
                return Selection(LOCAL_CONTEXT, source)
            return Selection(lookup(load(), name, source), source)
    config = load()
    if config.current:
        return Selection(lookup(config, config.current, "current-context"), "current-context")
    return Selection(LOCAL_CONTEXT, "default")


def overriding_variable() -> str | None:
    """The environment variable, if any, that selects over the file's current context."""
    for var in ("TAU_SERVER", "TAU_SERVER_URL", "TAU_CONTEXT"):
        if os.environ.get(var):
            return var
    return None


def lookup(config: Config, name: str, source: str | None = None) -> Context:
    ctx = config.get(name)
    if ctx is None:
        where = f" (from {source})" if source else ""
        raise NotFound(
            f"no context {name!r}{where}; known contexts: {', '.join(config.names())} "
            f"(in {config_path()})"
        )
    return ctx


# -- reading -------------------------------------------------------------------------------
def load(path: Path | None = None) -> Config:
    """The config at ``path`` (default :func:`config_path`); empty when there is none."""
    path = path or config_path()
    text = _read_text(path)
    if text is None:
        return Config()
    config = _read_cache(path, text)
    if config is None:
        config = parse(text, path)
        with suppress(OSError):  # best effort: a read-only config still works, only slower
            _atomic_write(cache_path(path), _cache_text(text, config))
    if any(c.token for c in config.contexts):
        _warn_if_shared(path)
    return config


def _warn_if_shared(path: Path) -> None:
    """Tokens in a file others can read are everybody's tokens: say so (as ssh does)."""
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        return
    if mode & 0o077:
        sys.stderr.write(
            f"tau: warning: {path} holds API tokens and is open to other users "
            f"(mode {mode:04o}); run: chmod 600 {path}\n"
        )


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the tau config {path}: {exc}") from exc


def _read_cache(path: Path, text: str) -> Config | None:
    try:
        data = json.loads(cache_path(path).read_text(encoding="utf-8"))
        if data.get("version") != CACHE_VERSION or data.get("yaml") != text:
            return None
        return Config(
            current=data["current"],
            contexts=tuple(Context(**c) for c in data["contexts"]),
        )
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _cache_text(text: str, config: Config) -> str:
    data = {
        "version": CACHE_VERSION,
        "note": "cache of the YAML below for fast start-up; edit the YAML, not this",
        "yaml": text,
        "current": config.current,
        "contexts": [
            {"name": c.name, "server": c.server, "token": c.token, "workspace": c.workspace}
            for c in config.contexts
        ],
    }
    return json.dumps(data, indent=2) + "\n"


def parse(text: str, path: Path) -> Config:
    """Validate the YAML text of a config; problems are reported as ``file:line:col``."""
    return _to_config(_load_document(text, path), path)


def _load_document(text: str, path: Path) -> Any:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    try:
        return YAML(typ="rt").load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {exc.problem or exc.context}") from exc
    except YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from exc


def _where(path: Path, node: Any, key: str | None = None) -> str:
    """``path:line:col`` of a mapping (or of one of its keys) when ruamel recorded it."""
    try:
        line, col = node.lc.key(key) if key is not None else (node.lc.line, node.lc.col)
        return f"{path}:{line + 1}:{col + 1}"
    except (AttributeError, KeyError, TypeError):
        return str(path)


def _to_config(doc: Any, path: Path) -> Config:
    if doc is None:
        return Config()
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a mapping with current-context and contexts")
    for key in doc:
        if key not in TOP_KEYS:
            raise ConfigError(
                f"{_where(path, doc, key)}: unknown key {key!r} (expected: {', '.join(TOP_KEYS)})"
            )
    entries = doc.get("contexts") or []
    if not isinstance(entries, list):
        raise ConfigError(f"{_where(path, doc, 'contexts')}: contexts must be a list")
    contexts: list[Context] = []
    for entry in entries:
        ctx = _to_context(entry, path)
        if ctx.name in (LOCAL, *(c.name for c in contexts)):
            why = "is built in" if ctx.name == LOCAL else "is defined twice"
            raise ConfigError(f"{_where(path, entry)}: context {ctx.name!r} {why}")
        contexts.append(ctx)
    current = doc.get("current-context")
    if current is not None and not isinstance(current, str):
        raise ConfigError(f"{_where(path, doc, 'current-context')}: must be a context name")
    config = Config(current or None, tuple(contexts))
    if config.current and config.get(config.current) is None:
        raise ConfigError(
            f"{_where(path, doc, 'current-context')}: current-context {config.current!r} is "
            f"not a context here; known: {', '.join(config.names())}"
        )
    return config


def _to_context(entry: Any, path: Path) -> Context:
    if not isinstance(entry, dict):
        raise ConfigError(f"{_where(path, entry)}: each context must be a mapping")
    for key in entry:
        if key not in CONTEXT_KEYS:
            raise ConfigError(
                f"{_where(path, entry, key)}: unknown key {key!r} in a context "
                f"(expected: {', '.join(CONTEXT_KEYS)})"
            )
    values: dict[str, str | None] = {}
    for key in CONTEXT_KEYS:
        value = entry.get(key)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{_where(path, entry, key)}: {key} must be a string")
        values[key] = value or None
    try:
        name = check_name(values["name"] or "")
        if values["server"] is None:
            raise UsageError(f"context {name!r} has no server")
        server = check_server(values["server"])
        token = check_token(values["token"]) if values["token"] is not None else None
    except UsageError as exc:
        raise ConfigError(f"{_where(path, entry)}: {exc.message}") from exc
    return Context(name, server, token, values["workspace"])


# -- checks (shared with tau login) --------------------------------------------------------
def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise UsageError(
            f"invalid context name {name!r}: letters, digits, '.', '_' and '-', "
            "starting with a letter or digit, at most 63 characters"
        )
    return name


def check_server(url: str) -> str:
    """``scheme://host[:port]``, the form the client uses; returns it without a final /."""
    bad = UsageError(f"invalid server URL {url!r}: expected https://HOST[:PORT] (or http://)")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # raises ValueError when it is not a number in range
    except ValueError:
        raise bad from None
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or port == 0
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or "@" in parts.netloc
    ):
        raise bad
    return f"{parts.scheme}://{parts.netloc}"


def check_token(token: str) -> str:
    """A token goes into an HTTP header verbatim: printable ASCII without spaces."""
    if not token or not token.isascii() or not token.isprintable() or " " in token:
        raise UsageError("invalid API token: expected printable ASCII without spaces")
    return token


# -- writing -------------------------------------------------------------------------------
def save_context(ctx: Context, *, make_current: bool = True) -> None:
    """Add the context, or update the one of that name (its comments stay)."""
    if ctx.is_local or ctx.name == LOCAL:
        raise UsageError("the context 'local' is built in and cannot be saved")
    check_name(ctx.name)

    def change(doc: Any) -> None:
        entries = _entries(doc)
        entry = next((e for e in entries if e.get("name") == ctx.name), None)
        if entry is None:
            from ruamel.yaml.comments import CommentedMap

            entry = CommentedMap()
            entries.append(entry)
        entry["name"] = ctx.name
        entry["server"] = ctx.server
        for key in ("token", "workspace"):
            value = getattr(ctx, key)
            if value is None:
                entry.pop(key, None)
            else:
                entry[key] = value
        if make_current:
            _set_current(doc, ctx.name)

    edit(change)


def use(name: str) -> Context:
    """Make ``name`` the current context; NotFound (exit 5) naming the known ones."""

    def change(doc: Any) -> Context:
        ctx = lookup(_to_config(doc, config_path()), name)
        _set_current(doc, name)
        return ctx

    if name == LOCAL and _read_text(config_path()) is None:
        return LOCAL_CONTEXT  # the default already; no need to create a file
    return edit(change)


def delete(name: str) -> bool:
    """Remove a context; True when it was current (``local`` is current then)."""
    if name == LOCAL:
        raise UsageError("the context 'local' is built in and cannot be deleted")

    def change(doc: Any) -> bool:
        lookup(_to_config(doc, config_path()), name)
        entries = _entries(doc)
        entries.pop(next(i for i, e in enumerate(entries) if e.get("name") == name))
        was_current: bool = doc.get("current-context") == name
        if was_current:
            del doc["current-context"]
        return was_current

    return edit(change)


def edit(change: Callable[[Any], T]) -> T:
    """Read-modify-write the config under a lock; writes the YAML and its JSON cache."""
    from ruamel.yaml.comments import CommentedMap

    path = config_path()
    _make_dir(path.parent)
    with _locked(path):
        text = _read_text(path) or ""
        doc = _load_document(text, path)
        _to_config(doc, path)  # refuse to rewrite a file we would misread
        if doc is None:
            doc = CommentedMap()
        result = change(doc)
        new_text = _dump(doc)
        config = parse(new_text, path)
        _atomic_write(path, new_text)
        _atomic_write(cache_path(path), _cache_text(new_text, config))
    return result


def _entries(doc: Any) -> Any:
    from ruamel.yaml.comments import CommentedSeq

    if doc.get("contexts") is None:
        doc["contexts"] = CommentedSeq()
    return doc["contexts"]


def _set_current(doc: Any, name: str) -> None:
    if "current-context" in doc:
        doc["current-context"] = name
    else:
        doc.insert(0, "current-context", name)


def _dump(doc: Any) -> str:
    import io

    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.indent(mapping=2, sequence=4, offset=2)
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def _make_dir(directory: Path) -> None:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if directory == default_dir():  # ours alone; a TAU_CONFIG elsewhere keeps its dir's mode
        os.chmod(directory, 0o700)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl

    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # two `tau login`s at once both land
        yield
    finally:
        os.close(fd)


def _atomic_write(path: Path, text: str) -> None:
    """Write a 0600 file by rename, so readers see the old or the new text, never half."""
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
