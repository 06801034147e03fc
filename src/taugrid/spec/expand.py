"""``${VAR}`` expansion in tau.yaml.

Rules (also exported as :data:`EXPANSION_RULES` so the CLI and docs show the same text):

1. At resolve time TauGrid expands ``${VAR}`` in ``command``, ``setup`` and ``env`` values
   using ONLY the spec's own ``env``. An ``env`` value may use keys defined above it.
2. Nothing else is expanded then: not ``TAU_*``, not ``secrets``, not the submitter's
   environment. The resolved spec is stored, and expanding the submitter's environment
   into it could leak secrets. Such references stay as written, for launch time.
3. At launch, a string ``command`` and ``setup`` go to the shell, which expands what is
   left; the executor expands what is left in a list ``command`` and in ``env`` values
   against the final process environment with :func:`expand_at_launch`. A variable unset
   even then stays as written.
4. ``$${VAR}`` stands for ``${VAR}`` that TauGrid must not expand. The resolved spec keeps
   ``$${VAR}`` in list commands and env values (so launch time can still tell), and turns
   it into ``${VAR}`` in shell strings (which the shell then sees as usual).
5. Only the braced form is touched: ``$VAR`` and ``${VAR:-x}`` pass through unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

EXPANSION_RULES = """\
${VAR} in tau.yaml
  - When a run is submitted, ${VAR} in `command`, `setup` and `env` values is replaced
    using only the spec's own `env`; an env value may use env keys defined above it.
  - Anything else (TAU_* variables, secrets, your shell's environment) is left as ${VAR}:
    the resolved spec is stored, and copying your environment into it could leak secrets.
  - What is left is expanded at launch: by the shell for a string `command` and `setup`,
    by TauGrid from the process environment for a list `command` and `env` values.
    A variable still unset then stays as written.
  - $${VAR} means a literal ${VAR} that TauGrid never expands (a shell still sees ${VAR}).
  - Only the braced form counts: $VAR and ${VAR:-default} are passed through untouched.
"""

_REFERENCE = re.compile(r"\$(\$\{[A-Za-z_][A-Za-z0-9_]*\})|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _unescape(text: str) -> str:
    return _REFERENCE.sub(lambda m: m.group(1) or m.group(0), text)


def expand(text: str, variables: Mapping[str, str], *, unescape: bool) -> str:
    """Replace ``${VAR}`` defined in ``variables``; ``$${VAR}`` -> ``${VAR}`` if ``unescape``.

    A substituted value keeps its own ``$${...}`` escapes unless ``unescape`` is set, so an
    escape survives being copied from one env value into another or into a list command.
    """

    def substitute(match: re.Match[str]) -> str:
        escaped, name = match.group(1), match.group(2)
        if escaped:
            return escaped if unescape else match.group(0)
        if name not in variables:
            return match.group(0)
        value = variables[name]
        return _unescape(value) if unescape else value

    return _REFERENCE.sub(substitute, text)


def expand_env(env: Mapping[str, str]) -> dict[str, str]:
    """Expand env values in order, each seeing only the (expanded) keys above it."""
    done: dict[str, str] = {}
    for key, value in env.items():
        done[key] = expand(value, done, unescape=False)
    return done


def expand_at_launch(argv: list[str], env: Mapping[str, str]) -> list[str]:
    """Expand what is left in a list command (or env values) against the process env.

    ``env`` is the final environment of the workload process. Unset variables stay as
    written and ``$${VAR}`` becomes a literal ``${VAR}``. A string command is not passed
    here: the shell expands it.
    """
    return [expand(arg, env, unescape=True) for arg in argv]
