//! Limits on what a client may ask for, and the checks of names and volumes that
//! requests share.

/// Longest accepted name (node, stream, client, port address) in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Highest accepted stream sample rate.
pub const MAX_RATE: u32 = 384_000;
/// Most channels a stream may have.
pub const MAX_CHANNELS: usize = 64;
/// Largest accepted requested latency in milliseconds.
pub const MAX_LATENCY_MS: f64 = 10_000.0;
/// Largest accepted linear volume (+20 dB).
pub const MAX_VOLUME: f32 = 10.0;
/// Largest quantum a client may ask for, frames.
pub const MAX_QUANTUM: u32 = 65536;
/// Most ports of one direction a callback node may ask for.
pub const MAX_CALLBACK_PORTS: u32 = crate::callback::MAX_CALLBACK_PORTS;
/// Longest port name in bytes.
pub const MAX_PORT_NAME_BYTES: usize = 128;

pub(super) fn check_port_name(field: &str, s: &str) -> Result<(), String> {
    check_name(field, s)?;
    if s.len() > MAX_PORT_NAME_BYTES {
        return Err(format!(
            "{field} is {} bytes, longer than {MAX_PORT_NAME_BYTES}",
            s.len()
        ));
    }
    if s.contains(':') {
        return Err(format!("{field} '{s}' contains ':'"));
    }
    Ok(())
}

pub(super) fn check_name(field: &str, s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err(format!("{field} must not be empty"));
    }
    if s.len() > MAX_NAME_BYTES {
        return Err(format!(
            "{field} is {} bytes, longer than {MAX_NAME_BYTES}",
            s.len()
        ));
    }
    // Control characters would corrupt terminal output of `quaver status`.
    if s.chars().any(char::is_control) {
        return Err(format!("{field} contains control characters"));
    }
    Ok(())
}

pub(super) fn check_volume(v: f32) -> Result<(), String> {
    if v.is_finite() && (0.0..=MAX_VOLUME).contains(&v) {
        Ok(())
    } else {
        Err(format!("volume {v} out of range 0..={MAX_VOLUME}"))
    }
}
