//! The protocol extensions quaverd answers: stream restore (volumes, mutes and devices
//! remembered per stream) and device restore (the formats a sink takes).

pub mod devrestore;
pub mod restore;
mod restore_live;
