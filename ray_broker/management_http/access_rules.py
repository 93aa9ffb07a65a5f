"""An entity description's `AuthorizationRules` element <-> the entity's authorization rules, as
Service Bus writes them (`<AuthorizationRule i:type="SharedAccessAuthorizationRule">` with
`ClaimType`, `ClaimValue`, `Rights`/`AccessRights`, `KeyName`, `PrimaryKey`, `SecondaryKey`). Pure.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Iterable

from ..access_rules import AuthorizationRule
from ..errors import InvalidArgumentError
from .atom import XSI_TYPE, sb

RULE_ELEMENT = "AuthorizationRule"
RULE_TYPE = "SharedAccessAuthorizationRule"
CLAIM_TYPE = "SharedAccessKey"
CLAIM_VALUE = "None"


def _text(element: ET.Element, name: str) -> str:
    found = element.find(sb(name))
    return "" if found is None or found.text is None else found.text.strip()


def read_rules(element: ET.Element) -> tuple[AuthorizationRule, ...]:
    """The rules an `AuthorizationRules` element holds; `InvalidArgumentError` for another kind of
    rule than a shared access key (claim type `SharedAccessKey`)."""
    rules = []
    for child in element:
        if child.tag != sb(RULE_ELEMENT):
            raise InvalidArgumentError(f"AuthorizationRules holds {child.tag.rsplit('}', 1)[-1]}; it takes "
                                       f"{RULE_ELEMENT} elements only")
        claim_type = _text(child, "ClaimType") or CLAIM_TYPE
        if claim_type != CLAIM_TYPE:
            raise InvalidArgumentError(f"authorization rule {_text(child, 'KeyName')!r} has claim type {claim_type!r}; "
                                       f"only {CLAIM_TYPE} rules (shared access keys) are supported")
        rights_element = child.find(sb("Rights"))
        rights = tuple((r.text or "").strip() for r in (rights_element if rights_element is not None else ()))
        rules.append(AuthorizationRule(_text(child, "KeyName"), rights, _text(child, "PrimaryKey"),
                                       _text(child, "SecondaryKey")))
    return tuple(rules)


def write_rules(parent: ET.Element, rules: Iterable[AuthorizationRule]) -> None:
    """Add an `AuthorizationRules` element holding `rules` to a description."""
    element = ET.SubElement(parent, sb("AuthorizationRules"))
    for rule in rules:
        written = ET.SubElement(element, sb(RULE_ELEMENT), {XSI_TYPE: RULE_TYPE})
        ET.SubElement(written, sb("ClaimType")).text = CLAIM_TYPE
        ET.SubElement(written, sb("ClaimValue")).text = CLAIM_VALUE
        rights = ET.SubElement(written, sb("Rights"))
        for right in rule.rights:
            ET.SubElement(rights, sb("AccessRights")).text = right
        ET.SubElement(written, sb("KeyName")).text = rule.key_name
        ET.SubElement(written, sb("PrimaryKey")).text = rule.primary_key
        ET.SubElement(written, sb("SecondaryKey")).text = rule.secondary_key
