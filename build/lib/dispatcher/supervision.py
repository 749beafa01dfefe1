"""Long-lived tasks with an owner and a name, in the manner of kopf's guarded tasks.

`guarded(name, run)` runs a task's body and logs how it ended when that was not a
cancellation, restarting it after `restart_delay` (on the given clock) when one is given;
so a failing loop is never a silent death, and never takes its TaskGroup down with it.
`TaskOwner` keeps the tasks of one owner that cannot await them in a TaskGroup of its
own (a worker connection's watches and probe; the dispatcher's tasks started from
callbacks): each by name, at most one running per name (single flight), referenced until
it ends, cancelled and awaited on `close()`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from dispatcher.clock import Clock

log = logging.getLogger(__name__)
Body = Callable[[], Awaitable[None]]


async def guarded(name: str, run: Body, *, clock: Clock,
                  restart_delay: float | None = None) -> None:
    while True:
        try:
            await run()
            if restart_delay is not None:
                log.warning("task %s returned; restarting it", name)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("task %s failed%s", name,
                          "; restarting it" if restart_delay is not None else "")
        if restart_delay is None:
            return
        await clock.sleep(restart_delay)


class TaskOwner:
    def __init__(self, *, clock: Clock) -> None:
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._clock = clock

    def __len__(self) -> int:
        return len(self._tasks)

    def running(self, name: str) -> bool:
        return name in self._tasks

    def start_once(self, name: str, run: Body, *, restart_delay: float | None = None) -> bool:
        """Start `run` as task `name` unless one of that name still runs; with a
        `restart_delay`, it is restarted after that delay whenever it ends or fails."""
        if name in self._tasks:
            return False
        task = asyncio.get_running_loop().create_task(
            guarded(name, run, clock=self._clock, restart_delay=restart_delay), name=name)
        self._tasks[name] = task
        task.add_done_callback(lambda done: self._ended(name, done))
        return True

    def _ended(self, name: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(name) is task:
            del self._tasks[name]

    async def close(self) -> None:
        """Cancel every task and wait until they have ended."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            # wait() never raises the tasks' CancelledError, but does raise our own.
            await asyncio.wait(tasks)
        self._tasks.clear()
