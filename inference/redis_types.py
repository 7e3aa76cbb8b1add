"""The shapes of what redis-py writes and reads, as our Redis clients use them."""

from __future__ import annotations

from redis.typing import EncodableT, FieldT, KeyT, StreamIdT

# The fields of a stream entry or a hash as redis-py's writes (XADD, HSET) take them: a
# dict of its own key and value unions. dict is invariant, so a ``dict[str, str]`` is
# refused there; what we write is typed as this instead.
RedisFields = dict[FieldT, EncodableT]
# What XREAD / XREADGROUP take: stream key -> the last entry id read (the same reason).
StreamOffsets = dict[KeyT, StreamIdT]
# Stream entries as our clients read them: ``decode_responses=True`` over RESP2
# (inference.connections), so ids, names and values are ``str``. redis-py types its
# replies for every protocol and encoding; a read is cast to these where it is unpacked.
StreamEntry = tuple[str, dict[str, str]]
StreamRead = list[tuple[str, list[StreamEntry]]]  # XREAD / XREADGROUP: per stream
