"""What a folder holds, to check that a refused command wrote nothing and changed no input."""

from __future__ import annotations

import hashlib
import os


def snapshot(root) -> dict:
    """Every entry under ``root``: a file by its content's digest, a symlink by its target (not followed), a folder
    by its name. Two snapshots are equal when nothing was written, removed or changed."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                out[rel] = "-> " + os.readlink(path)
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    out[rel] = hashlib.sha256(f.read()).hexdigest()
            else:
                out[rel] = "dir" if os.path.isdir(path) else "other"
    return out
