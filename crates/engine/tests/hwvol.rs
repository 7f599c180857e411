//! Hardware volume through the engine (no hardware: an element that rounds like
//! alsa-lib on a `TLV_DB_SCALE` and lets the test play "another program"):
//! `set_volume` splits between the element and the node's gain, mute uses the switch,
//! and an outside change becomes the node's volume with a `NodeChanged` event.

use quaver_devices::DeviceError;
use quaver_devices::hwvol::{HardwareVolume, HwCallback, HwEvent, HwReading, HwVolumeInfo};
use quaver_devices::null::{NullConfig, NullDevice};
use quaver_engine::{Engine, EngineConfig, GraphEvent, RtRunner};
use std::sync::{Arc, Mutex};

/// An element from -45 to 0 dB in 0.3 dB steps (snd-dummy's Master).
struct FakeElement {
    info: HwVolumeInfo,
    state: Mutex<(f64, bool)>,
    sets: Mutex<Vec<f64>>,
    callback: Mutex<Option<HwCallback>>,
}

impl FakeElement {
    fn new(has_switch: bool) -> Arc<Self> {
        Arc::new(FakeElement {
            info: HwVolumeInfo {
                card: "hw:Fake".into(),
                element: "Master".into(),
                capture: false,
                min_db: -45.0,
                max_db: 0.0,
                steps: 151,
                has_switch,
            },
            state: Mutex::new((-30.0, false)),
            sets: Mutex::new(Vec::new()),
            callback: Mutex::new(None),
        })
    }

    /// Another program sets the element.
    fn outside(&self, db: f64, muted: bool) {
        *self.state.lock().unwrap() = (db, muted);
        let r = HwReading {
            db,
            muted: self.info.has_switch.then_some(muted),
        };
        (self.callback.lock().unwrap().as_ref().expect("watched"))(HwEvent::Changed(r));
    }
}

impl HardwareVolume for FakeElement {
    fn info(&self) -> &HwVolumeInfo {
        &self.info
    }
    fn set_db(&self, db: f64) -> Result<f64, DeviceError> {
        self.sets.lock().unwrap().push(db);
        let k = ((db + 45.0) / 0.3 - 1e-9).ceil().clamp(0.0, 150.0);
        let took = -45.0 + 0.3 * k;
        self.state.lock().unwrap().0 = took;
        Ok(took)
    }
    fn set_mute(&self, mute: bool) -> Result<(), DeviceError> {
        self.state.lock().unwrap().1 = mute;
        Ok(())
    }
    fn read(&self) -> Result<HwReading, DeviceError> {
        let (db, muted) = *self.state.lock().unwrap();
        Ok(HwReading {
            db,
            muted: self.info.has_switch.then_some(muted),
        })
    }
    fn watch(&self, on_event: HwCallback) {
        *self.callback.lock().unwrap() = Some(on_event);
    }
}

/// An engine on a null device whose sink has a [`FakeElement`] (with or without a
/// switch) attached: the engine, its runner, the element, the sink's node and name.
fn attached(has_switch: bool) -> (Engine, RtRunner, Arc<FakeElement>, u32, String) {
    let null = NullDevice::new(NullConfig::default()).unwrap();
    let cfg = EngineConfig {
        quantum_default: 256,
        rt_priority: 0,
        suspend_timeout: None,
        ..EngineConfig::default()
    };
    let (engine, runner) = Engine::new_manual(cfg, vec![Box::new(null)]).unwrap();
    let el = FakeElement::new(has_switch);
    let id = engine.attach_hardware_volume(0, false, el.clone()).unwrap();
    let sink = engine.graph().nodes[&id].name.clone();
    (engine, runner, el, id, sink)
}

fn node_volume(engine: &Engine, id: u32) -> (f32, bool) {
    let g = engine.graph();
    let n = &g.nodes[&id];
    (n.volume, n.mute)
}

#[test]
fn the_volume_is_split_between_the_element_and_the_node_gain() {
    let (engine, runner, el, id, sink) = attached(false);
    let sink = sink.as_str();
    // Attaching takes the element's volume: -30 dB.
    let (v, _) = node_volume(&engine, id);
    assert!((20.0 * (v as f64).log10() - -30.0).abs() < 1e-3, "{v}");
    assert_eq!(engine.hardware_volume(id).unwrap().element, "Master");
    assert!(
        engine.attach_hardware_volume(0, true, el.clone()).is_err(),
        "no source"
    );

    // 100 %: 0 dB in hardware, unity in software (bit-exact).
    engine.set_volume(sink, Some(1.0), None).unwrap();
    assert_eq!(*el.sets.lock().unwrap().last().unwrap(), 0.0);
    assert_eq!(
        engine.software_gain(id).unwrap().to_bits(),
        1.0f32.to_bits()
    );
    // 50 % (cubic) = -18.06 dB: the element takes -18.0, accurate enough.
    engine.set_volume(sink, Some(0.125), None).unwrap();
    assert!((el.read().unwrap().db - -18.0).abs() < 1e-9);
    assert_eq!(engine.software_gain(id), Some(1.0));
    assert_eq!(
        node_volume(&engine, id).0,
        0.125,
        "the node keeps what was asked"
    );
    // 10 % = -60 dB: -45 in hardware, -15 dB in software.
    engine.set_volume(sink, Some(0.001), None).unwrap();
    assert_eq!(el.read().unwrap().db, -45.0);
    let sw = engine.software_gain(id).unwrap() as f64;
    assert!((20.0 * sw.log10() - -15.0).abs() < 1e-3, "{sw}");
    // Without a switch, mute is the software's; the element is left alone.
    let sets = el.sets.lock().unwrap().len();
    engine.set_volume(sink, None, Some(true)).unwrap();
    assert_eq!(el.sets.lock().unwrap().len(), sets);
    assert!(!el.state.lock().unwrap().1);
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn mute_uses_the_switch_and_outside_changes_become_the_volume() {
    let (engine, runner, el, id, sink) = attached(true);
    let sink = sink.as_str();
    let events = engine.subscribe();
    engine.set_volume(sink, None, Some(true)).unwrap();
    assert!(el.state.lock().unwrap().1, "the switch is off");
    assert!(node_volume(&engine, id).1);
    engine.set_volume(sink, Some(0.001), Some(false)).unwrap();
    assert!(!el.state.lock().unwrap().1);
    while events.try_recv().is_ok() {}

    // `amixer sset Master -20dB`: the node follows, software gain back to unity.
    el.outside(-20.0, false);
    let (v, m) = node_volume(&engine, id);
    assert!((20.0 * (v as f64).log10() - -20.0).abs() < 1e-3, "{v}");
    assert!(!m);
    assert_eq!(engine.software_gain(id), Some(1.0));
    assert!(
        events.try_iter().any(|e| e == GraphEvent::NodeChanged(id)),
        "no NodeChanged for the outside change"
    );
    // `amixer sset Master mute`.
    el.outside(-20.0, true);
    assert!(node_volume(&engine, id).1);
    // The card goes away: software volume only from then on.
    (el.callback.lock().unwrap().as_ref().unwrap())(HwEvent::Gone("test".into()));
    assert!(engine.hardware_volume(id).is_none());
    engine.set_volume(sink, Some(0.5), None).unwrap();
    assert_eq!(el.read().unwrap().db, -20.0, "the element is not touched");
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn removing_the_node_releases_its_element() {
    let (engine, runner, el, id, _) = attached(false);
    assert_eq!(Arc::strong_count(&el), 2, "the engine holds it");
    engine.remove_node(id).unwrap();
    assert_eq!(Arc::strong_count(&el), 1, "released with the node");
    assert!(engine.hardware_volumes().is_empty());
    engine.shutdown_manual(runner).unwrap();
}
