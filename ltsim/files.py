"""Reading the files a user names, without ever waiting on one.

A path may lead (through a symlink, say) to a file that blocks its reader: a FIFO, or a kernel
file such as /proc/kmsg, which looks like an empty regular file and waits for data. Opened here
with O_NONBLOCK, such a read fails at once, with an OSError that every caller turns into a
message naming the key and the file, instead of hanging the command.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path, PurePath
from typing import Iterator

from ltsim.errors import ConfigError, check_argument

WAITS = "it waits for data: a device, a pipe or a kernel file, not a file of text"
BLOCK = 1 << 20


class NotRegularFile(OSError):
    """The path leads to something other than a regular file (a pipe, a device), or to a kernel
    file whose read would wait for data."""


def input_blocks(path: str | os.PathLike, limit: int | None = None) -> Iterator[bytes]:
    """The bytes of ``path`` in blocks, at most ``limit`` of them when given; NotRegularFile when
    it is not a regular file or would block, another OSError when it cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file")
        left = limit
        while left is None or left > 0:
            try:
                block = os.read(fd, BLOCK if left is None else min(BLOCK, left))
            except BlockingIOError:
                raise NotRegularFile(errno.EAGAIN, WAITS) from None
            if not block:
                return
            if left is not None:
                left -= len(block)
            yield block
    finally:
        os.close(fd)


def read_input(path: str | os.PathLike, limit: int | None = None) -> bytes:
    """The bytes of ``path``, or its first ``limit`` + 1 when it holds more (a size check can
    then tell it is too big without reading it all: a kernel file's size reads as 0)."""
    return b"".join(input_blocks(path, None if limit is None else limit + 1))


def expand_user(path: str | os.PathLike) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded, or as written when that user (or
    the home folder) is unknown: the path then fails later as a missing file, by its name."""
    try:
        return Path(path).expanduser()
    except RuntimeError:  # "Could not determine home directory."
        return Path(path)


def folder_arg(text: str) -> Path:
    """An output folder's path (argparse type): an empty one would read as '.', the current
    folder, and fill it with files nobody asked for there."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must name a folder (got an empty name; write . for the "
                                         "current folder)")
    if text == "-":  # standard output to many tools: not a folder's name by accident
        raise argparse.ArgumentTypeError("must name a folder: '-' (standard output) is not taken "
                                         "here; write ./- for a folder named '-'")
    return Path(text)


@contextmanager
def replaced_atomically(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``path`` to write the whole output to; on success it replaces
    ``path`` in one step (os.replace), on any error it is removed and ``path`` keeps what it
    held: a write cut short (a full disk, a file-size limit, Ctrl-C) never leaves a truncated
    file that a later run trusts, nor destroys the earlier one (check --update rewrites its
    input)."""
    target = Path(path)
    if target.is_symlink():  # write where the link points, and keep the link
        target = Path(os.path.realpath(target))
    handle, name = tempfile.mkstemp(prefix=f".{target.name[:64]}.", suffix=".tmp",
                                    dir=target.parent)
    os.close(handle)
    temp = Path(name)
    try:
        yield temp
        if target.exists():  # keep the mode the file had (tempfile's is 0600)
            os.chmod(temp, stat.S_IMODE(os.stat(target).st_mode))
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temp, 0o666 & ~umask)
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)


def write_text_atomically(path: str | os.PathLike, text: str, **kwargs) -> None:
    """``Path(path).write_text(text, **kwargs)``, replacing the file in one step."""
    with replaced_atomically(path) as temp:
        temp.write_text(text, **kwargs)


def literal(text: str) -> str:
    """``text`` as a figure should show it, verbatim: a ``$`` escaped (matplotlib reads $...$ as
    mathtext, and a scenario named ``$$`` failed to parse), a file name's undecodable bytes
    (surrogate escapes, which the font renderer refuses) as U+FFFD."""
    if not text.isascii():
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return text.replace("$", r"\$")


def figure_path(path: object) -> Path:
    """A plot's ``path`` argument as a Path; ConfigError naming it when it is not text or a
    path (None or bytes were pathlib's TypeError)."""
    check_argument("path", path, (str, PurePath), "a file path (text or a Path)",
                   'e.g. "out/plot.png"')
    return Path(path)


def save_figure(fig, out: Path, **kwargs) -> None:
    """``fig.savefig`` (a matplotlib Figure) in the format ``out``'s suffix names, replacing
    ``out`` in one step."""
    import logging
    import warnings

    formats = fig.canvas.get_supported_filetypes()
    if out.suffix[1:].lower() not in formats:  # (with none, the temporary file's named one)
        raise ConfigError("path", "a file name ending in a format matplotlib writes (.png, .svg, "
                          ".pdf, ...)", str(out), f"e.g. {out.with_suffix('.png')}")
    library = logging.getLogger("matplotlib")  # the backends log through its children
    level = library.level
    with replaced_atomically(out) as temp, warnings.catch_warnings():
        # PostScript's "does not support transparency" (a log record) and the like: the file is
        # written all the same, and a library's warning is not a message of this command
        warnings.simplefilter("ignore")
        library.setLevel(logging.ERROR)
        try:
            fig.savefig(temp, format=out.suffix[1:].lower() or None, **kwargs)
        finally:
            library.setLevel(level)
