//! A bounded single-producer single-consumer queue of MIDI messages that neither side
//! allocates or locks in: two rtrb rings, one of headers (time, port, length) and one of
//! the bytes. The producer writes the bytes first and the header after, so a header the
//! consumer sees always has its bytes behind it.

use super::types::{PortId, QueueError};
use rtrb::chunks::ReadChunk;
use rtrb::{Consumer, Producer, RingBuffer};

/// A message's header in the queue.
#[derive(Debug, Clone, Copy)]
struct Header {
    time_ns: u64,
    port: PortId,
    len: u32,
}

/// A queue of up to `messages` messages and `bytes` bytes in all (the bridge's two
/// queues are these; the daemon may use more between its own threads).
pub fn queue(messages: usize, bytes: usize) -> (MidiSender, MidiReceiver) {
    let (heads, head_rx) = RingBuffer::new(messages.max(1));
    let (data, data_rx) = RingBuffer::new(bytes.max(1));
    (
        MidiSender { heads, data },
        MidiReceiver {
            heads: head_rx,
            data: data_rx,
        },
    )
}

/// The producing end. *Allocation-free, lock-free.*
pub struct MidiSender {
    heads: Producer<Header>,
    data: Producer<u8>,
}

impl MidiSender {
    /// Queues `bytes` from (or to) `port`, stamped `time_ns`.
    pub fn push(&mut self, time_ns: u64, port: PortId, bytes: &[u8]) -> Result<(), QueueError> {
        if bytes.len() > self.data.buffer().capacity() {
            return Err(QueueError::TooLong {
                len: bytes.len(),
                capacity: self.data.buffer().capacity(),
            });
        }
        if self.heads.slots() == 0 {
            return Err(QueueError::Full);
        }
        let mut chunk = self
            .data
            .write_chunk(bytes.len())
            .map_err(|_| QueueError::Full)?;
        let (a, b) = chunk.as_mut_slices();
        let split = a.len();
        a.copy_from_slice(&bytes[..split]);
        b.copy_from_slice(&bytes[split..]);
        chunk.commit_all();
        self.heads
            .push(Header {
                time_ns,
                port,
                len: bytes.len() as u32,
            })
            .map_err(|_| QueueError::Full)
    }
}

/// The consuming end. *Allocation-free, lock-free*: a real-time thread drains it.
pub struct MidiReceiver {
    heads: Consumer<Header>,
    data: Consumer<u8>,
}

impl MidiReceiver {
    /// The next message, or `None` when the queue is empty. Its bytes leave the queue
    /// when the [`Message`] is dropped.
    pub fn pop(&mut self) -> Option<Message<'_>> {
        let h = self.heads.pop().ok()?;
        let chunk = self
            .data
            .read_chunk(h.len as usize)
            .expect("a header is pushed only after its bytes");
        Some(Message {
            time_ns: h.time_ns,
            port: h.port,
            chunk: Some(chunk),
        })
    }

    /// Messages waiting.
    pub fn len(&self) -> usize {
        self.heads.slots()
    }

    /// Whether no message waits.
    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }
}

/// One queued message; its bytes are borrowed from the ring until it is dropped.
pub struct Message<'a> {
    /// `CLOCK_MONOTONIC` nanoseconds: when the bridge read it from the sequencer (input)
    /// or when it was queued (output).
    pub time_ns: u64,
    /// Where it came from (input) or goes to (output).
    pub port: PortId,
    chunk: Option<ReadChunk<'a, u8>>,
}

impl Message<'_> {
    /// The bytes, in at most two pieces (the ring wraps).
    pub fn slices(&self) -> (&[u8], &[u8]) {
        self.chunk.as_ref().map_or((&[], &[]), |c| c.as_slices())
    }

    /// The message's length in bytes.
    pub fn len(&self) -> usize {
        let (a, b) = self.slices();
        a.len() + b.len()
    }

    /// Whether the message has no bytes (never, for a queued MIDI message).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies the bytes into `dst`; `None` (nothing copied) when `dst` is too short.
    pub fn copy_to(&self, dst: &mut [u8]) -> Option<usize> {
        let (a, b) = self.slices();
        let out = dst.get_mut(..a.len() + b.len())?;
        out[..a.len()].copy_from_slice(a);
        out[a.len()..].copy_from_slice(b);
        Some(a.len() + b.len())
    }
}

impl Drop for Message<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.chunk.take() {
            c.commit_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: PortId = PortId {
        client: 20,
        port: 0,
    };

    fn bytes(m: &Message) -> Vec<u8> {
        let (a, b) = m.slices();
        [a, b].concat()
    }

    #[test]
    fn messages_come_out_whole_and_in_order_across_the_wrap() {
        let (mut tx, mut rx) = queue(4, 10);
        for round in 0..20u8 {
            tx.push(u64::from(round), P, &[0x90, round, 0x7F]).unwrap();
            tx.push(u64::from(round) + 1, P, &[0xF8]).unwrap();
            let m = rx.pop().unwrap();
            assert_eq!(
                (m.time_ns, bytes(&m)),
                (u64::from(round), vec![0x90, round, 0x7F])
            );
            drop(m);
            let m = rx.pop().unwrap();
            assert_eq!(bytes(&m), vec![0xF8]);
        }
        assert!(rx.pop().is_none());
    }

    #[test]
    fn a_full_queue_refuses_and_keeps_what_it_has() {
        let (mut tx, mut rx) = queue(2, 8);
        tx.push(1, P, &[0x90, 1, 2]).unwrap();
        tx.push(2, P, &[0x90, 3, 4]).unwrap();
        // Out of headers.
        assert_eq!(tx.push(3, P, &[0xF8]), Err(QueueError::Full));
        assert_eq!(rx.len(), 2);
        drop(rx.pop());
        // Headers free, but 3 + 6 bytes do not fit in 8.
        assert_eq!(
            tx.push(4, P, &[0xF0, 1, 2, 3, 4, 0xF7]),
            Err(QueueError::Full)
        );
        assert_eq!(
            tx.push(5, P, &[0; 9]),
            Err(QueueError::TooLong {
                len: 9,
                capacity: 8
            })
        );
        let m = rx.pop().unwrap();
        assert_eq!((m.time_ns, bytes(&m)), (2, vec![0x90, 3, 4]));
        let mut small = [0u8; 2];
        assert_eq!(m.copy_to(&mut small), None);
        let mut big = [0u8; 4];
        assert_eq!(m.copy_to(&mut big), Some(3));
    }
}
