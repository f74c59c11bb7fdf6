"""Wire encodings: JSON for external clients, msgpack for kubemesh components.

Both encodings carry the same JSON-like values (dicts, lists, str, int, float, bool, None).
External clients (kubectl, the Python clients, users' controllers) speak JSON; components
ask for `MSGPACK` in `Content-Type`/`Accept` because it is cheaper to encode and decode.
The apiserver encodes each watch event once per encoding and sends the same bytes to every
watcher of that encoding.

Libraries, chosen by measurement (both in C): orjson for JSON; msgspec for msgpack, whose
encoder writes the same bytes as msgpack-python's `packb(use_bin_type=True)` about three
times as fast and whose decoder reads twice as fast as `unpackb`. msgpack-python remains for
the incremental decoding of watch streams (`stream_unpacker`), which msgspec does not offer.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgpack
import msgspec
import orjson

JSON: Final = "application/json"
MSGPACK: Final = "application/vnd.kubemesh.msgpack"

Encoding = Literal["json", "msgpack"]


class DecodeError(ValueError):
    """The body is not valid in the encoding it claims."""


def _no_ext(code: int, data: memoryview) -> Any:
    # A msgpack extension type has no JSON form: the body is not a Kubernetes object.
    raise DecodeError(f"msgpack extension type {code} is not allowed")


_MSGPACK_ENCODER: Final = msgspec.msgpack.Encoder()
_MSGPACK_DECODER: Final = msgspec.msgpack.Decoder(ext_hook=_no_ext)


def content_type(encoding: Encoding) -> str:
    """The media type of an encoding."""
    return MSGPACK if encoding == "msgpack" else JSON


def encoding_of(media_type: str | None) -> Encoding | None:
    """Which encoding a Content-Type or Accept value names (None if neither)."""
    if not media_type:
        return None
    mt = media_type.split(";", 1)[0].strip().lower()
    if mt == MSGPACK:
        return "msgpack"
    if mt in (JSON, "*/*", "application/*") or mt.endswith("+json"):
        return "json"
    return None


def encode(value: Any, encoding: Encoding) -> bytes:
    """Serialise a JSON-like value."""
    if encoding == "msgpack":
        return _MSGPACK_ENCODER.encode(value)
    return orjson.dumps(value)


def decode(data: bytes, encoding: Encoding) -> Any:
    """Parse a JSON-like value; raises DecodeError on malformed input."""
    try:
        if encoding == "msgpack":
            # Map keys of any type are read: they must still be str for the value to be
            # JSON-like, which the apiserver's validation checks; here only broken framing fails.
            return _MSGPACK_DECODER.decode(data)
        return orjson.loads(data)
    except DecodeError:
        raise
    except RecursionError:
        raise DecodeError("the object is nested too deeply to be decoded") from None
    except (ValueError, TypeError, msgspec.DecodeError) as exc:
        raise DecodeError(str(exc)) from exc


def stream_unpacker() -> msgpack.Unpacker:
    """An incremental decoder for a msgpack watch stream (frames are concatenated objects)."""
    return msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=64 * 1024 * 1024)
