//! Clocks: CLOCK_MONOTONIC in ns, and UTC timestamps for file names and reports
//! (civil-date arithmetic by hand, to keep the dependency tree small).

use std::time::{SystemTime, UNIX_EPOCH};

/// CLOCK_MONOTONIC in ns (the clock quaverd's timing statistics use).
pub use quaver_rt::monotonic_ns;

/// A calendar date and time of day in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Utc {
    /// Year.
    pub year: i64,
    /// Month, 1–12.
    pub month: u32,
    /// Day of month, 1–31.
    pub day: u32,
    /// Hour, 0–23.
    pub hour: u32,
    /// Minute.
    pub minute: u32,
    /// Second.
    pub second: u32,
}

impl Utc {
    /// The UTC time `secs` seconds after the Unix epoch (Howard Hinnant's
    /// `civil_from_days`).
    pub fn from_unix(secs: i64) -> Utc {
        let days = secs.div_euclid(86_400);
        let tod = secs.rem_euclid(86_400);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Utc {
            year,
            month,
            day,
            hour: (tod / 3600) as u32,
            minute: (tod % 3600 / 60) as u32,
            second: (tod % 60) as u32,
        }
    }

    /// Now.
    pub fn now() -> Utc {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        Utc::from_unix(secs)
    }

    /// `20261122T015106Z`: sortable, and safe in file names.
    pub fn compact(&self) -> String {
        format!(
            "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }

    /// `2026-11-22T01:51:06Z` (RFC 3339).
    pub fn iso(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(Utc::from_unix(0).iso(), "1970-01-01T00:00:00Z");
        assert_eq!(Utc::from_unix(951_782_400).iso(), "2000-02-29T00:00:00Z");
        assert_eq!(Utc::from_unix(1_700_000_000).iso(), "2023-11-14T22:13:20Z");
        assert_eq!(Utc::from_unix(1_700_000_000).compact(), "20231114T221320Z");
        assert_eq!(Utc::from_unix(-1).iso(), "1969-12-31T23:59:59Z");
        assert_eq!(Utc::from_unix(4_102_444_800).iso(), "2100-01-01T00:00:00Z");
    }

    #[test]
    fn monotonic_moves_forward() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a && a > 0);
    }
}
