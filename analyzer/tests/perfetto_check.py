"""Independent check of an `export perfetto` file: decoded with Perfetto's
own Python bindings (perfetto_trace_pb2 from the `perfetto` package, with
`protobuf`), nothing shared with the exporter. Prints one JSON object:
what the trace holds and every structural error found.

Checked per track, in file order: every TYPE_SLICE_END closes a slice begun
on that track, nothing is left open at the end, timestamps never go back on
a slice track, every event names a track that was described, counters are
on counter tracks.

Flows (TrackEvent.flow_ids / terminating_flow_ids, v2): every id that is
terminated was started by an earlier event, none continues after it ended,
and no event both starts and ends one; reported per event name.
"""
import collections
import json
import sys

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent


def main(path):
    trace = Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    tracks = {}
    counters = set()
    errors = []
    depth = collections.Counter()
    last_ts = {}
    open_names = {}
    slices = collections.Counter()
    instants = collections.Counter()
    counter_values = collections.Counter()
    unterminated = 0
    lost_sum = 0
    gap_sum = 0
    slice_tracks = collections.Counter()
    flow_seen = set()
    flow_ended = set()
    flow_names = collections.Counter()
    flow_end_names = collections.Counter()
    flow_len = collections.Counter()
    for p in trace.packet:
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            if d.uuid in tracks:
                errors.append("track %d described twice" % d.uuid)
            if d.HasField("parent_uuid") and d.parent_uuid not in tracks:
                errors.append("track %d has an undescribed parent" % d.uuid)
            tracks[d.uuid] = d.name
            if d.HasField("counter"):
                counters.add(d.uuid)
            continue
        if not p.HasField("track_event"):
            errors.append("packet with neither descriptor nor event")
            continue
        e = p.track_event
        t = e.track_uuid
        if t not in tracks:
            errors.append("event on undescribed track %d" % t)
            continue
        args = {a.name: (a.uint_value if a.HasField("uint_value") else a.bool_value) for a in e.debug_annotations}
        for fid in e.flow_ids:
            if fid in flow_ended:
                errors.append("flow %d continues after its end at %d" % (fid, p.timestamp))
            flow_seen.add(fid)
            flow_len[fid] += 1
            flow_names[e.name or "(slice end)"] += 1
        for fid in e.terminating_flow_ids:
            if fid not in flow_seen:
                errors.append("flow %d ends without a start at %d" % (fid, p.timestamp))
            if fid in flow_ended:
                errors.append("flow %d ends twice" % fid)
            if fid in e.flow_ids:
                errors.append("flow %d starts and ends on one event" % fid)
            flow_ended.add(fid)
            flow_end_names[tracks[t].split(" #")[0]] += 1
        if e.type == TrackEvent.TYPE_COUNTER:
            if t not in counters:
                errors.append("counter value on non-counter track %s" % tracks[t])
            counter_values[tracks[t]] += 1
            continue
        if t in counters:
            errors.append("non-counter event on counter track %s" % tracks[t])
        if e.type == TrackEvent.TYPE_INSTANT:
            instants[e.name] += 1
            if e.name == "LOST":
                lost_sum += args["count"]
            if e.name == "sequence gap":
                gap_sum += args["count"]
            continue
        if t in last_ts and p.timestamp < last_ts[t]:
            errors.append("time goes back on %s at %d" % (tracks[t], p.timestamp))
        last_ts[t] = p.timestamp
        if e.type == TrackEvent.TYPE_SLICE_BEGIN:
            if depth[t] != 0:
                errors.append("slices overlap on lane %s at %d" % (tracks[t], p.timestamp))
            depth[t] += 1
            open_names[t] = e.name
        elif e.type == TrackEvent.TYPE_SLICE_END:
            if depth[t] == 0:
                errors.append("end without begin on %s at %d" % (tracks[t], p.timestamp))
                continue
            depth[t] -= 1
            slices[open_names[t]] += 1
            slice_tracks[tracks[t].split(" #")[0]] += 1
            if args.get("unterminated"):
                unterminated += 1
        else:
            errors.append("unexpected event type %d" % e.type)
    for t, d in depth.items():
        if d:
            errors.append("slice never ends on %s" % tracks[t])
    print(json.dumps({
        "packets": len(trace.packet),
        "tracks": len(tracks),
        "track_names": sorted(set(tracks.values())),
        "slices": slices,
        "slices_per_source": slice_tracks,
        "instants": instants,
        "counter_values": counter_values,
        "unterminated": unterminated,
        "lost_sum": lost_sum,
        "gap_sum": gap_sum,
        "flows_ended": len(flow_ended),
        "flow_steps_of_ended": sum(flow_len[f] for f in flow_ended),
        "flow_event_names": flow_names,
        "flow_end_tracks": flow_end_names,
        "errors": errors[:50],
        "error_count": len(errors),
    }, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
