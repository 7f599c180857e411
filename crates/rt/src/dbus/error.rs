//! Everything that can go wrong talking to a bus.

use std::io;

/// A D-Bus failure.
#[derive(Debug, thiserror::Error)]
pub enum DbusError {
    /// The socket could not be reached or broke.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// No bus listens at the address.
    #[error("no bus at {address} ({source})")]
    Connect {
        /// The address tried.
        address: String,
        /// Why connecting failed.
        source: io::Error,
    },
    /// The bus address is not one this client can use.
    #[error("unusable bus address {0:?}")]
    Address(String),
    /// The bus refused authentication.
    #[error("authentication refused: {0}")]
    Auth(String),
    /// The peer answered with an error.
    #[error("{name}: {message}")]
    Remote {
        /// The D-Bus error name.
        name: String,
        /// Its message, if any.
        message: String,
    },
    /// A message did not parse.
    #[error("malformed message: {0}")]
    Malformed(&'static str),
    /// `$DBUS_SESSION_BUS_ADDRESS` is not set.
    #[error("no session bus (DBUS_SESSION_BUS_ADDRESS is not set)")]
    NoSessionBus,
    /// The bus answered a name request with a code this client does not know.
    #[error("unknown RequestName reply {0}")]
    NameReply(i64),
}
