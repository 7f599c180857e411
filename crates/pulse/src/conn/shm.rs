//! The connection's shared memory: the srbchannel and record pool it offers the
//! client, and the client's memfd pools it copies blocks out of.

use super::Conn;
use crate::io::export::ExportPool;
use pulseaudio::protocol::CommandTag;

impl Conn {
    /// Offers the srbchannel: registers its memfd block as a pool of ours, sends
    /// ENABLE_SRBCHANNEL with the two wakeup descriptors, then a writable reference to
    /// the block; the client answers ENABLE_SRBCHANNEL with our tag.
    pub(crate) fn offer_srb(&mut self) {
        let shm_id = self.new_shm_id();
        let tag = random_u32() & 0x7fff_ffff;
        let mut srb = match crate::io::srb::Srb::new(shm_id, tag) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("pulse client {}: srbchannel not offered: {e}", self.client);
                return;
            }
        };
        let (Some(memfd), Some((wake_w, wake_r))) = (srb.take_memfd(), srb.take_client_fds())
        else {
            return;
        };
        self.queue_with_fds(
            &[CommandTag::RegisterMemfdShmid as u32, u32::MAX, shm_id],
            vec![memfd],
        );
        self.queue_with_fds(
            &[CommandTag::EnableSrbchannel as u32, tag],
            vec![wake_w, wake_r],
        );
        self.out().shm_memblock(
            0,
            crate::wire::FLAG_SHMWRITABLE,
            [
                crate::io::srb::BLOCK_ID,
                shm_id,
                0,
                crate::io::srb::BLOCK_SIZE as u32,
            ],
        );
        tracing::debug!("pulse client {}: srbchannel offered", self.client);
        self.srb = Some(srb);
        self.srb_block = Some(self.srv.mem.block(crate::io::srb::BLOCK_SIZE));
    }
    /// A packet of 'L' words (a tagstruct of u32s) whose descriptors go with its first
    /// byte.
    pub(crate) fn queue_with_fds(&mut self, words: &[u32], fds: Vec<rustix::fd::OwnedFd>) {
        use crate::wire::{CONTROL_CHANNEL, Descriptor};
        let mut payload = Vec::with_capacity(words.len() * 5);
        for w in words {
            payload.push(b'L');
            payload.extend_from_slice(&w.to_be_bytes());
        }
        let d = Descriptor {
            length: payload.len() as u32,
            channel: CONTROL_CHANNEL,
            offset: 0,
            flags: 0,
        };
        let off = self.out.len();
        self.out.extend_from_slice(&d.encode());
        self.out.extend_from_slice(&payload);
        self.out_fds.push_back((off, self.out.len() - off, fds));
    }
    /// A random pool id for a memfd we register, distinct from this connection's others.
    pub(crate) fn new_shm_id(&self) -> u32 {
        loop {
            let id = random_u32() | 1;
            if self.srb.as_ref().is_none_or(|s| s.shm_id != id)
                && self.pool.as_ref().is_none_or(|p| p.shm_id != id)
            {
                return id;
            }
        }
    }
    /// Registers the record pool with the client (its memfd rides along), so record
    /// audio can go out as references into it.
    pub(crate) fn offer_pool(&mut self) {
        let shm_id = self.new_shm_id();
        let mut pool = match ExportPool::new(shm_id, self.srv.mem.clone()) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(
                    "pulse client {}: no memfd record pool, record audio goes inline: {e}",
                    self.client
                );
                return;
            }
        };
        let Some(memfd) = pool.take_memfd() else {
            return;
        };
        self.queue_with_fds(
            &[CommandTag::RegisterMemfdShmid as u32, u32::MAX, shm_id],
            vec![memfd],
        );
        self.pool = Some(pool);
    }
    /// Copies a block out of the client's memfd pool with `pread` (a client that
    /// shrinks its memfd gets short reads, never a SIGBUS here). An unknown pool or a
    /// POSIX-shm reference reads as silence.
    /// Copies a client block out of its memfd pool into `data` (silence where the pool
    /// is unknown or ends).
    pub(crate) fn read_shm(
        &mut self,
        shm_id: u32,
        index: u32,
        length: u32,
        memfd: bool,
        data: &mut Vec<u8>,
    ) {
        let length = length.min(crate::wire::MAX_MEMBLOCK_PACKET) as usize;
        // Sized only: the read writes every byte (silence past the pool's end).
        data.resize(length, 0);
        match self.memfds.get(&shm_id).filter(|_| memfd) {
            Some(pool) => self.shm_bytes += pool.read(index as u64, data) as u64,
            None => {
                data.fill(0);
                tracing::debug!(
                    "pulse client {}: audio in unknown shared memory {shm_id} played as silence",
                    self.client
                )
            }
        }
    }
}

pub(crate) fn random_u32() -> u32 {
    let mut rnd = [0u8; 4];
    let _ = rustix::rand::getrandom(&mut rnd, rustix::rand::GetRandomFlags::empty());
    u32::from_ne_bytes(rnd)
}
