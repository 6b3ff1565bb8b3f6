"""The harness's preloaded C libraries (`clockshim.c`, `bindshim.c`), built with the
machine's C compiler into a run's directory, again only when the source is newer."""

import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def build(name, out_dir):
    """The path of `<name>.so`, built from `<name>.c` in this folder."""
    path = os.path.join(out_dir, f"{name}.so")
    source = os.path.join(HERE, f"{name}.c")
    if not os.path.exists(path) or os.path.getmtime(path) < os.path.getmtime(source):
        subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-o", path, source, "-ldl"],
                       check=True)
    return path
