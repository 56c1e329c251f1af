"""The PEP 517 build backend of the inagg Python package.

The package is a ctypes layer over libinagg_capi.so, so its wheel is that
library plus the package's modules (``inagg/__init__.py``, and
``inagg/torch.py``, which imports only where torch is): this backend runs ``cargo build
--release -p inagg-capi`` in the checkout the package sits in and writes a
``py3-none-linux_<arch>`` wheel (any Python 3, this platform) with the
library beside the package, where ``inagg.library_path()`` looks first.
It needs nothing from PyPI (setuptools-rust would need itself and
setuptools from there).

Config settings (``pip install -C key=value``):
  features: cargo features of inagg-capi, e.g. ``dpdk`` (backend=dpdk)
  library:  bundle this libinagg_capi.so instead of running cargo

There is no sdist: the library builds from the whole Cargo workspace, not
from this directory.
"""

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
LIBRARY = "libinagg_capi.so"
PACKAGE = "inagg"

# Zip entries get one fixed time, so the same inputs give the same wheel.
_EPOCH = (1980, 1, 1, 0, 0, 0)


class BuildError(Exception):
    """The wheel cannot be built; the message says why and what to do."""


def _string_keys(path, table):
    """The ``key = "string"`` entries of ``[table]`` in a TOML file (all
    this backend reads; no TOML parser is needed before Python 3.11)."""
    entries, current = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            header = re.fullmatch(r"\[([^\[\]]+)\]", line)
            if header:
                current = header.group(1).strip()
                continue
            entry = re.fullmatch(r'([A-Za-z0-9_-]+)\s*=\s*"([^"]*)"', line)
            if entry and current == table:
                entries[entry.group(1)] = entry.group(2)
    return entries


def _metadata():
    project = _string_keys(os.path.join(HERE, "pyproject.toml"), "project")
    version = _string_keys(os.path.join(REPO, "Cargo.toml"), "workspace.package").get("version")
    if not version:
        raise BuildError("no [workspace.package] version in %s" % os.path.join(REPO, "Cargo.toml"))
    project["version"] = version
    return project


def _platform_tag():
    platform = sysconfig.get_platform()
    if not platform.startswith("linux-"):
        raise BuildError("inagg builds on Linux only, not %s" % platform)
    return platform.replace("-", "_").replace(".", "_")


def _setting(settings, key):
    value = (settings or {}).get(key)
    if isinstance(value, list):
        raise BuildError("config setting %r given %d times; give it once" % (key, len(value)))
    return value or None


def _cargo(args):
    try:
        return subprocess.run(["cargo"] + args, check=True, stdout=subprocess.PIPE, cwd=REPO).stdout
    except FileNotFoundError:
        raise BuildError("cargo not found: install a Rust toolchain (1.91+) from https://rustup.rs") from None
    except subprocess.CalledProcessError as e:
        raise BuildError("cargo %s failed (exit %d); its messages are above" % (args[0], e.returncode)) from None


def _build_library(features):
    """Builds the library with cargo; returns its path."""
    manifest = os.path.join(REPO, "Cargo.toml")
    if not os.path.exists(os.path.join(REPO, "capi", "Cargo.toml")):
        raise BuildError("%s is not inside an inagg checkout: build from the repository" % HERE)
    args = ["build", "--release", "-p", "inagg-capi", "--manifest-path", manifest]
    if features:
        args += ["--features", features]
    print("inagg_build: cargo " + " ".join(args), file=sys.stderr)
    _cargo(args)
    meta = json.loads(_cargo(["metadata", "--format-version", "1", "--no-deps", "--manifest-path", manifest]))
    return os.path.join(meta["target_directory"], "release", LIBRARY)


def _stripped(library, scratch):
    """A copy of the library without debug sections where `strip` exists
    (the release profile keeps line tables: a tenth of the size without)."""
    copy = os.path.join(scratch, LIBRARY)
    shutil.copyfile(library, copy)
    strip = shutil.which("strip")
    if strip and subprocess.run([strip, "--strip-debug", copy]).returncode != 0:
        shutil.copyfile(library, copy)
    return copy


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def _write_wheel(path, files):
    """files: [(archive path, bytes, executable)]; adds the RECORD."""
    record_path = files[-1][0].rsplit("/", 1)[0] + "/RECORD"
    record = [_record_line(name, data) for name, data, _ in files] + [record_path + ",,"]
    entries = files + [(record_path, ("\n".join(record) + "\n").encode(), False)]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data, executable in entries:
            info = zipfile.ZipInfo(name, _EPOCH)
            info.external_attr = (0o755 if executable else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)


def _dist_info(meta, tag):
    lines = [
        "Metadata-Version: 2.1",
        "Name: %s" % meta["name"],
        "Version: %s" % meta["version"],
        "Summary: %s" % meta.get("description", ""),
        "License: %s" % meta.get("license", ""),
        "Requires-Python: %s" % meta.get("requires-python", ">=3"),
    ]
    wheel = ["Wheel-Version: 1.0", "Generator: inagg_build", "Root-Is-Purelib: false", "Tag: %s" % tag]
    return ("\n".join(lines) + "\n").encode(), ("\n".join(wheel) + "\n").encode()


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    meta = _metadata()
    tag = "py3-none-" + _platform_tag()
    library = _setting(config_settings, "library")
    if library is None:
        library = _build_library(_setting(config_settings, "features"))
    elif _setting(config_settings, "features"):
        raise BuildError("give features or library, not both: a library is bundled as it was built")
    if not os.path.isfile(library):
        raise BuildError("no library at %s" % library)
    with tempfile.TemporaryDirectory() as scratch:
        lib = _read(_stripped(library, scratch))
    info = "%s-%s.dist-info" % (meta["name"], meta["version"])
    metadata, wheel_file = _dist_info(meta, tag)
    modules = sorted(f for f in os.listdir(os.path.join(HERE, PACKAGE)) if f.endswith(".py"))
    files = [
        (PACKAGE + "/" + m, _read(os.path.join(HERE, PACKAGE, m)), False) for m in modules
    ] + [
        (PACKAGE + "/" + LIBRARY, lib, True),
        (info + "/METADATA", metadata, False),
        (info + "/WHEEL", wheel_file, False),
    ]
    name = "%s-%s-%s.whl" % (meta["name"], meta["version"], tag)
    _write_wheel(os.path.join(wheel_directory, name), files)
    return name


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    """The dist-info without building the library, which pip asks for first."""
    meta = _metadata()
    metadata, wheel_file = _dist_info(meta, "py3-none-" + _platform_tag())
    info = "%s-%s.dist-info" % (meta["name"], meta["version"])
    os.makedirs(os.path.join(metadata_directory, info))
    for name, data in (("METADATA", metadata), ("WHEEL", wheel_file)):
        with open(os.path.join(metadata_directory, info, name), "wb") as f:
            f.write(data)
    return info


def build_sdist(sdist_directory, config_settings=None):
    raise BuildError(
        "inagg has no sdist: the library builds from the whole Cargo workspace. "
        "Build a wheel from the checkout instead (pip wheel ./capi/python, or python -m build --wheel)"
    )


def get_requires_for_build_wheel(config_settings=None):
    return []
