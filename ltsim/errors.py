"""Exception hierarchy. Every message names the key path, the rule, the value and a fix.

Template (attrs' validators, torchtitan's config errors)::

    '<path.key>' must be <rule> (got <value>). <context>. Fix: <fix>
"""

from __future__ import annotations


class LtsimError(Exception):
    """Base class of every error ltsim raises on purpose."""


class ConfigError(LtsimError):
    """Bad input: a scenario, an override, a file or an argument."""

    def __init__(self, key: str, rule: str, value: object, fix: str = "", *, source: str = "",
                 context: str = "") -> None:
        self.key, self.rule, self.value, self.fix = key, rule, value, fix
        self.source, self.context = source, context
        super().__init__(self._format())

    def _format(self) -> str:
        where = f"{self.source} @ {self.key}" if self.source else f"'{self.key}'"
        text = f"{where} must be {self.rule} (got {self.value!r})"
        if self.context:
            text += f"; {self.context}"
        # every message ends with a fix: the raiser's, or else the rule read as an instruction
        text += f". Fix: {self.fix or self._default_fix()}"
        return text

    def _default_fix(self) -> str:
        if self.key.startswith("-"):  # a command-line flag
            return f"give {self.key} {self.rule}"
        return f"set {self.key} to {self.rule}"

    def with_source(self, source: str) -> "ConfigError":
        """The same error, prefixed with the file it came from."""
        return ConfigError(self.key, self.rule, self.value, self.fix, source=source,
                           context=self.context)


class ProfileError(LtsimError):
    """A profile directory or table is missing or unusable."""


class PlanError(LtsimError):
    """A strategy produced an invalid plan (a bug in the strategy, not in the input)."""
