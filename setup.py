"""Builds the shared-memory writer/reader (plugin/src/daemon/shm_*.c) as a ctypes library.

The control channel's publish step must have C11 release ordering (correct on aarch64 as well as
x86-64), so the daemon calls the same C source the plugin reads with instead of writing the
mapping from Python. The library has no Python entry points; linkguardd.shm loads it with ctypes.
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "linkguardd._lgshm",
            sources=["plugin/src/daemon/shm_writer.c", "plugin/src/daemon/shm_reader.c"],
            include_dirs=["plugin/include"],
            extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra", "-D_GNU_SOURCE"],
        )
    ]
)
