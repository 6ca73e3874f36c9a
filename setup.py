"""Build hook for kohort's optional C extensions; all metadata lives in pyproject.toml.

`kohort.protocol._crecords` (the compiled record decoder) and `kohort.storage._csync` (the
group-commit fsync worker) are declared optional: where no C compiler is available the build prints
a warning and kohort installs as pure Python (records.py then uses its Python decoder;
`kohort.protocol.records.HAVE_EXTENSION` tells which one runs; the broker's SyncPump then fsyncs on
a Python thread).
"""
import os

from setuptools import Extension, setup

_extra = ["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
          "-Wno-missing-field-initializers"] if os.name == "posix" else []

setup(
    ext_modules=[
        Extension(
            "kohort.protocol._crecords",
            sources=["src/kohort/protocol/_crecords.c"],
            extra_compile_args=_extra + (["-pthread"] if os.name == "posix" else []),
            # the native sealer's thread, and dlopen of the codec libraries (libdl: glibc < 2.34)
            extra_link_args=["-pthread", "-ldl"] if os.name == "posix" else [],
            optional=True,
        ),
        Extension(
            # the group-commit fsync worker: native threads and an eventfd (Linux; else the
            # broker's SyncPump uses a Python thread)
            "kohort.storage._csync",
            sources=["src/kohort/storage/_csync.c"],
            extra_compile_args=_extra + (["-pthread"] if os.name == "posix" else []),
            extra_link_args=["-pthread"] if os.name == "posix" else [],
            optional=True,
        ),
    ],
)
