"""The disk cache of parsed profiles (ltsim/profile_cache.py): a second load of the same inputs
parses nothing, any edit parses again, and a cache that cannot be used only costs the parse."""

from __future__ import annotations

import os

import shutil

import pytest

from ltsim import profile_cache, profiles
from ltsim.errors import ProfileError
from ltsim.profiles import PROFILES_DIR, Profile

SOURCE = PROFILES_DIR / "cpu-ci"


@pytest.fixture
def profile_dir(tmp_path):
    out = tmp_path / "prof"
    shutil.copytree(SOURCE, out)
    return out


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("LTSIM_CACHE_DIR", str(folder))
    return folder / "profiles"


def _load(directory) -> Profile:
    return profile_cache.cached(directory, "", lambda: Profile(directory))


def _parses(monkeypatch) -> list:
    """Counts Profile constructions (the parse) from here on."""
    made = []
    real = Profile.__init__

    def counting(self, *args, **kwargs):
        made.append(1)
        real(self, *args, **kwargs)

    monkeypatch.setattr(Profile, "__init__", counting)
    return made


def test_second_load_is_not_parsed_and_answers_alike(profile_dir, cache, monkeypatch):
    first = _load(profile_dir)
    assert len(list(cache.glob("*.pickle"))) == 1
    made = _parses(monkeypatch)
    second = _load(profile_dir)
    assert made == [] and second is not first
    assert second.path == first.path and second.attention_kernel == first.attention_kernel
    for profile in (first, second):
        assert profile.warnings() == []
    assert second.gemm_time_s(4096, 4096, 4096, "fp32") == first.gemm_time_s(4096, 4096, 4096, "fp32")
    assert (second.attention_time_s(3000, 5000, num_heads=8, num_kv_heads=8, head_dim=64)
            == first.attention_time_s(3000, 5000, num_heads=8, num_kv_heads=8, head_dim=64))


def test_an_edited_table_is_parsed_again(profile_dir, cache, monkeypatch):
    before = _load(profile_dir).gemm_time_s(512, 512, 512, "fp32")
    gemm = profile_dir / "gemm.csv"
    lines = gemm.read_text().splitlines()
    header = lines[0].split(",")
    col = header.index("time_s")
    doubled = [lines[0]] + [",".join(str(float(v) * 2) if i == col else v
                                     for i, v in enumerate(line.split(",")))
                            for line in lines[1:] if line.strip()]
    gemm.write_text("\n".join(doubled) + "\n")
    made = _parses(monkeypatch)
    after = _load(profile_dir).gemm_time_s(512, 512, 512, "fp32")
    assert made == [1]
    assert after == pytest.approx(2 * before)
    assert len(list(cache.glob("*.pickle"))) == 2


def test_kernel_and_path_are_part_of_the_key(profile_dir, cache, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(profile_dir, other)
    _load(profile_dir)
    _load(other)
    profile_cache.cached(profile_dir, "sdpa", lambda: Profile(profile_dir))
    assert len(list(cache.glob("*.pickle"))) == 3


def test_a_broken_entry_is_parsed_again(profile_dir, cache, monkeypatch):
    _load(profile_dir)
    (entry,) = cache.glob("*.pickle")
    entry.write_bytes(b"not a pickle")
    made = _parses(monkeypatch)
    assert _load(profile_dir).gemm_time_s(64, 64, 64, "fp32") > 0
    assert made == [1]


def test_an_entry_of_another_type_is_parsed_again(profile_dir, cache, monkeypatch):
    """A pickle of something else under the entry's name was an AttributeError traceback."""
    import pickle

    monkeypatch.setattr(profiles, "_CACHE", {})
    profiles.load_profile(profile_dir)
    (entry,) = cache.glob("*.pickle")
    entry.write_bytes(pickle.dumps({"not": "a profile"}))
    monkeypatch.setattr(profiles, "_CACHE", {})
    made = _parses(monkeypatch)
    assert profiles.load_profile(profile_dir).gemm_time_s(64, 64, 64, "fp32") > 0
    assert made == [1]


def test_a_bad_table_raises_and_is_not_cached(profile_dir, cache):
    (profile_dir / "gemm.csv").write_text("m,n,k,dtype\n1,2,3,bf16\n")
    with pytest.raises(ProfileError, match="lacks column"):
        _load(profile_dir)
    assert not list(cache.glob("*.pickle"))


def test_turned_off_or_unwritable(profile_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("LTSIM_CACHE_DIR", "")
    assert profile_cache.cache_dir() is None
    made = _parses(monkeypatch)
    _load(profile_dir)
    _load(profile_dir)
    assert made == [1, 1]
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("LTSIM_CACHE_DIR", str(blocker))  # a file where the folder would go
    assert _load(profile_dir).gemm_time_s(64, 64, 64, "fp32") > 0


def test_pruned_to_the_most_recently_used(profile_dir, cache, monkeypatch):
    monkeypatch.setattr(profile_cache, "MAX_ENTRIES", 2)
    for kernel in ("a", "b", "c"):
        profile_cache.cached(profile_dir, kernel, lambda: Profile(profile_dir))
    assert len(list(cache.glob("*.pickle"))) == 2
    made = _parses(monkeypatch)
    profile_cache.cached(profile_dir, "c", lambda: Profile(profile_dir))
    profile_cache.cached(profile_dir, "a", lambda: Profile(profile_dir))  # dropped: parsed again
    assert made == [1]


def test_pruning_leaves_files_it_did_not_write(profile_dir, cache, monkeypatch):
    # LTSIM_CACHE_DIR may name a folder that holds the user's own pickles: they were deleted
    monkeypatch.setattr(profile_cache, "MAX_ENTRIES", 1)
    cache.mkdir(parents=True, exist_ok=True)
    mine = cache / "model1.pickle"
    mine.write_bytes(b"not ltsim's")
    os.utime(mine, (0, 0))  # the oldest file of the folder
    for kernel in ("a", "b"):
        profile_cache.cached(profile_dir, kernel, lambda: Profile(profile_dir))
    assert mine.read_bytes() == b"not ltsim's"
    assert len(list(cache.glob("*.pickle"))) == 2  # its one entry, and the user's file


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch, tmp_path):
    monkeypatch.delenv("LTSIM_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/x")  # the XDG spec: not a base directory
    assert profile_cache.cache_dir() == tmp_path / ".cache" / "ltsim" / "profiles"


def test_load_profile_uses_it(profile_dir, cache, monkeypatch):
    monkeypatch.setattr(profiles, "_CACHE", {})
    profiles.load_profile(profile_dir)
    monkeypatch.setattr(profiles, "_CACHE", {})  # a new process: only the disk cache is left
    made = _parses(monkeypatch)
    assert profiles.load_profile(profile_dir).path == profile_dir.resolve()
    assert made == []


def test_every_module_a_cached_profile_holds_objects_of_keys_the_cache():
    """An edit to a module whose classes a cached Profile pickles must be a miss: collectives.py,
    split from profiles.py, held the collective curves but was not among the sources, so an edit
    to it served the stale curves (a review)."""
    import io
    import pickle

    modules: set[str] = set()

    class Recorder(pickle.Pickler):
        def reducer_override(self, obj):
            module = getattr(type(obj), "__module__", "")
            if module.startswith("ltsim."):
                modules.add(module.split(".")[-1] + ".py")
            return NotImplemented

    Recorder(io.BytesIO()).dump(Profile(PROFILES_DIR / "h100-sxm5-80gb"))
    assert modules and modules <= set(profile_cache._SOURCES), modules - set(profile_cache._SOURCES)


def _scaled(table, factor: float) -> None:
    """Every time_s of a CSV table times ``factor``."""
    lines = table.read_text().splitlines()
    column = lines[0].split(",").index("time_s")
    table.write_text("\n".join([lines[0]] + [
        ",".join(repr(float(v) * factor) if i == column else v
                 for i, v in enumerate(line.split(","))) for line in lines[1:]]) + "\n")


def test_a_profile_edited_in_a_session_is_read_again(profile_dir, cache, monkeypatch):
    """A notebook that rewrites a table and simulates again: the process kept the first parse
    by path (a gemm.csv ten times slower still read the old times, and a sweep store filed
    them under the new files' digest). The in-process cache checks the files' stamps, and the
    eager floor read by path is keyed by the Profile it goes with."""
    from ltsim.costs.table import TableCostModel
    from ltsim.hardware import ClusterSpec, get_device
    from ltsim.model import get_model

    monkeypatch.setattr(profiles, "_CACHE", {})
    first = profiles.load_profile(profile_dir)
    assert profiles.load_profile(profile_dir) is first  # unchanged: no parse
    before = first.gemm_time_s(64, 64, 64, "fp32")
    _scaled(profile_dir / "gemm.csv", 10)
    again = profiles.load_profile(profile_dir)
    assert again is not first
    assert again.gemm_time_s(64, 64, 64, "fp32") == pytest.approx(10 * before)
    cluster = ClusterSpec(device=get_device("cpu"), gpus_per_node=1, profile=str(profile_dir))
    model = get_model("llama-tiny")
    floor = TableCostModel(model, cluster)._compute._floor
    _scaled(profile_dir / "eager.csv", 3)
    assert TableCostModel(model, cluster)._compute._floor != floor


def test_a_folder_whose_name_is_not_utf8_is_cached(tmp_path, cache, monkeypatch):
    """A fuzzing review: a profile folder whose name holds a byte that is not UTF-8 (Python
    hands it over as a surrogate) was a UnicodeEncodeError where the entry's name is hashed."""
    import os

    directory = tmp_path / os.fsdecode(b"\xffprof")
    shutil.copytree(SOURCE, directory)
    first = _load(directory)
    assert len(list(cache.glob("*.pickle"))) == 1
    made = _parses(monkeypatch)
    second = _load(directory)
    assert made == [] and second.path == first.path
