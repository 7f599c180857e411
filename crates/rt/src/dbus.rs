//! Just enough D-Bus to ask RealtimeKit and to hold device reservations: connect to a
//! bus over a unix socket, authenticate with EXTERNAL, say Hello, make method calls and
//! read their replies; own and release well-known names, receive signals, and answer
//! method calls made on an object (docs/alsa/reservation.md).
//!
//! Hand-written rather than zbus: zbus 6 brings 31 crates, 12 of them new to the
//! workspace (its own async runtime, proc macros), into every cold build and into
//! libjack, which is loaded into arbitrary applications — for a few method calls per
//! audio thread (measurement in docs/engine.md). Only the types those calls use are
//! marshalled: `s o g y b u i t x`, variants, and (written only) the `a{sv}` of
//! `Properties.GetAll`.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

mod error;
mod wire;

pub use error::DbusError;
pub use wire::{Arg, ERROR, METHOD_CALL, METHOD_RETURN, Message, SIGNAL, Value, parse_message};
use wire::{Field, marshal_args, message, method_call, read_message};

/// Where the system bus listens when `$DBUS_SYSTEM_BUS_ADDRESS` is unset.
pub const DEFAULT_SYSTEM_BUS: &str = "unix:path=/run/dbus/system_bus_socket";

/// How long any single reply may take (polkit may be asked behind a RealtimeKit call).
const TIMEOUT: Duration = Duration::from_secs(5);

/// `RequestName` flag: another connection may take the name with
/// [`NAME_REPLACE_EXISTING`].
pub const NAME_ALLOW_REPLACEMENT: u32 = 1;
/// `RequestName` flag: take the name from an owner that allowed replacement.
pub const NAME_REPLACE_EXISTING: u32 = 2;
/// `RequestName` flag: fail rather than wait in the name's queue.
pub const NAME_DO_NOT_QUEUE: u32 = 4;

/// The bus's answer to `RequestName`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameReply {
    /// The caller owns the name now.
    PrimaryOwner,
    /// The caller waits in the name's queue.
    InQueue,
    /// Someone else owns it (and did not allow replacement, or it was not asked for).
    Exists,
    /// The caller owned it already.
    AlreadyOwner,
}

/// A connection to one bus.
pub struct Connection {
    sock: UnixStream,
    serial: u32,
    /// Calls and signals that arrived while a reply was awaited, for [`Connection::receive`].
    pending: VecDeque<Message>,
}

impl Connection {
    /// Connects to the system bus (`$DBUS_SYSTEM_BUS_ADDRESS` or the standard socket).
    pub fn system() -> Result<Connection, DbusError> {
        let addr = std::env::var("DBUS_SYSTEM_BUS_ADDRESS")
            .unwrap_or_else(|_| DEFAULT_SYSTEM_BUS.to_string());
        Connection::open(&addr)
    }

    /// Connects to the first `unix:` entry of `address`, authenticates and says Hello.
    pub fn open(address: &str) -> Result<Connection, DbusError> {
        let sock = connect(address).map_err(|e| match e {
            DbusError::Io(source) => DbusError::Connect {
                address: address.to_string(),
                source,
            },
            e => e,
        })?;
        sock.set_read_timeout(Some(TIMEOUT))?;
        sock.set_write_timeout(Some(TIMEOUT))?;
        let mut c = Connection {
            sock,
            serial: 0,
            pending: VecDeque::new(),
        };
        c.authenticate()?;
        c.bus_call("Hello", &[])?;
        Ok(c)
    }

    /// Connects to the session bus named by `$DBUS_SESSION_BUS_ADDRESS`.
    pub fn session() -> Result<Connection, DbusError> {
        let addr = std::env::var("DBUS_SESSION_BUS_ADDRESS")
            .ok()
            .filter(|a| !a.is_empty())
            .ok_or(DbusError::NoSessionBus)?;
        Connection::open(&addr)
    }

    fn bus_call(&mut self, member: &str, args: &[Arg<'_>]) -> Result<Vec<Value>, DbusError> {
        self.call(
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            member,
            args,
        )
    }

    /// Asks the bus for the well-known `name` with `flags` (`NAME_*`).
    pub fn request_name(&mut self, name: &str, flags: u32) -> Result<NameReply, DbusError> {
        let v = self.bus_call("RequestName", &[Arg::Str(name), Arg::U32(flags)])?;
        match v.first() {
            Some(Value::Int(1)) => Ok(NameReply::PrimaryOwner),
            Some(Value::Int(2)) => Ok(NameReply::InQueue),
            Some(Value::Int(3)) => Ok(NameReply::Exists),
            Some(Value::Int(4)) => Ok(NameReply::AlreadyOwner),
            Some(Value::Int(n)) => Err(DbusError::NameReply(*n)),
            _ => Err(DbusError::Malformed("RequestName reply without a code")),
        }
    }

    /// Gives `name` back; true if this connection owned it.
    pub fn release_name(&mut self, name: &str) -> Result<bool, DbusError> {
        let v = self.bus_call("ReleaseName", &[Arg::Str(name)])?;
        Ok(v.first() == Some(&Value::Int(1)))
    }

    /// Subscribes to the messages `rule` matches (`type='signal',member='…'`).
    pub fn add_match(&mut self, rule: &str) -> Result<(), DbusError> {
        self.bus_call("AddMatch", &[Arg::Str(rule)]).map(drop)
    }

    /// The next incoming call or signal (those that arrived during a [`Connection::call`]
    /// first). Blocks until one comes: poll the connection's fd first to wait longer
    /// than the 5 s socket timeout.
    pub fn receive(&mut self) -> Result<Message, DbusError> {
        loop {
            if let Some(m) = self.pending.pop_front() {
                return Ok(m);
            }
            let m = read_message(&mut self.sock)?;
            if matches!(m.kind, METHOD_CALL | SIGNAL) {
                return Ok(m);
            }
        }
    }

    /// Waits, without a time limit, until [`Connection::receive`] has a message to read
    /// (one kept already, or bytes on the socket).
    pub fn wait(&self) -> Result<(), DbusError> {
        use std::os::fd::AsRawFd;
        if !self.pending.is_empty() {
            return Ok(());
        }
        let mut pfd = libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one valid pollfd.
            let rc = unsafe { libc::poll(&mut pfd, 1, -1) };
            if rc >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e.into());
            }
        }
    }

    /// Like [`Connection::wait`], also woken by `other` becoming readable (a bell
    /// another thread rings). Returns whether the bus has a message to read; false
    /// means only `other` is ready.
    pub fn wait_or(&self, other: std::os::fd::BorrowedFd<'_>) -> Result<bool, DbusError> {
        use std::os::fd::{AsFd, AsRawFd};
        if !self.pending.is_empty() {
            return Ok(true);
        }
        let mut pfds = [
            libc::pollfd {
                fd: self.sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: other.as_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        loop {
            // SAFETY: two valid pollfds.
            let rc = unsafe { libc::poll(pfds.as_mut_ptr(), 2, -1) };
            if rc >= 0 {
                return Ok(pfds[0].revents != 0);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e.into());
            }
        }
    }

    /// Answers the method call `to` with `args`.
    pub fn reply(&mut self, to: &Message, args: &[Arg<'_>]) -> Result<(), DbusError> {
        self.answer(to, None, args)
    }

    /// Answers the method call `to` with the error `name` and `text`.
    pub fn reply_error(&mut self, to: &Message, name: &str, text: &str) -> Result<(), DbusError> {
        self.answer(to, Some(name), &[Arg::Str(text)])
    }

    /// Sends the return of `to` (the error `error` if given) carrying `args`.
    fn answer(
        &mut self,
        to: &Message,
        error: Option<&str>,
        args: &[Arg<'_>],
    ) -> Result<(), DbusError> {
        let (sig, body) = marshal_args(args);
        self.serial += 1;
        let mut fields = vec![(5u8, Field::U32(to.serial))];
        if let Some(name) = error {
            fields.push((4, Field::Str(name)));
        }
        if let Some(dest) = to.sender.as_deref().filter(|d| !d.is_empty()) {
            fields.push((6, Field::Str(dest)));
        }
        let kind = if error.is_some() {
            ERROR
        } else {
            METHOD_RETURN
        };
        self.sock
            .write_all(&message(kind, self.serial, &fields, &sig, &body))?;
        Ok(())
    }

    fn authenticate(&mut self) -> Result<(), DbusError> {
        // SAFETY: geteuid cannot fail.
        let uid = unsafe { libc::geteuid() }.to_string();
        let hex: String = uid.bytes().map(|b| format!("{b:02x}")).collect();
        self.sock.write_all(b"\0")?;
        self.sock
            .write_all(format!("AUTH EXTERNAL {hex}\r\n").as_bytes())?;
        let line = self.read_line()?;
        if !line.starts_with("OK ") {
            return Err(DbusError::Auth(line));
        }
        self.sock.write_all(b"BEGIN\r\n")?;
        Ok(())
    }

    fn read_line(&mut self) -> Result<String, DbusError> {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            if line.len() > 4096 {
                return Err(DbusError::Malformed("authentication line too long"));
            }
            self.sock.read_exact(&mut b)?;
            line.push(b[0]);
        }
        line.truncate(line.len() - 2);
        Ok(String::from_utf8_lossy(&line).into_owned())
    }

    /// Calls `member` and returns the reply's body values.
    pub fn call(
        &mut self,
        destination: &str,
        path: &str,
        interface: &str,
        member: &str,
        args: &[Arg<'_>],
    ) -> Result<Vec<Value>, DbusError> {
        self.serial += 1;
        let serial = self.serial;
        let msg = method_call(serial, destination, path, interface, member, args);
        self.sock.write_all(&msg)?;
        // Keep calls and signals (NameAcquired) for `receive` until our reply comes.
        loop {
            let m = read_message(&mut self.sock)?;
            if m.reply_serial != Some(serial) {
                if matches!(m.kind, METHOD_CALL | SIGNAL) {
                    self.pending.push_back(m);
                }
                continue;
            }
            match m.kind {
                2 => return Ok(m.body),
                3 => {
                    let message = match m.body.first() {
                        Some(Value::Str(s)) => s.clone(),
                        _ => String::new(),
                    };
                    return Err(DbusError::Remote {
                        name: m.error_name.unwrap_or_default(),
                        message,
                    });
                }
                _ => continue,
            }
        }
    }

    /// Reads property `name` of `interface` through `org.freedesktop.DBus.Properties.Get`.
    pub fn get_property(
        &mut self,
        destination: &str,
        path: &str,
        interface: &str,
        name: &str,
    ) -> Result<Value, DbusError> {
        let mut v = self.call(
            destination,
            path,
            "org.freedesktop.DBus.Properties",
            "Get",
            &[Arg::Str(interface), Arg::Str(name)],
        )?;
        if v.is_empty() {
            return Err(DbusError::Malformed("empty property reply"));
        }
        Ok(v.swap_remove(0))
    }
}

fn connect(address: &str) -> Result<UnixStream, DbusError> {
    for entry in address.split(';') {
        let Some(rest) = entry.strip_prefix("unix:") else {
            continue;
        };
        for kv in rest.split(',') {
            if let Some(p) = kv.strip_prefix("path=") {
                return Ok(UnixStream::connect(unescape(p))?);
            }
            if let Some(name) = kv.strip_prefix("abstract=") {
                use std::os::linux::net::SocketAddrExt;
                let a = std::os::unix::net::SocketAddr::from_abstract_name(unescape(name))?;
                return Ok(UnixStream::connect_addr(&a)?);
            }
        }
    }
    Err(DbusError::Address(address.to_string()))
}

/// Undoes the `%XX` escaping of D-Bus address values.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(h) = std::str::from_utf8(&b[i + 1..i + 3])
            && let Ok(v) = u8::from_str_radix(h, 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::wire::Reader;
    use super::*;

    #[test]
    fn variants_nested_past_the_specifications_limit_are_refused() {
        // A variant holding `n` more variants around the byte 7, read as a "v".
        let read_nested = |n: usize| {
            let mut buf = [1, b'v', 0].repeat(n + 1);
            buf.extend_from_slice(&[1, b'y', 0, 7]);
            let mut r = Reader {
                buf: &buf,
                pos: 0,
                big: false,
            };
            r.value("v")
        };
        // 100 000 variants, each holding the next: one message's worth from a hostile
        // peer. Before the depth bound this overflowed the thread's stack.
        match read_nested(99_999) {
            Err(DbusError::Malformed(why)) => assert!(why.contains("too deep"), "{why}"),
            other => panic!("{other:?}"),
        }
        // Within the limit the innermost value comes through.
        assert!(matches!(read_nested(9), Ok(Value::Int(7))));
    }

    #[test]
    fn method_call_layout() {
        let m = method_call(
            7,
            "org.freedesktop.RealtimeKit1",
            "/org/freedesktop/RealtimeKit1",
            "org.freedesktop.RealtimeKit1",
            "MakeThreadRealtime",
            &[Arg::U64(1234), Arg::U32(20)],
        );
        assert_eq!(&m[..4], &[b'l', 1, 0, 1]);
        assert_eq!(u32::from_le_bytes(m[4..8].try_into().unwrap()), 12);
        assert_eq!(u32::from_le_bytes(m[8..12].try_into().unwrap()), 7);
        let fields = u32::from_le_bytes(m[12..16].try_into().unwrap()) as usize;
        let body = (16 + fields).next_multiple_of(8);
        assert_eq!(m.len(), body + 12);
        assert_eq!(
            u64::from_le_bytes(m[body..body + 8].try_into().unwrap()),
            1234
        );
        assert_eq!(
            u32::from_le_bytes(m[body + 8..body + 12].try_into().unwrap()),
            20
        );
        assert!(m.windows(2).any(|w| w == b"tu"));
    }

    #[test]
    fn props_are_an_aligned_dict_of_variants() {
        let (sig, body) = marshal_args(&[Arg::Props(&[
            ("Priority", Arg::I32(10)),
            ("ApplicationName", Arg::Str("jackd")),
        ])]);
        assert_eq!(sig, "a{sv}");
        // Length, 4 bytes of padding to the first 8-aligned entry.
        assert_eq!(&body[4..8], &[0; 4]);
        // "Priority": length 8, the name, its nul (to 21), signature "i" (to 24), 10.
        assert_eq!(&body[8..12], &8u32.to_le_bytes());
        assert_eq!(&body[12..21], b"Priority\0");
        assert_eq!(&body[21..24], b"\x01i\0");
        assert_eq!(&body[24..28], &10u32.to_le_bytes());
        // The second entry starts 8-aligned at 32.
        assert_eq!(&body[28..32], &[0; 4]);
        assert_eq!(&body[32..36], &15u32.to_le_bytes());
        assert_eq!(&body[36..52], b"ApplicationName\0");
        assert_eq!(&body[52..55], b"\x01s\0");
        assert_eq!(&body[56..60], &5u32.to_le_bytes());
        assert_eq!(&body[60..66], b"jackd\0");
        let len = u32::from_le_bytes(body[0..4].try_into().unwrap()) as usize;
        assert_eq!(
            len,
            body.len() - 8,
            "the array length leaves out the first padding"
        );
    }

    #[test]
    fn replies_with_booleans_and_variants_read_back() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let (sig, body) = marshal_args(&[
            Arg::Bool(true),
            Arg::Variant(&Arg::I32(-3)),
            Arg::Bool(false),
            Arg::Variant(&Arg::Str("quaverd")),
        ]);
        assert_eq!(sig, "bvbv");
        let fields = [(5u8, Field::U32(9)), (7, Field::Str(":1.7"))];
        a.write_all(&message(METHOD_RETURN, 3, &fields, &sig, &body))
            .unwrap();
        let m = read_message(&mut b).unwrap();
        assert_eq!(m.kind, METHOD_RETURN);
        assert_eq!(m.reply_serial, Some(9));
        assert_eq!(m.sender.as_deref(), Some(":1.7"));
        assert_eq!(
            m.body,
            [
                Value::Bool(true),
                Value::Int(-3),
                Value::Bool(false),
                Value::Str("quaverd".into())
            ]
        );
    }

    #[test]
    fn calls_and_errors_against_a_fake_bus() {
        let (addr, server) = fake::serve();
        let mut c = Connection::open(&addr).unwrap();
        let v = c
            .get_property("a.b", "/a/b", "a.b", "MaxRealtimePriority")
            .unwrap();
        assert_eq!(v, Value::Int(15));
        let v = c
            .get_property("a.b", "/a/b", "a.b", "RTTimeUSecMax")
            .unwrap();
        assert_eq!(v, Value::Long(200_000));
        match c.call("a.b", "/a/b", "a.b", "Nope", &[Arg::Str("x")]) {
            Err(DbusError::Remote { name, message }) => {
                assert_eq!(name, "org.example.Error.Unknown");
                assert_eq!(message, "no such method");
            }
            other => panic!("{other:?}"),
        }
        drop(c);
        assert_eq!(server.join().unwrap(), None);
    }

    #[test]
    fn missing_bus_names_the_address() {
        let e = Connection::open("unix:path=/nonexistent/quaver-test-bus")
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("/nonexistent/quaver-test-bus"),
            "{e}"
        );
        assert!(matches!(
            Connection::open("tcp:host=x"),
            Err(DbusError::Address(_))
        ));
    }

    #[test]
    fn unescapes_addresses() {
        assert_eq!(unescape("/tmp/a%20b"), "/tmp/a b");
        assert_eq!(unescape("/run/x"), "/run/x");
        assert_eq!(unescape("%4"), "%4");
    }
}

/// A stand-in for a bus with RealtimeKit on it, for tests: it authenticates, answers
/// Hello, the two properties and MakeThreadRealtime (recording its arguments), and
/// refuses anything else. It changes no scheduling; it only checks the wire format.
#[cfg(test)]
pub(crate) mod fake {
    use super::wire::{pad, put_sig, put_str, put_u32};
    use super::*;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Serves one connection on a fresh abstract socket; returns its address and the
    /// thread, whose result is MakeThreadRealtime's (thread id, priority).
    pub fn serve() -> (String, std::thread::JoinHandle<Option<(u64, u32)>>) {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "quaver-rt-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let l = UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(TIMEOUT)).unwrap();
            let mut got = None;
            let mut hdr = Vec::new();
            let mut b = [0u8; 1];
            while !hdr.ends_with(b"\r\n") {
                s.read_exact(&mut b).unwrap();
                hdr.push(b[0]);
            }
            assert!(hdr.starts_with(b"\0AUTH EXTERNAL "));
            s.write_all(b"OK 0123456789abcdef0123456789abcdef\r\n")
                .unwrap();
            let mut begin = [0u8; 7];
            s.read_exact(&mut begin).unwrap();
            assert_eq!(&begin, b"BEGIN\r\n");
            let mut serial = 100;
            while let Ok(m) = read_message(&mut s) {
                serial += 1;
                let reply = [(5u8, Field::U32(m.serial))];
                let (sig, body): (&str, Vec<u8>) = match m.member.as_deref() {
                    Some("Hello") => {
                        // A signal first, as a real bus sends NameAcquired.
                        let sig_msg = message(4, serial, &[], "", &[]);
                        s.write_all(&sig_msg).unwrap();
                        let mut b = Vec::new();
                        put_str(&mut b, ":1.42");
                        ("s", b)
                    }
                    Some("Get") => {
                        let mut b = Vec::new();
                        match m.body.get(1) {
                            Some(Value::Str(p)) if p == "MaxRealtimePriority" => {
                                put_sig(&mut b, "i");
                                put_u32(&mut b, 15);
                            }
                            Some(Value::Str(p)) if p == "MinNiceLevel" => {
                                put_sig(&mut b, "i");
                                put_u32(&mut b, -15i32 as u32);
                            }
                            _ => {
                                put_sig(&mut b, "x");
                                pad(&mut b, 8);
                                b.extend_from_slice(&200_000u64.to_le_bytes());
                            }
                        }
                        ("v", b)
                    }
                    Some("MakeThreadRealtime") => {
                        if let [Value::Long(t), Value::Int(p)] = m.body[..] {
                            got = Some((t as u64, p as u32));
                        }
                        ("", Vec::new())
                    }
                    Some("MakeThreadHighPriority") => {
                        if let [Value::Long(t), Value::Int(n)] = m.body[..] {
                            got = Some((t as u64, n as i32 as u32));
                        }
                        ("", Vec::new())
                    }
                    _ => {
                        let mut b = Vec::new();
                        put_str(&mut b, "no such method");
                        let f = [reply[0], (4, Field::Str("org.example.Error.Unknown"))];
                        s.write_all(&message(3, serial, &f, "s", &b)).unwrap();
                        continue;
                    }
                };
                s.write_all(&message(2, serial, &reply, sig, &body))
                    .unwrap();
            }
            got
        });
        (format!("unix:abstract={name},guid=0123"), h)
    }
}
