//! Port latency ranges a JACK client publishes for its ports, so that every other
//! client reads them (`jack_port_get_latency_range` on a port that is not its own) and
//! propagates them through the graph in its latency callback, as jackd2's clients read
//! the shared port table.

use serde::{Deserialize, Serialize};

/// A latency range in frames, JACK's `jack_latency_range_t`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyRange {
    /// Smallest latency, frames.
    pub min: u32,
    /// Largest latency, frames.
    pub max: u32,
}

impl LatencyRange {
    /// Checks `min <= max`.
    pub fn check(&self, what: &str) -> Result<(), String> {
        if self.min > self.max {
            Err(format!(
                "{what} latency range [{}, {}] has min above max",
                self.min, self.max
            ))
        } else {
            Ok(())
        }
    }
}

/// What a port's owner published, in a `PortLatencies` reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortLatency {
    /// The port id.
    pub port: u32,
    /// JACK's capture latency: how long ago what the port carries entered the system.
    pub capture: LatencyRange,
    /// JACK's playback latency: how long until what the port carries leaves it.
    pub playback: LatencyRange,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_with_min_above_max_is_refused() {
        assert!(LatencyRange { min: 0, max: 64 }.check("capture").is_ok());
        assert!(LatencyRange { min: 7, max: 7 }.check("capture").is_ok());
        let e = LatencyRange { min: 65, max: 64 }.check("playback");
        assert!(e.unwrap_err().contains("playback latency range [65, 64]"));
    }
}
