//! What a load becomes (listed at once, or later by a tunnel's thread) and listing a
//! loaded module under its index: apart from `mod.rs` so that a module loading on a
//! thread of its own lists itself without reaching back into it.

use super::record::{FIRST_LOADED, ModuleRec};
use crate::state::Server;
use pulseaudio::protocol::PulseError;

/// Told, on another thread, the index of a module that loads in the background, or why
/// it did not load.
pub type LoadDone = Box<dyn FnOnce(Result<u32, PulseError>) + Send>;

/// What became of a load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loading {
    /// Loaded and listed under this index.
    Now(u32),
    /// Loading on a thread of its own (a tunnel connecting): its `done` is told.
    Later,
}

/// Lists loaded module `rec` under the next free index, which it returns; subscribers
/// are told.
pub(crate) fn register(srv: &Server, rec: ModuleRec) -> u32 {
    let (name, argument) = (rec.name.clone(), rec.argument.clone());
    let mut st = srv.lock();
    let idx = st.next_module.max(FIRST_LOADED);
    st.next_module = idx + 1;
    st.modules.insert(idx, rec);
    drop(st);
    srv.broadcast(
        pulseaudio::protocol::SubscriptionEventFacility::Module,
        pulseaudio::protocol::SubscriptionEventType::New,
        idx,
    );
    tracing::info!("pulse: loaded {name} {argument} as module #{idx}");
    idx
}
