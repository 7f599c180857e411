//! A simulated sound card: playback and capture rings driven by a virtual DMA pointer
//! that advances with a (pluggable) clock, with optional loopback from playback to
//! capture, clock drift and injected faults.
//!
//! The card is split the way a real driver is:
//!
//! * the **hardware model** (`sync`): the DMA position is a pure function of time,
//!   `hw(t) = base + floor((t - t_base) · rate · (1 + drift_ppm/1e6))`. Whenever the
//!   model is brought up to date it "plays" the playback ring up to that position,
//!   copies what was played into the capture ring at the same position (loopback; a
//!   position the application had not written yet was played as silence — an underrun),
//!   and notices underruns and overruns. Positions are frame counters that never wrap;
//!   ring slots are `position % buffer_frames`.
//! * the **driver** (`wait`): timer-based scheduling that knows only what a real driver
//!   knows — the nominal rate, the pointer values it has read and the system clock. It
//!   predicts when the pointer will reach the watermark, sleeps once until then (with a
//!   small late margin and a rate estimated from its own readings, so it is not woken
//!   early by drift), and reads the pointer once on waking. Only these reads count as
//!   `pointer_queries`; `write`/`read` also bring the model up to date (a real card's DMA
//!   runs on its own; the simulation has to catch up before the rings are touched), which
//!   is a clock read, not a driver pointer query.
//!
//! Buffering: the card keeps `quantum + period_frames` frames queued for playback right
//! after each cycle's write, so when the driver wakes `period_frames` frames are still
//! queued — the period is the watermark, the margin that absorbs wakeup latency. See
//! [`theoretical_round_trip_frames`] and docs/devices.md for what that means for latency.
//!
//! The engine must call `read` and `write` every cycle (with silence or dropping the data
//! if nothing uses that side), exactly as with a real duplex card; a side left unserviced
//! under- or overruns.
//!
//! [`config`] holds the set-up, faults and probe; `card.rs` the card.

mod card;
pub mod config;

pub use crate::clock::VirtualClock;
pub use card::SimCard;
pub use config::{
    DacProbe, DriftStep, Fault, MAX_DRIFT_PPM, SimConfig, theoretical_round_trip_frames,
};
