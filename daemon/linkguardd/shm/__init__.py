"""The shared-memory control channel: the daemon writes it, every NCCL process reads it.

The layout and the concurrency contract live in plugin/include/linkguard_shm.h; layout.py mirrors
the structs, writer.py and reader.py call the C writer and reader (plugin/src/daemon/shm_*.c) through
ctypes (native.py), so the ordering on aarch64 is the C11 one and not Python's.
"""
from linkguardd.shm.layout import Event, HeaderInfo, NicEntry, ShmStatus
from linkguardd.shm.reader import ShmReader, ShmUnavailable
from linkguardd.shm.writer import ShmWriter

__all__ = [
    "Event",
    "HeaderInfo",
    "NicEntry",
    "ShmReader",
    "ShmStatus",
    "ShmUnavailable",
    "ShmWriter",
]
