"""The asyncio client: `ray_broker`'s client names with `async def` methods, `async with` and
`async for`, over the same client core as the sync client.

    import ray_broker as rb
    import ray_broker.aio as rba

    ns = await rba.start("demo")
    await ns.create_queue("orders", enable_partitioning=True)
    async with ns.get_queue_sender("orders") as sender:
        await sender.send_messages([rb.Message("a"), rb.Message("b")])
    async with ns.get_queue_receiver("orders", max_wait_time=5) as receiver:
        async for message in receiver:
            await receiver.complete_message(message)

Calls run on the caller's event loop: Ray object refs are awaited there (no thread pool wraps the
sync client), and data goes straight to the partitions through a router of that loop. A sync and
an async `Namespace` of the same name are interchangeable handles to the same actors; both pickle.
"""
from __future__ import annotations

from .autolock import AutoLockRenewer
from .namespace import Namespace, connect, init_ray, start, stop
from .receiver import Receiver, ReceiverSession
from .sender import Sender
from .transaction import Transaction

__all__ = ["start", "connect", "stop", "init_ray", "Namespace", "Sender", "Receiver", "ReceiverSession",
           "AutoLockRenewer", "Transaction"]
