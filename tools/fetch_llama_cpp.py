#!/usr/bin/env python3
"""Fill vendor/llama.cpp from the pinned llama-cpp-python source distribution.

The llama.cpp tree reaches this project only through PyPI (see shared/VENDOR.md):
the llama-cpp-python sdist carries it under ``vendor/llama.cpp``. This script
downloads that sdist with pip (once, into a cache folder), checks its sha256,
extracts only the llama.cpp part into the destination and applies our patches.
A tree that is already there (marked by a stamp file) is reused as it is.

Exit status 0 on success; any failure prints one clear line and exits 1.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "llama-cpp-python"
VERSION = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
TREE_PREFIX = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/"
LLAMA_CPP_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
STAMP = ".llamaspec-vendor"

REPO_ROOT = Path(__file__).resolve().parent.parent


class FetchError(RuntimeError):
    pass


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def pip_environment() -> dict:
    """The environment without pip's build isolation, which hides the interpreter's own pip."""
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME", "PIP_BUILD_TRACKER", "PIP_REQ_TRACKER"):
        env.pop(name, None)
    return env


def pip_command(env: dict) -> list[str]:
    """pip of this interpreter, else the first pip on PATH."""
    probe = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, env=env)
    if probe.returncode == 0:
        return [sys.executable, "-m", "pip"]
    for name in ("pip3", "pip"):
        found = shutil.which(name)
        if found:
            return [found]
    raise FetchError("pip is needed to download the llama.cpp source but none was found")


def download_sdist(cache_dir: Path) -> Path:
    cache_dir.mkdir(parents=True, exist_ok=True)
    sdist = cache_dir / SDIST_NAME
    if sdist.exists() and sha256_of(sdist) == SDIST_SHA256:
        return sdist
    sdist.unlink(missing_ok=True)
    print(f"llamaspec: downloading {PACKAGE}=={VERSION} source (about 77 MB) into {cache_dir}", flush=True)
    env = pip_environment()
    cmd = pip_command(env) + ["download", "--no-deps", "--no-binary", ":all:",
                           "-d", str(cache_dir), f"{PACKAGE}=={VERSION}"]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if result.returncode != 0 or not sdist.exists():
        raise FetchError(f"pip could not download {PACKAGE}=={VERSION}: {result.stderr.strip()[-800:]}")
    return sdist


def verify(sdist: Path) -> None:
    actual = sha256_of(sdist)
    if actual != SDIST_SHA256:
        raise FetchError(f"{sdist} has sha256 {actual}, expected {SDIST_SHA256}: refusing to use it")


def extract_tree(sdist: Path, dest: Path) -> None:
    """Extract only the llama.cpp subtree, into a temporary folder first so a partial tree never remains."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".llama.cpp-", dir=dest.parent))
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            members = []
            for member in tar.getmembers():
                if not member.name.startswith(TREE_PREFIX):
                    continue
                member.name = member.name[len(TREE_PREFIX):]
                if member.name:
                    members.append(member)
            if not members:
                raise FetchError(f"{sdist} holds no {TREE_PREFIX}")
            kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(staging, members=members, **kwargs)
        if not (staging / "include" / "llama.h").exists():
            raise FetchError("the extracted tree has no include/llama.h")
        apply_patches(staging)
        (staging / STAMP).write_text(stamp_text())
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def our_patches() -> list[Path]:
    return sorted((REPO_ROOT / "patches").glob("*.patch"))


def stamp_text() -> str:
    """What the stamp of a finished tree says: the sdist, and a digest of the patches applied to it."""
    digest = hashlib.sha256()
    for patch in our_patches():
        digest.update(patch.name.encode() + b"\0" + patch.read_bytes())
    return f"{SDIST_NAME} {SDIST_SHA256} {LLAMA_CPP_COMMIT} patches:{digest.hexdigest()[:16]}\n"


def apply_patches(tree: Path) -> None:
    """Apply patches/*.patch (ours, small and reviewed) in name order."""
    for patch in our_patches():
        result = subprocess.run(["patch", "-p1", "-N", "-i", str(patch)], cwd=tree, capture_output=True, text=True)
        if result.returncode != 0:
            raise FetchError(f"patch {patch.name} does not apply: {result.stdout.strip()[-400:]}")
        print(f"llamaspec: applied {patch.name}", flush=True)


def ensure_tree(dest: Path, cache_dir: Path) -> Path:
    stamp = dest / STAMP
    if stamp.exists() and stamp.read_text() == stamp_text():
        return dest
    if stamp.exists():
        print("llamaspec: the patches changed since the tree was extracted: extracting it again", flush=True)
    elif dest.exists() and any(dest.iterdir()):
        raise FetchError(f"{dest} exists but was not made by this script; remove it or set LLAMASPEC_LLAMA_CPP_DIR")
    sdist = download_sdist(cache_dir)
    verify(sdist)
    extract_tree(sdist, dest)
    print(f"llamaspec: llama.cpp {LLAMA_CPP_COMMIT[:12]} ready in {dest}", flush=True)
    return dest


def default_cache_dir() -> Path:
    env = os.environ.get("LLAMASPEC_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llamaspec"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=REPO_ROOT / "vendor" / "llama.cpp")
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir())
    parser.add_argument("--sdist", type=Path, help="use this already downloaded sdist (still sha256-checked)")
    args = parser.parse_args(argv)
    try:
        if args.sdist:
            verify(args.sdist)
            if not (args.dest / STAMP).exists() or (args.dest / STAMP).read_text() != stamp_text():
                extract_tree(args.sdist, args.dest)
        else:
            ensure_tree(args.dest, args.cache_dir)
    except (FetchError, OSError, tarfile.TarError) as exc:
        print(f"llamaspec: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
