//! Fuzzes the minimal D-Bus client's message reader (`quaver_rt::dbus::parse_message`):
//! since device reservation, quaverd reads messages from any program on the session bus,
//! so arbitrary bytes must give a message or an error, never a panic, an overflow of the
//! stack (nested variants) or an allocation past the message size limit.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = quaver_rt::dbus::parse_message(data) {
        // What the reservation thread asks of every message must hold too.
        let _ = m.is_call("org.freedesktop.ReserveDevice1", "RequestRelease");
        let _ = m.is_signal("org.freedesktop.DBus", "NameOwnerChanged");
        let _ = m.str_arg(0);
    }
});
