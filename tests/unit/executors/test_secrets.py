"""The local secret store, within one workspace: file modes, reference syntax, atomic
replacement, launch help. Scopes and the flat layout's migration: test_secret_scopes.py."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from secret_checks import require_secrets
from taugrid.domain.secret_refs import MAX_VALUE_BYTES, check_ref
from taugrid.errors import NotFound, UsageError
from taugrid.executors.local import secrets as secrets_mod
from taugrid.executors.local.secrets import (
    LocalSecretStore,
    SecretScope,
    secret_files,
)

VALUE = "hf_Sup3rS3cretValue-do-not-leak"
WS = SecretScope("default")


@pytest.fixture
def store(tmp_path: Path) -> LocalSecretStore:
    return LocalSecretStore(tmp_path / "home" / "secrets")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_default_root_is_under_tau_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAU_HOME", str(tmp_path / "th"))
    assert LocalSecretStore().root == (tmp_path / "th").resolve() / "secrets"


def test_set_then_read_back_with_private_modes(store: LocalSecretStore) -> None:
    old = os.umask(0o022)
    try:
        store.set(WS, "hf/token", VALUE)
    finally:
        os.umask(old)
    path = store.path_of(WS, "hf/token")
    assert path.is_absolute() and path.parent == store.root / "default"
    assert path.read_text() == VALUE
    assert mode(store.root) == mode(path.parent) == 0o700
    assert mode(path) == 0o600
    assert store.refs(WS) == ["hf/token"]


def test_existing_loose_directory_is_tightened(store: LocalSecretStore) -> None:
    store.dir_of(WS).mkdir(parents=True, mode=0o755)
    os.chmod(store.root, 0o755)
    os.chmod(store.dir_of(WS), 0o755)
    store.set(WS, "a", "1")
    assert mode(store.root) == mode(store.dir_of(WS)) == 0o700


def test_overwrite_replaces_atomically_and_leaves_no_temp_files(
    store: LocalSecretStore,
) -> None:
    store.set(WS, "hf/token", "old-value")
    before = store.path_of(WS, "hf/token").stat().st_ino
    store.set(WS, "hf/token", "new-value")
    path = store.path_of(WS, "hf/token")
    assert path.read_text() == "new-value"
    assert path.stat().st_ino != before  # a new file renamed over, not rewritten in place
    assert mode(path) == 0o600
    assert sorted(os.listdir(store.dir_of(WS))) == ["hf@token"]


def test_readers_never_see_a_partial_value(store: LocalSecretStore) -> None:
    a, b = "a" * MAX_VALUE_BYTES, "b" * MAX_VALUE_BYTES
    store.set(WS, "big", a)
    stop = threading.Event()
    seen: set[str] = set()

    def read() -> None:
        while not stop.is_set():
            seen.add(store.path_of(WS, "big").read_text())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(30):
            store.set(WS, "big", a if i % 2 else b)
    finally:
        stop.set()
        reader.join()
    assert seen <= {a, b}


def test_failed_write_keeps_the_old_value(
    store: LocalSecretStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.set(WS, "k", "old")

    def boom(fd: int) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(secrets_mod.os, "fsync", boom)
    with pytest.raises(OSError, match="disk on fire"):
        store.set(WS, "k", "new")
    monkeypatch.undo()
    assert store.path_of(WS, "k").read_text() == "old"
    assert os.listdir(store.dir_of(WS)) == ["k"]


def test_delete(store: LocalSecretStore) -> None:
    store.set(WS, "hf/token", VALUE)
    assert store.delete(WS, "hf/token") is True
    assert store.delete(WS, "hf/token") is False
    assert store.refs(WS) == []
    with pytest.raises(NotFound) as err:
        store.path_of(WS, "hf/token")
    assert err.value.message == (
        "secret 'hf/token' is not set in workspace 'default'; "
        "set it with: tau secret set hf/token --workspace default"
    )


def test_nested_and_prefix_refs_coexist(store: LocalSecretStore) -> None:
    for ref in ("hf", "hf/token", "hf/token/v2", "wandb.api-key", "A_b-1.x"):
        store.set(WS, ref, ref + "-value")
    assert store.refs(WS) == sorted(["hf", "hf/token", "hf/token/v2", "wandb.api-key", "A_b-1.x"])
    assert store.path_of(WS, "hf/token/v2").read_text() == "hf/token/v2-value"
    assert store.path_of(WS, "hf").read_text() == "hf-value"


def test_entries_have_times_and_skip_stray_files(store: LocalSecretStore) -> None:
    store.set(WS, "a/b", "1")
    (store.dir_of(WS) / "~tmp.123.abc").write_text("partial")
    (store.dir_of(WS) / "not a ref").write_text("x")
    (store.dir_of(WS) / "dir").mkdir()
    entries = store.entries(WS)
    assert [e.ref for e in entries] == ["a/b"]
    assert entries[0].updated_at == pytest.approx(store.path_of(WS, "a/b").stat().st_mtime)


def test_refs_and_missing_on_an_empty_store(store: LocalSecretStore) -> None:
    assert store.refs(WS) == []
    assert not store.root.exists()
    assert store.missing("default", None, ["x", "y/z", "x"]) == ["x", "y/z"]
    store.set(WS, "y/z", "1")
    assert store.missing("default", None, ["x", "y/z"]) == ["x"]


@pytest.mark.parametrize(
    "ref",
    [
        "",
        "/abs",
        "a/",
        "a//b",
        "../up",
        "a/../b",
        "a..b",
        ".",
        "a/./b",
        "sp ace",
        "a=b",
        "a@b",
        "~tmp.1",
        "é",
        "a\nb",
        "x" * 254,
    ],
)
def test_invalid_refs_are_usage_errors(store: LocalSecretStore, ref: str) -> None:
    with pytest.raises(UsageError, match="invalid secret reference"):
        check_ref(ref)
    with pytest.raises(UsageError):
        store.set(WS, ref, "v")
    with pytest.raises(UsageError):
        store.path_of(WS, ref)
    with pytest.raises(UsageError):
        store.delete(WS, ref)
    assert not store.root.exists() or os.listdir(store.root) == []


def test_longest_ref_fits_in_a_file_name(store: LocalSecretStore) -> None:
    ref = "/".join(["x"] * 127)  # 253 characters
    assert len(ref) == 253
    store.set(WS, ref, "v")
    assert store.refs(WS) == [ref]


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("", "cannot be empty"),
        ("a\0b", "NUL"),
        ("x" * (MAX_VALUE_BYTES + 1), "at most 64 KiB"),
        ("é" * (MAX_VALUE_BYTES // 2 + 1), "at most 64 KiB"),  # bytes, not characters
    ],
)
def test_invalid_values_are_refused_without_repeating_them(
    store: LocalSecretStore, value: str, match: str
) -> None:
    with pytest.raises(UsageError, match=match) as err:
        store.set(WS, "k", value)
    if value:
        assert value not in err.value.message
    assert store.refs(WS) == []


def test_largest_value_and_unicode_round_trip(store: LocalSecretStore) -> None:
    store.set(WS, "big", "x" * MAX_VALUE_BYTES)
    store.set(WS, "uni", "päss wörd\nline2\n")
    assert len(store.path_of(WS, "big").read_bytes()) == MAX_VALUE_BYTES
    assert store.path_of(WS, "uni").read_text(encoding="utf-8") == "päss wörd\nline2\n"


def test_repr_shows_no_value(store: LocalSecretStore) -> None:
    store.set(WS, "k", VALUE)
    assert VALUE not in repr(store)


def test_secret_files_maps_env_names_to_absolute_paths(store: LocalSecretStore) -> None:
    store.set(WS, "hf/token", VALUE)
    store.set(WS, "wandb", "w")
    files = secret_files(store, "default", None, {"HF_TOKEN": "hf/token", "WANDB_API_KEY": "wandb"})
    assert files == {
        "HF_TOKEN": str(store.path_of(WS, "hf/token")),
        "WANDB_API_KEY": str(store.path_of(WS, "wandb")),
    }
    assert all(os.path.isabs(p) for p in files.values())
    assert VALUE not in repr(files)


def test_secret_files_missing_ref(store: LocalSecretStore) -> None:
    with pytest.raises(NotFound, match="tau secret set hf/token"):
        secret_files(store, "default", None, {"HF_TOKEN": "hf/token"})
    files = secret_files(store, "default", None, {"HF_TOKEN": "hf/token"}, must_exist=False)
    assert files == {"HF_TOKEN": str(store.root / "default" / "hf@token")}


def test_require_secrets_names_every_missing_ref(store: LocalSecretStore) -> None:
    store.set(WS, "ok", "1")
    require_secrets(store, "default", None, {"A": "ok"})
    require_secrets(store, "default", None, {})
    with pytest.raises(UsageError) as one:
        require_secrets(store, "default", None, {"A": "ok", "B": "hf/token"})
    assert one.value.message == (
        "secret 'hf/token' is not set in workspace 'default'; "
        "set it with: tau secret set hf/token --workspace default"
    )
    assert one.value.exit_code == 2
    with pytest.raises(UsageError) as two:
        require_secrets(store, "default", None, {"A": "x/y", "B": "z", "C": "x/y"})
    assert two.value.message == (
        "secrets 'x/y', 'z' are not set in workspace 'default'; set them with: "
        "tau secret set x/y --workspace default; tau secret set z --workspace default"
    )
    with pytest.raises(UsageError) as mine:
        require_secrets(store, "vision", "ann", {"A": "hf/token"}, personal=True)
    assert mine.value.message == (
        "secret 'hf/token' is not set in workspace 'vision'; "
        "set it with: tau secret set hf/token --workspace vision --personal"
    )
