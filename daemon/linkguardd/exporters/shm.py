"""Exporter "shm": the control file the NCCL plugin reads (NIC table, event ring, heartbeat).

First in exporters.Exporters: an update is published once it is here, and the exporters after
this one see it as such (Update.mark_published).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging

from linkguardd.exporters.base import EngineState, Update
from linkguardd.facts import LinkFact
from linkguardd.inventory import NicInfo
from linkguardd.shm.layout import (
    LG_NIC_F_ADMIN_UP,
    LG_NIC_F_CARRIER,
    LG_NIC_F_PRESENT,
    LG_NIC_F_RDMA,
    Event,
    NicEntry,
)
from linkguardd.shm.writer import ShmWriter

log = logging.getLogger(__name__)

SHM_NIC_CAPACITY = 64  # LG_SHM_MAX_NICS: more NICs than any GPU server has
SHM_RING_SLOTS = 1024  # ~ hours of transitions at realistic rates; readers re-sync on a lap
NO_NIC = 0xFFFFFFFF  # Event.nic_index of a NIC no longer in the table


class ShmExporter:
    name = "shm"

    def __init__(self) -> None:
        self.state: EngineState | None = None  # the engine's, from start()
        self.writer: ShmWriter | None = None
        self.last_heartbeat_ns = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self, state: EngineState) -> None:
        """Create the file and write the first heartbeat (readers see a live daemon with an
        empty table until the first update)."""
        self.state = state
        self.writer = ShmWriter(state.settings.shm_path, SHM_NIC_CAPACITY, SHM_RING_SLOTS,
                                first_seq=state.next_seq)
        self.heartbeat()
        self._task = asyncio.get_running_loop().create_task(self._heartbeat_loop(state),
                                                            name="heartbeat")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.writer is not None:
            self.writer.close(unlink=True)
            self.writer = None

    def export(self, update: Update) -> None:
        state = self.state
        if self.writer is None or state is None:
            return
        if update.table_changed or update.transitions:
            self.writer.publish_table(entries(state))
        index = {name: i for i, name in enumerate(state.ifnames)}
        for i, tr in enumerate(update.transitions):
            seq = self.writer.push_event(Event(
                time_ns=tr.at_ns, epoch=tr.epoch, fact_ns=update.fact_ns or tr.at_ns,
                nic_index=index.get(tr.ifname, NO_NIC), old_state=int(tr.old),
                new_state=int(tr.new), reason=int(tr.reason), name=tr.ifname))
            if seq != update.first_seq + i:  # the API's numbers would not be the ring's
                log.error("shm: event %d got ring sequence %d", update.first_seq + i, seq)
        update.mark_published(state.clock())

    def heartbeat(self) -> None:
        if self.writer is not None and self.state is not None:
            self.last_heartbeat_ns = self.state.clock()
            self.writer.heartbeat(self.last_heartbeat_ns)

    def heartbeat_age_s(self) -> float:
        """From the last heartbeat to now: safe from any thread (a scrape while the loop is
        stuck sees the age grow)."""
        last, state = self.last_heartbeat_ns, self.state
        return (state.clock() - last) / 1e9 if last and state is not None else 0.0

    async def _heartbeat_loop(self, state: EngineState) -> None:
        """Beats on a fixed grid of the period, as a periodic timer would: a beat that comes
        late (a busy loop, a flood) does not push every later beat back, and beats missed
        while the loop was stuck are skipped, never written in a burst."""
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:  # the period is read each time: a reload applies it
            period = state.settings.heartbeat_interval_ms / 1000
            due = next_beat(due, loop.time(), period)
            await asyncio.sleep(due - loop.time())
            self.heartbeat()


def next_beat(last_due: float, now: float, period: float) -> float:
    """The first point of the grid last_due + k*period (k >= 1) that is still ahead of now."""
    missed = max(0, int((now - last_due) // period))
    return last_due + (missed + 1) * period


def entries(state: EngineState) -> list[NicEntry]:
    """The NIC table as the plugin reads it, in rail order."""
    index = {name: i for i, name in enumerate(state.ifnames)}
    out = []
    for name in state.ifnames:
        rec = state.policy.records[name]
        info = state.inventory.get(name, NicInfo(name))
        out.append(NicEntry(
            name=name, state=int(rec.state), reason=int(rec.reason), epoch=rec.epoch,
            last_change_ns=rec.since_ns,
            backup_set=tuple(index[m] for m in state.backup_sets.get(name, ()) if m in index),
            flags=_flags(rec.link, info), ifindex=info.ifindex,
            speed_mbps=info.speed_mbps, ipv4=info.ipv4, ipv6=info.ipv6,
            rdma_dev=info.rdma_dev, rdma_port=info.rdma_port, pci_path=info.pci_path))
    return out


def _flags(link: LinkFact | None, info: NicInfo) -> int:
    flags = LG_NIC_F_RDMA if info.rdma_dev else 0
    if link is not None and link.present:
        flags |= LG_NIC_F_PRESENT
        flags |= LG_NIC_F_CARRIER if link.carrier else 0
        flags |= LG_NIC_F_ADMIN_UP if link.admin_up else 0
    return flags
