"""Hypothesis strategies for message fields and management arguments.

Every generated value is an `Arg`: the value plus the `Verdict` the public API contract (API.md,
and the validation documented in ray_broker/message.py) gives it, so a test knows what must
happen to it without re-deriving the rules:

- `VALID`: the contract allows it; it must be accepted (and then come back identical).
- `EDGE`: the contract is silent or the value sits at an extreme (a TTL of centuries, a schedule
  time in year 1, seconds as a number where a `timedelta` is documented); it may be accepted
  (and must then come back identical) or refused with a typed error.
- `INVALID`: the contract forbids it; it must be refused with a typed error.

Each field strategy draws a valid value most of the time, so that a message of a dozen fields is
still often valid as a whole and goes through the broker.
"""
from __future__ import annotations

import enum
import functools
import string
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Mapping, TypeVar

from hypothesis import strategies as st

import ray_broker as rb

T = TypeVar("T")

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
MAX_ID_LENGTH = 128
MAX_NAME_LENGTH = 260
MESSAGE_LIMIT_BYTES = 256 * 1024
"""The standard tier's limit per message and per batch."""
MAX_RECEIVE_COUNT = 10_000
HEADER_FIELDS = ("correlation_id", "subject", "to", "reply_to", "reply_to_session_id", "content_type")
ID_FIELDS = ("message_id", "session_id", "partition_key")
NAME_CHARACTERS = string.ascii_letters + string.digits + "._-/"
QUEUE_STATUSES = ("Active", "Disabled", "SendDisabled", "ReceiveDisabled")
IMMUTABLE_QUEUE_OPTIONS = ("enable_partitioning", "requires_session", "requires_duplicate_detection")


class Verdict(enum.IntEnum):
    """What the contract says must happen to a value (ordered: a combination takes the worst)."""

    VALID = 0
    EDGE = 1
    INVALID = 2


@dataclass(frozen=True)
class Arg:
    """A generated value and its verdict; `note` says which family it came from."""

    value: Any
    verdict: Verdict
    note: str = ""

    def __repr__(self) -> str:
        return f"Arg({self.value!r}, {self.verdict.name}{', ' + self.note if self.note else ''})"


def tag(strategy: st.SearchStrategy[Any], verdict: Verdict, note: str = "") -> st.SearchStrategy[Arg]:
    """Tag every value `strategy` draws with `verdict`."""
    return st.builds(Arg, strategy, st.just(verdict), st.just(note))


def mostly(common: st.SearchStrategy[T], rare: st.SearchStrategy[T], one_in: int = 6) -> st.SearchStrategy[T]:
    """Draw from `rare` about once in `one_in` draws, else from `common` (shrinking toward `common`)."""
    return st.integers(0, one_in - 1).flatmap(lambda k: rare if k == one_in - 1 else common)


def graded(valid: st.SearchStrategy[Arg], edge: st.SearchStrategy[Arg], invalid: st.SearchStrategy[Arg],
           weights: tuple[int, int, int]) -> st.SearchStrategy[Arg]:
    """Draw valid, edge and invalid values in the proportions `weights` (shrinking toward valid)."""
    cut_valid, cut_edge = weights[0], weights[0] + weights[1]
    return st.integers(0, sum(weights) - 1).flatmap(
        lambda k: valid if k < cut_valid else edge if k < cut_edge else invalid)


def combined(*args: Arg) -> Verdict:
    """The verdict of several values used together: the worst of theirs."""
    return max((a.verdict for a in args), default=Verdict.VALID)


# ---------------------------------------------------------------------- building blocks

class Level(enum.IntEnum):
    """An int subclass: a supported property type by inheritance."""

    LOW = 1
    HIGH = 1 << 40


class Colour(str, enum.Enum):
    """A str subclass: a supported property type by inheritance."""

    RED = "red"
    BLUE = "blåg"


LONE_SURROGATE = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
NOT_UNICODE = st.tuples(st.text(max_size=6), LONE_SURROGATE, st.text(max_size=6)).map("".join)
"""Text with a lone surrogate: a `str` that cannot be encoded as UTF-8."""
NOT_TEXT = st.one_of(st.integers(), st.floats(), st.binary(max_size=8), st.lists(st.integers(), max_size=2),
                     st.just(object()), st.dates())
FIXED_OFFSETS = st.timedeltas(min_value=timedelta(hours=-23, minutes=-59, seconds=-59),
                              max_value=timedelta(hours=23, minutes=59, seconds=59)).map(
    lambda d: timezone(timedelta(seconds=int(d.total_seconds()))))
"""Fixed UTC offsets in whole seconds (zoneinfo's historic offsets have seconds too).

Sub-second offsets are left out: CPython's own `datetime.fromisoformat` drops an offset of under
a second (`+00:00:00.000001` parses as `+00:00`), so they cannot survive an ISO round trip.
"""
TIMEZONES = st.one_of(st.none(), st.just(timezone.utc), FIXED_OFFSETS, st.timezones())


def repeated_text(min_size: int, max_size: int) -> st.SearchStrategy[str]:
    """Text of `min_size` to `max_size` characters, a short drawn text repeated (cheap to draw)."""
    return st.tuples(st.text(min_size=1, max_size=6), st.integers(min_size, max_size)).map(
        lambda t: (t[0] * max_size)[:t[1]])


def _seconds(value: Any) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def positive_numbers(low: float, high: float) -> st.SearchStrategy[float | int]:
    """Ints and floats from `low` to `high` (seconds given as a number, not a timedelta)."""
    return st.one_of(st.integers(max(1, int(low) + 1), int(high)) if high >= low + 1 else st.nothing(),
                     st.floats(low, high, allow_nan=False, allow_infinity=False))


# ---------------------------------------------------------------------- message fields

@functools.cache
def bodies(max_size: int = 2048) -> st.SearchStrategy[Arg]:
    """Message bodies: bytes and str (valid), bytes-like (edge), non-Unicode str and other types."""
    return graded(
        st.one_of(tag(st.binary(max_size=max_size), Verdict.VALID, "bytes"),
                  tag(st.text(max_size=64), Verdict.VALID, "str")),
        st.one_of(tag(st.binary(max_size=64).map(bytearray), Verdict.EDGE, "bytearray"),
                  tag(st.binary(max_size=64).map(memoryview), Verdict.EDGE, "memoryview")),
        st.one_of(tag(NOT_UNICODE, Verdict.INVALID, "str that is not valid Unicode"),
                  tag(st.one_of(st.none(), st.integers(), st.floats(), st.lists(st.binary(max_size=4), max_size=2),
                                st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)),
                      Verdict.INVALID, "neither bytes nor str")),
        (12, 1, 1))


@functools.cache
def ids(field: str) -> st.SearchStrategy[Arg]:
    """message_id, session_id and partition_key: up to 128 characters of text, or None. An empty
    message id is refused; an empty session id names the session "" and an empty partition key
    goes with it (as on Service Bus)."""
    empty = tag(st.just(""), Verdict.INVALID if field == "message_id" else Verdict.VALID, "empty")
    valid = st.one_of(
        tag(st.none(), Verdict.VALID, "none"),
        tag(st.text(min_size=1, max_size=24), Verdict.VALID, "text"),
        tag(repeated_text(MAX_ID_LENGTH - 2, MAX_ID_LENGTH), Verdict.VALID, "at the length limit"),
    )
    invalid = st.one_of(
        tag(repeated_text(MAX_ID_LENGTH + 1, MAX_ID_LENGTH + 40), Verdict.INVALID, "too long"),
        tag(NOT_UNICODE, Verdict.INVALID, "not valid Unicode"),
        tag(NOT_TEXT, Verdict.INVALID, "not a str"),
    )
    if field == "message_id":
        invalid = st.one_of(empty, invalid)
    else:
        valid = st.one_of(valid, empty)
    return mostly(valid, invalid, one_in=12)


@functools.cache
def header_texts() -> st.SearchStrategy[Arg]:
    """correlation_id, subject, to, reply_to, reply_to_session_id, content_type: any text or None."""
    valid = st.one_of(tag(st.none(), Verdict.VALID, "none"), tag(st.text(max_size=32), Verdict.VALID, "text"))
    invalid = st.one_of(tag(NOT_UNICODE, Verdict.INVALID, "not valid Unicode"),
                        tag(NOT_TEXT, Verdict.INVALID, "not a str"))
    return mostly(valid, invalid, one_in=12)


CENTURY = timedelta(days=36_525)
LONGEST_DURATION = timedelta(days=10_675_199)
"""The longest TTL the broker takes (Service Bus's TimeSpan.MaxValue, in whole days)."""


@functools.cache
def time_to_lives() -> st.SearchStrategy[Arg]:
    """time_to_live: a positive timedelta; centuries and plain numbers are edges."""
    return graded(
        st.one_of(tag(st.timedeltas(min_value=timedelta(minutes=10), max_value=CENTURY), Verdict.VALID, "timedelta"),
                  tag(st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(minutes=10)),
                      Verdict.VALID, "short timedelta")),
        st.one_of(tag(st.timedeltas(min_value=CENTURY, max_value=timedelta.max) | st.just(timedelta.max),
                      Verdict.EDGE, "centuries"),
                  tag(positive_numbers(1e-9, 1e30), Verdict.EDGE, "seconds as a number")),
        st.one_of(tag(st.timedeltas(max_value=timedelta(0)), Verdict.INVALID, "not positive"),
                  tag(st.one_of(st.floats(max_value=0.0), st.integers(max_value=0),
                                st.sampled_from([float("nan"), float("inf")])),
                      Verdict.INVALID, "number that is not a positive finite"),
                  tag(st.one_of(st.booleans(), st.text(max_size=4), st.dates()), Verdict.INVALID, "not a duration")),
        (5, 3, 2))


@functools.cache
def datetimes_any(min_year: int = 1, max_year: int = 9999) -> st.SearchStrategy[datetime]:
    """Datetimes from `min_year` to `max_year`, naive or aware (fixed offsets and IANA zones)."""
    return st.datetimes(min_value=datetime(min_year, 1, 1), max_value=datetime(max_year, 12, 31, 23, 59, 59, 999999),
                        timezones=TIMEZONES)


@functools.cache
def schedule_times() -> st.SearchStrategy[Arg]:
    """scheduled_enqueue_time_utc: any datetime (naive is UTC); years 1900-2999 are valid, the rest edges."""
    return graded(
        st.one_of(tag(datetimes_any(1900, 2020), Verdict.VALID, "past"),
                  tag(datetimes_any(2100, 2999), Verdict.VALID, "future")),
        st.one_of(tag(datetimes_any(), Verdict.EDGE, "any year"),
                  tag(st.sampled_from([datetime.min, datetime.max,
                                       datetime.min.replace(tzinfo=timezone(timedelta(hours=14))),
                                       datetime.max.replace(tzinfo=timezone(timedelta(hours=-14)))]),
                      Verdict.EDGE, "extreme")),
        tag(st.one_of(st.dates(), st.floats(), st.integers(), st.text(max_size=20)), Verdict.INVALID, "not a datetime"),
        (5, 3, 2))


@functools.cache
def property_keys() -> st.SearchStrategy[Arg]:
    """application_properties keys: any str; non-Unicode text and other types are invalid."""
    invalid = st.one_of(tag(NOT_UNICODE, Verdict.INVALID, "key not valid Unicode"),
                        tag(st.one_of(st.integers(), st.binary(max_size=4), st.none(), st.tuples(st.integers())),
                            Verdict.INVALID, "key not a str"))
    return mostly(tag(st.text(max_size=16), Verdict.VALID, "key"), invalid, one_in=20)


@functools.cache
def property_values() -> st.SearchStrategy[Arg]:
    """application_properties values: every supported type, subclasses of them, and unsupported ones."""
    valid = st.one_of(
        tag(st.text(max_size=32), Verdict.VALID, "str"),
        tag(st.binary(max_size=32), Verdict.VALID, "bytes"),
        tag(st.integers(INT64_MIN, INT64_MAX), Verdict.VALID, "int"),
        tag(st.floats(), Verdict.VALID, "float"),
        tag(st.booleans(), Verdict.VALID, "bool"),
        tag(st.none(), Verdict.VALID, "None"),
        tag(datetimes_any(), Verdict.VALID, "datetime"),
        tag(st.uuids(), Verdict.VALID, "UUID"),
        tag(st.decimals(min_value=-10**20, max_value=10**20, places=6), Verdict.VALID, "Decimal (a decimal128)"),
    )
    edge = tag(st.sampled_from(list(Level) + list(Colour)), Verdict.EDGE, "subclass of int or str")
    invalid = st.one_of(
        tag(st.one_of(st.integers(max_value=INT64_MIN - 1), st.integers(min_value=INT64_MAX + 1)),
            Verdict.INVALID, "int beyond 64 bits"),
        tag(NOT_UNICODE, Verdict.INVALID, "str not valid Unicode"),
        tag(st.sampled_from([Decimal("NaN"), Decimal("Infinity"), Decimal("1" * 35), Decimal("1E+6112")]),
            Verdict.INVALID, "Decimal no decimal128 holds"),
        tag(st.one_of(st.lists(st.integers(), max_size=2), st.tuples(st.integers()),
                      st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
                      st.frozensets(st.integers(), max_size=2), st.binary(max_size=4).map(bytearray),
                      st.complex_numbers(), st.dates(), st.times(),
                      st.timedeltas(), st.just(object()), st.just(rb.Message(b"nested"))),
            Verdict.INVALID, "unsupported type"),
    )
    return graded(valid, edge, invalid, (16, 1, 1))


@st.composite
def property_maps(draw: st.DrawFn) -> Arg:
    """application_properties: None, a dict of keys to values, or something that is not a mapping."""
    kind = draw(st.integers(0, 9))
    if kind == 9:
        return draw(tag(st.one_of(st.lists(st.tuples(st.text(max_size=3), st.integers()), max_size=2),
                                  st.text(max_size=4), st.integers()), Verdict.INVALID, "not a mapping"))
    if kind == 8:
        return Arg(None, Verdict.VALID, "none")
    pairs = draw(st.lists(st.tuples(property_keys(), property_values()), max_size=6, unique_by=lambda kv: kv[0].value))
    return Arg({k.value: v.value for k, v in pairs}, combined(*(a for kv in pairs for a in kv)), "map")


@dataclass(frozen=True)
class MessageCase:
    """A message to build: its body and the keyword arguments given to `rb.Message`."""

    body: Arg
    fields: Mapping[str, Arg] = field(default_factory=dict)

    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments for `rb.Message`."""
        return {name: arg.value for name, arg in self.fields.items()}

    def value(self, name: str) -> Any:
        """A field's value (None when not given)."""
        arg = self.fields.get(name)
        return None if arg is None else arg.value

    @property
    def verdict(self) -> Verdict:
        """The message's verdict: its fields', and a partition key that differs from the session id is invalid."""
        verdict = combined(self.body, *self.fields.values())
        session_id, partition_key = self.value("session_id"), self.value("partition_key")
        if session_id is not None and partition_key is not None and session_id != partition_key:
            verdict = Verdict.INVALID
        return verdict


@st.composite
def message_cases(draw: st.DrawFn, *, body_size: int = 2048, timing: bool = True,
                  message_ids: st.SearchStrategy[Arg] | None = None,
                  session_ids: st.SearchStrategy[Arg] | None = None) -> MessageCase:
    """A message with each field given or left out; `timing` adds TTLs and schedule times.

    `message_ids` / `session_ids`, when given, always draw that id from them. A partition key
    drawn together with a session id usually equals it.
    """
    fields: dict[str, Arg] = {}
    for name in HEADER_FIELDS:
        if draw(st.booleans()):
            fields[name] = draw(header_texts())
    given = {"message_id": message_ids, "session_id": session_ids}
    for name in ID_FIELDS:
        if given.get(name) is None and draw(st.booleans()):
            fields[name] = draw(ids(name))
    if message_ids is not None:
        fields["message_id"] = draw(message_ids)
    if session_ids is not None:
        fields["session_id"] = draw(session_ids)
    if "partition_key" in fields and "session_id" in fields and draw(st.integers(0, 3)) > 0:
        fields["partition_key"] = fields["session_id"]
    if timing and draw(st.integers(0, 3)) == 0:
        fields["time_to_live"] = draw(time_to_lives())
    if timing and draw(st.integers(0, 4)) == 0:
        fields["scheduled_enqueue_time_utc"] = draw(schedule_times())
    if draw(st.booleans()):
        fields["application_properties"] = draw(property_maps())
    return MessageCase(draw(bodies(body_size)), fields)


def session_id_pools() -> st.SearchStrategy[list[Arg]]:
    """A few distinct valid session ids for one example (messages draw theirs from the pool)."""
    return st.lists(tag(st.text(min_size=1, max_size=MAX_ID_LENGTH), Verdict.VALID, "session"),
                    min_size=1, max_size=3, unique_by=lambda a: a.value)


def large_body_sizes() -> st.SearchStrategy[Arg]:
    """Body sizes around the 256 KiB limit: well under (valid), near (edge), over (invalid)."""
    return st.one_of(tag(st.integers(100_000, 250_000), Verdict.VALID, "under the limit"),
                     tag(st.integers(250_001, MESSAGE_LIMIT_BYTES), Verdict.EDGE, "near the limit"),
                     tag(st.integers(MESSAGE_LIMIT_BYTES + 1, MESSAGE_LIMIT_BYTES + 4096), Verdict.INVALID,
                         "over the limit"))


# ---------------------------------------------------------------------- management arguments

def name_verdict(name: Any) -> Verdict:
    """An entity name's verdict: letters, digits, '.', '-', '_', '/'; 1 to 260 characters.

    Names that start or end with '/' or hold '//' are edges: the contract is silent on them.
    """
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME_LENGTH:
        return Verdict.INVALID
    if any(c not in NAME_CHARACTERS for c in name):
        return Verdict.INVALID
    if name.startswith("/") or name.endswith("/") or "//" in name:
        return Verdict.EDGE
    return Verdict.VALID


@dataclass(frozen=True)
class NameCase:
    """A queue name: `text` after a unique prefix (so that valid names never clash), or `text`
    alone (`whole`), or the prefix padded with 'a' to `length` characters."""

    text: Any
    whole: bool = False
    length: int | None = None

    def materialize(self, prefix: str) -> Any:
        """The name to pass, given this example's unique prefix."""
        if self.length is not None:
            return prefix + "a" * (self.length - len(prefix))
        return self.text if self.whole else prefix + self.text


def entity_names() -> st.SearchStrategy[NameCase]:
    """Queue names: valid characters (mostly), slashes, lengths at the limit, other characters, non-str."""
    characters = st.one_of(st.sampled_from(NAME_CHARACTERS), st.characters())
    valid = st.one_of(
        st.builds(NameCase, st.text(alphabet=NAME_CHARACTERS.replace("/", ""), max_size=40)),
        st.builds(NameCase, st.text(alphabet=NAME_CHARACTERS, max_size=40)),
        st.builds(NameCase, st.just(""), length=st.sampled_from([MAX_NAME_LENGTH - 1, MAX_NAME_LENGTH])),
    )
    other = st.one_of(
        st.builds(NameCase, st.text(alphabet=characters, min_size=1, max_size=20)),
        st.builds(NameCase, st.sampled_from(["\n", "a\n", " ", "$", "/", "a/", "a//b", "\x00", "é", "Ⅻ", "٣",
                                             "q\t"])),
        st.builds(NameCase, st.sampled_from(["", "/lead", "$x", "a b"]) | NOT_TEXT, whole=st.just(True)),
        st.builds(NameCase, st.just(""), length=st.just(MAX_NAME_LENGTH + 1)),
    )
    return st.integers(0, 3).flatmap(lambda k: other if k == 3 else valid)


OPTION_WEIGHTS = (16, 2, 2)
"""Valid, edge and invalid option values: each option is usually valid, so that a creation with
several options is often accepted as a whole."""


def durations(low: timedelta, high: timedelta, *, optional: bool = False,
              edge_below: timedelta | None = None) -> st.SearchStrategy[Arg]:
    """A management duration from `low` to `high` (inclusive, both drawn often).

    `edge_below`: values from it up to `low` are edges (the contract gives no lower bound).
    `optional`: None is valid. Numbers of seconds are edges (the contract documents timedelta).
    """
    valid = [tag(st.timedeltas(min_value=low, max_value=high) | st.sampled_from([low, high]), Verdict.VALID,
                 "in range")]
    if optional:
        valid.append(tag(st.none(), Verdict.VALID, "none"))
    lowest = edge_below if edge_below is not None else low
    edge = [tag(positive_numbers(max(_seconds(lowest), 0.0), min(_seconds(high), 1e12)), Verdict.EDGE,
                "seconds as a number")]
    if edge_below is not None:
        edge.append(tag(st.timedeltas(min_value=edge_below, max_value=low - timedelta(microseconds=1)),
                        Verdict.EDGE, "shorter than documented"))
    invalid = [
        tag(st.timedeltas(max_value=lowest - timedelta(microseconds=1)), Verdict.INVALID, "too short"),
        tag(st.sampled_from([float("nan"), float("inf"), float("-inf"), -1, 0, 1e20, 10 ** 30]),
            Verdict.INVALID, "number out of range"),
        tag(st.one_of(st.booleans(), st.text(max_size=4), st.dates(), st.nothing() if optional else st.none()),
            Verdict.INVALID, "not a duration"),
    ]
    if high < timedelta.max:
        invalid.append(tag(st.timedeltas(min_value=high + timedelta(microseconds=1)), Verdict.INVALID, "too long"))
    return graded(st.one_of(*valid), st.one_of(*edge), st.one_of(*invalid), OPTION_WEIGHTS)


def counts(low: int, high: int, *, edge_high: int) -> st.SearchStrategy[Arg]:
    """A count from `low` to `high`; above `high` up to `edge_high` is an edge; the rest invalid."""
    return graded(tag(st.integers(low, high) | st.sampled_from([low, high]), Verdict.VALID, "in range"),
                  tag(st.integers(high + 1, edge_high), Verdict.EDGE, "above the documented range"),
                  st.one_of(tag(st.integers(max_value=low - 1), Verdict.INVALID, "too small"),
                            tag(st.integers(min_value=edge_high + 1), Verdict.INVALID, "too large"),
                            tag(st.one_of(st.booleans(), st.floats(), st.text(max_size=3), st.none()),
                                Verdict.INVALID, "not an int")),
                  OPTION_WEIGHTS)


def flags() -> st.SearchStrategy[Arg]:
    """A flag: True or False; anything else (0, 1, None, "true") is invalid."""
    return mostly(tag(st.booleans(), Verdict.VALID, "bool"),
                  tag(st.one_of(st.integers(0, 1), st.none(), st.sampled_from(["true", "False", ""]), st.floats(0, 1)),
                      Verdict.INVALID, "not a bool"), one_in=10)


def statuses() -> st.SearchStrategy[Arg]:
    """A queue status: the four names; other spellings are edges; other values invalid."""
    known = {x.lower() for x in QUEUE_STATUSES}
    return graded(tag(st.sampled_from(QUEUE_STATUSES), Verdict.VALID, "status"),
                  tag(st.sampled_from(["active", "DISABLED", "senddisabled", "Receive_Disabled"]), Verdict.EDGE,
                      "other spelling"),
                  tag(st.one_of(st.text(max_size=8).filter(lambda s: s.lower() not in known), st.none(),
                                st.integers(0, 3)), Verdict.INVALID, "not a status"),
                  OPTION_WEIGHTS)


def forward_targets() -> st.SearchStrategy[Arg]:
    """forward_to targets: None is valid; a queue name is an edge (the target must exist); others invalid."""
    return graded(tag(st.none(), Verdict.VALID, "none"),
                  tag(st.text(alphabet=NAME_CHARACTERS.replace("/", ""), min_size=1, max_size=12), Verdict.EDGE,
                      "name"),
                  tag(st.one_of(st.just(""), NOT_TEXT, st.just("bad name")), Verdict.INVALID, "bad target"),
                  (36, 2, 2))


@functools.cache
def queue_options() -> st.SearchStrategy[dict[str, Arg]]:
    """A subset of create_queue's keyword arguments, each valid or not."""
    strategies: dict[str, st.SearchStrategy[Arg]] = {
        "enable_partitioning": flags(),
        "requires_session": flags(),
        "requires_duplicate_detection": flags(),
        "duplicate_detection_history_time_window": durations(timedelta(seconds=20), timedelta(days=7)),
        "lock_duration": durations(timedelta(seconds=5), timedelta(minutes=5), edge_below=timedelta(microseconds=1)),
        "max_delivery_count": counts(1, 2_000_000_000, edge_high=(1 << 31) - 1),
        "default_message_time_to_live": durations(timedelta(seconds=1), LONGEST_DURATION, optional=True,
                                                  edge_below=timedelta(microseconds=1)),
        "dead_lettering_on_message_expiration": flags(),
        "forward_to": forward_targets(),
        "forward_dead_lettered_messages_to": forward_targets(),
        "max_size_in_megabytes": counts(1, 80 * 1024, edge_high=(1 << 31) - 1),
        "status": statuses(),
    }
    return st.fixed_dictionaries({}, optional=strategies)


def queue_changes() -> st.SearchStrategy[dict[str, Arg]]:
    """The changes given to update_queue: known options (immutable ones included) and unknown keys."""
    unknown = st.dictionaries(st.sampled_from(["express", "autoDeleteOnIdle", "name", "Status", ""]),
                              tag(st.integers(), Verdict.INVALID, "unknown option"), max_size=1)
    return st.tuples(queue_options(), mostly(st.just({}), unknown, one_in=10)).map(lambda t: {**t[0], **t[1]})


# ---------------------------------------------------------------------- client arguments

def waiting_times(*, long: bool) -> st.SearchStrategy[Arg]:
    """A max_wait_time or timeout in seconds; `long` adds valid waits of up to 1e300 seconds
    (only for calls that return at once because a message is waiting)."""
    short = st.one_of(tag(st.none(), Verdict.VALID, "none") if long else st.nothing(),
                      tag(st.floats(0.0, 0.2), Verdict.VALID, "short"), tag(st.just(0), Verdict.VALID, "int"))
    unusual = [tag(st.timedeltas(min_value=timedelta(0), max_value=timedelta(seconds=0.2)), Verdict.EDGE, "timedelta"),
               tag(st.one_of(st.floats(max_value=-1e-9), st.integers(max_value=-1),
                             st.sampled_from([float("nan"), float("inf")])), Verdict.INVALID, "negative or not finite"),
               tag(st.one_of(st.booleans(), st.text(max_size=3), st.dates()), Verdict.INVALID, "not a number")]
    if long:
        unusual += [tag(st.floats(1.0, 1e9), Verdict.VALID, "long"),
                    tag(st.one_of(st.floats(1e9, 1e300), st.integers(10 ** 9, 10 ** 40)), Verdict.EDGE, "very long")]
    return mostly(short, st.one_of(*unusual), one_in=3)


def send_timeouts() -> st.SearchStrategy[Arg]:
    """send_messages / schedule_messages timeout: None or seconds; under a second and
    astronomically long ones are edges; negative, NaN, infinite and non-numbers invalid."""
    return mostly(tag(st.one_of(st.none(), st.floats(1.0, 120.0), st.integers(1, 600)), Verdict.VALID, "timeout"),
                  st.one_of(tag(st.floats(0.0, 1.0), Verdict.EDGE, "under a second"),
                            tag(st.one_of(st.floats(1e6, 1e300), st.integers(10 ** 6, 10 ** 40)), Verdict.EDGE,
                                "very long"),
                            tag(st.one_of(st.floats(max_value=-1e-9), st.integers(max_value=-1),
                                          st.sampled_from([float("nan"), float("inf")])),
                                Verdict.INVALID, "negative or not finite"),
                            tag(st.one_of(st.booleans(), st.text(max_size=3)), Verdict.INVALID, "not a number")),
                  one_in=3)


def message_counts(*, low: int = 1) -> st.SearchStrategy[Arg]:
    """max_message_count / prefetch_count: `low` to 100 valid; up to 10,000 and None are edges."""
    return mostly(tag(st.integers(low, 100), Verdict.VALID, "count"),
                  st.one_of(tag(st.integers(101, MAX_RECEIVE_COUNT), Verdict.EDGE, "large"),
                            tag(st.integers(min_value=MAX_RECEIVE_COUNT + 1), Verdict.EDGE, "very large"),
                            tag(st.integers(max_value=low - 1), Verdict.INVALID, "too small"),
                            tag(st.one_of(st.booleans(), st.floats(), st.text(max_size=2)), Verdict.INVALID,
                                "not an int")),
                  one_in=3)


def receive_modes() -> st.SearchStrategy[Arg]:
    """receive_mode: the enum members; their string values are edges; anything else invalid."""
    return mostly(tag(st.sampled_from(list(rb.ReceiveMode)), Verdict.VALID, "mode"),
                  st.one_of(tag(st.sampled_from([m.value for m in rb.ReceiveMode]), Verdict.EDGE, "mode value"),
                            tag(st.one_of(st.text(max_size=5), st.none(), st.integers(0, 2)), Verdict.INVALID,
                                "not a mode")),
                  one_in=4)


def sub_queues() -> st.SearchStrategy[Arg]:
    """sub_queue: None or a SubQueue (string values are edges); anything else invalid."""
    return mostly(tag(st.sampled_from([None, *rb.SubQueue]), Verdict.VALID, "sub-queue"),
                  st.one_of(tag(st.sampled_from([q.value for q in rb.SubQueue]), Verdict.EDGE, "value"),
                            tag(st.one_of(st.text(max_size=5).filter(lambda s: s not in {q.value for q in rb.SubQueue}),
                                          st.integers(0, 3)), Verdict.INVALID, "not a sub-queue")),
                  one_in=4)


def receiver_session_ids() -> st.SearchStrategy[Arg]:
    """A receiver's session_id on a queue without sessions: None is valid; an id or
    NEXT_AVAILABLE_SESSION must be refused (typed); a malformed one is invalid."""
    return mostly(tag(st.none(), Verdict.VALID, "none"),
                  st.one_of(tag(st.one_of(st.text(min_size=1, max_size=12), st.just(rb.NEXT_AVAILABLE_SESSION)),
                                Verdict.INVALID, "session on a queue without sessions"),
                            tag(st.one_of(st.just(""), repeated_text(MAX_ID_LENGTH + 1, MAX_ID_LENGTH + 9),
                                          st.integers()), Verdict.INVALID, "malformed")),
                  one_in=5)


def sequence_numbers() -> st.SearchStrategy[Arg]:
    """A sequence number: non-negative int64 values are valid, larger ints edges, the rest invalid."""
    return mostly(tag(st.one_of(st.integers(0, 1 << 20), st.integers(0, INT64_MAX),
                                st.tuples(st.integers(0, 31), st.integers(0, 64)).map(lambda t: (t[0] << 48) | t[1])),
                      Verdict.VALID, "sequence number"),
                  st.one_of(tag(st.integers(min_value=INT64_MAX + 1), Verdict.EDGE, "beyond int64"),
                            tag(st.integers(max_value=-1), Verdict.INVALID, "negative"),
                            tag(st.one_of(st.booleans(), st.floats(), st.text(max_size=3), st.none()),
                                Verdict.INVALID, "not an int")),
                  one_in=4)


def batch_sizes() -> st.SearchStrategy[Arg]:
    """create_message_batch(max_size_in_bytes): None or 1 to 256 KiB; the rest invalid."""
    return mostly(tag(st.one_of(st.none(), st.integers(1, MESSAGE_LIMIT_BYTES)), Verdict.VALID, "size"),
                  tag(st.one_of(st.integers(max_value=0), st.integers(min_value=MESSAGE_LIMIT_BYTES + 1),
                                st.booleans(), st.floats(), st.text(max_size=2)), Verdict.INVALID, "bad size"),
                  one_in=4)


def schedule_arguments() -> st.SearchStrategy[Arg]:
    """schedule_messages' schedule_time_utc: a datetime (extreme years are edges); anything else invalid."""
    return mostly(tag(datetimes_any(2100, 2999), Verdict.VALID, "future"),
                  st.one_of(tag(st.one_of(datetimes_any(), st.sampled_from([datetime.min, datetime.max])),
                                Verdict.EDGE, "any year"),
                            tag(st.one_of(st.dates(), st.floats(), st.integers(), st.text(max_size=10), st.none(),
                                          st.times()),
                                Verdict.INVALID, "not a datetime")),
                  one_in=4)
