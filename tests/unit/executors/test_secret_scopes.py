"""Secrets per workspace and per user: layout on disk, resolution order, names that cannot
escape or collide, and the one-time move of the flat layout into ``default``."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from secret_checks import require_secrets
from taugrid.domain.secret_refs import check_workspace, refuse_value_as_ref
from taugrid.errors import NotFound, UsageError
from taugrid.executors.local.secrets import (
    LocalSecretStore,
    SecretScope,
    secret_files,
    user_on_disk,
)

A, B = SecretScope("a"), SecretScope("b")
ANN_A = SecretScope("a", "ann")


@pytest.fixture
def store(tmp_path: Path) -> LocalSecretStore:
    return LocalSecretStore(tmp_path / "home" / "secrets")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_layout_on_disk_is_private_at_every_level(store: LocalSecretStore) -> None:
    store.set(A, "hf/token", "workspace-value")
    store.set(ANN_A, "hf/token", "ann-value")
    assert (store.root / "a" / "hf@token").read_text() == "workspace-value"
    personal = store.root / "a" / "~users" / "ann" / "hf@token"
    assert personal.read_text() == "ann-value"
    for d in (store.root, store.root / "a", store.root / "a" / "~users", personal.parent):
        assert mode(d) == 0o700, d
    assert mode(personal) == 0o600


def test_workspaces_do_not_share_secrets(store: LocalSecretStore) -> None:
    store.set(A, "hf/token", "a-value")
    assert store.resolve("b", None, "hf/token") is None
    assert store.resolve("b", "ann", "hf/token") is None
    assert store.missing("b", "ann", ["hf/token"]) == ["hf/token"]
    with pytest.raises(UsageError, match="not set in workspace 'b'"):
        require_secrets(store, "b", "ann", {"HF_TOKEN": "hf/token"})
    with pytest.raises(NotFound):
        secret_files(store, "b", "ann", {"HF_TOKEN": "hf/token"})
    # At launch, a reference that resolves to nothing points into the run's own workspace.
    files = secret_files(store, "b", "ann", {"HF_TOKEN": "hf/token"}, must_exist=False)
    assert files == {"HF_TOKEN": str(store.root / "b" / "hf@token")}
    assert store.refs(B) == [] and store.refs(A) == ["hf/token"]


def test_personal_secret_wins_for_its_owner_only(store: LocalSecretStore) -> None:
    store.set(A, "hf/token", "shared")
    store.set(ANN_A, "hf/token", "anns")
    assert store.resolve("a", "ann", "hf/token") == store.file_of(ANN_A, "hf/token")
    assert store.resolve("a", "bob", "hf/token") == store.file_of(A, "hf/token")
    assert store.resolve("a", None, "hf/token") == store.file_of(A, "hf/token")
    files = secret_files(store, "a", "ann", {"T": "hf/token"})
    assert Path(files["T"]).read_text() == "anns"
    # Deleting the personal one falls back to the workspace's.
    assert store.delete(ANN_A, "hf/token")
    assert Path(secret_files(store, "a", "ann", {"T": "hf/token"})["T"]).read_text() == "shared"


def test_a_personal_secret_alone_satisfies_its_owner(store: LocalSecretStore) -> None:
    store.set(ANN_A, "wandb", "anns")
    require_secrets(store, "a", "ann", {"W": "wandb"})
    with pytest.raises(UsageError):
        require_secrets(store, "a", "bob", {"W": "wandb"})


def test_entries_of_a_scope_hold_only_that_scope(store: LocalSecretStore) -> None:
    store.set(A, "x", "1")
    store.set(ANN_A, "y", "2")
    store.set(SecretScope("a", "bob"), "z", "3")
    assert [(e.ref, e.scope, e.owner) for e in store.entries(A)] == [("x", "workspace", None)]
    assert [(e.ref, e.scope, e.owner) for e in store.entries(ANN_A)] == [("y", "personal", "ann")]
    assert store.entries(SecretScope("nope")) == []


@pytest.mark.parametrize(
    "user",
    ["../../b", "..", ".", "a/b", "ann@example.org", "~users", "%41", "A", "a", "ü", "x" * 63],
)
def test_user_names_stay_inside_their_directory(store: LocalSecretStore, user: str) -> None:
    scope = SecretScope("a", user)
    store.set(scope, "k", "v")
    where = store.dir_of(scope)
    assert where.parent == store.root / "a" / "~users"
    assert where.name not in (".", "..") and "/" not in where.name
    assert store.resolve("a", user, "k") == where / "k"
    assert store.resolve("b", user, "k") is None


def test_user_encoding_is_one_to_one() -> None:
    names = ["ann", "Ann", "a.b", "a%2Eb", "a_b", "a-b", "a b", "ü", "%C3%BC", "~", "x" * 63]
    encoded = [user_on_disk(n) for n in names]
    assert len(set(encoded)) == len(names)
    assert all(len(e) <= 200 for e in encoded)
    assert user_on_disk("ü" * 63).startswith("#")  # too long spelled out: a digest
    with pytest.raises(UsageError):
        user_on_disk("")


@pytest.mark.parametrize("ws", ["", "..", ".", "A", "a/b", "~users", "-a", "a" * 254, "a..b"])
def test_bad_workspace_names_are_refused_without_echo(store: LocalSecretStore, ws: str) -> None:
    with pytest.raises(UsageError) as err:
        store.set(SecretScope(ws), "k", "v")
    assert err.value.message.startswith("invalid workspace name")
    assert not ws or ws not in err.value.message.split(":")[0]
    assert not store.root.exists()


def test_workspace_names_as_specs_allow_them() -> None:
    for ws in ("default", "a", "0lab", "vision-2", "team.vision"):
        assert check_workspace(ws) == ws


def test_bad_refs_are_not_echoed(store: LocalSecretStore) -> None:
    typed = "hunter2 is my password"
    with pytest.raises(UsageError) as err:
        store.set(A, typed, "v")
    assert typed not in err.value.message


@pytest.mark.parametrize(
    "ref", ["hf_abcdefghijklmnopqrstuvwxyzABCDEF12", "ghp_" + "a1B2" * 9, "AKIAIOSFODNN7EXAMPLE"]
)
def test_a_value_given_as_the_reference_is_refused_without_echo(ref: str) -> None:
    with pytest.raises(UsageError) as err:
        refuse_value_as_ref(ref)
    assert ref not in err.value.message and "not a name" in err.value.message


def test_ordinary_refs_are_not_taken_for_values() -> None:
    for ref in ("hf/token", "wandb.api-key", "github/ghp-token", "aws/AKIA-id", "openai/sk-key"):
        refuse_value_as_ref(ref)


# -- the flat layout of before workspaces ----------------------------------------------------


def flat_store(root: Path, secrets: dict[str, str]) -> None:
    """What the previous version left: files directly in the store, '/' as '@'."""
    root.mkdir(parents=True, mode=0o700)
    for ref, value in secrets.items():
        path = root / ref.replace("/", "@")
        path.write_text(value)
        path.chmod(0o600)


def test_flat_secrets_move_into_default(store: LocalSecretStore) -> None:
    flat_store(store.root, {"hf/token": "h", "wandb": "w", "default": "named-like-the-dir"})
    (store.root / "~tmp.99.abc").write_text("half-written")
    inode = (store.root / "hf@token").stat().st_ino
    assert store.migrate_flat_layout() == 3
    assert sorted(os.listdir(store.root)) == ["default"]
    default = SecretScope("default")
    assert store.refs(default) == ["default", "hf/token", "wandb"]
    assert store.path_of(default, "hf/token").read_text() == "h"
    assert store.path_of(default, "default").read_text() == "named-like-the-dir"
    assert store.path_of(default, "hf/token").stat().st_ino == inode  # moved, not copied
    assert mode(store.path_of(default, "hf/token")) == 0o600
    assert mode(store.root / "default") == 0o700
    assert store.migrate_flat_layout() == 0  # once


def test_migration_without_a_store_or_flat_files_does_nothing(store: LocalSecretStore) -> None:
    assert store.migrate_flat_layout() == 0
    assert not store.root.exists()
    store.set(A, "k", "v")
    assert store.migrate_flat_layout() == 0
    assert sorted(os.listdir(store.root)) == ["a"]


def test_migration_resumes_after_a_crash_before_the_switch(store: LocalSecretStore) -> None:
    """Killed after linking some files into ~flat/: the next start finishes the job."""
    flat_store(store.root, {"hf/token": "h", "wandb": "w"})
    (store.root / "~flat").mkdir(mode=0o700)
    os.link(store.root / "hf@token", store.root / "~flat" / "hf@token")
    assert store.migrate_flat_layout() == 2
    assert sorted(os.listdir(store.root)) == ["default"]
    assert store.refs(SecretScope("default")) == ["hf/token", "wandb"]


def test_migration_resumes_after_a_crash_after_the_switch(store: LocalSecretStore) -> None:
    """Killed after the rename, before the old links were removed: nothing doubles."""
    flat_store(store.root, {"hf/token": "h"})
    (store.root / "default").mkdir(mode=0o700)
    os.link(store.root / "hf@token", store.root / "default" / "hf@token")
    assert store.migrate_flat_layout() == 1
    assert sorted(os.listdir(store.root)) == ["default"]
    assert os.listdir(store.root / "default") == ["hf@token"]


def test_migration_into_a_default_in_use_keeps_the_newer_value(store: LocalSecretStore) -> None:
    default = SecretScope("default")
    store.set(default, "newer-here", "kept")
    store.set(default, "older-here", "replaced")
    os.utime(store.file_of(default, "older-here"), (1, 1))
    for ref, value, when in (("newer-here", "old", 2), ("older-here", "flat-wins", None)):
        (store.root / ref).write_text(value)
        if when is not None:
            os.utime(store.root / ref, (when, when))
    assert store.migrate_flat_layout() == 2
    assert sorted(os.listdir(store.root)) == ["default"]
    assert store.path_of(default, "newer-here").read_text() == "kept"
    assert store.path_of(default, "older-here").read_text() == "flat-wins"
