"""AMQP 1.0 frames between the socket and the proton engine, mended where the Azure SDKs and proton
disagree. Pure (no I/O, no Ray).

- **Delivery ids.** AMQP numbers a session's transfers one after the other, and proton closes the
  connection (`amqp:session:invalid-field`, "sequencing error") on a transfer out of that order.
  The Python SDK's threads put transfers on the wire out of order (several threads sending
  `$management` requests, or renewing locks, on one link), and its async client may give two
  transfers one id; Service Bus takes both. So each new transfer from the client is renumbered
  to the id proton expects, and the dispositions that name transfers by id are translated: from
  the client to proton's numbering, from proton back to the client's (split into one
  disposition per run of consecutive ids). Only the frames whose ids change are rewritten.
- **Errors.** An error in a Close, End or Detach that proton sends with no `info` gets an empty
  map there: the SDKs read an error's condition, description and info, and fail (IndexError) on an
  error of two fields.

Frames are taken whole (the protocol headers pass as they are); bytes that are no AMQP frames
pass unchanged from there on, for proton to refuse.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from .decoding import decode_value, encoded_items
from .encoding import described_section, encode_map, encode_uint, encoded_list

_HEADER = struct.Struct(">IBBH")
_PROTOCOL_HEADER = b"AMQP"
_AMQP_FRAME = 0
_BEGIN, _TRANSFER, _DISPOSITION, _DETACH, _END, _CLOSE = 0x11, 0x14, 0x15, 0x16, 0x17, 0x18
_ERROR = 0x1D
_READ_IN = frozenset({_BEGIN, _TRANSFER, _DISPOSITION, _END})
_READ_OUT = frozenset({_BEGIN, _DISPOSITION, _DETACH, _END, _CLOSE})
_LARGEST_FRAME = 16 * 1024 * 1024
"""A frame size past which the bytes are taken for no AMQP (proton refuses them)."""
_REMEMBERED_IDS = 65536
"""Renumbered transfers remembered per session for their dispositions (the oldest go first)."""
_SEQUENCE = 1 << 32


@dataclass
class _Session:
    """The renumbering of one session's incoming transfers."""

    next_id: int | None = None
    """The id proton expects for the next new transfer (None until the first transfer)."""
    in_progress: dict[int, int] = field(default_factory=dict)
    """Link handle -> proton's id of the transfer still being received in several frames."""
    to_client: dict[int, int] = field(default_factory=dict)
    """Proton's id -> the client's, for the transfers whose ids differ."""
    to_proton: dict[int, int] = field(default_factory=dict)
    """The client's id -> proton's, for the same transfers."""

    def renumber(self, client_id: int) -> int:
        """Proton's id for a new transfer the client numbered `client_id`."""
        ours = client_id if self.next_id is None else self.next_id
        self.next_id = (ours + 1) % _SEQUENCE
        if ours == client_id:
            self.to_client.pop(ours, None)
        else:
            self.to_client[ours] = client_id
            while len(self.to_client) > _REMEMBERED_IDS:
                del self.to_client[next(iter(self.to_client))]
        self.to_proton[client_id] = ours
        while len(self.to_proton) > _REMEMBERED_IDS:
            del self.to_proton[next(iter(self.to_proton))]
        return ours


class FrameMender:
    """Mends the frames of one connection: `inbound` for bytes from the client (before proton reads
    them), `outbound` for bytes proton writes (before the client reads them)."""

    def __init__(self) -> None:
        self._in = _Splitter()
        self._out = _Splitter()
        self._sessions: dict[int, _Session] = {}
        """The client's channel -> its session."""
        self._channels: dict[int, int] = {}
        """Proton's channel -> the client's, learnt from proton's Begin."""

    def inbound(self, data: bytes) -> bytes:
        """The bytes to give proton for `data` read from the socket (whole frames only: the rest
        waits for the next call)."""
        return b"".join(self._inbound_frame(frame) for frame in self._in.frames(data))

    def outbound(self, data: bytes) -> bytes:
        """The bytes to send the client for `data` that proton wrote."""
        return b"".join(self._outbound_frame(frame) for frame in self._out.frames(data))

    # ------------------------------------------------------------------ from the client

    def _inbound_frame(self, frame: bytes) -> bytes:
        parsed = _performative(frame, _READ_IN)
        if parsed is None:
            return frame
        channel, code, items, payload = parsed
        if code == _BEGIN:
            self._sessions[channel] = _Session()
        elif code == _END:
            self._sessions.pop(channel, None)
        elif code == _TRANSFER:
            return self._transfer(frame, channel, items, payload)
        elif code == _DISPOSITION:
            return self._client_disposition(frame, channel, items)
        return frame

    def _transfer(self, frame: bytes, channel: int, items: list[bytes], payload: bytes) -> bytes:
        session = self._sessions.setdefault(channel, _Session())
        handle = _int(items, 0)
        client_id, more, aborted = _int(items, 1), _flag(items, 5), _flag(items, 9)
        if handle is None:
            return frame
        ours = session.in_progress.get(handle)
        if ours is None:
            if client_id is None:
                return frame  # no id to renumber: proton refuses it
            ours = session.renumber(client_id)
        if more and not aborted:
            session.in_progress[handle] = ours
        else:
            session.in_progress.pop(handle, None)
        if client_id is None or client_id == ours:
            return frame
        items[1] = encode_uint(ours)
        return _frame(frame, _TRANSFER, items, payload)

    def _client_disposition(self, frame: bytes, channel: int, items: list[bytes]) -> bytes:
        """A disposition from the client about transfers it sent (role sender): proton's ids."""
        session = self._sessions.get(channel)
        ids = None if session is None or _flag(items, 0) or not session.to_proton else _disposed(items)
        if ids is None:
            return frame
        ours = [session.to_proton.get(i, i) for i in ids]
        if ours == ids:
            return frame
        return b"".join(_disposition(frame, items, run) for run in _runs(ours))

    # ------------------------------------------------------------------ from proton

    def _outbound_frame(self, frame: bytes) -> bytes:
        parsed = _performative(frame, _READ_OUT)
        if parsed is None:
            return frame
        channel, code, items, payload = parsed
        if code == _BEGIN:
            remote = _int(items, 0)
            if remote is not None:
                self._channels[channel] = remote
        elif code == _DISPOSITION:
            return self._proton_disposition(frame, channel, items)
        elif code in (_CLOSE, _END, _DETACH):
            mended = _with_error_info(code, items)
            if code == _END:
                self._sessions.pop(self._channels.pop(channel, -1), None)
            if mended is not None:
                return _frame(frame, code, mended, payload)
        return frame

    def _proton_disposition(self, frame: bytes, channel: int, items: list[bytes]) -> bytes:
        """A disposition from proton about transfers the client sent (role receiver): the client's ids."""
        session = self._sessions.get(self._channels.get(channel, -1))
        ids = None if session is None or not _flag(items, 0) or not session.to_client else _disposed(items)
        if ids is None:
            return frame
        theirs = [session.to_client.get(i, i) for i in ids]
        if _flag(items, 3):  # settled: these transfers are done with
            for i in ids:
                client_id = session.to_client.pop(i, None)
                if client_id is not None and session.to_proton.get(client_id) == i:
                    del session.to_proton[client_id]
        if theirs == ids:
            return frame
        return b"".join(_disposition(frame, items, run) for run in _runs(theirs))


class _Splitter:
    """Cuts a byte stream into protocol headers and whole frames; once the bytes are no AMQP, passes
    everything through as it comes."""

    def __init__(self) -> None:
        self._pending = b""
        self._passing = False

    def frames(self, data: bytes) -> list[bytes]:
        if self._passing:
            return [data] if data else []
        buffer = self._pending + data
        out: list[bytes] = []
        offset = 0
        while len(buffer) - offset >= 8:
            if buffer[offset:offset + 4] == _PROTOCOL_HEADER:
                out.append(buffer[offset:offset + 8])
                offset += 8
                continue
            size, doff, _kind, _channel = _HEADER.unpack_from(buffer, offset)
            if size < 8 or doff < 2 or doff * 4 > size or size > _LARGEST_FRAME:
                self._passing = True
                out.append(buffer[offset:])
                self._pending = b""
                return out
            if len(buffer) - offset < size:
                break
            out.append(buffer[offset:offset + size])
            offset += size
        self._pending = buffer[offset:]
        return out


def _performative(frame: bytes, wanted: frozenset[int]) -> tuple[int, int, list[bytes], bytes] | None:
    """(channel, descriptor code, encoded list items, payload) of an AMQP frame whose performative
    is one of `wanted`, or None for any other frame: a header, an empty frame, a SASL frame, another
    performative or one that does not parse (passed as it is)."""
    if len(frame) <= 8 or frame[:4] == _PROTOCOL_HEADER:
        return None
    _size, doff, kind, channel = _HEADER.unpack_from(frame, 0)
    start = doff * 4
    if kind != _AMQP_FRAME or start >= len(frame) or frame[start] != 0x00:
        return None
    try:
        code, offset = decode_value(frame, start + 1)
        if not isinstance(code, int) or code not in wanted:
            return None
        items, end = encoded_items(frame, offset)
    except (ValueError, IndexError, struct.error):
        return None
    return channel, code, items, frame[end:]


def _frame(original: bytes, code: int, items: list[bytes], payload: bytes) -> bytes:
    """`original`'s frame (its channel) with the performative `code` of `items` and `payload`."""
    _size, _doff, kind, channel = _HEADER.unpack_from(original, 0)
    body = described_section(code, encoded_list(items)) + payload
    return _HEADER.pack(8 + len(body), 2, kind, channel) + body


def _int(items: list[bytes], index: int) -> int | None:
    """An integer field (None when absent or null)."""
    if index >= len(items):
        return None
    value, _ = decode_value(items[index])
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _flag(items: list[bytes], index: int) -> bool:
    """A boolean field (false when absent or null)."""
    return index < len(items) and items[index] in (b"\x41", b"\x56\x01")


def _disposed(items: list[bytes]) -> list[int] | None:
    """The delivery ids a disposition's fields (`first`, `last`) name, or None without a `first`."""
    first = _int(items, 1)
    if first is None:
        return None
    last = _int(items, 2)
    return _span(first, first if last is None else last)


def _span(first: int, last: int) -> list[int]:
    """The ids from `first` to `last`, in serial-number order (they may wrap)."""
    return [(first + i) % _SEQUENCE for i in range((last - first) % _SEQUENCE + 1)]


def _runs(ids: list[int]) -> list[tuple[int, int]]:
    """`ids` as runs of consecutive ids, (first, last) each, in order."""
    runs: list[tuple[int, int]] = []
    for i in ids:
        if runs and i == (runs[-1][1] + 1) % _SEQUENCE:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def _disposition(original: bytes, items: list[bytes], run: tuple[int, int]) -> bytes:
    """The disposition `items` for the ids `run` (first, last)."""
    first, last = run
    fields = list(items) + [b"\x40"] * max(0, 3 - len(items))
    fields[1] = encode_uint(first)
    fields[2] = encode_uint(last)
    return _frame(original, _DISPOSITION, fields, b"")


def _with_error_info(code: int, items: list[bytes]) -> list[bytes] | None:
    """The fields of a Close, End or Detach whose error has no info, with an info map added; None
    when there is nothing to mend."""
    index = 2 if code == _DETACH else 0
    if index >= len(items) or items[index] == b"\x40":
        return None
    error = items[index]
    if error[0] != 0x00:
        return None
    try:
        descriptor, offset = decode_value(error, 1)
        fields, _ = encoded_items(error, offset)
    except (ValueError, IndexError, struct.error):
        return None
    if descriptor != _ERROR or (len(fields) >= 3 and fields[2] != b"\x40"):
        return None
    fields = (fields + [b"\x40"] * 3)[:3]
    fields[2] = encode_map({})
    mended = list(items)
    mended[index] = described_section(_ERROR, encoded_list(fields))
    return mended
