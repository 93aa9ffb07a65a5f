"""The settlement an AMQP outcome on a received message asks for, as the Azure SDKs send them. Pure.

    accepted                                   complete
    modified (undeliverable-here)              defer
    modified, or anything else not terminal    abandon (the delivery counts)
    released                                   release (back at once, the delivery not counted:
                                               the SDKs release prefetched messages they never
                                               handed out when a receiver closes)
    rejected                                   dead-letter, with the `DeadLetterReason` and
                                               `DeadLetterErrorDescription` of the error's info
"""
from __future__ import annotations

from proton import Condition, Delivery


def settle_action(outcome: int, undeliverable: bool) -> str:
    """The settlement (a `ray_broker.protocol.SETTLE_ACTIONS` name) an outcome asks for."""
    if outcome == Delivery.ACCEPTED:
        return "complete"
    if outcome == Delivery.REJECTED:
        return "dead_letter"
    if outcome == Delivery.RELEASED:
        return "release"
    if outcome == Delivery.MODIFIED and undeliverable:
        return "defer"
    return "abandon"


def dead_letter_reason(condition: Condition | None) -> tuple[str | None, str | None]:
    """The reason and description a `rejected` outcome carries (`DeadLetterReason` and
    `DeadLetterErrorDescription` in its error's info, else its description)."""
    if condition is None:
        return None, None
    info = {str(k): v for k, v in (condition.info or {}).items()}
    reason = info.get("DeadLetterReason")
    description = info.get("DeadLetterErrorDescription", condition.description)
    return (None if reason is None else str(reason)), (None if description is None else str(description))
