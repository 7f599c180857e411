//! Where a new stream goes and what the rule file gives it: the device it names, else
//! the rule's target, else stream restore's memory, else the default; its role, own
//! filter chain and starting volume (docs/policy/rules.md).

use super::stream::{Opening, Target};
use crate::conn::Conn;
use crate::state::{Device, stream_target};
use crate::wire::convert::prop_str;
use pulseaudio::protocol::{PlaybackStreamParams, Props, PulseError, RecordStreamParams};
use quaver_engine::{Graph, NodeKind};

impl Conn {
    /// What a playback stream plays to: the sink it names, else the one stream restore
    /// remembers (if it exists), else the default; `true` when restore chose it.
    pub(super) fn playback_target(
        &self,
        graph: &Graph,
        p: &PlaybackStreamParams,
        o: &Opening,
    ) -> Result<(Device, bool), PulseError> {
        let srv = &self.srv;
        // The rule file first, then stream restore's memory, for a stream naming no sink.
        let ruled_sink = match (p.sink_index, p.sink_name.as_ref()) {
            (None, None) => self.rule_target(&o.props, graph),
            _ => None,
        };
        let restored_sink = match (p.sink_index, p.sink_name.as_ref(), o.restored.as_ref()) {
            (None, None, Some(e)) => e.device.as_ref().and_then(|d| srv.sink_by_name(graph, d)),
            _ => None,
        };
        let from_restore = restored_sink.is_some() || ruled_sink.is_some();
        let sink = match (p.sink_index, p.sink_name.as_ref()) {
            _ if ruled_sink.is_some() => ruled_sink,
            _ if restored_sink.is_some() => restored_sink,
            (None, None) => srv.default_sink(graph),
            (i, n) => srv.find_sink(graph, i, n.and_then(|n| n.to_str().ok())),
        }
        .ok_or(PulseError::NoEntity)?;
        Ok((sink, from_restore))
    }

    /// The sink the rule file sends a stream with these (merged, as [`Opening::props`])
    /// properties to, if it exists.
    pub(super) fn rule_target(&self, props: &Props, graph: &Graph) -> Option<Device> {
        let lookup = rule_lookup(props);
        let name = self
            .srv
            .policy
            .lock()
            .ok()?
            .rules()
            .target(&lookup)?
            .to_string();
        let sink = self.srv.sink_by_name(graph, &name);
        if sink.is_none() {
            tracing::info!("rules: sink {name:?} is not here; the stream goes to the default");
        }
        sink
    }

    /// A stream's role for ducking: its `media.role` (its own or its client's), else the
    /// one the rule file gives it.
    pub(super) fn stream_role(&self, props: &Props) -> Option<String> {
        prop_str(props, pulseaudio::protocol::Prop::MediaRole).or_else(|| {
            let policy = self.srv.policy.lock().ok()?;
            policy.rules().role(&rule_lookup(props)).map(str::to_string)
        })
    }

    /// The chain and starting volume the rule file gives a stream with these (merged)
    /// properties; the chain is built by the caller, outside the policy's lock.
    pub(super) fn stream_extras(&self, props: &Props) -> quaver_policy::StreamExtras {
        self.srv
            .policy
            .lock()
            .map(|p| p.stream_extras(&rule_lookup(props)))
            .unwrap_or_default()
    }

    /// What a record stream taps: the sink input it monitors, else the device it names,
    /// else the rule file's target (`ruled`), else the one stream restore remembers
    /// (`restored`), each if it exists, else the default.
    pub(crate) fn record_target(
        &self,
        p: &RecordStreamParams,
        ruled: Option<&str>,
        restored: Option<&str>,
    ) -> Result<(Target, Device), PulseError> {
        let srv = &self.srv;
        let graph = srv.engine.graph();
        if let Some(input) = p.direct_on_input_index {
            // A single sink input's monitor: tap that stream's node.
            let n = graph
                .nodes
                .get(&input)
                .filter(|n| n.kind == NodeKind::PlaybackStream)
                .ok_or(PulseError::NoEntity)?;
            let sink = stream_target(&graph, input)
                .and_then(|s| srv.monitor_of(&graph, s))
                .ok_or(PulseError::NoEntity)?;
            return Ok((
                Target {
                    node: n.id,
                    name: n.name.clone(),
                    dev_index: sink.index,
                    dev_name: sink.name.clone(),
                },
                sink,
            ));
        }
        let dev = match (p.source_index, p.source_name.as_ref()) {
            (None, None) => ruled
                .and_then(|d| {
                    let found = srv.source_by_name(&graph, d);
                    if found.is_none() {
                        tracing::info!(
                            "rules: source {d:?} is not here; the record stream goes elsewhere"
                        );
                    }
                    found
                })
                .or_else(|| restored.and_then(|d| srv.source_by_name(&graph, d)))
                .or_else(|| srv.default_source(&graph)),
            (i, n) => srv.find_source(&graph, i, n.and_then(|n| n.to_str().ok())),
        }
        .ok_or(PulseError::NoEntity)?;
        let node = &graph.nodes[&dev.node];
        Ok((
            Target {
                node: node.id,
                name: node.name.clone(),
                dev_index: dev.index,
                dev_name: dev.name.clone(),
            },
            dev,
        ))
    }

    /// The device the rule file names for a stream with these (merged) properties.
    pub(super) fn ruled_target(&self, props: &Props) -> Option<String> {
        let policy = self.srv.policy.lock().ok()?;
        policy
            .rules()
            .target(&rule_lookup(props))
            .map(str::to_string)
    }
}
/// A stream's property by name, as rules see it, from its merged proplist.
fn rule_lookup(props: &Props) -> impl Fn(&str) -> Option<String> + '_ {
    move |key: &str| {
        let v = props.get_bytes(std::ffi::CString::new(key).ok()?)?;
        let v = v.strip_suffix(&[0]).unwrap_or(v);
        std::str::from_utf8(v).ok().map(str::to_string)
    }
}
