//! The front-end's sockets and shared memory, below the connections: listening and
//! accepting (unix and TCP), the socket type, the memfd pools and the srbchannel.
//!
//! - [`listener`]: the PulseAudio socket path; [`accept`]: the accept threads.
//! - [`tcp`]: the socket type and TCP access rules.
//! - [`shm`]: memfd mappings; [`export`]: the record pool; [`srb`]: the srbchannel.
//! - [`shared`]: what the accept threads, the I/O thread and the state share about
//!   connections.

pub mod accept;
pub mod export;
pub mod listener;
pub mod shared;
pub mod shm;
pub mod srb;
pub mod tcp;
