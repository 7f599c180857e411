#!/usr/bin/python3
"""Metadata, aliases and UUIDs through python3-jack-client, across two clients.

Prints a transcript in which every UUID is replaced by a symbolic name, so the same
script gives the same text against any JACK server (quaverd through quaver-jack, or
jackd2). Exits 77 when `import jack` fails, 1 on an unexpected failure.
"""

import sys
import time

try:
    import jack
except Exception as e:  # noqa: BLE001 - any import failure means "skip"
    print(f"SKIPPED: import jack failed: {e}", file=sys.stderr)
    sys.exit(77)

a = jack.Client("meta_a")
b = jack.Client("meta_b")
events = {"a": [], "b": []}
a.set_property_change_callback(lambda s, k, c: events["a"].append((s, k, c)))
b.set_property_change_callback(lambda s, k, c: events["b"].append((s, k, c)))
a.activate()
b.activate()
out = a.outports.register("out")
inp = b.inports.register("in")
names = {}


def sym(u):
    """The symbolic name of UUID `u`."""
    u = int(u)
    if u not in names:
        names[u] = f"uuid{len(names)}"
    return names[u]


CHANGE = {
    jack.PROPERTY_CREATED: "created",
    jack.PROPERTY_CHANGED: "changed",
    jack.PROPERTY_DELETED: "deleted",
}


def settle(expect_a, expect_b):
    """Waits (bounded) for the callbacks, then prints and clears them."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if len(events["a"]) >= expect_a and len(events["b"]) >= expect_b:
            break
        time.sleep(0.02)
    time.sleep(0.2)
    for who in ("a", "b"):
        got = [f"{sym(s)} {k or '-'} {CHANGE.get(c, c)}" for s, k, c in events[who]]
        print(f"  events {who}: {got}")
        events[who].clear()


def gone(subject, key):
    """The property once it is gone, waiting (bounded) for the server to drop it."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        p = jack.get_property(subject, key)
        if p is None:
            break
        time.sleep(0.05)
    return p


print("uuids:", sym(a.uuid), sym(b.uuid), sym(out.uuid), sym(inp.uuid))
print("client uuid by name:", sym(b.get_uuid_for_client_name("meta_a")))
print("uuid is type client:", int(a.uuid) >> 32, "port:", out.uuid >> 32)
print("port uuid differs:", out.uuid != inp.uuid)

K = "http://jackaudio.org/metadata/pretty-name"
a.set_property(out, K, "Left out")
print("set on port by a")
settle(1, 1)
print("b sees:", jack.get_property(out.uuid, K))
a.set_property(out, K, "Left out 2", "text/plain")
print("changed by a")
settle(1, 1)
print("b sees:", jack.get_property(out.uuid, K))
b.set_property(a.uuid, "urn:quaver:test", b"\xff\x01bytes", "application/octet-stream")
print("set on client a by b")
settle(1, 1)
print("properties of a:", jack.get_properties(a.uuid))
allp = jack.get_all_properties()
print("all:", sorted((sym(s), sorted(d.items())) for s, d in allp.items()))
print("missing key:", jack.get_property(out.uuid, "urn:none"))
print("no properties:", jack.get_properties(inp.uuid))
try:
    b.remove_property(out, "urn:none")
    print("remove missing: accepted")
except ValueError as e:
    print("remove missing: ValueError")
b.remove_property(out, K)
print("removed by b")
settle(1, 1)
print("b sees:", jack.get_property(out.uuid, K))
print("remove_properties(a):", a.remove_properties(a.uuid))
settle(1, 1)
print("remove_properties(in, none):", a.remove_properties(inp.uuid))
a.set_property(inp, "urn:x", "1")
a.set_property(out, "urn:y", "2")
settle(2, 2)
a.remove_all_properties()
print("removed all")
settle(1, 1)
print("all after:", jack.get_all_properties())

# Aliases: two per port, set by anyone, seen by everyone.
bout = b.get_port_by_name("meta_a:out")
bout.set_alias("alias:one")
out.set_alias("alias:two")
try:
    out.set_alias("alias:three")
    print("third alias: accepted")
except jack.JackError:
    print("third alias: refused")
time.sleep(0.3)
print("aliases seen by a:", out.aliases)
print("aliases seen by b:", b.get_port_by_name("meta_a:out").aliases)
print("port by alias:", b.get_port_by_name("alias:two").name)
try:
    out.unset_alias("alias:nope")
    print("unset missing: accepted")
except jack.JackError:
    print("unset missing: refused")
bout.unset_alias("alias:one")
time.sleep(0.3)
print("after unset:", out.aliases)

# A port's properties go with it.
tmp = a.outports.register("tmp")
tu = tmp.uuid
a.set_property(tmp, "urn:t", "t")
settle(1, 1)
tmp.unregister()
print("tmp's property after unregister:", gone(tu, "urn:t"))
settle(1, 1)

# A client's properties go with it.
c = jack.Client("meta_c")
c.set_property(c.uuid, "urn:c", "c")
cu = c.uuid
settle(1, 1)
c.close()
print("c's property after close:", gone(cu, "urn:c"))
settle(1, 1)
a.close()
b.close()
print("done")
