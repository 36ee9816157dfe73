"""Exception hierarchy. Every message names the key path, the rule, the value and a fix.

Template (attrs' validators, torchtitan's config errors)::

    '<path.key>' must be <rule> (got <value>). <context>. Fix: <fix>
"""

from __future__ import annotations

import datetime


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
        source = self.source if self.source.isprintable() else repr(self.source)[1:-1]
        where = f"{source} @ {self.key}" if source else f"'{self.key}'"
        text = f"{where} must be {self.rule} (got {_shown(self.value)})"
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


def unusable_path(key: str, path: object, exc: OSError, *, source: str = "") -> ConfigError:
    """The error for a path the system refuses to look at (too long, a folder without
    permission): ``exc`` is the OSError a stat or an open raised."""
    return ConfigError(key, "a path this system can use", str(path), "give a shorter or "
                       "accessible path", source=source,
                       context=exc.strerror or type(exc).__name__)


def check_one_line(key: str, value: str, *, source: str = "") -> None:
    """Raise ConfigError unless ``value`` (a name a table or report prints) is printable text on
    one line."""
    if not value.isprintable():
        raise ConfigError(key, "printable text on one line (no newline, tab or control "
                          "character)", value, "write it on one line", source=source)


def check_argument(name: str, value: object, kinds: type | tuple[type, ...], rule: str,
                   fix: str = "") -> None:
    """Raise ConfigError naming the Python argument ``name`` when ``value`` is not of ``kinds``
    (a bool is never an int): a caller's slip, said here rather than as an AttributeError deep
    inside. The message shows the type given, not the value."""
    if isinstance(value, kinds) and not (isinstance(value, bool) and bool not in (
            kinds if isinstance(kinds, tuple) else (kinds,))):
        return
    raise ConfigError(name, rule, TypeShown(value), fix)


def check_callable(name: str, value: object, rule: str) -> None:
    """Raise ConfigError naming the Python argument ``name`` unless ``value`` is None or a
    function (``rule``: what it is called with)."""
    if value is not None and not callable(value):
        raise ConfigError(name, f"{rule}, or None", TypeShown(value),
                          "pass a function or leave it out")


class TypeShown:
    """A value's type as a message shows it (``an int``), for an argument of the wrong type."""

    def __init__(self, value: object) -> None:
        kind = type(value).__name__
        self.name = "None" if value is None else f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"

    def __repr__(self) -> str:
        return self.name


_MAX_SHOWN = 200  # characters of a value quoted in a message


def _shown(value: object) -> str:
    """A value as a message quotes it: on one line, and short (an integer of thousands of digits
    cannot even be printed: Python refuses past 4300 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length():,} bits"
    if isinstance(value, (datetime.date, datetime.time)):  # a TOML date or time, as written
        return f"the date/time {value.isoformat()}"
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "... (cut)"


class ProfileError(LtsimError):
    """A profile directory or table is missing or unusable."""

    def problem_and_fix(self) -> tuple[str, str]:
        """The message's problem and its fix ("" if it gives none), for a ConfigError that
        names the key or flag the profile came from."""
        problem, _, fix = str(self).partition(". Fix: ")
        return problem, fix


class PlanError(LtsimError):
    """A strategy produced an invalid plan (a bug in the strategy, not in the input)."""
