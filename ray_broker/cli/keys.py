"""`ray-broker keys add|list|remove`: a namespace's named shared access keys, which sign the tokens
of the Azure SDKs' connection strings (`ray-broker connection-string --key NAME`), each with rights
(Manage, Send, Listen) that the AMQP front end checks before a link may send or receive."""
from __future__ import annotations

from typing import Annotated

import typer

from . import output
from .options import DEFAULT_NAMESPACE, AddressOption, NamespaceOption, attach

keys_app = typer.Typer(help="Add, list and remove a namespace's shared access keys.", no_args_is_help=True)

KeyName = Annotated[str, typer.Argument(help="The key's name (letters, digits, '.', '-', '_').")]


@keys_app.command("add")
def keys_add(name: KeyName, rights: Annotated[str, typer.Option(
                 "--rights", help="What tokens signed with it may do: any of manage, send, listen, comma-separated.")],
             namespace: NamespaceOption = DEFAULT_NAMESPACE, address: AddressOption = None) -> None:
    """Make a new random key with rights; prints its name, rights and key."""
    key = attach(namespace, address).add_shared_access_key(name, rights)
    output.out(f"key {key.name!r} added ({', '.join(key.rights)}): {key.key}")


@keys_app.command("list")
def keys_list(namespace: NamespaceOption = DEFAULT_NAMESPACE, address: AddressOption = None,
              show_keys: Annotated[bool, typer.Option("--show-keys", help="Also print each key.")] = False) -> None:
    """List the keys with their rights."""
    keys = attach(namespace, address).list_shared_access_keys()
    rows = [[k.name, ", ".join(k.rights), *([k.key] if show_keys else [])] for k in keys]
    output.table(["key", "rights", *(["key"] if show_keys else [])], rows)


@keys_app.command("remove")
def keys_remove(name: KeyName, namespace: NamespaceOption = DEFAULT_NAMESPACE,
                address: AddressOption = None) -> None:
    """Remove a key: tokens it signed are refused from then on."""
    attach(namespace, address).remove_shared_access_key(name)
    output.out(f"key {name!r} removed")
