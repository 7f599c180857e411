//! The D-Bus wire format this client speaks: marshalling arguments and whole messages,
//! and reading a received message field by field with every length and nesting bounded.

use std::io::Read;

use super::error::DbusError;

/// Replies bigger than this are refused (ours are tiny).
const MAX_MESSAGE: usize = 1 << 20;
/// Deepest variant nesting read (the specification's limit for container nesting).
const MAX_VARIANT_DEPTH: usize = 64;

/// Message type: a method call.
pub const METHOD_CALL: u8 = 1;
/// Message type: a method's return.
pub const METHOD_RETURN: u8 = 2;
/// Message type: an error reply.
pub const ERROR: u8 = 3;
/// Message type: a signal.
pub const SIGNAL: u8 = 4;

/// An argument of a method call or reply.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    /// `s`
    Str(&'a str),
    /// `u`
    U32(u32),
    /// `i`
    I32(i32),
    /// `t`
    U64(u64),
    /// `b`
    Bool(bool),
    /// `v` holding the argument.
    Variant(&'a Arg<'a>),
    /// `a{sv}`: names and values, each value in a variant.
    Props(&'a [(&'a str, Arg<'a>)]),
}

impl Arg<'_> {
    fn signature(&self, out: &mut String) {
        match self {
            Arg::Str(_) => out.push('s'),
            Arg::U32(_) => out.push('u'),
            Arg::I32(_) => out.push('i'),
            Arg::U64(_) => out.push('t'),
            Arg::Bool(_) => out.push('b'),
            Arg::Variant(_) => out.push('v'),
            Arg::Props(_) => out.push_str("a{sv}"),
        }
    }

    fn marshal(&self, body: &mut Vec<u8>) {
        match *self {
            Arg::Str(s) => put_str(body, s),
            Arg::U32(v) => put_u32(body, v),
            Arg::I32(v) => put_u32(body, v as u32),
            Arg::Bool(v) => put_u32(body, v as u32),
            Arg::U64(v) => {
                pad(body, 8);
                body.extend_from_slice(&v.to_le_bytes());
            }
            Arg::Variant(inner) => {
                let mut sig = String::new();
                inner.signature(&mut sig);
                put_sig(body, &sig);
                inner.marshal(body);
            }
            Arg::Props(entries) => {
                put_u32(body, 0);
                let len_at = body.len() - 4;
                // Dict entries are 8-aligned; the padding before the first is not
                // counted in the array's length.
                pad(body, 8);
                let start = body.len();
                for (name, value) in entries {
                    pad(body, 8);
                    put_str(body, name);
                    Arg::Variant(value).marshal(body);
                }
                let len = (body.len() - start) as u32;
                body[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
            }
        }
    }
}

/// The signature and body (marshalled from an 8-aligned start, as every body starts)
/// of `args`.
pub(super) fn marshal_args(args: &[Arg<'_>]) -> (String, Vec<u8>) {
    let mut sig = String::new();
    let mut body = Vec::new();
    for a in args {
        a.signature(&mut sig);
        a.marshal(&mut body);
    }
    (sig, body)
}

/// A value read from a reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `s`, `o` or `g`.
    Str(String),
    /// `y`, `u` or `i`, widened.
    Int(i64),
    /// `b`
    Bool(bool),
    /// `x` or `t`, as signed.
    Long(i64),
    /// A type this client does not decode.
    Other(String),
}

pub(super) fn pad(buf: &mut Vec<u8>, align: usize) {
    while !buf.len().is_multiple_of(align) {
        buf.push(0);
    }
}

pub(super) fn put_u32(buf: &mut Vec<u8>, v: u32) {
    pad(buf, 4);
    buf.extend_from_slice(&v.to_le_bytes());
}

pub(super) fn put_str(buf: &mut Vec<u8>, s: &str) {
    put_u32(buf, s.len() as u32);
    buf.extend_from_slice(s.as_bytes());
    buf.push(0);
}

pub(super) fn put_sig(buf: &mut Vec<u8>, s: &str) {
    buf.push(s.len() as u8);
    buf.extend_from_slice(s.as_bytes());
    buf.push(0);
}

/// A header field's value.
#[derive(Clone, Copy)]
pub(super) enum Field<'a> {
    Path(&'a str),
    Str(&'a str),
    Sig(&'a str),
    U32(u32),
}

/// A little-endian message of type `kind` with header `fields` and a body already
/// marshalled (starting 8-aligned, as every body does) with signature `sig`.
pub(super) fn message(
    kind: u8,
    serial: u32,
    fields: &[(u8, Field<'_>)],
    sig: &str,
    body: &[u8],
) -> Vec<u8> {
    let mut m = vec![b'l', kind, 0, 1];
    m.extend_from_slice(&(body.len() as u32).to_le_bytes());
    m.extend_from_slice(&serial.to_le_bytes());
    m.extend_from_slice(&[0; 4]); // header fields' length, patched below
    let sig_field = [(8u8, Field::Sig(sig))];
    let extra: &[(u8, Field<'_>)] = if sig.is_empty() { &[] } else { &sig_field };
    for &(code, f) in fields.iter().chain(extra) {
        pad(&mut m, 8);
        m.push(code);
        match f {
            Field::Path(v) => {
                put_sig(&mut m, "o");
                put_str(&mut m, v);
            }
            Field::Str(v) => {
                put_sig(&mut m, "s");
                put_str(&mut m, v);
            }
            Field::Sig(v) => {
                put_sig(&mut m, "g");
                put_sig(&mut m, v);
            }
            Field::U32(v) => {
                put_sig(&mut m, "u");
                put_u32(&mut m, v);
            }
        }
    }
    let fields_len = (m.len() - 16) as u32;
    m[12..16].copy_from_slice(&fields_len.to_le_bytes());
    pad(&mut m, 8);
    m.extend_from_slice(body);
    m
}

/// A little-endian METHOD_CALL message.
pub(super) fn method_call(
    serial: u32,
    destination: &str,
    path: &str,
    interface: &str,
    member: &str,
    args: &[Arg<'_>],
) -> Vec<u8> {
    // The body is marshalled on its own: it starts 8-aligned in the message, so its
    // alignment can be computed from its own start.
    let (sig, body) = marshal_args(args);
    let fields = [
        (1, Field::Path(path)),
        (2, Field::Str(interface)),
        (3, Field::Str(member)),
        (6, Field::Str(destination)),
    ];
    message(1, serial, &fields, &sig, &body)
}

/// What this client keeps of a received message.
#[derive(Debug, Clone)]
pub struct Message {
    /// [`METHOD_CALL`], [`METHOD_RETURN`], [`ERROR`] or [`SIGNAL`].
    pub kind: u8,
    /// Its serial (a reply names it).
    pub serial: u32,
    /// The object it is for or from.
    pub path: Option<String>,
    /// The interface of the method or signal.
    pub interface: Option<String>,
    /// The method or signal.
    pub member: Option<String>,
    /// The connection that sent it.
    pub sender: Option<String>,
    /// The call a reply answers.
    pub reply_serial: Option<u32>,
    /// An error's name.
    pub error_name: Option<String>,
    /// The body's values, up to the first this client does not decode.
    pub body: Vec<Value>,
}

impl Message {
    /// Whether this is a call of `interface.member`.
    pub fn is_call(&self, interface: &str, member: &str) -> bool {
        self.kind == METHOD_CALL
            && self.interface.as_deref() == Some(interface)
            && self.member.as_deref() == Some(member)
    }

    /// Whether this is the signal `interface.member`.
    pub fn is_signal(&self, interface: &str, member: &str) -> bool {
        self.kind == SIGNAL
            && self.interface.as_deref() == Some(interface)
            && self.member.as_deref() == Some(member)
    }

    /// The `i`-th body value as a string.
    pub fn str_arg(&self, i: usize) -> Option<&str> {
        match self.body.get(i) {
            Some(Value::Str(s)) => Some(s),
            _ => None,
        }
    }
}

/// Reads one whole message from `bytes` (what the connection reads from its socket): for
/// the fuzz target and tests; every field a peer sends is checked the same way.
pub fn parse_message(mut bytes: &[u8]) -> Result<Message, DbusError> {
    read_message(&mut bytes)
}

pub(super) fn read_message(sock: &mut impl Read) -> Result<Message, DbusError> {
    let mut fixed = [0u8; 16];
    sock.read_exact(&mut fixed)?;
    let big = match fixed[0] {
        b'l' => false,
        b'B' => true,
        _ => return Err(DbusError::Malformed("bad endianness mark")),
    };
    let word = |b: &[u8]| {
        let a = [b[0], b[1], b[2], b[3]];
        if big {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        }
    };
    let body_len = word(&fixed[4..8]) as usize;
    let fields_len = word(&fixed[12..16]) as usize;
    let header_len = (16 + fields_len).next_multiple_of(8);
    let total = header_len + body_len;
    if total > MAX_MESSAGE {
        return Err(DbusError::Malformed("message too long"));
    }
    let mut m = vec![0u8; total];
    m[..16].copy_from_slice(&fixed);
    sock.read_exact(&mut m[16..])?;

    let mut r = Reader {
        buf: &m[..16 + fields_len],
        pos: 16,
        big,
    };
    let (mut reply_serial, mut error_name, mut signature) = (None, None, String::new());
    let (mut member, mut path, mut interface, mut sender) = (None, None, None, None);
    while r.pos < r.buf.len() {
        r.align(8)?;
        let code = r.u8()?;
        let sig = r.sig()?;
        let v = r.value(&sig)?;
        match (code, v) {
            (5, Value::Int(s)) => reply_serial = Some(s as u32),
            (1, Value::Str(s)) => path = Some(s),
            (2, Value::Str(s)) => interface = Some(s),
            (3, Value::Str(s)) => member = Some(s),
            (7, Value::Str(s)) => sender = Some(s),
            (4, Value::Str(s)) => error_name = Some(s),
            (8, Value::Str(s)) => signature = s,
            _ => {}
        }
    }
    let mut r = Reader {
        buf: &m[header_len..],
        pos: 0,
        big,
    };
    let mut body = Vec::new();
    for c in signature.chars() {
        match c {
            's' | 'o' | 'g' | 'y' | 'b' | 'u' | 'i' | 't' | 'x' | 'v' => {
                body.push(r.value(&c.to_string())?)
            }
            // Containers are not needed for the calls this client makes; stop there.
            _ => break,
        }
    }
    Ok(Message {
        kind: m[1],
        serial: word(&fixed[8..12]),
        path,
        interface,
        member,
        sender,
        reply_serial,
        error_name,
        body,
    })
}

pub(super) struct Reader<'a> {
    pub(super) buf: &'a [u8],
    pub(super) pos: usize,
    pub(super) big: bool,
}

impl Reader<'_> {
    fn align(&mut self, a: usize) -> Result<(), DbusError> {
        self.pos = self.pos.next_multiple_of(a);
        if self.pos > self.buf.len() {
            return Err(DbusError::Malformed("truncated"));
        }
        Ok(())
    }

    fn take(&mut self, n: usize) -> Result<&[u8], DbusError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or(DbusError::Malformed("truncated"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, DbusError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, DbusError> {
        self.align(4)?;
        let b: [u8; 4] = self.take(4)?.try_into().expect("4 bytes");
        Ok(if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    fn u64(&mut self) -> Result<u64, DbusError> {
        self.align(8)?;
        let b: [u8; 8] = self.take(8)?.try_into().expect("8 bytes");
        Ok(if self.big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }

    fn string(&mut self, len: usize) -> Result<String, DbusError> {
        let s = String::from_utf8_lossy(self.take(len)?).into_owned();
        self.take(1)?; // the nul
        Ok(s)
    }

    fn sig(&mut self) -> Result<String, DbusError> {
        let n = self.u8()? as usize;
        self.string(n)
    }

    pub(super) fn value(&mut self, sig: &str) -> Result<Value, DbusError> {
        self.value_in(sig, 0)
    }

    /// Reads one value of type `sig` inside `depth` variants. The depth is bounded as
    /// the D-Bus specification bounds container nesting (64): a message of nested
    /// variants from another program on the bus would otherwise recurse until this
    /// thread's stack overflowed, taking the daemon with it.
    fn value_in(&mut self, sig: &str, depth: usize) -> Result<Value, DbusError> {
        Ok(match sig {
            "s" | "o" => {
                let n = self.u32()? as usize;
                Value::Str(self.string(n)?)
            }
            "g" => Value::Str(self.sig()?),
            "y" => Value::Int(self.u8()? as i64),
            "b" => Value::Bool(self.u32()? != 0),
            "u" => Value::Int(self.u32()? as i64),
            "i" => Value::Int(self.u32()? as i32 as i64),
            "t" | "x" => Value::Long(self.u64()? as i64),
            "v" => {
                if depth >= MAX_VARIANT_DEPTH {
                    return Err(DbusError::Malformed("variants nested too deep"));
                }
                let inner = self.sig()?;
                self.value_in(&inner, depth + 1)?
            }
            other => {
                // Unknown single values cannot be skipped without knowing their size;
                // the caller stops at the first one.
                self.pos = self.buf.len();
                Value::Other(other.to_string())
            }
        })
    }
}
