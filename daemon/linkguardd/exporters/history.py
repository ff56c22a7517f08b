"""Exporter "history": the recent events behind the API's ListEvents and Watch."""
from __future__ import annotations

import collections

from linkguardd.exporters.base import EngineState, Update
from linkguardd.view import WATCH_QUEUE_EVENTS, EventView, WatchQueue

HISTORY = WATCH_QUEUE_EVENTS  # events kept for the API's Watch/ListEvents resume


class HistoryExporter:
    name = "history"

    def __init__(self) -> None:
        self.events: collections.deque[EventView] = collections.deque(maxlen=HISTORY)
        self.subscribers: set[WatchQueue] = set()

    async def start(self, state: EngineState) -> None:
        pass

    async def stop(self) -> None:
        pass

    def export(self, update: Update) -> None:
        for event in update.events():
            self.events.append(event)
            for queue in self.subscribers:
                queue.put(event)

    def since(self, seq: int) -> list[EventView]:
        return [e for e in self.events if e.seq > seq]

    def subscribe(self) -> WatchQueue:
        queue = WatchQueue()
        self.subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: WatchQueue) -> None:
        self.subscribers.discard(queue)
