"""Where profiles are: the bundled ones (``PROFILES_DIR``) and a name or path as a scenario's
``hardware.profile`` gives it (split from ltsim/profiles.py, which re-exports these names)."""

from __future__ import annotations

from pathlib import Path

from ltsim.errors import ProfileError

_PACKAGE = Path(__file__).resolve().parent
# Installed from a wheel the bundled tables ship inside the package (pyproject.toml maps the
# repository's profiles/ to ltsim/_profiles); in a checkout they are the repository's profiles/.
PROFILES_DIR = (_PACKAGE / "_profiles" if (_PACKAGE / "_profiles").is_dir()
                else _PACKAGE.parent / "profiles")


def available_profiles() -> list[str]:
    """Names of the profile directories (with a meta.json) under the repository's profiles/."""
    if not PROFILES_DIR.is_dir():
        return []
    return sorted(p.name for p in PROFILES_DIR.iterdir() if (p / "meta.json").is_file())


def resolve_profile(directory: str | Path) -> Path:
    """A bare name ("h100-sxm5-80gb") is looked up in the repository's profiles/ first, then as a
    path, then among the bundled names in any case; one written as a folder ("cpu-ci/") is tried
    as a path first; a path is tried as given, then relative to the repository. Raises
    ProfileError."""
    text = str(directory)
    if not text.strip():  # (PROFILES_DIR / "" is the folder of all profiles)
        raise ProfileError("a profile's name or path is empty. Fix: name one of "
                           f"{', '.join(available_profiles()) or 'none'}")
    name = text.rstrip("/\\") or text  # a folder's name may end in a slash ("cpu-ci/")
    bare = "/" not in name and "\\" not in name
    bundled = PROFILES_DIR.joinpath(*Path(text).parts[1:]) if text.startswith("profiles/") else None
    if bare and name != text:  # written as a folder (as a shell completes one): a local first
        candidates = [Path(text), PROFILES_DIR / name]
    elif bare:
        candidates = [PROFILES_DIR / name, Path(text)]
    else:
        candidates = [Path(text), PROFILES_DIR.parent / text, *([bundled] if bundled else [])]
    for path in candidates:
        try:
            if path.is_dir():
                return path.resolve()
        except OSError:  # a path the system refuses (too long, ...): not a profile
            continue
    if bare:  # a bundled name in another case ("CPU-CI"), as model, dataset and strategy names
        for other in available_profiles():
            if other.lower() == name.lower():
                return (PROFILES_DIR / other).resolve()
    raise ProfileError(f"unknown profile '{text}' (not a directory). Available in {PROFILES_DIR}: "
                       f"{', '.join(available_profiles()) or 'none'}. Fix: use one of these names "
                       "or the path of a directory written by `ltsim profile`")


def shadowed_folder(directory: str | Path) -> str:
    """A note when a bare name resolves to a bundled profile while a folder of that name is in
    the current directory too (which the user may have meant), else ""."""
    text = str(directory)
    if "/" in text or "\\" in text or not text.strip() or text in (".", ".."):
        return ""
    try:
        both = (PROFILES_DIR / text).is_dir() and Path(text).is_dir()
        same = both and (PROFILES_DIR / text).resolve() == Path(text).resolve()
    except OSError:
        return ""
    if not both or same:
        return ""
    return (f"profile '{text}' is the bundled one; a folder ./{text} here was not used "
            f"(write ./{text} to use it)")
