//! Packet framing of the PulseAudio native protocol.
//!
//! Every packet starts with a 20-byte descriptor (big-endian): payload length, channel
//! (`u32::MAX` for a control packet carrying a tagstruct, else the stream channel of a
//! memblock), a 64-bit offset (the seek offset of a memblock) and flags (the low byte
//! is the seek mode of a memblock; the high bits mark SHM references). The
//! `pulseaudio` crate's descriptor type drops the seek-mode bits, so this module reads
//! descriptors itself and hands only control payloads to the crate.
//!
//! Reading is incremental: a packet may arrive in any number of pieces, and nothing
//! past a packet's end is consumed until the next one is parsed. Lengths are capped
//! before anything is allocated.
//!
//! Below the framing sit the pieces every other part of the front-end uses to read and
//! build what travels in packets: [`tagcheck`] (bounds check before decoding),
//! [`convert`] (formats, channel maps, volumes, proplist text) and [`bufattr`]
//! (buffer-attribute rules).

pub mod bufattr;
pub mod convert;
pub mod tagcheck;

use pulseaudio::protocol::{
    Command, CommandReply, PulseError, TagStructWriter, write_ack_message, write_error,
    write_reply_message,
};

/// Size of a packet descriptor.
pub const DESCRIPTOR_SIZE: usize = 20;
/// Channel value of control packets.
pub const CONTROL_CHANNEL: u32 = u32::MAX;
/// Largest control packet accepted (PulseAudio allows 16 MiB frames; real control
/// packets are a few KiB, proplists at most 64 KiB per value).
pub const MAX_CONTROL_PACKET: u32 = 4 * 1024 * 1024;
/// Largest memblock packet accepted (PulseAudio's `MAX_MEMBLOCKQ_LENGTH`).
pub const MAX_MEMBLOCK_PACKET: u32 = 4 * 1024 * 1024;

/// Descriptor flag bits that mark shared-memory frames; refused unless shm was
/// negotiated for the connection.
pub const FLAG_SHM_MASK: u32 = 0xFF00_0000;
/// A memblock frame whose payload references shared memory instead of carrying data.
pub const FLAG_SHMDATA: u32 = 0x8000_0000;
/// The referenced shared memory is a memfd registered with REGISTER_MEMFD_SHMID.
pub const FLAG_SHMDATA_MEMFD_BLOCK: u32 = 0x2000_0000;
/// The sender allows the receiver to write into the block (irrelevant to us).
pub const FLAG_SHMWRITABLE: u32 = 0x0080_0000;
/// A frame releasing a block the receiver imported (block id in the offset's high word).
pub const FLAG_SHMRELEASE: u32 = 0x4000_0000;
/// A frame revoking a block the sender exported.
pub const FLAG_SHMREVOKE: u32 = 0xC000_0000;
/// Size of the payload of a shared-memory reference: block id, shm id, index, length.
pub const SHM_INFO_SIZE: u32 = 16;
/// Low byte of the flags: the seek mode of a memblock.
pub const FLAG_SEEK_MASK: u32 = 0x0000_00FF;

/// Seek modes of a memblock (`pa_seek_mode_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekMode {
    /// Relative to the current write index.
    Relative,
    /// Absolute index.
    Absolute,
    /// Relative to the read index.
    RelativeOnRead,
    /// Relative to the end of the queued data.
    RelativeEnd,
}

impl SeekMode {
    /// Decodes the low byte of a descriptor's flags.
    pub fn from_flags(flags: u32) -> Option<SeekMode> {
        match flags & FLAG_SEEK_MASK {
            0 => Some(SeekMode::Relative),
            1 => Some(SeekMode::Absolute),
            2 => Some(SeekMode::RelativeOnRead),
            3 => Some(SeekMode::RelativeEnd),
            _ => None,
        }
    }
}

/// A parsed descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    /// Payload bytes that follow.
    pub length: u32,
    /// Stream channel, or [`CONTROL_CHANNEL`].
    pub channel: u32,
    /// Seek offset of a memblock (signed on the wire).
    pub offset: i64,
    /// Raw flags.
    pub flags: u32,
}

impl Descriptor {
    /// Parses the 20 descriptor bytes.
    pub fn parse(b: &[u8; DESCRIPTOR_SIZE]) -> Descriptor {
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Descriptor {
            length: u32_at(0),
            channel: u32_at(4),
            offset: ((u32_at(8) as u64) << 32 | u32_at(12) as u64) as i64,
            flags: u32_at(16),
        }
    }

    /// Encodes the descriptor.
    pub fn encode(&self) -> [u8; DESCRIPTOR_SIZE] {
        let mut b = [0u8; DESCRIPTOR_SIZE];
        b[0..4].copy_from_slice(&self.length.to_be_bytes());
        b[4..8].copy_from_slice(&self.channel.to_be_bytes());
        b[8..16].copy_from_slice(&(self.offset as u64).to_be_bytes());
        b[16..20].copy_from_slice(&self.flags.to_be_bytes());
        b
    }
}

/// A complete packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// A tagstruct: command tag, sequence number, payload.
    Control(Vec<u8>),
    /// Audio for a stream.
    Memblock {
        /// Stream channel.
        channel: u32,
        /// Seek offset.
        offset: i64,
        /// Seek mode.
        seek: SeekMode,
        /// Sample bytes.
        data: Vec<u8>,
    },
    /// Audio for a stream that lives in the client's shared memory.
    ShmRef {
        /// Stream channel.
        channel: u32,
        /// Seek offset.
        offset: i64,
        /// Seek mode.
        seek: SeekMode,
        /// The client's block id, to be released after use.
        block_id: u32,
        /// The segment: a memfd registered with REGISTER_MEMFD_SHMID.
        shm_id: u32,
        /// Byte offset of the audio in the segment.
        index: u32,
        /// Bytes of audio.
        length: u32,
        /// True for memfd segments (the only kind this server imports).
        memfd: bool,
    },
    /// The client is done with a block we exported (a record pool block id).
    ShmRelease(u32),
    /// The client revokes a block it exported (we copy on arrival: nothing to do).
    ShmRevoke(u32),
}

/// Why a connection's byte stream cannot be framed; the connection is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    /// A length over the cap.
    #[error("packet of {0} bytes exceeds the limit")]
    TooLarge(u32),
    /// Shared-memory references, which were never offered.
    #[error("shared-memory packet (flags {0:#x}) although shm was not negotiated")]
    SharedMemory(u32),
    /// An unknown seek mode.
    #[error("invalid seek mode {0}")]
    BadSeek(u32),
    /// A control packet with an offset or flags.
    #[error("malformed control packet descriptor")]
    BadControl,
}

/// Incremental packet reader: feed it bytes as they arrive, take packets out.
#[derive(Debug, Default)]
pub struct PacketReader {
    shm: bool,
    header: [u8; DESCRIPTOR_SIZE],
    header_len: usize,
    current: Option<Descriptor>,
    payload: Vec<u8>,
}

impl PacketReader {
    /// A reader at a packet boundary.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts shared-memory frames from now on (after AUTH negotiated shm).
    pub fn enable_shm(&mut self) {
        self.shm = true;
    }

    /// True once shared-memory frames are accepted.
    pub fn shm_enabled(&self) -> bool {
        self.shm
    }

    /// True when no partial packet is buffered (EOF here is a clean close).
    pub fn at_boundary(&self) -> bool {
        self.header_len == 0 && self.current.is_none()
    }

    /// Consumes bytes from `input`, returning how many were used and the packet they
    /// completed, if any. Call again with the rest of `input` until it is used up.
    pub fn feed(&mut self, input: &[u8]) -> Result<(usize, Option<Packet>), FramingError> {
        let mut used = 0;
        if self.current.is_none() {
            let take = (DESCRIPTOR_SIZE - self.header_len).min(input.len());
            self.header[self.header_len..self.header_len + take].copy_from_slice(&input[..take]);
            self.header_len += take;
            used += take;
            if self.header_len < DESCRIPTOR_SIZE {
                return Ok((used, None));
            }
            let d = Descriptor::parse(&self.header);
            self.header_len = 0;
            if self.shm && (d.flags == FLAG_SHMRELEASE || d.flags == FLAG_SHMREVOKE) {
                // No payload, whatever the length field says (as in PulseAudio); the
                // block id is the offset's high word.
                let block_id = (d.offset as u64 >> 32) as u32;
                return Ok((
                    used,
                    Some(if d.flags == FLAG_SHMRELEASE {
                        Packet::ShmRelease(block_id)
                    } else {
                        Packet::ShmRevoke(block_id)
                    }),
                ));
            }
            self.check(&d)?;
            self.payload = Vec::with_capacity(d.length as usize);
            self.current = Some(d);
        }
        let d = self.current.expect("descriptor parsed");
        let want = d.length as usize - self.payload.len();
        let take = want.min(input.len() - used);
        self.payload.extend_from_slice(&input[used..used + take]);
        used += take;
        if self.payload.len() < d.length as usize {
            return Ok((used, None));
        }
        self.current = None;
        let data = std::mem::take(&mut self.payload);
        let packet = if d.channel == CONTROL_CHANNEL {
            Packet::Control(data)
        } else if d.flags & FLAG_SHMDATA != 0 {
            let w = |i: usize| u32::from_be_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
            Packet::ShmRef {
                channel: d.channel,
                offset: d.offset,
                seek: SeekMode::from_flags(d.flags).expect("checked"),
                block_id: w(0),
                shm_id: w(4),
                index: w(8),
                length: w(12),
                memfd: d.flags & FLAG_SHMDATA_MEMFD_BLOCK != 0,
            }
        } else {
            Packet::Memblock {
                channel: d.channel,
                offset: d.offset,
                seek: SeekMode::from_flags(d.flags).expect("checked"),
                data,
            }
        };
        Ok((used, Some(packet)))
    }

    fn check(&self, d: &Descriptor) -> Result<(), FramingError> {
        let shm_bits = d.flags & (FLAG_SHM_MASK | FLAG_SHMWRITABLE);
        if shm_bits != 0 {
            let allowed = FLAG_SHMDATA | FLAG_SHMDATA_MEMFD_BLOCK | FLAG_SHMWRITABLE;
            if !self.shm
                || d.channel == CONTROL_CHANNEL
                || d.flags & FLAG_SHMDATA == 0
                || shm_bits & !allowed != 0
                || d.length != SHM_INFO_SIZE
            {
                return Err(FramingError::SharedMemory(d.flags));
            }
        }
        if d.channel == CONTROL_CHANNEL {
            if d.length > MAX_CONTROL_PACKET {
                return Err(FramingError::TooLarge(d.length));
            }
            if d.flags != 0 {
                return Err(FramingError::BadControl);
            }
        } else {
            if d.length > MAX_MEMBLOCK_PACKET {
                return Err(FramingError::TooLarge(d.length));
            }
            if SeekMode::from_flags(d.flags).is_none()
                || d.flags & !(FLAG_SEEK_MASK | FLAG_SHM_MASK | FLAG_SHMWRITABLE) != 0
            {
                return Err(FramingError::BadSeek(d.flags));
            }
        }
        Ok(())
    }
}

/// Writers of outgoing packets into a byte buffer (the connection flushes it).
pub struct Out<'a> {
    /// The buffer packets are appended to.
    pub buf: &'a mut Vec<u8>,
    /// Negotiated protocol version.
    pub version: u16,
}

impl Out<'_> {
    /// A reply with a payload.
    pub fn reply<R: CommandReply>(&mut self, seq: u32, reply: &R) {
        write_reply_message(self.buf, seq, reply, self.version)
            .expect("writing into a Vec cannot fail");
    }

    /// An empty reply.
    pub fn ack(&mut self, seq: u32) {
        write_ack_message(self.buf, seq).expect("writing into a Vec cannot fail");
    }

    /// An error reply.
    pub fn error(&mut self, seq: u32, e: PulseError) {
        write_error(self.buf, seq, &e).expect("writing into a Vec cannot fail");
    }

    /// A command or event sent by the server (tag -1).
    pub fn command(&mut self, cmd: &Command) {
        pulseaudio::protocol::write_command_message(self.buf, u32::MAX, cmd, self.version)
            .expect("writing into a Vec cannot fail");
    }

    /// A reply whose payload is written by `f` (for replies the crate has no type for).
    pub fn reply_with(&mut self, seq: u32, f: impl FnOnce(&mut TagStructWriter<'_>)) {
        self.control_with(pulseaudio::protocol::CommandTag::Reply as u32, seq, f);
    }

    /// A server-sent command (tag -1) whose payload is written by `f` (for commands the
    /// crate has no type for, such as extension events).
    pub fn command_with(&mut self, command: u32, f: impl FnOnce(&mut TagStructWriter<'_>)) {
        self.control_with(command, u32::MAX, f);
    }

    fn control_with(&mut self, command: u32, tag: u32, f: impl FnOnce(&mut TagStructWriter<'_>)) {
        let mut payload = Vec::new();
        {
            let mut ts = TagStructWriter::new(&mut payload, self.version);
            ts.write_u32(command).expect("vec");
            ts.write_u32(tag).expect("vec");
            f(&mut ts);
        }
        let d = Descriptor {
            length: payload.len() as u32,
            channel: CONTROL_CHANNEL,
            offset: 0,
            flags: 0,
        };
        self.buf.extend_from_slice(&d.encode());
        self.buf.extend_from_slice(&payload);
    }

    /// Tells the client we are done with one of its shared-memory blocks.
    pub fn shm_release(&mut self, block_id: u32) {
        let d = Descriptor {
            length: 0,
            channel: CONTROL_CHANNEL,
            offset: ((block_id as u64) << 32) as i64,
            flags: FLAG_SHMRELEASE,
        };
        self.buf.extend_from_slice(&d.encode());
    }

    /// A memblock frame referencing `length` bytes at `index` of the memfd pool
    /// registered as `shm_id`; `extra_flags` may add [`FLAG_SHMWRITABLE`].
    pub fn shm_memblock(
        &mut self,
        channel: u32,
        extra_flags: u32,
        [block_id, shm_id, index, length]: [u32; 4],
    ) {
        let d = Descriptor {
            length: SHM_INFO_SIZE,
            channel,
            offset: 0,
            flags: FLAG_SHMDATA | FLAG_SHMDATA_MEMFD_BLOCK | extra_flags,
        };
        self.buf.extend_from_slice(&d.encode());
        for w in [block_id, shm_id, index, length] {
            self.buf.extend_from_slice(&w.to_be_bytes());
        }
    }

    /// Audio for a record stream.
    pub fn memblock(&mut self, channel: u32, data: &[u8]) {
        let d = Descriptor {
            length: data.len() as u32,
            channel,
            offset: 0,
            flags: 0,
        };
        self.buf.extend_from_slice(&d.encode());
        self.buf.extend_from_slice(data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(channel: u32, offset: i64, flags: u32, payload: &[u8]) -> Vec<u8> {
        let d = Descriptor {
            length: payload.len() as u32,
            channel,
            offset,
            flags,
        };
        let mut v = d.encode().to_vec();
        v.extend_from_slice(payload);
        v
    }

    fn feed_all(r: &mut PacketReader, mut input: &[u8]) -> Result<Vec<Packet>, FramingError> {
        let mut out = Vec::new();
        while !input.is_empty() {
            let (used, p) = r.feed(input)?;
            input = &input[used..];
            out.extend(p);
        }
        Ok(out)
    }

    #[test]
    fn descriptor_round_trips_with_negative_offset_and_seek() {
        let d = Descriptor {
            length: 7,
            channel: 3,
            offset: -4096,
            flags: 2,
        };
        assert_eq!(Descriptor::parse(&d.encode()), d);
    }

    #[test]
    fn packets_split_byte_by_byte_are_reassembled() {
        let mut bytes = packet(CONTROL_CHANNEL, 0, 0, b"hello");
        bytes.extend(packet(5, 12, 0, &[1, 2, 3, 4]));
        let mut r = PacketReader::new();
        let mut got = Vec::new();
        for b in &bytes {
            got.extend(feed_all(&mut r, std::slice::from_ref(b)).unwrap());
        }
        assert!(r.at_boundary());
        assert_eq!(
            got,
            vec![
                Packet::Control(b"hello".to_vec()),
                Packet::Memblock {
                    channel: 5,
                    offset: 12,
                    seek: SeekMode::Relative,
                    data: vec![1, 2, 3, 4]
                }
            ]
        );
    }

    #[test]
    fn shm_references_parse_only_once_negotiated() {
        let mut info = Vec::new();
        for v in [7u32, 3, 4096, 1920] {
            info.extend_from_slice(&v.to_be_bytes());
        }
        let frame = packet(2, 0, FLAG_SHMDATA | FLAG_SHMDATA_MEMFD_BLOCK, &info);
        assert!(PacketReader::new().feed(&frame).is_err());
        let mut r = PacketReader::new();
        r.enable_shm();
        assert_eq!(
            feed_all(&mut r, &frame).unwrap(),
            vec![Packet::ShmRef {
                channel: 2,
                offset: 0,
                seek: SeekMode::Relative,
                block_id: 7,
                shm_id: 3,
                index: 4096,
                length: 1920,
                memfd: true
            }]
        );
        // A release frame has no payload; a wrong-sized reference is refused.
        let release = packet(CONTROL_CHANNEL, 5 << 32, FLAG_SHMRELEASE, &[]);
        assert_eq!(
            feed_all(&mut r, &release).unwrap(),
            vec![Packet::ShmRelease(5)]
        );
        let revoke = packet(CONTROL_CHANNEL, 6 << 32, FLAG_SHMREVOKE, &[]);
        assert_eq!(
            feed_all(&mut r, &revoke).unwrap(),
            vec![Packet::ShmRevoke(6)]
        );
        let short = packet(2, 0, FLAG_SHMDATA, &info[..8]);
        assert!(r.feed(&short).is_err());
        // What we send for the record pool parses back as the same reference.
        let mut buf = Vec::new();
        Out {
            buf: &mut buf,
            version: 35,
        }
        .shm_memblock(4, 0, [16, 3, 65536, 1920]);
        assert_eq!(
            feed_all(&mut r, &buf).unwrap(),
            vec![Packet::ShmRef {
                channel: 4,
                offset: 0,
                seek: SeekMode::Relative,
                block_id: 16,
                shm_id: 3,
                index: 65536,
                length: 1920,
                memfd: true
            }]
        );
    }

    #[test]
    fn oversize_and_shm_packets_are_refused_before_allocating() {
        let mut r = PacketReader::new();
        let d = Descriptor {
            length: u32::MAX,
            channel: CONTROL_CHANNEL,
            offset: 0,
            flags: 0,
        };
        assert_eq!(
            r.feed(&d.encode()).unwrap_err(),
            FramingError::TooLarge(u32::MAX)
        );
        let mut r = PacketReader::new();
        let shm = packet(1, 0, 0x8000_0000, &[]);
        assert!(matches!(
            r.feed(&shm).unwrap_err(),
            FramingError::SharedMemory(_)
        ));
        let mut r = PacketReader::new();
        assert!(matches!(
            r.feed(&packet(1, 0, 9, &[])).unwrap_err(),
            FramingError::BadSeek(9)
        ));
    }
}
