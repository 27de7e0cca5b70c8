"""cache.py — attnc.compile's on-disk cache of compiled PTX.

An entry is the PTX (with its manifest) that attnc wrote for one source
text, target and -backward flag, by one attnc binary. The key hashes those:
the source's bytes (not its path: attnc's output does not name the file),
the target, the flag, and the compiler as ccache's default
`compiler_check = mtime` sees it (the binary's real path, size and
modification time), so a rebuilt or reinstalled attnc misses. Where:
$ATTNC_CACHE_DIR, else $XDG_CACHE_HOME/attnc, else ~/.cache/attnc. Entries
are written to a temporary file in the same directory and renamed into
place, so a reader never sees half a file and concurrent compiles of one
block agree (the last rename wins, with the same bytes).
"""
import hashlib
import json
import os
import shutil
import tempfile

_FORMAT = 1   # bump when the key's meaning or an entry's layout changes


def directory():
    """The cache's directory (it may not exist yet)."""
    if os.environ.get("ATTNC_CACHE_DIR"):
        return os.environ["ATTNC_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "attnc")


def key(source_bytes, arch, backward, compiler):
    """The entry's name for this source, target, flag and attnc binary."""
    st = os.stat(compiler)
    what = {"format": _FORMAT, "arch": arch or "", "backward": bool(backward),
            "compiler": [os.path.realpath(compiler), st.st_size, st.st_mtime_ns],
            "source": hashlib.sha256(source_bytes).hexdigest()}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def path(k):
    return os.path.join(directory(), k[:2], k + ".ptx")


def lookup(k):
    """The entry's path, or None when there is none."""
    p = path(k)
    return p if os.path.isfile(p) else None


def store(k, ptx):
    """Copies the PTX file ptx into the cache as entry k; returns its path.
    A cache that cannot be written is skipped (None): compiling still works."""
    p = path(k)
    try:
        os.makedirs(os.path.dirname(p), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(p), prefix=".tmp-", suffix=".ptx")
        with os.fdopen(fd, "wb") as f, open(ptx, "rb") as src:
            shutil.copyfileobj(src, f)
        os.replace(tmp, p)
        return p
    except OSError:
        try:
            os.remove(tmp)
        except (OSError, UnboundLocalError):
            pass
        return None


def drop(k):
    """Removes entry k (one that no longer loads)."""
    try:
        os.remove(path(k))
    except OSError:
        pass
