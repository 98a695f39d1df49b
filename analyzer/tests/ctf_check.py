"""Independent reader of an `export ctf` directory: Debian's babeltrace2
Python bindings (python3-bt2), nothing shared with the exporter. Prints one
JSON object: every event (stream, class, clock value in ns, event context,
payload), every discarded-events message, and the structural errors found
(time going back on a stream, a discarded count bt2 could not compute).

Run with Debian's /usr/bin/python3: python3-bt2 installs there.
"""
import json
import sys

import bt2


def value(f):
    """A bt2 field as plain JSON (integers, arrays, structures)."""
    if isinstance(f, bt2._StructureFieldConst):
        return {k: value(v) for k, v in f.items()}
    if isinstance(f, (bt2._ArrayFieldConst,)):
        return [value(v) for v in f]
    if isinstance(f, bt2._StringFieldConst):
        return str(f)
    return int(f)


def main(path):
    events = []
    discarded = []
    errors = []
    last = {}
    counts = {}
    for msg in bt2.TraceCollectionMessageIterator(path):
        if type(msg) is bt2._EventMessageConst:
            ev = msg.event
            stream = ev.packet.stream
            key = (stream.cls.id, stream.id)
            ts = msg.default_clock_snapshot.ns_from_origin
            if key in last and ts < last[key]:
                errors.append("time goes back on stream %s: %d after %d" % (key, ts, last[key]))
            last[key] = ts
            counts[ev.name] = counts.get(ev.name, 0) + 1
            ctx = ev.common_context_field
            events.append({
                "stream_class": stream.cls.id,
                "stream": stream.id,
                "name": ev.name,
                "ts": ts,
                "context": value(ctx) if ctx is not None else None,
                "payload": value(ev.payload_field),
                "packet_source": int(ev.packet.context_field["source"]),
            })
        elif type(msg) is bt2._DiscardedEventsMessageConst:
            if msg.count is None:
                errors.append("discarded events without a count")
            discarded.append({
                "stream_class": msg.stream.cls.id,
                "stream": msg.stream.id,
                "count": msg.count,
            })
    print(json.dumps({
        "events": events,
        "counts": counts,
        "discarded": discarded,
        "errors": errors,
    }))


if __name__ == "__main__":
    main(sys.argv[1])
