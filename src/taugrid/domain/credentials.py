"""Does an inline ``env`` value look like a credential? Pure: names and strings in, words out.

A value written in a spec's ``env`` is stored in the run record and served by the API, so
a token put there is in clear for everyone who can read the run. Submitting such a spec
still works (the run is the user's), but the answer carries a warning that says which
variable and how to use ``secrets:`` instead. The rules aim at few false positives: a
warning people learn to ignore protects nothing.

Two kinds of evidence, each enough alone:

- the **name** says so (``HF_TOKEN``, ``DB_PASSWORD``, ``WANDB_API_KEY``,
  ``AWS_SECRET_ACCESS_KEY``, ...: whole ``_``-separated words, so ``TOKENIZERS_PARALLELISM``
  and ``MAX_NEW_TOKENS`` are not credentials) and the value is something, not a flag, a
  number, a path to a file or a ``${VAR}`` reference;
- the **value** has the shape of a well-known token (``hf_...``, ``ghp_...``, ``sk-...``,
  ``AKIA...``, a private key, a JWT, TauGrid's own ``tau_...``, a URL with a password in
  it) or is a long random-looking string of mixed letters and digits. Hex strings alone
  are not flagged: commit hashes and model revisions look exactly like that.

Warnings name the variable and the kind of evidence, never the value or a part of it.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Mapping

# Whole words of a variable's name (split on "_") that make it a credential's name ...
_NAME_WORDS = frozenset(
    {
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "PASSPHRASE",
        "CREDENTIAL",
        "CREDENTIALS",
        "APIKEY",
        "PRIVATEKEY",
    }
)
# ... words ending so (PGPASSWORD, GHTOKEN, CLIENTSECRET) ...
_NAME_SUFFIXES = ("PASSWORD", "PASSWD", "TOKEN", "SECRET", "APIKEY")
# ... and pairs of adjacent words.
_NAME_PAIRS = frozenset(
    {
        ("API", "KEY"),
        ("ACCESS", "KEY"),
        ("PRIVATE", "KEY"),
        ("SECRET", "KEY"),
        ("SIGNING", "KEY"),
        ("ENCRYPTION", "KEY"),
        ("AUTH", "KEY"),
        ("LICENSE", "KEY"),
    }
)
# A name with one of these words holds where the credential is, not the credential.
_NAME_NOT = frozenset({"FILE", "PATH", "DIR", "URL", "URI", "ENDPOINT", "HOST", "ID", "NAME"})

# Values that are settings, not credentials, whatever the variable is called.
_HARMLESS = frozenset(
    {"true", "false", "yes", "no", "on", "off", "none", "null", "nil", "auto", "enabled",
     "disabled", "unset", "empty"}
)  # fmt: skip
_REFERENCE = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")
_PATHLIKE = re.compile(r"(?:/|\./|\.\./|~/|file:)")
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")

# (kind, shape) of tokens with a recognisable form.
_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("a GitHub token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}")),
    ("a GitHub token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{30,}")),
    ("a GitLab token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}")),
    ("an API key (sk-...)", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")),
    ("an AWS access key", re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")),
    ("a Slack token", re.compile(r"\bxox[abeprs]-[A-Za-z0-9-]{10,}")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("a TauGrid API token", re.compile(r"\btau_[A-Za-z0-9]{1,16}_[A-Za-z0-9_-]{20,}")),
    ("a JSON web token", re.compile(r"\beyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]{8,}", re.ASCII)),
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    # scheme://user:password@host, the password not a ${VAR} left for the shell
    ("a URL with a password", re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/:@]+:(?!\$)[^\s/@]+@")),
)  # fmt: skip

RANDOM_MIN_LEN = 24  # a run of letters and digits this long ...
RANDOM_MIN_BITS = 4.0  # ... with at least this much entropy per character
_RUN = re.compile(rf"[A-Za-z0-9+=]{{{RANDOM_MIN_LEN},}}")


def credential_name(name: str) -> bool:
    """Whether the variable's name says it holds a credential."""
    words = [w for w in name.upper().split("_") if w]
    if any(w in _NAME_NOT for w in words):
        return False
    if any(w in _NAME_WORDS or w.endswith(_NAME_SUFFIXES) for w in words):
        return True
    return any(pair in _NAME_PAIRS for pair in itertools.pairwise(words))


def substantial(value: str) -> bool:
    """Whether a value could be a credential at all: not empty, a flag, a number, a path
    or a ``${VAR}`` reference (which the workload's shell fills in)."""
    text = value.strip()
    return not (
        len(text) < 4
        or text.lower() in _HARMLESS
        or _REFERENCE.fullmatch(text)
        or _PATHLIKE.match(text)
        or _NUMBER.fullmatch(text)
    )


def shannon_bits(text: str) -> float:
    """Entropy of the string's own character distribution, in bits per character."""
    if not text:
        return 0.0
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


def _random_looking(value: str) -> bool:
    for match in _RUN.finditer(value):
        run = match.group()
        if not (
            any(c.isupper() for c in run)
            and any(c.islower() for c in run)
            and any(c.isdigit() for c in run)
        ):
            continue  # hex digests, words, numbers
        if shannon_bits(run) >= RANDOM_MIN_BITS:
            return True
    return False


def credential_shape(value: str) -> str | None:
    """What the value looks like (``"a GitHub token"``), or None. Never a part of it."""
    for kind, shape in _SHAPES:
        if shape.search(value):
            return kind
    if _random_looking(value):
        return "a long random string"
    return None


def credential_evidence(name: str, value: str) -> str | None:
    """Why ``name: value`` looks like an inline credential, in words; None if it does not."""
    if not isinstance(value, str) or not substantial(value):
        return None
    shape = credential_shape(value)
    if shape is not None:
        return f"its value looks like {shape}"
    if credential_name(name):
        return "its name says it holds a credential"
    return None


def secret_ref_for(name: str) -> str:
    """A reference to suggest for the variable (``HF_TOKEN`` -> ``hf-token``)."""
    ref = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return ref or "my-secret"


def inline_credential_warnings(env: Mapping[str, object], workspace: str) -> list[str]:
    """One warning per ``env`` variable that looks like a credential, in the spec's order.

    Each says how to move it to ``secrets:``; none contains any part of a value.
    """
    out = []
    for name, value in env.items():
        evidence = credential_evidence(name, value) if isinstance(value, str) else None
        if evidence is None:
            continue
        ref = secret_ref_for(name)
        out.append(
            f"env.{name} looks like a credential ({evidence}); values in env are stored in "
            "the run record and shown to everyone who can read the run. Keep it in a secret "
            f"instead: tau secret set {ref} --workspace {workspace} (add --personal for "
            f"yours only), then in tau.yaml replace env.{name} with "
            f"secrets: {{{name}: {ref}}}"
        )
    return out
