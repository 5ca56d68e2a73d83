#!/usr/bin/env python3
"""Where a contended lock's handoff spends its time: the server's part and the client's.

Reads a packet capture of the loopback traffic of a `peers` bench run (`tcpdump -i lo -s 700
-w FILE`; tcpdump is not needed by anything else here) and, for every handoff of the
contended mutex, splits the time from one holder's release to the next holder's release
(hold 0: the cycle) into four phases, each measured at the server's socket:

  a  server: the holder's delete request -> the deletion's watch event to the next waiter
     (the write's commit: proposal, fsyncs, quorum)
  b  client: the watch event -> the waiter's listing request (its wake-up)
  c  server: the listing request -> its answer
  d  client: the answer -> the new holder's delete request (acquire returns, release starts)

A waiter that takes the lock on the watch event without listing again (ours and the floor do
when the holder was the only one ahead of them: a fast handoff) has no b, c, d: its event ->
delete is counted apart ("fast handoff"), with its own cycle. Beside them y, the old holder's
delete answer -> its next create (how soon it queues again). Only handoffs whose next delete
in the directory is the waiter's are counted. Medians and means per client (ours, zkc, cur,
floor: the suffix of the bench's lock directories), and what was left out. Usage:

  benches/handoff_phases.py CAPTURE [SERVER_PORT|-] [DIR_PREFIX]

SERVER_PORT defaults to the port most connections were opened to; DIR_PREFIX to
`/bench/peers/m8-` (the peers bench's N = 8 directories). The capture must begin before the
clients connect (a stream's first message is taken as its connect), be a microsecond pcap
of Ethernet frames (`-i lo`), and keep whole messages: a stream whose bytes have a gap (a
dropped packet) or whose framing breaks is cut there, and counted.
"""
import statistics
import struct
import sys
from collections import defaultdict

CLIENTS = ("ours", "zkc", "cur", "floor")
KINDS = {1: "create", 15: "create", 19: "create", 21: "create", 2: "delete",
         3: "watch", 4: "watch", 8: "list", 12: "list"}


def packets(name):
    """(time, source port, destination port, seq, payload or None for a SYN) per TCP packet."""
    with open(name, "rb") as f:
        magic, _, _, _, _, _, link = struct.unpack("<IHHiIII", f.read(24))
        if magic != 0xA1B2C3D4 or link != 1:
            sys.exit(f"{name}: not a little-endian microsecond pcap of Ethernet frames (tcpdump -i lo)")
        while True:
            head = f.read(16)
            if len(head) < 16:
                return
            sec, usec, kept, orig = struct.unpack("<IIII", head)
            frame = f.read(kept)
            ip = frame[14:]
            if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
                continue
            tcp = ip[(ip[0] & 15) * 4:struct.unpack(">H", ip[2:4])[0]]
            sport, dport, seq = struct.unpack(">HHI", tcp[:8])
            t = sec + usec / 1e6
            if tcp[13] & 0x02:
                yield t, sport, dport, seq, None, False
            payload = tcp[(tcp[12] >> 4) * 4:]
            if payload:
                # Cut by the snap length: its stream ends there (counted).
                yield t, sport, dport, seq, payload, kept < orig


BROKEN = []
LEFT = defaultdict(int)


def messages(chunks, key):
    """The length-prefixed messages of one direction, each with the time its last byte came;
    in sequence order, up to the first gap (a packet the capture missed) or cut packet."""
    buf, starts = bytearray(), []
    expected = None
    for t, seq, payload, cut in sorted(chunks, key=lambda c: (c[1] - chunks[0][1]) % 2**32):
        if expected is not None and seq != expected:
            BROKEN.append((key, "a gap in the bytes"))
            break
        if cut:
            BROKEN.append((key, "a packet cut by the snap length"))
            break
        expected = (seq + len(payload)) % 2**32
        starts.append((len(buf), t))
        buf += payload
    out, i, k = [], 0, 0
    while i + 4 <= len(buf):
        n = struct.unpack(">i", buf[i:i + 4])[0]
        if n <= 0 or n > 1 << 20:
            BROKEN.append((key, "a message length of %d" % n))
            break
        if i + 4 + n > len(buf):
            break
        while k + 1 < len(starts) and starts[k + 1][0] <= i + 3 + n:
            k += 1
        out.append((starts[k][1], bytes(buf[i + 4:i + 4 + n])))
        i += 4 + n
    return out


def string(body, at):
    n = struct.unpack(">i", body[at:at + 4])[0]
    return body[at + 4:at + 4 + max(n, 0)].decode("utf8", "replace")


def main():
    capture = sys.argv[1]
    prefix = sys.argv[3] if len(sys.argv) > 3 else "/bench/peers/m8-"
    all_packets = list(packets(capture))
    opened = defaultdict(set)
    for t, sport, dport, seq, payload, cut in all_packets:
        if payload is None:
            opened[dport].add(sport)
    if len(sys.argv) > 2 and sys.argv[2] != "-":
        server = int(sys.argv[2])
    else:
        server = max(opened, key=lambda p: len(opened[p]))
    # A connection is its client port and how many times that port has opened one.
    streams, seen, opening = defaultdict(list), defaultdict(set), defaultdict(int)
    for t, sport, dport, seq, payload, cut in all_packets:
        if server not in (sport, dport):
            continue
        port = dport if sport == server else sport
        if payload is None:
            if dport == server:
                opening[port] += 1
            continue
        key = ("s" if sport == server else "c", (port, opening[port]))
        if seq not in seen[key]:
            seen[key].add(seq)
            streams[key].append((t, seq, payload, cut))
    # (time, client port, kind, path): requests, answers ("-answer") and watch events.
    events = []
    for (side, port), chunks in streams.items():
        if side != "c":
            continue
        first = min(chunks, key=lambda c: (c[1] - chunks[0][1]) % 2**32)[2]
        if first[:4].isalpha():
            continue  # a four-letter word (`srvr`, `mntr`), not a session
        asked = {}
        for j, (t, body) in enumerate(messages(chunks, port)):
            if j == 0 or len(body) < 8:
                continue  # the connect request
            xid, op = struct.unpack(">ii", body[:8])
            if op in KINDS:
                path = string(body, 8)
                if path.startswith(prefix):
                    events.append((t, port, KINDS[op], path))
                    asked[xid] = (KINDS[op], path)
        for j, (t, body) in enumerate(messages(streams.get(("s", port), []), port)):
            if j == 0 or len(body) < 4:
                continue
            xid = struct.unpack(">i", body[:4])[0]
            if xid == -1 and len(body) >= 24:
                kind = struct.unpack(">i", body[16:20])[0]
                path = string(body, 24)
                if kind == 2 and path.startswith(prefix):
                    events.append((t, port, "deleted", path))
            elif xid in asked:
                kind, path = asked.pop(xid)
                events.append((t, port, kind + "-answer", path))
    events.sort()
    by_dir = defaultdict(list)
    for e in events:
        directory = e[3] if e[2].startswith("list") else e[3].rsplit("/", 1)[0]
        by_dir[directory].append(e)
    phases = defaultdict(lambda: defaultdict(list))
    LEFT.clear()
    for directory, evs in by_dir.items():
        client = directory.rsplit("-", 1)[-1]
        if client not in CLIENTS:
            continue
        deletes = [i for i, e in enumerate(evs) if e[2] == "delete"]
        for at, nxt in zip(deletes, deletes[1:]):
            t0, holder, _, node = evs[at]
            release, waiter = evs[nxt][0], evs[nxt][1]
            between = evs[at:nxt]
            # The deletion's event to the waiter that deletes next (not to the holder itself).
            event = next((e for e in between if e[2] == "deleted" and e[3] == node
                          and e[1] == waiter and e[1] != holder), None)
            if event is None:
                LEFT[client] += 1
                continue
            tn = event[0]
            mine = [e for e in between if e[1] == waiter and e[0] >= tn]
            listing = next((e[0] for e in mine if e[2] == "list"), None)
            answer = next((e[0] for e in mine if e[2] == "list-answer"), None)
            p = phases[client]
            if listing is None:
                p["fast handoff: a, delete -> watch event"].append(tn - t0)
                p["fast handoff: watch event -> delete"].append(release - tn)
                p["fast handoff: cycle"].append(release - t0)
                p["every handoff: cycle"].append(release - t0)
                continue
            if answer is None:
                LEFT[client] += 1
                continue
            p["a server: delete -> watch event"].append(tn - t0)
            p["b client: watch event -> listing"].append(listing - tn)
            p["c server: listing -> its answer"].append(answer - listing)
            p["d client: answer -> next delete"].append(release - answer)
            p["cycle: delete -> next delete"].append(release - t0)
            p["every handoff: cycle"].append(release - t0)
            ours = [e for e in evs[at:] if e[1] == holder]
            done = next((e[0] for e in ours if e[2] == "delete-answer"), None)
            again = next((e[0] for e in ours if e[2] == "create"), None)
            if done is not None and again is not None and again >= done:
                p["y holder: delete answer -> create"].append(again - done)
                # Only the handoffs whose old holder queued again (a block's last ones drain
                # the line without it).
                p["cycle minus y, per handoff"].append(release - t0 - (again - done))
    print(f"server port {server}; µs, median / mean")
    print("%-36s" % "phase" + "".join("%17s" % c for c in CLIENTS))
    for phase in sorted({k for c in phases.values() for k in c}):
        row = ""
        for c in CLIENTS:
            v = phases[c].get(phase, [])
            cell = "%5.0f / %5.0f" % (statistics.median(v) * 1e6, statistics.mean(v) * 1e6) if v else "-"
            row += "%17s" % cell
        print("%-36s" % phase + row)
    print("%-36s" % "server's share of the cycle (means)" + "".join(
        "%17s" % ("%.2f" % ((statistics.mean(phases[c]["a server: delete -> watch event"])
                             + statistics.mean(phases[c]["c server: listing -> its answer"]))
                            / statistics.mean(phases[c]["cycle: delete -> next delete"]))
                  if phases[c]["cycle: delete -> next delete"] else "-") for c in CLIENTS))
    # On a leader that fsyncs, the old holder's new create is flushed as the waiter comes; if
    # the waiter's delete arrives during that flush it waits for it: the cycle is then y plus
    # two flushes, and the "cycle minus y" row comes out alike for clients in that regime.
    print("%-36s" % "waiter's b + c + d (means)" + "".join(
        "%17s" % ("%.0f" % sum(1e6 * statistics.mean(phases[c][k]) for k in (
            "b client: watch event -> listing", "c server: listing -> its answer",
            "d client: answer -> next delete")))
        if phases[c]["b client: watch event -> listing"] else "-" for c in CLIENTS))
    print("handoffs split (listed / fast / left out, no event to the next deleter):", ", ".join(
        f"{c} {len(phases[c]['cycle: delete -> next delete'])} / "
        f"{len(phases[c]['fast handoff: cycle'])} / {LEFT[c]}" for c in CLIENTS))
    if BROKEN:
        print(f"streams cut: {len(BROKEN)} ({', '.join(sorted({why for _, why in BROKEN}))})")


if __name__ == "__main__":
    main()
