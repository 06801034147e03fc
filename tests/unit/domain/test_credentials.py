"""The inline-credential rule: what it flags, what it leaves alone, and that its words
never carry the value."""

from __future__ import annotations

import pytest

from taugrid.domain.credentials import (
    credential_evidence,
    credential_name,
    inline_credential_warnings,
    secret_ref_for,
    shannon_bits,
)

# Shapes only: none of these is a real credential.
HF = "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3f"
GH = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
SK = "sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
TAU = "tau_0a1b2c3d4e5f_" + "Qk3vX9rT2mB7nL5pW8zY4cH6jD1fG0sA-_eRuIoPlKm"
RANDOM = "q8Zr3kP0vXw9LmN2bT7yHc4JdF6sGe1A"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("HF_TOKEN", HF),
        ("X", HF),  # the value's shape alone
        ("GITHUB_TOKEN", GH),
        ("OPENAI_API_KEY", SK),
        ("AWS_ACCESS_KEY_ID", AWS),
        ("AUTH", "Bearer " + JWT),
        ("TAU_CLIENT", TAU),
        ("DATABASE_URL", "postgresql://app:s3cret@db.lab:5432/runs"),
        ("CFG", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEA\n"),
        ("SOME_VALUE", RANDOM),
        ("DB_PASSWORD", "hunter22"),
        ("PGPASSWORD", "pw-1234"),
        ("WANDB_API_KEY", "0123456789abcdef0123456789abcdef01234567"),  # hex: by its name
        ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        ("CLIENT_SECRET", "abcd"),
        ("SLACK", "xoxb-" + "123456789012-abcdefABCDEF"),
    ],
)
def test_flagged(name: str, value: str) -> None:
    assert credential_evidence(name, value) is not None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TOKENIZERS_PARALLELISM", "false"),
        ("MAX_NEW_TOKENS", "512"),
        ("LR", "3e-4"),
        ("GIT_COMMIT", "0123456789abcdef0123456789abcdef01234567"),  # hex: commits, revisions
        ("MODEL", "sentence-transformers/all-MiniLM-L6-v2"),
        ("MODEL_CLASS", "TransformerEncoderLayer12"),
        ("OUT", "models/checkpoints/Run2024abcdefghijklmn"),
        ("HF_TOKEN", "${HF_TOKEN}"),  # left for the workload's shell
        ("HF_TOKEN", "$HF_TOKEN"),
        ("HF_TOKEN", ""),
        ("HF_TOKEN_PATH", "/run/secrets/hf"),
        ("HF_TOKEN", "/run/secrets/hf"),
        ("GOOGLE_APPLICATION_CREDENTIALS", "./sa.json"),
        ("PASSWORD_MIN_LENGTH", "12"),
        ("USE_AUTH_TOKEN", "true"),
        ("DATABASE_URL", "postgresql://app:${DB_PASSWORD}@db.lab:5432/runs"),
        ("DATABASE_URL", "postgresql://db.lab:5432/runs"),
        ("PYTHONPATH", "src:lib"),
        ("WANDB_PROJECT", "llm-pretraining-2024"),
        ("RUN_ID", "exp-20240131-lr3e4-bs256"),
        ("SECRET_NAME", "hf/token"),
        ("AWS_ACCESS_KEY_ID", "${AWS_ACCESS_KEY_ID}"),
    ],
)
def test_not_flagged(name: str, value: str) -> None:
    assert credential_evidence(name, value) is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("HF_TOKEN", True),
        ("hf_token", True),
        ("GHTOKEN", True),
        ("MY_API_KEY", True),
        ("PRIVATE_KEY", True),
        ("TOKENIZERS_PARALLELISM", False),
        ("MAX_TOKENS", False),
        ("KEY", False),
        ("HF_TOKEN_FILE", False),
        ("SECRET_ID", False),
        ("PWD", False),
        ("COMPASS", False),
    ],
)
def test_names(name: str, expected: bool) -> None:
    assert credential_name(name) is expected


def test_warnings_name_the_variable_and_never_the_value() -> None:
    env = {"LR": "0.1", "HF_TOKEN": HF, "DB_PASSWORD": "hunter22", "N": "3"}
    warnings = inline_credential_warnings(env, "vision")
    assert len(warnings) == 2
    hf, db = warnings
    assert hf.startswith("env.HF_TOKEN looks like a credential (its value looks like a Hugging")
    assert "tau secret set hf-token --workspace vision" in hf
    assert "secrets: {HF_TOKEN: hf-token}" in hf
    assert db.startswith("env.DB_PASSWORD looks like a credential (its name says")
    for w in warnings:
        for value in env.values():
            if len(value) > 3:
                assert value not in w
        assert HF[:8] not in w and HF[-8:] not in w  # no part of it either


def test_non_string_values_and_empty_env() -> None:
    assert inline_credential_warnings({}, "a") == []
    assert inline_credential_warnings({"HF_TOKEN": 3}, "a") == []


def test_suggested_refs_are_valid_secret_refs() -> None:
    assert secret_ref_for("HF_TOKEN") == "hf-token"
    assert secret_ref_for("__") == "my-secret"


def test_entropy() -> None:
    assert shannon_bits("") == 0.0
    assert shannon_bits("aaaa") == 0.0
    assert shannon_bits("abcd") == 2.0
