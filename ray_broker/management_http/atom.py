"""The ATOM envelope of the management API: entries and feeds around a description element, the
XML namespaces, and the error body the SDKs read (`<Error><Code/><Detail/></Error>`). Pure.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from copy import deepcopy as copy_tree
from typing import Iterable, Sequence
from xml.sax.saxutils import escape, quoteattr

from ..errors import InvalidArgumentError

ATOM = "http://www.w3.org/2005/Atom"
SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
SB_COUNTS = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
XSD = "http://www.w3.org/2001/XMLSchema"
XSI_TYPE = f"{{{XSI}}}type"

DESCRIPTION_MARK = "\u2063description\u2063"
"""Stands in an entry's content for its description while the envelope is written (no XML text
the service writes contains it)."""
ENTRY_CONTENT_TYPE = "application/atom+xml;type=entry;charset=utf-8"
FEED_CONTENT_TYPE = "application/atom+xml;type=feed;charset=utf-8"
ERROR_CONTENT_TYPE = "application/xml;charset=utf-8"

PREFIXES = {SB: "sb", SB_COUNTS: "d2p1", XSI: "i", XSD: "xs"}
"""The prefix Service Bus writes each namespace with."""
ET.register_namespace("", ATOM)
for _uri, _prefix in PREFIXES.items():
    ET.register_namespace(_prefix, _uri)


def sb(tag: str) -> str:
    """The qualified name of a Service Bus element."""
    return f"{{{SB}}}{tag}"


def atom(tag: str) -> str:
    """The qualified name of an ATOM element."""
    return f"{{{ATOM}}}{tag}"


def timestamp(when: datetime | None) -> str:
    """An ISO 8601 UTC time as Service Bus writes it; the epoch for None."""
    moment = when or datetime(1970, 1, 1, tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def entry(base_url: str, path: str, title: str, description: ET.Element, updated: datetime | None) -> ET.Element:
    """An ATOM entry for the resource at `path` holding `description`."""
    element = ET.Element(atom("entry"))
    url = f"{base_url}/{path}"
    ET.SubElement(element, atom("id")).text = url
    ET.SubElement(element, atom("title"), type="text").text = title
    ET.SubElement(element, atom("published")).text = timestamp(updated)
    ET.SubElement(element, atom("updated")).text = timestamp(updated)
    author = ET.SubElement(element, atom("author"))
    ET.SubElement(author, atom("name")).text = base_url.split("//", 1)[-1]
    ET.SubElement(element, atom("link"), rel="self", href=url)
    content = ET.SubElement(element, atom("content"), type="application/xml")
    content.append(description)
    return element


def feed(base_url: str, path: str, title: str, entries: Iterable[ET.Element], next_link: str | None) -> ET.Element:
    """An ATOM feed of `entries`; `next_link` (a URL with `$skip` and `$top`) when there are more."""
    element = ET.Element(atom("feed"))
    ET.SubElement(element, atom("title"), type="text").text = title
    ET.SubElement(element, atom("id")).text = f"{base_url}/{path}"
    ET.SubElement(element, atom("updated")).text = timestamp(datetime.now(timezone.utc))
    ET.SubElement(element, atom("link"), rel="self", href=f"{base_url}/{path}")
    if next_link is not None:
        ET.SubElement(element, atom("link"), rel="next", href=next_link)
    element.extend(entries)
    return element


def to_bytes(element: ET.Element) -> bytes:
    """An element as a UTF-8 XML document, written as Service Bus writes it: each description in
    an entry's content declares the Service Bus namespace as its default, so its elements carry no
    prefix (`<QueueDescription xmlns="..."><LockDuration>`). Clients that read element names as
    they are written, such as the JavaScript SDK's, find them under those names.

    >>> entry_ = ET.Element(atom("entry")); content = ET.SubElement(entry_, atom("content"))
    >>> ET.SubElement(ET.SubElement(content, sb("QueueDescription")), sb("LockDuration")).text = "PT1M"
    >>> written = to_bytes(entry_).decode()
    >>> '<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"' in written
    True
    >>> "<LockDuration>PT1M</LockDuration>" in written
    True
    """
    copy = copy_tree(element)
    descriptions: list[bytes] = []
    for content in copy.iter(atom("content")):
        for description in [child for child in content if child.tag.startswith(f"{{{SB}}}")]:
            content.remove(description)
            content.text = f"{DESCRIPTION_MARK}{len(descriptions)}{DESCRIPTION_MARK}"
            descriptions.append(_description_xml(description).encode("utf-8"))
    document = ET.tostring(copy, encoding="utf-8", xml_declaration=True)
    for n, description in enumerate(descriptions):
        document = document.replace(f"{DESCRIPTION_MARK}{n}{DESCRIPTION_MARK}".encode("utf-8"), description, 1)
    return document


def _description_xml(description: ET.Element) -> str:
    """A description written as Service Bus writes one: its namespace the default, declared with
    the instance namespace (`i:`) on the description, and any other namespace declared under its
    prefix on the element whose own name or whose children's names first use it
    (`<CountDetails xmlns:d2p1="..."><d2p1:ActiveMessageCount>`)."""

    def name(qualified: str, is_tag: bool, uses: set[str]) -> str:
        if not qualified.startswith("{"):
            return qualified
        uri, local = qualified[1:].split("}", 1)
        if uri == SB and is_tag:
            return local
        uses.add(uri)
        return f"{PREFIXES[uri]}:{local}"

    def write(element: ET.Element, declared: frozenset[str]) -> str:
        uses: set[str] = set()
        tag = name(element.tag, True, uses)
        attributes = "".join(f" {name(key, False, uses)}={quoteattr(value)}" for key, value in element.items())
        for child in element:
            name(child.tag, True, uses)
        new = sorted(uses - declared)
        declarations = "".join(f' xmlns:{PREFIXES[uri]}="{uri}"' for uri in new)
        inner = escape(element.text or "") + "".join(write(child, declared | set(new)) + escape(child.tail or "")
                                                     for child in element)
        return f"<{tag}{declarations}{attributes}>{inner}</{tag}>"

    written = write(description, frozenset({XSI}))
    opening = len(description.tag.split("}", 1)[-1]) + 1
    return f'{written[:opening]} xmlns="{SB}" xmlns:{PREFIXES[XSI]}="{XSI}"{written[opening:]}'


def error_body(status: int, detail: str) -> bytes:
    """The body of an error answer, which the SDKs read the detail of."""
    element = ET.Element("Error")
    ET.SubElement(element, "Code").text = str(status)
    ET.SubElement(element, "Detail").text = detail
    return to_bytes(element)


def entry_content(body: bytes, kinds: Sequence[str]) -> ET.Element:
    """The description element (one of `kinds`, e.g. "QueueDescription") in the content of an ATOM
    entry a client sent; InvalidArgumentError if the body is no such entry."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise InvalidArgumentError(f"the request body is not well-formed XML: {exc}") from None
    content = root.find(atom("content")) if root.tag == atom("entry") else None
    found = None if content is None else next((e for e in content if e.tag in {sb(k) for k in kinds}), None)
    if found is None:
        raise InvalidArgumentError(f"the request body must be an ATOM entry whose content holds a "
                                   f"{' or '.join(kinds)} element (in the namespace {SB})")
    return found
