//! JACK's session API over the native protocol: which clients have a session callback,
//! a session manager's notify (answered once every notified client replied), the
//! event each notified client gets on its `watch` connection, and its reply.

use serde::{Deserialize, Serialize};

/// Longest session directory, bytes (jackd2's session notify request holds 256).
pub const MAX_SESSION_PATH_BYTES: usize = 256;

/// Longest command line a client may give in its reply, bytes (jackd2's
/// `JACK_SESSION_COMMAND_SIZE`).
pub const MAX_SESSION_COMMAND_BYTES: usize = 256;

/// JACK's `jack_session_event_type_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionEventType {
    /// `JackSessionSave`.
    Save,
    /// `JackSessionSaveAndQuit`.
    SaveAndQuit,
    /// `JackSessionSaveTemplate`.
    SaveTemplate,
}

impl SessionEventType {
    /// JACK's number for it.
    pub fn code(self) -> i32 {
        match self {
            SessionEventType::Save => 1,
            SessionEventType::SaveAndQuit => 2,
            SessionEventType::SaveTemplate => 3,
        }
    }

    /// The type for JACK's number, if it is one.
    pub fn from_code(code: i32) -> Option<SessionEventType> {
        match code {
            1 => Some(SessionEventType::Save),
            2 => Some(SessionEventType::SaveAndQuit),
            3 => Some(SessionEventType::SaveTemplate),
            _ => None,
        }
    }
}

/// JACK's `JackSessionSaveError` flag.
pub const SESSION_SAVE_ERROR: u32 = 0x01;
/// JACK's `JackSessionNeedTerminal` flag.
pub const SESSION_NEED_TERMINAL: u32 = 0x02;

/// What a notified client is told, in a `session` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEvent {
    /// What to do.
    pub kind: SessionEventType,
    /// The client's own directory (the notify path, its name, a slash).
    pub dir: String,
}

/// One client's answer, in a `SessionCommands` reply (JACK's `jack_session_command_t`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCommand {
    /// The client's UUID, as text.
    pub uuid: String,
    /// Its name.
    pub client_name: String,
    /// The command line that restores it (empty when it did not answer).
    pub command: String,
    /// `SESSION_SAVE_ERROR`, `SESSION_NEED_TERMINAL`.
    pub flags: u32,
}

/// Checks a notify path: absolute, without control characters, at most
/// [`MAX_SESSION_PATH_BYTES`] with the trailing slash JACK's session managers add.
pub(super) fn check_session_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!("session path '{path}' is not absolute"));
    }
    if path.len() > MAX_SESSION_PATH_BYTES {
        return Err(format!(
            "session path is {} bytes, longer than {MAX_SESSION_PATH_BYTES}",
            path.len()
        ));
    }
    if path.chars().any(char::is_control) {
        return Err("session path contains control characters".into());
    }
    Ok(())
}

/// Checks a reply's command line.
pub(super) fn check_session_command(command: &str) -> Result<(), String> {
    if command.len() > MAX_SESSION_COMMAND_BYTES {
        return Err(format!(
            "session command is {} bytes, longer than {MAX_SESSION_COMMAND_BYTES}",
            command.len()
        ));
    }
    if command.contains('\0') {
        return Err("session command contains a NUL".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_commands_are_checked() {
        assert!(check_session_path("/tmp/s/").is_ok());
        assert!(check_session_path("tmp/s/").is_err());
        assert!(check_session_path(&format!("/{}", "x".repeat(256))).is_err());
        assert!(check_session_path("/a\nb/").is_err());
        assert!(check_session_command("jack_simple_session_client 8589934597").is_ok());
        assert!(check_session_command(&"x".repeat(257)).is_err());
        for t in [
            SessionEventType::Save,
            SessionEventType::SaveAndQuit,
            SessionEventType::SaveTemplate,
        ] {
            assert_eq!(SessionEventType::from_code(t.code()), Some(t));
        }
        assert_eq!(SessionEventType::from_code(0), None);
    }
}
