//! SCM_CREDENTIALS with AUTH: the kernel-checked credentials decide shared memory (only
//! for our own user, as PulseAudio) and fill the client's process properties.

#[macro_use]
mod pulse_util;

use pulse_util::*;
use quaver_pulse::pulseaudio::protocol as pa;

/// AUTH asking for shm and memfd, with `creds` passed alongside; returns the reply.
fn auth_with_creds(c: &mut RawClient, creds: rustix::net::UCred) -> pa::AuthReply {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
    let mut packet = Vec::new();
    pa::write_command_message(
        &mut packet,
        1,
        &pa::Command::Auth(pa::AuthParams {
            version: pa::MAX_VERSION,
            supports_shm: true,
            supports_memfd: true,
            cookie: vec![0; 256],
        }),
        pa::MAX_VERSION,
    )
    .unwrap();
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmCredentials(1))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    assert!(anc.push(SendAncillaryMessage::ScmCredentials(creds)));
    sendmsg(
        c.sock.get_ref(),
        &[std::io::IoSlice::new(&packet)],
        &mut anc,
        SendFlags::empty(),
    )
    .expect("sending AUTH with credentials");
    let body = c.reply_to(1, |_| {}).expect("AUTH reply");
    c.decode(&body)
}

#[test]
fn own_credentials_get_shared_memory() {
    let d = pulse_util::start(&["--device", "null"]);
    let mut c = RawClient::connect(&d);
    let reply = auth_with_creds(&mut c, own_creds());
    assert!(reply.use_shm && reply.use_memfd, "{}", d.log_text());
}

fn own_creds() -> rustix::net::UCred {
    rustix::net::UCred {
        pid: rustix::process::getpid(),
        uid: rustix::process::getuid(),
        gid: rustix::process::getgid(),
    }
}

/// As root, a client can pass another user's credentials (the kernel allows it with
/// CAP_SETUID/CAP_SETGID/CAP_SYS_ADMIN): that user gets no shared memory, and the
/// client's props show the user it passed.
#[test]
fn another_users_credentials_get_no_shared_memory_and_fill_the_props() {
    require_tools!("pactl");
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to pass another user's credentials");
        return;
    }
    let d = pulse_util::start(&["--device", "null"]);
    let mut c = RawClient::connect(&d);
    let other = rustix::net::UCred {
        pid: rustix::process::Pid::from_raw(1).unwrap(),
        uid: rustix::process::Uid::from_raw(65534),
        gid: rustix::process::Gid::from_raw(65534),
    };
    let reply = auth_with_creds(&mut c, other);
    assert!(!reply.use_shm && !reply.use_memfd, "{}", d.log_text());
    let mut props = pa::Props::new();
    props.set(
        pa::Prop::ApplicationName,
        std::ffi::CString::new("credtest").unwrap(),
    );
    let _: pa::SetClientNameReply = c.request(&pa::Command::SetClientName(props)).unwrap();
    let list = pa_ok(&d, &run_pa(&d, "pactl", &["list", "clients"]));
    let block = list
        .split("Client #")
        .find(|b| b.contains("credtest"))
        .unwrap_or_else(|| panic!("client not listed:\n{list}"));
    // The pid was already known from the socket's peer credentials at accept.
    assert!(
        block.contains("application.process.id = \""),
        "a pid:\n{block}"
    );
    assert!(
        block.contains("application.process.user = \"nobody\"")
            || block.contains("application.process.user = \"nfsnobody\""),
        "user from the credentials:\n{block}"
    );
}
