//! AUTH, the client's name and proplist, SUBSCRIBE, and the shared-memory set-up.

use super::{Reply, remove_props, update_props};
use crate::conn::Conn;
use crate::io::tcp::Sock;
use crate::wire::convert::{cstr, prop_str};
use pulseaudio::protocol::props::PropsUpdateMode;
use pulseaudio::protocol::{
    self as pa, AuthReply, Prop, Props, PulseError, SetClientNameReply,
    SubscriptionEventFacility as Fac, SubscriptionEventType as Ev,
};
use std::sync::atomic::Ordering::Relaxed;

/// The protocol version this server speaks.
pub(crate) const SERVER_VERSION: u16 = pa::MAX_VERSION;

impl Conn {
    /// REMOVE_CLIENT_PROPLIST.
    pub(crate) fn remove_client_proplist(&mut self, seq: u32, keys: &[std::ffi::CString]) -> Reply {
        let mut st = self.srv.lock();
        if let Some(c) = st.clients.get_mut(&self.client) {
            remove_props(&mut c.props, keys);
        }
        drop(st);
        self.srv.broadcast(Fac::Client, Ev::Changed, self.client);
        self.out().ack(seq);
        Ok(())
    }

    /// REGISTER_MEMFD_SHMID: the client's memfd pool (its descriptor came with the packet).
    pub(crate) fn register_memfd(&mut self, shm_id: Option<u32>) {
        let fd = self.fds.pop_front();
        let size = fd
            .as_ref()
            .and_then(|f| rustix::fs::fstat(f).ok())
            .map_or(0, |st| st.st_size);
        match (shm_id, fd) {
            (Some(id), Some(fd)) if self.reader_shm() && size > 0 && self.memfds.len() < 64 => {
                let pool = crate::io::shm::ClientPool::new(fd);
                tracing::debug!(
                    "pulse client {}: memfd pool {id} registered ({size} bytes, {})",
                    self.client,
                    if pool.mapped() {
                        "sealed and mapped"
                    } else {
                        "read with pread: cannot be sealed"
                    }
                );
                self.memfds.insert(id, pool);
            }
            _ => {
                tracing::info!(
                    "pulse client {}: bad memfd registration; disconnecting",
                    self.client
                );
                self.closing = true;
            }
        }
    }

    /// The client's ENABLE_SRBCHANNEL (an acknowledgement, no reply).
    pub(crate) fn enable_srbchannel(&mut self, seq: u32) {
        // From now on our output goes through the ring, after what the socket still
        // holds.
        match self.srb.as_mut() {
            Some(s) if !s.active && s.tag == seq && self.out_fds.is_empty() => {
                s.active = true;
                if let Some(w) = &self.wire {
                    w.use_srb(s.out());
                }
                self.sock_tail.append(&mut self.out);
                tracing::debug!("pulse client {}: srbchannel enabled", self.client);
            }
            _ => {
                tracing::info!(
                    "pulse client {}: unexpected ENABLE_SRBCHANNEL (tag {seq}); disconnecting",
                    self.client
                );
                self.closing = true;
            }
        }
    }

    /// AUTH.
    pub(crate) fn auth(&mut self, seq: u32, p: pa::AuthParams) -> Reply {
        if p.version < pa::MIN_VERSION {
            self.closing = true;
            return Err(PulseError::Version);
        }
        if let Some(cookie) = self.sock.required_cookie()
            && p.cookie.as_slice() != cookie
        {
            tracing::warn!(
                "pulse client {}: TCP peer without the cookie refused",
                self.client
            );
            self.closing = true;
            return Err(PulseError::AccessDenied);
        }
        self.version = p.version.min(SERVER_VERSION);
        self.authed = true;
        // Shared memory only as memfd (no POSIX shm segments to open), only on the
        // unix socket, and only for libraries past the 9.0 memfd bug (v32). A
        // client with shm disabled (`enable-shm = no`) still says memfd: as
        // PulseAudio, memfd needs shm too.
        self.auth_creds = self.creds;
        let same_user = self.same_user();
        let memfd = self.srv.opts.memfd
            && same_user
            && p.supports_shm
            && p.supports_memfd
            && p.version >= 32
            && self.sock.is_unix();
        if memfd {
            self.reader.enable_shm();
        }
        tracing::debug!(
            "pulse client {}: protocol {} (shm {}, memfd {}): audio {}",
            self.client,
            self.version,
            p.supports_shm,
            p.supports_memfd,
            if memfd { "by memfd" } else { "inline" }
        );
        self.out().reply(
            seq,
            &AuthReply {
                version: SERVER_VERSION,
                use_memfd: memfd,
                use_shm: memfd,
            },
        );
        // Registered before the srbchannel is offered, as PulseAudio registers
        // its pool: everything before the offer leaves through the socket
        // before the ring is used, so the client knows the pool before the
        // first reference into it can reach it through the ring.
        if memfd && self.srv.opts.memfd_record && self.pool.is_none() {
            self.offer_pool();
        }
        // As PulseAudio: offered right after the reply, only with shared memory
        // (the rings live in a memfd block) and only once.
        if memfd && self.srv.opts.srbchannel && self.version >= 30 && self.srb.is_none() {
            self.offer_srb();
        }
        Ok(())
    }

    /// SET_CLIENT_NAME.
    pub(crate) fn set_client_name(&mut self, seq: u32, props: Props) -> Reply {
        self.update_client(PropsUpdateMode::Replace, &props);
        let reply = SetClientNameReply {
            client_id: self.client,
        };
        self.out().reply(seq, &reply);
        Ok(())
    }

    /// UPDATE_CLIENT_PROPLIST.
    pub(crate) fn update_client_proplist(
        &mut self,
        seq: u32,
        p: pa::UpdateClientProplistParams,
    ) -> Reply {
        self.update_client(p.mode, &p.props);
        self.out().ack(seq);
        Ok(())
    }

    /// SUBSCRIBE.
    pub(crate) fn subscribe(&mut self, seq: u32, mask: pa::SubscriptionMask) -> Reply {
        self.handle.mask.store(mask.bits(), Relaxed);
        self.out().ack(seq);
        Ok(())
    }

    /// Whether the client runs as our user — as PulseAudio, shared memory is only used
    /// then, so nothing of ours is mapped into another user's process. The uid comes
    /// from the credentials passed with AUTH, else from the socket's peer credentials
    /// (both checked by the kernel).
    pub(crate) fn same_user(&self) -> bool {
        let uid = match (&self.auth_creds, &self.sock) {
            (Some(c), _) => Some(c.uid),
            (None, Sock::Unix(s)) => rustix::net::sockopt::socket_peercred(s).ok().map(|c| c.uid),
            (None, Sock::Tcp { .. }) => None,
        };
        if let Some(c) = &self.auth_creds {
            tracing::debug!(
                "pulse client {}: credentials pid {} uid {} gid {}",
                self.client,
                c.pid.as_raw_nonzero(),
                c.uid.as_raw(),
                c.gid.as_raw()
            );
        }
        let same = uid == Some(rustix::process::geteuid());
        if !same && uid.is_some() {
            tracing::info!(
                "pulse client {}: runs as uid {} (not ours): no shared memory",
                self.client,
                uid.map_or(0, |u| u.as_raw())
            );
        }
        same
    }

    pub(crate) fn update_client(&mut self, mode: PropsUpdateMode, props: &Props) {
        let creds = self.auth_creds;
        let mut st = self.srv.lock();
        if let Some(c) = st.clients.get_mut(&self.client) {
            update_props(&mut c.props, mode, props);
            // What the kernel vouches for fills what the client left out.
            if let Some(cr) = creds {
                if c.props.get(Prop::ApplicationProcessId).is_none() {
                    c.props.set(
                        Prop::ApplicationProcessId,
                        cstr(&cr.pid.as_raw_nonzero().to_string()),
                    );
                }
                if c.props.get(Prop::ApplicationProcessUser).is_none()
                    && let Some(user) = user_name(cr.uid.as_raw())
                {
                    c.props.set(Prop::ApplicationProcessUser, cstr(&user));
                }
            }
            if let Some(n) = prop_str(&c.props, Prop::ApplicationName) {
                c.name = n;
            }
        }
        drop(st);
        self.srv.broadcast(Fac::Client, Ev::Changed, self.client);
    }
}

/// The login name of `uid` (getpwuid_r), if it has one.
pub(crate) fn user_name(uid: u32) -> Option<String> {
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 4096];
    let mut res: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: all pointers are to live, correctly sized locals.
    let r = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut res) };
    if r != 0 || res.is_null() || pw.pw_name.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded; pw_name points into `buf`, NUL-terminated.
    let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
    Some(name.to_string_lossy().into_owned())
}
