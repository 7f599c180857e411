//! `rtp-send:` and `rtp-recv:` specs (docs/net.md):
//!
//! * `rtp-send:dest=ADDR:PORT[,options]`: `format=L24|L16` (default L24), `rate`,
//!   `channels`, `ptime=MS` (packet time, default 1, decimals allowed: `0.125`),
//!   `pt` (payload type; default 10 or 11 for L16 at 44.1 kHz stereo or mono, as
//!   RFC 3551 assigns them, else 127, what PulseAudio and PipeWire use), `ttl` (multicast hops, default 1),
//!   `sap=on|off|GROUP` (SAP announcements of IPv4 streams, default on, to 224.0.0.56
//!   where PulseAudio and PipeWire listen, or to the IPv4 multicast GROUP given),
//!   `name` (default `rtp-send`; also the SDP's session name).
//! * `rtp-recv:listen=ADDR:PORT[,options]` (a multicast ADDR joins the group):
//!   `source=IP` (only this sender), `format`, `rate` (the stream's; resampled to the
//!   device's, the engine's default rate, when they differ), `channels`, `pt`,
//!   `latency=MS` (the jitter buffer's target, default 50), `name` (default `rtp-recv`).

use super::{DeviceDefaults, DeviceSpec, Parser};
use crate::DeviceError;
use crate::rtp::{RtpRecvConfig, RtpSendConfig, default_payload_type};
use quaver_net::Encoding;
use quaver_net::sap::SAP_GROUP_AUDIO;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

impl Parser<'_> {
    fn encoding(&self, value: Option<&str>) -> Result<Encoding, DeviceError> {
        let v = self.value("format", value)?;
        Encoding::from_name(v)
            .ok_or_else(|| self.bad(format!("bad value '{v}' for format (expected L24 or L16)")))
    }

    fn socket_addr(&self, key: &str, value: Option<&str>) -> Result<SocketAddr, DeviceError> {
        let v = self.value(key, value)?;
        v.parse().map_err(|_| {
            self.bad(format!(
                "bad value '{v}' for {key} (expected ADDRESS:PORT, e.g. 239.69.0.1:5004)"
            ))
        })
    }

    /// Milliseconds with decimals, as microseconds within `min_us..=max_us`.
    fn millis(
        &self,
        key: &str,
        value: Option<&str>,
        min_us: u32,
        max_us: u32,
    ) -> Result<u32, DeviceError> {
        let v = self.value(key, value)?;
        let us = v
            .parse::<f64>()
            .ok()
            .filter(|ms| ms.is_finite())
            .map(|ms| (ms * 1000.0).round());
        match us {
            Some(us) if us >= min_us as f64 && us <= max_us as f64 => Ok(us as u32),
            _ => Err(self.bad(format!(
                "bad value '{v}' for {key} (expected milliseconds in {}..={})",
                min_us as f64 / 1000.0,
                max_us as f64 / 1000.0
            ))),
        }
    }

    fn payload_type(&self, value: Option<&str>) -> Result<u8, DeviceError> {
        let pt: u8 = self.number("pt", value)?;
        if pt > 127 {
            return Err(self.bad(format!("pt {pt} is outside 0..=127")));
        }
        Ok(pt)
    }

    /// `on`, `off` or an IPv4 multicast group.
    fn sap_group(&self, value: Option<&str>) -> Result<Option<Ipv4Addr>, DeviceError> {
        if let Some(g) = value.and_then(|v| v.parse::<Ipv4Addr>().ok()) {
            if !g.is_multicast() {
                return Err(self.bad(format!("sap group {g} is not a multicast address")));
            }
            return Ok(Some(g));
        }
        match value.map(str::to_ascii_lowercase).as_deref() {
            None | Some("on" | "true" | "yes" | "1") => Ok(Some(SAP_GROUP_AUDIO)),
            Some("off" | "false" | "no" | "0") => Ok(None),
            Some(_) => Err(self.bad(format!(
                "bad value '{}' for sap (expected on, off or an IPv4 multicast group)",
                value.unwrap_or_default()
            ))),
        }
    }

    pub(super) fn rtp_send(
        &self,
        rest: &str,
        d: &DeviceDefaults,
    ) -> Result<DeviceSpec, DeviceError> {
        let mut dest = None;
        let mut pt = None;
        let mut cfg = RtpSendConfig {
            dest: SocketAddr::from(([0, 0, 0, 0], 0)),
            encoding: Encoding::L24,
            rate: d.rate,
            channels: d.channels.clone(),
            ptime_us: 1000,
            payload_type: 0,
            ttl: 1,
            sap: Some(SAP_GROUP_AUDIO),
            name: "rtp-send".into(),
        };
        for (key, value) in self.options(rest, &[])? {
            match key {
                "dest" => dest = Some(self.socket_addr(key, value)?),
                "format" => cfg.encoding = self.encoding(value)?,
                "rate" => cfg.rate = self.rate(value)?,
                "channels" => cfg.channels = self.channels(value)?,
                "ptime" => cfg.ptime_us = self.millis(key, value, 1, 1_000_000)?,
                "pt" => pt = Some(self.payload_type(value)?),
                "ttl" => {
                    let ttl: u8 = self.number(key, value)?;
                    cfg.ttl = ttl as u32;
                }
                "sap" => cfg.sap = self.sap_group(value)?,
                "name" => cfg.name = self.name(value)?,
                _ => {
                    return Err(self.unknown(
                        "rtp-send",
                        key,
                        "dest, format, rate, channels, ptime, pt, ttl, sap, name",
                    ));
                }
            }
        }
        cfg.payload_type =
            pt.unwrap_or_else(|| default_payload_type(cfg.encoding, cfg.rate, cfg.channels.len()));
        cfg.dest = dest.ok_or_else(|| self.bad("missing dest=ADDRESS:PORT".into()))?;
        if cfg.dest.port() == 0 {
            return Err(self.bad("dest port 0".into()));
        }
        Ok(DeviceSpec::RtpSend(cfg))
    }

    pub(super) fn rtp_recv(
        &self,
        rest: &str,
        d: &DeviceDefaults,
    ) -> Result<DeviceSpec, DeviceError> {
        let mut listen = None;
        let mut pt = None;
        let mut cfg = RtpRecvConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 0)),
            source: None,
            encoding: Encoding::L24,
            rate: d.rate,
            device_rate: d.rate,
            channels: d.channels.clone(),
            payload_type: 0,
            latency_us: 50_000,
            name: "rtp-recv".into(),
        };
        for (key, value) in self.options(rest, &[])? {
            match key {
                "listen" => listen = Some(self.socket_addr(key, value)?),
                "source" => {
                    let v = self.value(key, value)?;
                    let ip: IpAddr = v.parse().map_err(|_| {
                        self.bad(format!(
                            "bad value '{v}' for source (expected an IP address)"
                        ))
                    })?;
                    cfg.source = Some(ip);
                }
                "format" => cfg.encoding = self.encoding(value)?,
                "rate" => cfg.rate = self.rate(value)?,
                "channels" => cfg.channels = self.channels(value)?,
                "pt" => pt = Some(self.payload_type(value)?),
                "latency" => cfg.latency_us = self.millis(key, value, 0, 2_000_000)?,
                "name" => cfg.name = self.name(value)?,
                _ => {
                    return Err(self.unknown(
                        "rtp-recv",
                        key,
                        "listen, source, format, rate, channels, pt, latency, name",
                    ));
                }
            }
        }
        cfg.payload_type =
            pt.unwrap_or_else(|| default_payload_type(cfg.encoding, cfg.rate, cfg.channels.len()));
        cfg.listen = listen.ok_or_else(|| self.bad("missing listen=ADDRESS:PORT".into()))?;
        Ok(DeviceSpec::RtpRecv(cfg))
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::{DeviceDefaults, DeviceSpec, parse_spec};
    use quaver_net::Encoding;

    #[test]
    fn rtp_specs_parse_and_refuse_with_reasons() {
        let d = DeviceDefaults::default();
        let Ok(DeviceSpec::RtpSend(c)) = parse_spec(
            "rtp-send:dest=239.69.0.1:5004,format=L16,ptime=0.125,ttl=4",
            &d,
        ) else {
            panic!("rtp-send spec refused");
        };
        assert_eq!(
            (c.dest.port(), c.encoding, c.ptime_us, c.ttl),
            (5004, Encoding::L16, 125, 4)
        );
        let Ok(DeviceSpec::RtpRecv(c)) = parse_spec(
            "rtp-recv:listen=[ff02::1]:5004,source=fe80::1,latency=2.5,channels=8",
            &d,
        ) else {
            panic!("rtp-recv spec refused");
        };
        assert_eq!(
            (c.latency_us, c.channels.len(), c.name.as_str()),
            (2500, 8, "rtp-recv")
        );
        let err = |s: &str| parse_spec(s, &d).unwrap_err().to_string();
        let Ok(DeviceSpec::RtpRecv(c)) = parse_spec("rtp-recv:listen=0.0.0.0:5004,rate=44100", &d)
        else {
            panic!("rtp-recv spec refused");
        };
        assert_eq!((c.rate, c.device_rate), (44_100, d.rate));
        // PulseAudio's default format gets its static type; anything else 127.
        let pt = |s: &str| match parse_spec(s, &d) {
            Ok(DeviceSpec::RtpRecv(c)) => c.payload_type,
            Ok(DeviceSpec::RtpSend(c)) => c.payload_type,
            _ => panic!("{s} refused"),
        };
        assert_eq!(pt("rtp-recv:listen=0.0.0.0:5004,format=L16,rate=44100"), 10);
        assert_eq!(
            pt("rtp-send:dest=239.1.1.1:5004,format=L16,rate=44100,channels=mono"),
            11
        );
        assert_eq!(pt("rtp-send:dest=239.1.1.1:5004,format=L16"), 127);
        assert_eq!(pt("rtp-send:dest=239.1.1.1:5004,pt=96"), 96);
        let sap = |s: &str| match parse_spec(s, &d) {
            Ok(DeviceSpec::RtpSend(c)) => c.sap,
            _ => panic!("{s} refused"),
        };
        assert_eq!(
            sap("rtp-send:dest=239.1.1.1:5004"),
            Some([224, 0, 0, 56].into())
        );
        assert_eq!(sap("rtp-send:dest=239.1.1.1:5004,sap=off"), None);
        assert_eq!(
            sap("rtp-send:dest=239.1.1.1:5004,sap=239.255.255.255"),
            Some([239, 255, 255, 255].into())
        );
        assert_eq!(
            err("rtp-send:dest=1.2.3.4:5,sap=10.0.0.1"),
            "bad device spec 'rtp-send:dest=1.2.3.4:5,sap=10.0.0.1': sap group 10.0.0.1 is not a multicast address"
        );
        assert_eq!(
            err("rtp-send:dest=1.2.3.4:5,sap=maybe"),
            "bad device spec 'rtp-send:dest=1.2.3.4:5,sap=maybe': bad value 'maybe' for sap (expected on, off or an IPv4 multicast group)"
        );
        assert_eq!(
            err("rtp-send:format=L24"),
            "bad device spec 'rtp-send:format=L24': missing dest=ADDRESS:PORT"
        );
        assert_eq!(
            err("rtp-send:dest=239.69.0.1"),
            "bad device spec 'rtp-send:dest=239.69.0.1': bad value '239.69.0.1' for dest (expected ADDRESS:PORT, e.g. 239.69.0.1:5004)"
        );
        assert_eq!(
            err("rtp-send:dest=1.2.3.4:5,format=opus"),
            "bad device spec 'rtp-send:dest=1.2.3.4:5,format=opus': bad value 'opus' for format (expected L24 or L16)"
        );
        assert_eq!(
            err("rtp-send:dest=1.2.3.4:5,ptime=0"),
            "bad device spec 'rtp-send:dest=1.2.3.4:5,ptime=0': bad value '0' for ptime (expected milliseconds in 0.001..=1000)"
        );
        assert_eq!(
            err("rtp-recv:listen=0.0.0.0:5004,pt=200"),
            "bad device spec 'rtp-recv:listen=0.0.0.0:5004,pt=200': pt 200 is outside 0..=127"
        );
        assert_eq!(
            err("rtp-recv:listen=0.0.0.0:5004,channels=1000000000"),
            "bad device spec 'rtp-recv:listen=0.0.0.0:5004,channels=1000000000': channel count 1000000000 is outside 1..=64"
        );
    }
}
