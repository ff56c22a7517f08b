"""ctypes binding to linkguardd._lgshm, the C writer and reader (plugin/src/daemon/shm_*.c).

The library is a plain shared object built by setup.py, not a Python module: it is found with
importlib and loaded with ctypes.CDLL, and every function used gets its argtypes and restype here,
so a wrong call fails in Python instead of corrupting the stack.
"""
from __future__ import annotations

import ctypes
import functools
import importlib.util

from linkguardd.shm.layout import LG_SHM_MAX_NICS, LG_SHM_NIC_SIZE


class LgShmReader(ctypes.Structure):
    """struct lg_shm_reader (checked against C by tests/unit/test_shm_layout.py)."""

    _fields_ = [
        ("base", ctypes.c_void_p),
        ("size", ctypes.c_size_t),
        ("hdr", ctypes.c_void_p),
        ("nics", ctypes.c_void_p),
        ("ring", ctypes.c_void_p),
        ("nic_capacity", ctypes.c_uint32),
        ("ring_mask", ctypes.c_uint32),
        ("dev", ctypes.c_uint64),
        ("ino", ctypes.c_uint64),
    ]


class LgShmSnapshot(ctypes.Structure):
    """struct lg_shm_snapshot."""

    _fields_ = [
        ("generation", ctypes.c_uint64),
        ("nic_count", ctypes.c_uint32),
        # uint64 elements give the array struct lg_shm_nic's 8-byte alignment (offset 16, not 12)
        ("nics", ctypes.c_uint64 * (LG_SHM_MAX_NICS * LG_SHM_NIC_SIZE // 8)),
    ]


_ReaderP = ctypes.POINTER(LgShmReader)
_u32, _u64, _int = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int

# name: (restype, argtypes)
_PROTOTYPES: dict[str, tuple[object, list[object]]] = {
    "lg_shm_writer_create": (
        ctypes.c_void_p,
        [ctypes.c_char_p, _u32, _u32, _u64, ctypes.POINTER(_int)],
    ),
    "lg_shm_writer_update": (_u64, [ctypes.c_void_p, ctypes.c_char_p, _u32]),
    "lg_shm_writer_push_event": (_u64, [ctypes.c_void_p, ctypes.c_char_p]),
    "lg_shm_writer_heartbeat": (None, [ctypes.c_void_p, _u64]),
    "lg_shm_writer_close": (None, [ctypes.c_void_p, _int]),
    "lg_shm_reader_open": (_int, [_ReaderP, ctypes.c_char_p]),
    "lg_shm_reader_close": (None, [_ReaderP]),
    "lg_shm_strerror": (ctypes.c_char_p, [_int]),
    "lg_shm_generation": (_u64, [_ReaderP]),
    "lg_shm_snapshot_read": (_int, [_ReaderP, ctypes.POINTER(LgShmSnapshot)]),
    "lg_shm_events_read": (
        _int,
        [_ReaderP, ctypes.POINTER(_u64), ctypes.c_void_p, _int, ctypes.POINTER(_int)],
    ),
    "lg_shm_ring_head": (_u64, [_ReaderP]),
    "lg_shm_alive": (_int, [_ReaderP, _u64, _u64]),
    "lg_shm_replaced": (_int, [_ReaderP, ctypes.c_char_p]),
}


def library_path() -> str:
    spec = importlib.util.find_spec("linkguardd._lgshm")
    if spec is None or spec.origin is None:
        raise ImportError(
            "linkguardd._lgshm is not built: run `pip install -e .` (or "
            "`python setup.py build_ext --inplace`) in the repository"
        )
    return spec.origin


@functools.cache
def lib() -> ctypes.CDLL:
    """The C library with every prototype declared (loaded once per process)."""
    cdll = ctypes.CDLL(library_path())
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(cdll, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return cdll


def strerror(status: int) -> str:
    msg: bytes = lib().lg_shm_strerror(status)
    return msg.decode()
