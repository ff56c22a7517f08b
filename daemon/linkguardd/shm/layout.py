"""Python mirror of the control channel's layout (plugin/include/linkguard_shm.h, version 2).

The C header is canonical; tests/unit/test_shm_layout.py compiles plugin/tools/lg_shm_layout.c
and compares every offset and size below with C's, so the two cannot drift. The structs, as in C
(all little-endian, no padding)::

    struct lg_shm_header {              /* 256 B */
        uint32_t magic;                 /*   0: LG_SHM_MAGIC */
        uint32_t version;               /*   4 */
        uint32_t compat_version;        /*   8 */
        uint32_t header_size;           /*  12 */
        uint32_t nic_size;              /*  16 */
        uint32_t nic_capacity;          /*  20 */
        uint32_t event_size;            /*  24 */
        uint32_t ring_slots;            /*  28: power of two */
        uint64_t nic_table_offset;      /*  32 */
        uint64_t ring_offset;           /*  40 */
        uint64_t total_size;            /*  48 */
        uint32_t daemon_pid;            /*  56 */
        uint32_t reserved0;             /*  60 */
        uint64_t generation;            /*  64: seqlock; even = stable */
        uint64_t heartbeat_ns;          /*  72: CLOCK_MONOTONIC */
        uint64_t ring_head;             /*  80: newest event seq (0 = none) */
        uint32_t nic_count;             /*  88 */
        uint32_t reserved1;             /*  92 */
        uint64_t reserved2[4];          /*  96 */
        uint64_t daemon_start_ns;       /* 128: CLOCK_REALTIME */
        uint64_t daemon_start_monotonic_ns; /* 136 */
        uint8_t reserved3[112];         /* 144 */
    };

    struct lg_shm_nic {                 /* 512 B */
        char name[16];                  /*   0: netdev, NUL-terminated */
        uint32_t state;                 /*  16: enum lg_nic_state */
        uint32_t reason;                /*  20: enum lg_reason */
        uint64_t epoch;                 /*  24 */
        uint64_t last_change_ns;        /*  32 */
        int32_t backup_index;           /*  40: LG_NO_BACKUP (-1) if none */
        uint32_t flags;                 /*  44: LG_NIC_F_* */
        uint32_t ifindex;               /*  48 */
        uint32_t speed_mbps;            /*  52 */
        uint32_t rdma_port;             /*  56 */
        uint32_t n_ipv4;                /*  60 */
        uint32_t ipv4[4];               /*  64: network byte order */
        uint32_t n_ipv6;                /*  80 */
        uint32_t reserved0;             /*  84 */
        uint8_t ipv6[4][16];            /*  88 */
        char rdma_dev[64];              /* 152 */
        char pci_path[192];             /* 216 */
        uint32_t n_backups;             /* 408: version 2 (reserved in 1) */
        uint8_t backup_set[16];         /* 412: NIC table indices, nearest first */
        uint8_t reserved1[84];          /* 428 */
    };

    struct lg_shm_event {               /* 64 B */
        uint64_t seq;                   /*  0: written last by the C writer */
        uint64_t time_ns;               /*  8 */
        uint64_t epoch;                 /* 16 */
        uint64_t fact_ns;               /* 24 */
        uint32_t nic_index;             /* 32 */
        uint32_t old_state;             /* 36 */
        uint32_t new_state;             /* 40 */
        uint32_t reason;                /* 44 */
        char name[16];                  /* 48 */
    };

States and reasons are plain ints here (linkguardd.states names them). Python only packs whole
entries into bytes: the C writer (shm_writer.c) stores them into the mapping with the ordering the
concurrency contract needs.
"""
from __future__ import annotations

import enum
import socket
import struct
from dataclasses import dataclass

LG_SHM_MAGIC = 0x4853474C  # "LGSH" in file byte order
LG_SHM_VERSION = 2  # 2: backup sets, in version 1's reserved bytes
LG_SHM_COMPAT_VERSION = 1
LG_SHM_DEFAULT_PATH = "/run/linkguard/linkguard.shm"
LG_SHM_PATH_ENV = "LINKGUARD_SHM"
LG_SHM_HEADER_SIZE = 256
LG_SHM_NIC_SIZE = 512
LG_SHM_EVENT_SIZE = 64
LG_SHM_MAX_NICS = 64
LG_SHM_MAX_RING_SLOTS = 1 << 16
LG_NAME_LEN = 16
LG_RDMA_NAME_LEN = 64
LG_PCI_PATH_LEN = 192
LG_MAX_IPV4 = 4
LG_MAX_IPV6 = 4
LG_SHM_MAX_BACKUPS = 16
LG_NIC_F_PRESENT = 1 << 0
LG_NIC_F_CARRIER = 1 << 1
LG_NIC_F_ADMIN_UP = 1 << 2
LG_NIC_F_RDMA = 1 << 3
LG_NO_BACKUP = -1
LG_NIC_STATE_COUNT = 6
LG_REASON_COUNT = 19


class ShmStatus(enum.IntEnum):
    """enum lg_shm_status: what the C reader returns."""

    OK = 0
    ENOENT = 1
    ESHORT = 2
    EMAGIC = 3
    EVERSION = 4
    ELAYOUT = 5
    EBUSY = 6
    ESYS = 7
    ESTALE = 8
    EUNTRUSTED = 9


# (name, struct format) in C order; offsets are computed, and the test checks them against C.
HEADER_FIELDS: tuple[tuple[str, str], ...] = (
    ("magic", "I"),
    ("version", "I"),
    ("compat_version", "I"),
    ("header_size", "I"),
    ("nic_size", "I"),
    ("nic_capacity", "I"),
    ("event_size", "I"),
    ("ring_slots", "I"),
    ("nic_table_offset", "Q"),
    ("ring_offset", "Q"),
    ("total_size", "Q"),
    ("daemon_pid", "I"),
    ("reserved0", "I"),
    ("generation", "Q"),
    ("heartbeat_ns", "Q"),
    ("ring_head", "Q"),
    ("nic_count", "I"),
    ("reserved1", "I"),
    ("reserved2", "32s"),
    ("daemon_start_ns", "Q"),
    ("daemon_start_monotonic_ns", "Q"),
    ("reserved3", "112s"),
)

NIC_FIELDS: tuple[tuple[str, str], ...] = (
    ("name", f"{LG_NAME_LEN}s"),
    ("state", "I"),
    ("reason", "I"),
    ("epoch", "Q"),
    ("last_change_ns", "Q"),
    ("backup_index", "i"),
    ("flags", "I"),
    ("ifindex", "I"),
    ("speed_mbps", "I"),
    ("rdma_port", "I"),
    ("n_ipv4", "I"),
    ("ipv4", f"{4 * LG_MAX_IPV4}s"),  # raw network-order bytes
    ("n_ipv6", "I"),
    ("reserved0", "I"),
    ("ipv6", f"{16 * LG_MAX_IPV6}s"),
    ("rdma_dev", f"{LG_RDMA_NAME_LEN}s"),
    ("pci_path", f"{LG_PCI_PATH_LEN}s"),
    ("n_backups", "I"),
    ("backup_set", f"{LG_SHM_MAX_BACKUPS}s"),  # one byte per index
    ("reserved1", "84s"),
)

EVENT_FIELDS: tuple[tuple[str, str], ...] = (
    ("seq", "Q"),
    ("time_ns", "Q"),
    ("epoch", "Q"),
    ("fact_ns", "Q"),
    ("nic_index", "I"),
    ("old_state", "I"),
    ("new_state", "I"),
    ("reason", "I"),
    ("name", f"{LG_NAME_LEN}s"),
)


def _struct_of(fields: tuple[tuple[str, str], ...]) -> struct.Struct:
    return struct.Struct("<" + "".join(fmt for _, fmt in fields))


def field_offsets(fields: tuple[tuple[str, str], ...]) -> dict[str, tuple[int, int]]:
    """name -> (offset, size), the shape lg_shm_layout prints."""
    out: dict[str, tuple[int, int]] = {}
    offset = 0
    for name, fmt in fields:
        size = struct.calcsize("<" + fmt)
        out[name] = (offset, size)
        offset += size
    return out


HEADER_STRUCT = _struct_of(HEADER_FIELDS)
NIC_STRUCT = _struct_of(NIC_FIELDS)
EVENT_STRUCT = _struct_of(EVENT_FIELDS)
HEADER_OFFSETS = field_offsets(HEADER_FIELDS)
NIC_OFFSETS = field_offsets(NIC_FIELDS)
EVENT_OFFSETS = field_offsets(EVENT_FIELDS)
assert HEADER_STRUCT.size == LG_SHM_HEADER_SIZE
assert NIC_STRUCT.size == LG_SHM_NIC_SIZE
assert EVENT_STRUCT.size == LG_SHM_EVENT_SIZE


def _cstr(value: str, size: int, what: str) -> bytes:
    """A NUL-terminated fixed-size field; refuses (never truncates) a value that does not fit."""
    raw = value.encode()
    if len(raw) >= size or b"\0" in raw:
        raise ValueError(f"{what} {value!r} does not fit in {size - 1} bytes")
    return raw


def _addr_pack(family: int, addr: str) -> bytes:
    """inet_pton (fast: the daemon packs the table on every change), raising ValueError."""
    try:
        return socket.inet_pton(family, addr)
    except OSError as e:
        raise ValueError(f"bad IP address {addr!r}") from e


def _from_cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


@dataclass(frozen=True)
class NicEntry:
    """One struct lg_shm_nic. Addresses are strings; the packed form is network byte order.

    backup_set: indices into the table, nearest first; backup_index is its first member (the
    pair a version 1 reader sees). Either given alone implies the other; pack() refuses the two
    disagreeing."""

    name: str
    state: int = 0
    reason: int = 0
    epoch: int = 0
    last_change_ns: int = 0
    backup_index: int = LG_NO_BACKUP
    flags: int = 0
    ifindex: int = 0
    speed_mbps: int = 0
    rdma_port: int = 0
    ipv4: tuple[str, ...] = ()
    ipv6: tuple[str, ...] = ()
    rdma_dev: str = ""
    pci_path: str = ""
    backup_set: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.backup_set and self.backup_index != LG_NO_BACKUP:
            object.__setattr__(self, "backup_set", (self.backup_index,))  # a pair: a set of one
        elif self.backup_set and self.backup_index == LG_NO_BACKUP:
            object.__setattr__(self, "backup_index", self.backup_set[0])

    def pack(self) -> bytes:
        if len(self.ipv4) > LG_MAX_IPV4 or len(self.ipv6) > LG_MAX_IPV6:
            raise ValueError(f"{self.name}: at most {LG_MAX_IPV4} IPv4 and {LG_MAX_IPV6} IPv6")
        if len(self.backup_set) > LG_SHM_MAX_BACKUPS:
            raise ValueError(f"{self.name}: at most {LG_SHM_MAX_BACKUPS} backups")
        if not all(0 <= i < LG_SHM_MAX_NICS for i in self.backup_set):
            raise ValueError(f"{self.name}: backup index out of range in {self.backup_set}")
        if self.backup_set and self.backup_index != self.backup_set[0]:
            raise ValueError(f"{self.name}: backup_index {self.backup_index} is not the first "
                             f"of backup_set {self.backup_set}")
        v4 = b"".join(_addr_pack(socket.AF_INET, a) for a in self.ipv4)
        v6 = b"".join(_addr_pack(socket.AF_INET6, a) for a in self.ipv6)
        return NIC_STRUCT.pack(
            _cstr(self.name, LG_NAME_LEN, "name"),
            self.state,
            self.reason,
            self.epoch,
            self.last_change_ns,
            self.backup_index,
            self.flags,
            self.ifindex,
            self.speed_mbps,
            self.rdma_port,
            len(self.ipv4),
            v4,
            len(self.ipv6),
            0,
            v6,
            _cstr(self.rdma_dev, LG_RDMA_NAME_LEN, "rdma_dev"),
            _cstr(self.pci_path, LG_PCI_PATH_LEN, "pci_path"),
            len(self.backup_set),
            bytes(self.backup_set),
            b"",
        )

    @classmethod
    def unpack(cls, buf: bytes, own_index: int | None = None,
               nic_count: int | None = None) -> NicEntry:
        """With the entry's own index and the table's nic_count, the backup set is sanitized as
        the header's reader rules say: members out of range, the NIC itself and repeats are
        dropped (a version 1 file's empty set then becomes backup_index alone)."""
        f = dict(zip((n for n, _ in NIC_FIELDS), NIC_STRUCT.unpack(buf[:LG_SHM_NIC_SIZE])))
        members = tuple(f["backup_set"][: min(f["n_backups"], LG_SHM_MAX_BACKUPS)])
        if nic_count is not None:
            members = tuple(dict.fromkeys(
                m for m in members if m < nic_count and m != own_index))
            if f["backup_index"] >= nic_count or f["backup_index"] == own_index:
                f["backup_index"] = LG_NO_BACKUP
            if members and f["backup_index"] != members[0]:
                f["backup_index"] = LG_NO_BACKUP  # the set is the newer word: it wins
        n4, v4 = min(f["n_ipv4"], LG_MAX_IPV4), f["ipv4"]
        n6, v6 = min(f["n_ipv6"], LG_MAX_IPV6), f["ipv6"]
        return cls(
            name=_from_cstr(f["name"]),
            state=f["state"],
            reason=f["reason"],
            epoch=f["epoch"],
            last_change_ns=f["last_change_ns"],
            backup_index=f["backup_index"],
            flags=f["flags"],
            ifindex=f["ifindex"],
            speed_mbps=f["speed_mbps"],
            rdma_port=f["rdma_port"],
            ipv4=tuple(socket.inet_ntop(socket.AF_INET, v4[4 * i : 4 * i + 4]) for i in range(n4)),
            ipv6=tuple(
                socket.inet_ntop(socket.AF_INET6, v6[16 * i : 16 * i + 16]) for i in range(n6)
            ),
            rdma_dev=_from_cstr(f["rdma_dev"]),
            pci_path=_from_cstr(f["pci_path"]),
            backup_set=members,
        )


@dataclass(frozen=True)
class Event:
    """One struct lg_shm_event. `seq` is assigned by the writer (ignored when pushing)."""

    nic_index: int
    name: str
    old_state: int
    new_state: int
    reason: int
    epoch: int = 0
    time_ns: int = 0
    fact_ns: int = 0
    seq: int = 0

    def pack(self) -> bytes:
        return EVENT_STRUCT.pack(
            self.seq,
            self.time_ns,
            self.epoch,
            self.fact_ns,
            self.nic_index,
            self.old_state,
            self.new_state,
            self.reason,
            _cstr(self.name, LG_NAME_LEN, "name"),
        )

    @classmethod
    def unpack(cls, buf: bytes) -> Event:
        f = dict(zip((n for n, _ in EVENT_FIELDS), EVENT_STRUCT.unpack(buf[:LG_SHM_EVENT_SIZE])))
        f["name"] = _from_cstr(f["name"])
        return cls(**f)


@dataclass(frozen=True)
class HeaderInfo:
    """The identity part of struct lg_shm_header (what `linkguard-cli` shows about the daemon)."""

    version: int
    compat_version: int
    nic_capacity: int
    ring_slots: int
    daemon_pid: int
    daemon_start_ns: int
    daemon_start_monotonic_ns: int
    heartbeat_ns: int
    generation: int
    ring_head: int

    @classmethod
    def unpack(cls, buf: bytes) -> HeaderInfo:
        f = dict(zip((n for n, _ in HEADER_FIELDS), HEADER_STRUCT.unpack(buf[:LG_SHM_HEADER_SIZE])))
        return cls(**{k: f[k] for k in cls.__dataclass_fields__})
