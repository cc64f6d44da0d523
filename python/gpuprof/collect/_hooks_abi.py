"""What identifies a torch build's C++ binary interface, as the operator hooks see it: one key for the
hooks cache (collect/hooks.py) and for the hooks prebuilt into the package (CMakeLists.txt runs this
file with each Python whose torch it builds the hooks for, so both sides compute the key here).

What breaks that interface is the torch source revision (``torch.version.git_version``: the same
for ``2.13.0+cpu`` and ``2.13.0+cu130``, different for every release), the C++ std::string ABI
torch was built with, and the CPython version; local version labels (``+cpu``, ``+cu130``) do not.

This file imports nothing from gpuprof, so that the build can run it before gpuprof exists.
"""

from __future__ import annotations

import os
import sys


def torch_build(torch) -> dict:
    """What identifies the installed torch's C++ binary interface."""
    return {
        "version": str(torch.__version__),
        "git_version": str(getattr(torch.version, "git_version", "") or ""),
        "cxx11_abi": str(int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))),
    }


def abi_key(build: dict, cache_tag: str | None = None) -> str:
    """``torch-2.13.0-cf30153c4c13-abi1-cpython-311``: the torch part of a hooks cache key, and the
    folder name of the hooks prebuilt for that torch (python/gpuprof/_hooks_prebuilt/KEY/)."""
    base = build["version"].split("+", 1)[0]
    tag = cache_tag or sys.implementation.cache_tag
    return f"torch-{base}-{build['git_version'][:12] or 'nogit'}-abi{build['cxx11_abi']}-{tag}"


if __name__ == "__main__":  # for CMakeLists.txt: the key, then what the build needs to know
    import logging

    logging.disable(logging.WARNING)  # a CUDA build of torch without the toolkit warns on import
    import torch

    build = torch_build(torch)
    print(abi_key(build))
    print(build["version"])
    print(os.path.dirname(torch.__file__))
    print(build["cxx11_abi"])
    print(sys.implementation.cache_tag)
