"""The ATOM envelope of the management API: entries and feeds around a description element, the
XML namespaces, and the error body the SDKs read (`<Error><Code/><Detail/></Error>`). Pure.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from typing import Iterable, Sequence

from ..errors import InvalidArgumentError

ATOM = "http://www.w3.org/2005/Atom"
SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
SB_COUNTS = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
XSD = "http://www.w3.org/2001/XMLSchema"
XSI_TYPE = f"{{{XSI}}}type"

ENTRY_CONTENT_TYPE = "application/atom+xml;type=entry;charset=utf-8"
FEED_CONTENT_TYPE = "application/atom+xml;type=feed;charset=utf-8"
ERROR_CONTENT_TYPE = "application/xml;charset=utf-8"

for _prefix, _uri in (("", ATOM), ("sb", SB), ("d2p1", SB_COUNTS), ("i", XSI), ("xs", XSD)):
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
    """An element as a UTF-8 XML document."""
    return ET.tostring(element, encoding="utf-8", xml_declaration=True)


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
