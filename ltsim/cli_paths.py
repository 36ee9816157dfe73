"""Output paths of the commands, checked before any work starts (a figure's format, folders that
exist or can be made, outputs that do not overwrite an input or each other) and written with an
OSError turned into a ConfigError naming the flag."""

from __future__ import annotations

import errno
import importlib
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable

from ltsim.errors import ConfigError, unusable_path

_EXAMPLE_NAMES = {"--trace": "trace.json", "--plot": "figure.png", "--db": "sweep.sqlite"}
_FIGURE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")  # else matplotlib is asked


def check_figure_suffix(path: Path) -> None:
    """A --plot path ends in a format matplotlib writes (it would otherwise fail after the work, or
    write another file than the one named: no suffix means .png added)."""
    try:  # matplotlib refuses to import under an MPLBACKEND it does not know
        importlib.import_module("matplotlib")
    except ValueError:
        raise ConfigError("MPLBACKEND", "a backend matplotlib knows (ltsim draws its files with "
                          "Agg whatever it names)", os.environ.get("MPLBACKEND", ""),
                          "unset MPLBACKEND, or set MPLBACKEND=Agg") from None
    suffix = path.suffix.lower()
    if suffix in _FIGURE_SUFFIXES:
        return
    example = path.with_suffix(".png") if path.stem and not path.name.startswith(".") else (
        path.with_name("figure.png"))
    if suffix:
        from matplotlib import rcParams
        from matplotlib.backend_bases import FigureCanvasBase

        if suffix == ".pgf" and not shutil.which(tex := rcParams["pgf.texsystem"]):
            raise ConfigError("--plot", "a figure format this machine can write", str(path),
                              f"e.g. --plot {example.with_suffix('.pdf')}",
                              context=f"matplotlib writes .pgf through {tex}, which is not installed")
        if suffix[1:] in FigureCanvasBase.get_supported_filetypes():
            return
    raise ConfigError("--plot", "a file name ending in a figure format (.png, .pdf, .svg, ...)",
                      str(path), f"e.g. --plot {example}")


def check_distinct(outputs: dict[str, Path | None], inputs: tuple[Path, ...] = ()) -> None:
    """Outputs go to distinct files, none of them an input (a scenario overwritten is lost): by
    resolved path, and by the file itself where both exist (a hard link is another name for it)."""
    seen: dict[Path, str] = {}
    for flag, path in outputs.items():
        if path is None:
            continue
        where = _resolved(flag, path)
        if _is_input(where, path, inputs):
            raise ConfigError(flag, "a file other than the command's input", str(path),
                              "choose another file name (the input would be overwritten)")
        if where in seen:
            raise ConfigError(flag, f"a file other than {seen[where]}'s", str(path),
                              "give each output its own file name")
        seen[where] = flag


def check_folder_outputs(flag: str, folder: Path, names: tuple[str, ...],
                         inputs: tuple[Path, ...]) -> None:
    """The files a command writes into ``folder`` (``names``) are none of its inputs (a scenario
    overwritten is lost), as ``check_distinct`` checks a file output."""
    for name in names:
        path = folder / name
        if _is_input(_resolved(flag, path), path, inputs):
            raise ConfigError(flag, f"a folder none of whose outputs ({', '.join(names)}) is an "
                              "input", str(folder), f"choose another folder: its {name} is an "
                              "input the command would overwrite")


def _is_input(where: Path, path: Path, inputs: tuple[Path, ...]) -> bool:
    """Whether output ``path`` (resolved: ``where``) is one of ``inputs``, by resolved path or as
    the same file (a hard link)."""
    return any(where == _input(p) or _same_file(path, p) for p in inputs)


def _input(path: Path) -> Path | None:
    """An input's resolved path; None where it has none (a relative one in a deleted working
    directory, a link loop), which no output can then be: an output is resolved, or refused."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return None


def _resolved(flag: str, path: Path) -> Path:
    """``path.resolve()``; a symbolic-link loop (a RuntimeError in Python 3.11, an OSError
    later), or a relative path in a working directory that was deleted, is a ConfigError naming
    ``flag``."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        if not path.is_absolute() and not _cwd_exists():
            raise ConfigError(flag, "a path ltsim can resolve", str(path),
                              "the current directory no longer exists: cd to one that does, or "
                              "give an absolute path") from None
        raise _loop(flag, path) from None


def _cwd_exists() -> bool:
    try:
        os.getcwd()
    except OSError:  # (FileNotFoundError: the directory was removed while the shell sat in it)
        return False
    return True


def _loop(flag: str, path: Path) -> ConfigError:
    return ConfigError(flag, "a path without a symbolic-link loop", str(path),
                       "remove the link, or give another file name")


def _check_no_loop(flag: str, path: Path) -> None:
    """A link that leads back to itself: writing through it fails late, with a confusing error
    ("File exists" from mkdir)."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _loop(flag, path) from None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_output(flag: str, path: Path | None) -> None:
    """An output path is checked before the work starts: a file name (not a folder) whose folder
    exists or can be made; a figure's in a format matplotlib writes. Raises ConfigError (also for
    a path the system refuses to look at: too long, a folder without permission)."""
    if path is None:
        return
    if path.name in ("", ".", ".."):  # '' reads as '.': the current folder, not a file
        raise ConfigError(flag, "a file path", str(path),
                          f"name a file, e.g. {flag} {_EXAMPLE_NAMES.get(flag, 'out')}")
    if flag == "--plot":
        check_figure_suffix(path)
    try:
        _check_output(flag, path)
    except OSError as exc:
        raise unusable_path(flag, path, exc) from None


def _check_output(flag: str, path: Path) -> None:
    _check_no_loop(flag, path)
    if path.is_dir():
        raise ConfigError(flag, "a file path, not a directory", str(path),
                          f"name a file inside it, e.g. {flag} {path / _EXAMPLE_NAMES.get(flag, 'out')}")
    mode = path.stat().st_mode if path.exists() else None
    if mode is not None and stat.S_ISFIFO(mode):  # opening it could wait forever
        raise ConfigError(flag, "a file, not a named pipe", str(path), "give a file name")
    if mode is not None and not stat.S_ISREG(mode):  # a file is written beside it and renamed
        raise ConfigError(flag, "a regular file (or a new one), not a device or socket",  # over:
                          str(path), "give a file name")  # that would replace the node itself
    blocking = next((a for a in path.parents if a.exists() and not a.is_dir()), None)
    if blocking is not None:
        raise ConfigError(flag, "a path whose folders are folders", str(path),
                          "choose another folder", context=f"{str(blocking)!r} is a file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(flag, "a path whose folder exists or can be created", str(path),
                          "choose a writable folder", context=exc.strerror or "") from None


def check_folder(flag: str, path: Path | None) -> None:
    """An output folder is checked before the work starts (measuring takes minutes): a folder that
    exists or can be made, and where a file can be written (a file made and removed: /proc and
    read-only mounts are folders too). The folders it makes for the check are removed again (the
    command makes them when it writes), so a run refused later leaves none. Raises ConfigError."""
    if path is None:
        return
    path = Path(path)
    _check_no_loop(flag, path)
    made = []  # the folders made here, outermost first
    try:
        try:
            if path.exists() and not path.is_dir():
                raise ConfigError(flag, "a folder, not a file", str(path),
                                  "name a new or existing folder")
            for folder in reversed((path, *path.parents)):
                if not folder.exists():
                    folder.mkdir()
                    made.append(folder)
        except OSError as exc:
            raise ConfigError(flag, "a folder that exists or can be created", str(path),
                              "choose a writable place", context=exc.strerror or "") from None
        try:
            with tempfile.NamedTemporaryFile(dir=path, prefix=".ltsim-write-check-"):
                pass
        except OSError as exc:
            raise ConfigError(flag, "a folder where files can be written", str(path),
                              "choose a writable place", context=exc.strerror or "") from None
    finally:
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                break


def written(flag: str, path: Path, write: Callable[[], Any]) -> None:
    """Run ``write``; an OSError becomes a ConfigError naming the flag and the file."""
    try:
        write()
    except OSError as exc:
        raise ConfigError(flag, "a writable file", str(path), "choose a writable folder",
                          context=exc.strerror or type(exc).__name__) from None


def command_inputs(path: str, scenario: Any) -> tuple[Path, ...]:
    """The files a command reads: the scenario file, its length file and its profile's tables
    (an output path on one of them would overwrite it)."""
    from ltsim.datasets import packaged_files
    from ltsim.errors import LtsimError
    from ltsim.files import expand_user
    from ltsim.profile_files import PROFILE_FILES
    from ltsim.profiles import resolve_profile

    out = [Path(path)]
    if scenario.source:  # where it was found (a bundled scenario when the path did not exist)
        out.append(Path(scenario.source))
    if scenario.workload.dataset:  # a built-in name read from ltsim's own data, or a path
        out += (packaged_files(scenario.workload.dataset)
                or [expand_user(scenario.workload.dataset)])
    if not scenario.cluster.device.is_unit:
        try:
            profile = resolve_profile(scenario.cluster.profile_dir)
        except LtsimError:  # the run names a profile it cannot find; nothing to overwrite there
            profile = None
        if profile is not None:
            out += [profile / name for name in PROFILE_FILES]
    return tuple(out)
