"""The async `AutoLockRenewer`: keeps message and session locks alive from one asyncio task."""
from __future__ import annotations

import asyncio
import contextlib
import inspect
from datetime import timedelta
from typing import Any

from ..client.receiver_flows import Renewable
from ..client.renewal import FailureCallback, Registration
from ..client.renewing import RenewerBase
from .closing import Closing
from .receiver import Receiver


class AutoLockRenewer(RenewerBase, Closing):
    """Renews the locks of registered messages and sessions before they expire, from a task on the
    event loop that `register` is first called on; `rb.AutoLockRenewer`'s policy and limits.

    Args:
        max_lock_renewal_duration: how long to keep each lock alive, in seconds or as a timedelta
            (default 300 s); `register` can set another limit per registration.
        on_lock_renew_failure: called as `on_lock_renew_failure(renewable, error)` once per
            registration when its lock is lost while registered (as `rb.AutoLockRenewer` says);
            a plain function or an async one (awaited).

    Example:
        async with rba.AutoLockRenewer(max_lock_renewal_duration=600) as renewer:
            for message in await receiver.receive_messages(max_message_count=10):
                renewer.register(receiver, message)
                await handle(message)             # may take longer than the queue's lock_duration
                await receiver.complete_message(message)
    """

    receiver_class = Receiver
    receiver_kind = "ray_broker.aio Receiver"
    _task: asyncio.Task[None] | None = None
    """The renewing task, started by the first registration together with `_wake`, which wakes it."""
    _wake: asyncio.Event

    async def __aenter__(self) -> AutoLockRenewer:
        self._check_not_closed()
        return self

    def register(self, receiver: Receiver, renewable: Renewable,
                 max_lock_renewal_duration: float | timedelta | None = None,
                 on_lock_renew_failure: FailureCallback | None = None) -> None:
        """Keep the lock of `renewable` alive: a message `receiver` received in PEEK_LOCK mode, or
        the session of an opened session receiver (`receiver.session`). Call it on the receiver's
        event loop; raises as `rb.AutoLockRenewer.register` does.

            renewer.register(receiver, message, max_lock_renewal_duration=timedelta(minutes=30))
            renewer.register(session_receiver, session_receiver.session)
        """
        max_duration, on_failure = self._registration(receiver, renewable, max_lock_renewal_duration,
                                                      on_lock_renew_failure)
        self._add(receiver, renewable, max_duration, on_failure)
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="ray-broker-lock-renewer")
        self._wake.set()

    async def close(self) -> None:
        """Stop renewing every lock and wait for the renewer's task (and a renewal under way) to end."""
        self._closed = True
        self._book.clear()
        if self._task is not None:
            self._wake.set()
            await self._task

    async def _run(self) -> None:
        while not self._closed:
            plan, sleep = self._plan()
            if not plan.due and not plan.lapsed:
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), sleep)
                continue
            for registration in plan.lapsed:
                await self._settle_report(registration, self._report_lapse(registration))
            for registration in plan.due:
                if self._closed:
                    return
                await self._renew_one(registration)

    async def _renew_one(self, registration: Registration[Renewable]) -> None:
        try:
            until = await registration.receiver._renew_lock(registration.renewable)
        except Exception as error:  # noqa: BLE001 - reported to on_lock_renew_failure
            if self._failed(registration):
                await self._settle_report(registration, self._report(registration, error))
            return
        self._renewed(registration, until)

    async def _settle_report(self, registration: Registration[Renewable], reported: Any) -> None:
        """Await what an async failure callback returned."""
        if inspect.isawaitable(reported):
            try:
                await reported
            except Exception:  # noqa: BLE001 - a failing callback must not stop the renewal of other locks
                self._callback_raised(registration)
