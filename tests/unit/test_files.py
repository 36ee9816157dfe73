"""ltsim.files: inputs are read without ever waiting on a device, a pipe or a kernel file."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from ltsim.files import input_blocks, read_input, replaced_atomically, write_text_atomically


def test_a_regular_file_is_read_whole_or_up_to_one_past_the_limit(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"x" * 3000)
    assert read_input(path) == b"x" * 3000
    assert read_input(path, 100) == b"x" * 101  # enough to tell it is too big
    assert read_input(path, 5000) == b"x" * 3000
    assert b"".join(input_blocks(path)) == b"x" * 3000


def test_a_named_pipe_is_refused_at_once(tmp_path):
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    with pytest.raises(OSError) as info:
        read_input(pipe)
    assert info.value.errno == errno.EINVAL


def test_a_folder_is_an_oserror(tmp_path):
    with pytest.raises(OSError):
        read_input(tmp_path)


@pytest.mark.skipif(not os.access("/proc/kmsg", os.R_OK), reason="needs read access to /proc/kmsg")
def test_a_kernel_file_that_waits_for_data_is_refused_not_waited_on(tmp_path):
    link = tmp_path / "scenario.toml"
    link.symlink_to("/proc/kmsg")  # a regular file of size 0 whose plain read blocks
    outcome: list = []

    def read() -> None:
        try:
            outcome.append(read_input(link, 1024))
        except OSError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "read_input waited on /proc/kmsg"
    # either the kernel had nothing (EAGAIN) or a message was pending and came back at once
    assert isinstance(outcome[0], bytes) or outcome[0].errno == errno.EAGAIN


def test_an_unknown_users_home_is_left_as_written():
    from pathlib import Path

    from ltsim.files import expand_user

    assert expand_user("~nosuchuser-7f3a/l.txt") == Path("~nosuchuser-7f3a/l.txt")
    assert expand_user("/abs/l.txt") == Path("/abs/l.txt")


def test_the_profile_cache_is_off_under_an_unknown_users_home(monkeypatch):
    from ltsim.profile_cache import cache_dir

    monkeypatch.setenv("LTSIM_CACHE_DIR", "~nosuchuser-7f3a/cache")
    assert cache_dir() is None  # not a folder named "~nosuchuser-7f3a" in the working directory


def test_an_output_cut_short_leaves_the_earlier_file_whole(tmp_path):
    """check --update rewrote its input in place, and a trace cut short by a full disk or a file
    size limit was left truncated: now the whole output replaces the file in one step."""
    out = tmp_path / "reg.toml"
    out.write_text("kept\n")
    os.chmod(out, 0o640)
    with pytest.raises(OSError):
        with replaced_atomically(out) as temp:
            temp.write_text("half")
            raise OSError(errno.EFBIG, "File too large")
    assert out.read_text() == "kept\n"
    assert [p.name for p in tmp_path.iterdir()] == ["reg.toml"]  # no temporary file left
    write_text_atomically(out, "new\n")
    assert out.read_text() == "new\n" and (os.stat(out).st_mode & 0o777) == 0o640  # its mode kept
    fresh = tmp_path / "fresh.json"
    write_text_atomically(fresh, "{}")
    umask = os.umask(0)
    os.umask(umask)
    assert (os.stat(fresh).st_mode & 0o777) == 0o666 & ~umask  # as a plain write makes it


def test_an_output_through_a_link_replaces_the_file_it_points_at(tmp_path):
    real, link = tmp_path / "real.json", tmp_path / "link.json"
    real.write_text("old")
    link.symlink_to(real.name)
    write_text_atomically(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
