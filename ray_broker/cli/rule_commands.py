"""`ray-broker rule list|add|remove TOPIC SUBSCRIPTION ...`: a subscription's rules, which select
the messages it gets (a SQL or correlation filter, and an optional SQL action on its copy)."""
from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from ..errors import MessagingEntityNotFoundError
from ..filters import FalseFilter, SqlFilter, TrueFilter
from . import output
from .options import DEFAULT_NAMESPACE, AddressOption, Entity, NamespaceOption, SubscriptionName, TopicName, attach, \
    not_found
from .properties import PROPERTY_HELP, parse_properties

rule_app = typer.Typer(help="List, add and remove a subscription's rules (filters and actions).",
                       no_args_is_help=True)

RuleName = Annotated[str, typer.Argument(metavar="RULE", help="The rule's name (1 to 50 letters, digits, '.', '-', '_' or '$').")]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of a table or line.")]
CORRELATION_FIELDS = ("correlation_id", "message_id", "to", "reply_to", "subject", "session_id",
                      "reply_to_session_id", "content_type")


def _exact(field: str) -> Any:
    flag = "--" + field.replace("_", "-")
    return typer.Option(flag, metavar="TEXT", help=f"Correlation filter: the message's {field} equals this.",
                        rich_help_panel="Correlation filter (all given must hold)")


@rule_app.command("list")
def rule_list(topic: TopicName, subscription: SubscriptionName, namespace: NamespaceOption = DEFAULT_NAMESPACE,
              address: AddressOption = None, as_json: AsJson = False) -> None:
    """List a subscription's rules, in the order they apply."""
    ns = attach(namespace, address)
    rules = _existing(ns, topic, subscription, lambda: ns.list_rules(topic, subscription))
    if as_json:
        output.json_document([rule.to_wire() for rule in rules])
        return
    if not rules:
        output.out(f"subscription {subscription!r} of topic {topic!r} has no rules: it gets no messages")
        return
    output.table(["rule", "filter", "action"], [[r.name, filter_text(r.filter), action_text(r.action)]
                                                 for r in rules])


@rule_app.command("add")
def rule_add(
    topic: TopicName,
    subscription: SubscriptionName,
    name: RuleName,
    namespace: NamespaceOption = DEFAULT_NAMESPACE,
    address: AddressOption = None,
    sql: Annotated[Optional[str], typer.Option(
        "--sql", metavar="SQL", help="A SQL filter over the message's properties, e.g. "
                                     "\"user.region = 'eu' AND sys.label LIKE 'order%'\".")] = None,
    correlation_id: Annotated[Optional[str], _exact("correlation_id")] = None,
    message_id: Annotated[Optional[str], _exact("message_id")] = None,
    to: Annotated[Optional[str], _exact("to")] = None,
    reply_to: Annotated[Optional[str], _exact("reply_to")] = None,
    subject: Annotated[Optional[str], _exact("subject")] = None,
    session_id: Annotated[Optional[str], _exact("session_id")] = None,
    reply_to_session_id: Annotated[Optional[str], _exact("reply_to_session_id")] = None,
    content_type: Annotated[Optional[str], _exact("content_type")] = None,
    properties: Annotated[Optional[list[str]], typer.Option(
        "--property", metavar="KEY[:TYPE]=VALUE", rich_help_panel="Correlation filter (all given must hold)",
        help="Correlation filter: the message has this application property with this value. " + PROPERTY_HELP)] = None,
    action: Annotated[Optional[str], typer.Option(
        "--action", metavar="SQL", help="A SQL action on the copy the rule selects, e.g. \"SET user.lane = 'eu'\".")]
    = None,
    as_json: AsJson = False,
) -> None:
    """Add a rule to a subscription: a SQL filter (--sql) or a correlation filter (--correlation-id,
    --subject, --property, ...; without either, every message), with an optional SQL --action. It
    selects the messages sent from then on."""
    import ray_broker as rb

    exact = {"correlation_id": correlation_id, "message_id": message_id, "to": to, "reply_to": reply_to,
             "subject": subject, "session_id": session_id, "reply_to_session_id": reply_to_session_id,
             "content_type": content_type}
    given = {k: v for k, v in exact.items() if v is not None}
    if sql is not None and (given or properties):
        raise typer.BadParameter("give a SQL filter or a correlation filter, not both", param_hint="'--sql'")
    if sql is not None:
        rule_filter: Any = rb.SqlFilter(sql)
    elif given or properties:
        rule_filter = rb.CorrelationFilter(**given, properties=parse_properties(properties or []) or None)
    else:
        rule_filter = rb.TrueFilter()
    rule_action = None if action is None else rb.SqlRuleAction(action)
    ns = attach(namespace, address)
    rule = _existing(ns, topic, subscription, lambda: ns.create_rule(topic, subscription, name, filter=rule_filter,
                                                                      action=rule_action))
    if as_json:
        output.json_document(rule.to_wire())
    else:
        output.out(f"rule {rule.name!r} added to subscription {subscription!r} of topic {topic!r}: "
                   f"{filter_text(rule.filter)}" + (f"; {action_text(rule.action)}" if rule.action else ""))


@rule_app.command("remove")
def rule_remove(topic: TopicName, subscription: SubscriptionName, name: RuleName,
                namespace: NamespaceOption = DEFAULT_NAMESPACE, address: AddressOption = None) -> None:
    """Remove a rule from a subscription: messages sent from then on are no longer selected by it
    (a subscription without rules gets none)."""
    ns = attach(namespace, address)
    rules = _existing(ns, topic, subscription, lambda: ns.list_rules(topic, subscription))
    if not any(r.name.lower() == name.lower() for r in rules):
        raise MessagingEntityNotFoundError(
            f"subscription {subscription!r} of topic {topic!r} has no rule named {name!r}; its rules: "
            f"{', '.join(repr(r.name) for r in rules) or 'none'} (`ray-broker rule list {topic} {subscription} "
            f"-n {ns.name}`)", entity=f"{topic}/subscriptions/{subscription}")
    ns.delete_rule(topic, subscription, name)
    output.out(f"rule {name!r} removed from subscription {subscription!r} of topic {topic!r}")


def _existing(ns: Any, topic: str, subscription: str, call: Any) -> Any:
    """`call()` on an existing subscription; a missing topic or subscription is reported as the
    command line words it (how to list what exists)."""
    try:
        ns.get_subscription(topic, subscription)
    except MessagingEntityNotFoundError:
        raise not_found(Entity("subscription", topic, subscription), ns.name) from None
    return call()


def filter_text(rule_filter: Any) -> str:
    """A rule's filter as one line: its SQL, `correlation: field=value, ...`, or TrueFilter/FalseFilter."""
    if isinstance(rule_filter, (TrueFilter, FalseFilter)):
        return type(rule_filter).__name__
    if isinstance(rule_filter, SqlFilter):
        return rule_filter.sql_expression
    parts = [f"{k}={v!r}" for k, v in rule_filter.fields().items()]
    parts += [f"user.{k}={v!r}" for k, v in rule_filter.properties.items()]
    return "correlation: " + ", ".join(parts)


def action_text(action: Any) -> str | None:
    """A rule's action as its SQL (None: no action)."""
    return None if action is None else str(action.sql_expression)
