#!/usr/bin/python3
"""python3-jack-client's transport API, step by step, printing one answer per line.

Run it against quaverd (under quaver-jack) and against jackd2 and compare the output
(crates/jack/tests/transport.rs does the first; docs/engine/transport.md records the
second). Exit status 77: python3-jack-client is missing."""

import sys
import threading
import time

try:
    import jack
except ImportError:
    print("SKIPPED: python3-jack-client is missing (import jack)", flush=True)
    sys.exit(77)


def wait_for(pred, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.002)
    return False


def out(key, value):
    print(f"{key}: {value}", flush=True)


ctl = jack.Client("tr_ctl", no_start_server=True)
slow = jack.Client("tr_slow", no_start_server=True)
master = jack.Client("tr_master", no_start_server=True)
rate = ctl.samplerate
BPM = 120.0
FPB = rate * 60.0 / BPM  # frames per beat

ready = threading.Event()
sync_states = []


def sync(state, pos):
    sync_states.append(int(state))
    return ready.is_set()


new_pos_calls = [0]


def bbt_of(frame):
    beat = int(frame // FPB)
    tick = int((frame % FPB) * 1920 / FPB)
    return beat // 4 + 1, beat % 4 + 1, tick


def timebase(state, blocksize, pos, new_pos):
    if new_pos:
        new_pos_calls[0] += 1
    pos.valid = jack._lib.JackPositionBBT
    pos.bar, pos.beat, pos.tick = bbt_of(pos.frame)
    pos.bar_start_tick = 0.0
    pos.beats_per_bar = 4.0
    pos.beat_type = 4.0
    pos.ticks_per_beat = 1920.0
    pos.beats_per_minute = BPM


for c in (ctl, slow, master):
    c.set_process_callback(lambda frames: None)
slow.set_sync_callback(sync)
for c in (ctl, slow, master):
    c.activate()

state, pos = ctl.transport_query()
out("initial", f"{state} frame={pos['frame']} rate={pos['frame_rate'] == rate}")
out("sync callback called once after registering",
    wait_for(lambda: len(sync_states) > 0) and sync_states[0] == jack.STOPPED)
out("conditional master", master.set_timebase_callback(timebase, True))
out("second conditional master", ctl.set_timebase_callback(timebase, True))

ctl.transport_locate(48000)
out("locate while stopped", wait_for(lambda: ctl.transport_frame == 48000))
out("state after locate", ctl.transport_state)
out("master new_pos after locate", wait_for(lambda: new_pos_calls[0] >= 1))
wait_for(lambda: "bar" in ctl.transport_query()[1])
_, pos = ctl.transport_query()
out("bbt at 48000", (pos.get("bar"), pos.get("beat"), pos.get("tick"),
                     pos.get("beats_per_minute")))

ctl.transport_start()
out("starting while the slow client is not ready",
    wait_for(lambda: ctl.transport_state == jack.STARTING))
time.sleep(0.3)
out("still starting after 0.3 s", (ctl.transport_state, ctl.transport_frame))
out("sync callback saw starting", jack.STARTING in sync_states)
ready.set()
out("rolling once ready", wait_for(lambda: ctl.transport_state == jack.ROLLING))
out("frame advances", wait_for(lambda: ctl.transport_frame > 48000 + rate // 4))


def bbt_matches():
    st, p = ctl.transport_query()
    return "bar" in p and (p["bar"], p["beat"], p["tick"]) == bbt_of(p["frame"])


out("bbt follows the frame while rolling", wait_for(bbt_matches))
out("every client sees the same state",
    (slow.transport_state, master.transport_state) == (jack.ROLLING, jack.ROLLING))

ctl.transport_stop()
out("stop", wait_for(lambda: ctl.transport_state == jack.STOPPED))
f1 = ctl.transport_frame
time.sleep(0.1)
out("stopped frame stands still", f1 == ctl.transport_frame)

ready.clear()
ctl.set_sync_timeout(300000)
ctl.transport_locate(0)
wait_for(lambda: ctl.transport_frame == 0)
t0 = time.monotonic()
ctl.transport_start()
rolled = wait_for(lambda: ctl.transport_state == jack.ROLLING)
elapsed = time.monotonic() - t0
out("sync timeout of 0.3 s starts without the slow client",
    rolled and 0.2 < elapsed < 1.5)
ready.set()
ctl.set_sync_timeout(2000000)

ctl.transport_locate(rate * 10)
out("locate while rolling",
    wait_for(lambda: rate * 10 <= ctl.transport_frame < rate * 11
             and ctl.transport_state == jack.ROLLING))

master.release_timebase()
out("release_timebase", "ok")
out("bbt gone after release", wait_for(lambda: "bar" not in ctl.transport_query()[1]))
time.sleep(0.1)
out("after release", (ctl.transport_state, ctl.transport_frame >= rate * 10))
try:
    master.release_timebase()
    out("second release", "accepted")
except jack.JackErrorCode as e:
    out("second release", f"refused code={e.code}")

out("unconditional master", master.set_timebase_callback(timebase, False))
out("bbt back", wait_for(lambda: "bar" in ctl.transport_query()[1]))
master.deactivate()
master.close()
out("bbt gone after the master closed",
    wait_for(lambda: "bar" not in ctl.transport_query()[1]))

try:
    ctl.transport_locate(2 ** 32)
    out("locate 2**32", "accepted")
except OverflowError:
    out("locate 2**32", "OverflowError")
bad = jack._ffi.new("jack_position_t*")
bad.frame = 1000
bad.valid = 0x1
try:
    ctl.transport_reposition_struct(bad)
    out("reposition with bad bits", "accepted")
except jack.JackErrorCode as e:
    out("reposition with bad bits", f"refused code={e.code}")
time.sleep(0.05)
out("bad reposition not applied", ctl.transport_frame > rate * 10)
out("still rolling after bad input", ctl.transport_state == jack.ROLLING)

ctl.transport_stop()
out("stopped at the end", wait_for(lambda: ctl.transport_state == jack.STOPPED))
slow.close()
ctl.close()
