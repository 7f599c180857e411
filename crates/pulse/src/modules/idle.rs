//! `module-suspend-on-idle`: sets the engine's idle timeout (unloading it clears it).

use super::args::unescape;
use super::context::Load;
use super::record::ModuleRec;
use pulseaudio::protocol::PulseError;

/// `module-suspend-on-idle` (`timeout`, in seconds).
pub(super) fn load(cx: &Load<'_>, rec: &mut ModuleRec) -> Result<(), PulseError> {
    let Load { srv, args, .. } = cx;
    let fail = cx.fail();
    if srv.lock().modules.values().any(|m| m.idle_suspend) {
        return Err(fail("already loaded (it loads once)".into()));
    }
    if let Some(k) = args.keys().find(|k| k.as_str() != "timeout") {
        return Err(fail(format!("unknown argument '{k}'")));
    }
    // PulseAudio's default: 5 s.
    let secs = match args.get("timeout") {
        Some(t) => unescape(t)
            .parse::<u32>()
            .map_err(|_| fail(format!("bad timeout '{t}'")))?,
        None => 5,
    };
    srv.engine
        .set_suspend_timeout(Some(std::time::Duration::from_secs(secs.into())))
        .map_err(|e| fail(e.to_string()))?;
    tracing::info!("idle devices suspend after {secs} s");
    rec.idle_suspend = true;
    Ok(())
}
