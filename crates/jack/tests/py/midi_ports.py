"""python3-jack-client's MIDI API, printed so that runs against quaverd and jackd2 can be
compared line by line: port attributes and types, events from one client's MIDI output
to another's input with their offsets, and the error codes of bad writes."""
import sys
import threading
import time

import jack

a = jack.Client("pa", no_start_server=True)
b = jack.Client("pb", no_start_server=True)
out = a.midi_outports.register("out")
inp = b.midi_inports.register("in")
got = []
codes = {}
in_lost = set()
done = threading.Event()


def code(f):
    try:
        f()
        return 0
    except jack.JackErrorCode as e:
        return e.code


@a.set_process_callback
def pa(frames):
    out.clear_buffer()
    out.write_midi_event(3, bytes([0x90, 60, 100]))
    if not codes:
        codes["order"] = code(lambda: out.write_midi_event(1, b"\x80\x3c\x00"))
        codes["late"] = code(lambda: out.write_midi_event(frames, b"\x80\x3c\x00"))
        big = bytes(out.max_event_size + 1)
        codes["big"] = code(lambda: out.write_midi_event(5, big))
        codes["lost"] = out.lost_midi_events
    else:
        # One event too big for the room left, every cycle: the input sees it lost.
        try:
            out.write_midi_event(5, bytes(out.max_event_size + 1))
        except jack.JackErrorCode:
            pass
    out.write_midi_event(frames - 1, bytes([0x80, 60, 0]))


@b.set_process_callback
def pb(frames):
    in_lost.add(inp.lost_midi_events)
    for offset, data in inp.incoming_midi_events():
        if len(got) < 6:
            got.append(("last" if offset == frames - 1 else offset, bytes(data).hex()))
    if len(got) >= 6:
        done.set()


with a, b:
    print("out", out.shortname, out.is_midi, out.is_audio, out.is_output)
    print("in", inp.shortname, inp.is_midi, inp.is_input)
    print("midi ports", sorted(p.name for p in a.get_ports("p[ab]:", is_midi=True)))
    print("audio ports", sorted(p.name for p in a.get_ports("p[ab]:", is_audio=True)))
    out.connect(inp)
    print("connected", out.is_connected_to(inp), [p.name for p in out.connections])
    if not done.wait(10):
        print("no events arrived")
        sys.exit(1)
    print("events", got)
    print("codes", sorted(codes.items()))
    print("input lost", sorted(in_lost - {0}))
