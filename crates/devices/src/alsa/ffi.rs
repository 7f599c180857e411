//! alsa-lib, loaded at run time: `dlopen("libasound.so.2")` and a typed table of the
//! `snd_*` functions the backend calls.
//!
//! Why run-time loading: the build must not need `libasound2-dev` (no headers, no
//! `libasound.so` link symlink), and a machine without alsa-lib must still run quaverd on
//! its other devices. So nothing links against libasound; [`lib`] opens it on first use
//! and resolves every symbol up front, and a missing library or symbol becomes an
//! "ALSA unavailable" error the daemon can fall back from.
//!
//! Why `libc::dlopen` rather than the `libloading` crate: `libc` is already a workspace
//! dependency, the table is resolved exactly once and never unloaded (alsa-lib keeps
//! global configuration state, so `dlclose` would be unsafe anyway), and that leaves
//! libloading nothing to add but a dependency.
//!
//! Symbol versions: a few functions (`snd_pcm_hw_params_set_rate_near`, `…_get_rate`,
//! `…_buffer_size…`, `…_period_size…`) exist in two versions, the 0.9 API and the current
//! `ALSA_0.9.0rc4` one. An unversioned `dlsym` returns the default (`@@`) version, which
//! is the current API the signatures below describe (checked against alsa-lib 1.2.8).
//!
//! Constants are the values of alsa-lib's public headers (`pcm.h`), which are ABI.

#![allow(non_camel_case_types)]

use std::ffi::{CStr, CString, c_char, c_int, c_long, c_uint, c_ulong, c_ushort, c_void};
use std::sync::OnceLock;

/// `snd_pcm_uframes_t`.
pub(crate) type uframes = c_ulong;
/// `snd_pcm_sframes_t`.
pub(crate) type sframes = c_long;
/// Opaque alsa-lib objects (`snd_pcm_t`, `snd_pcm_hw_params_t`, …).
pub(crate) type Opaque = c_void;

/// `snd_pcm_channel_area_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChannelArea {
    /// Base address of the channel's samples.
    pub addr: *mut c_void,
    /// Offset of the first sample, in bits.
    pub first: c_uint,
    /// Distance between samples, in bits.
    pub step: c_uint,
}

pub(crate) const SND_PCM_STREAM_PLAYBACK: c_int = 0;
pub(crate) const SND_PCM_STREAM_CAPTURE: c_int = 1;

pub(crate) const SND_PCM_NONBLOCK: c_int = 0x1;

pub(crate) const SND_PCM_ACCESS_MMAP_INTERLEAVED: c_int = 0;
pub(crate) const SND_PCM_ACCESS_RW_INTERLEAVED: c_int = 3;

pub(crate) const SND_PCM_FORMAT_S16_LE: c_int = 2;
pub(crate) const SND_PCM_FORMAT_S24_LE: c_int = 6;
pub(crate) const SND_PCM_FORMAT_S32_LE: c_int = 10;
pub(crate) const SND_PCM_FORMAT_FLOAT_LE: c_int = 14;
pub(crate) const SND_PCM_FORMAT_S24_3LE: c_int = 32;

pub(crate) const SND_PCM_STATE_RUNNING: c_int = 3;
pub(crate) const SND_PCM_STATE_XRUN: c_int = 4;
pub(crate) const SND_PCM_STATE_SUSPENDED: c_int = 7;
pub(crate) const SND_PCM_STATE_DISCONNECTED: c_int = 8;

pub(crate) const SND_PCM_TSTAMP_ENABLE: c_int = 1;
pub(crate) const SND_PCM_TSTAMP_TYPE_MONOTONIC: c_int = 1;

pub(crate) const SND_PCM_TYPE_FILE: c_int = 3;
pub(crate) const SND_PCM_TYPE_NULL: c_int = 4;

/// `control.h`: the card interface (jacks live there), element events and masks.
pub(crate) const SND_CTL_ELEM_IFACE_CARD: c_int = 0;
pub(crate) const SND_CTL_EVENT_ELEM: c_int = 0;
pub(crate) const SND_CTL_EVENT_MASK_VALUE: c_uint = 1;
pub(crate) const SND_CTL_EVENT_MASK_ADD: c_uint = 1 << 2;
pub(crate) const SND_CTL_EVENT_MASK_REMOVE: c_uint = !0;
pub(crate) const SND_CTL_NONBLOCK: c_int = 1;

/// The library file opened unless `QUAVER_ALSA_LIBRARY` names another.
pub const LIBRARY: &str = "libasound.so.2";

/// Environment variable that overrides [`LIBRARY`] (a path or a soname; tests use a
/// missing name to exercise the "unavailable" path).
pub const LIBRARY_ENV: &str = "QUAVER_ALSA_LIBRARY";

/// Declares a table of alsa-lib functions (`$name`) and its `resolve`; the sequencer
/// (seq/ffi.rs) has a second table of its own so neither file grows too long.
macro_rules! alsa_table {
    ($name:ident; $( $field:ident = $sym:literal : fn($($arg:ty),*) $(-> $ret:ty)?; )*) => {
        /// Resolved alsa-lib functions. Calling any of them is `unsafe`: the caller
        /// upholds alsa-lib's contract for that call (valid handles, buffer sizes).
        pub(crate) struct $name {
            $( pub(crate) $field: unsafe extern "C" fn($($arg),*) $(-> $ret)?, )*
        }

        impl $name {
            /// Resolves every function in `handle`, or names the first one missing.
            ///
            /// # Safety
            /// `handle` must be a live `dlopen` handle of an alsa-lib whose functions
            /// have the signatures above.
            unsafe fn resolve(handle: *mut c_void) -> Result<$name, String> {
                Ok($name {
                    $( $field: {
                        let name = concat!($sym, "\0");
                        // SAFETY: NUL-terminated name, live handle.
                        let p = unsafe { libc::dlsym(handle, name.as_ptr().cast()) };
                        if p.is_null() {
                            return Err(format!("{} has no {} (alsa-lib too old?)", $crate::alsa::ffi::LIBRARY, $sym));
                        }
                        // SAFETY: the symbol is alsa-lib's function of this signature.
                        unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(p)
                        }
                    }, )*
                })
            }
        }
    };
}

pub(crate) use alsa_table;

alsa_table! {
    Lib;
    pcm_open = "snd_pcm_open": fn(*mut *mut Opaque, *const c_char, c_int, c_int) -> c_int;
    pcm_close = "snd_pcm_close": fn(*mut Opaque) -> c_int;
    pcm_nonblock = "snd_pcm_nonblock": fn(*mut Opaque, c_int) -> c_int;
    pcm_type = "snd_pcm_type": fn(*mut Opaque) -> c_int;

    hw_malloc = "snd_pcm_hw_params_malloc": fn(*mut *mut Opaque) -> c_int;
    hw_free = "snd_pcm_hw_params_free": fn(*mut Opaque);
    hw_any = "snd_pcm_hw_params_any": fn(*mut Opaque, *mut Opaque) -> c_int;
    hw_test_access = "snd_pcm_hw_params_test_access": fn(*mut Opaque, *mut Opaque, c_int) -> c_int;
    hw_set_access = "snd_pcm_hw_params_set_access": fn(*mut Opaque, *mut Opaque, c_int) -> c_int;
    hw_test_format = "snd_pcm_hw_params_test_format": fn(*mut Opaque, *mut Opaque, c_int) -> c_int;
    hw_set_format = "snd_pcm_hw_params_set_format": fn(*mut Opaque, *mut Opaque, c_int) -> c_int;
    hw_set_channels = "snd_pcm_hw_params_set_channels": fn(*mut Opaque, *mut Opaque, c_uint) -> c_int;
    hw_set_channels_near = "snd_pcm_hw_params_set_channels_near": fn(*mut Opaque, *mut Opaque, *mut c_uint) -> c_int;
    hw_set_rate_resample = "snd_pcm_hw_params_set_rate_resample": fn(*mut Opaque, *mut Opaque, c_uint) -> c_int;
    hw_set_rate_near = "snd_pcm_hw_params_set_rate_near": fn(*mut Opaque, *mut Opaque, *mut c_uint, *mut c_int) -> c_int;
    hw_set_buffer_size_near = "snd_pcm_hw_params_set_buffer_size_near": fn(*mut Opaque, *mut Opaque, *mut uframes) -> c_int;
    hw_set_period_size_near = "snd_pcm_hw_params_set_period_size_near": fn(*mut Opaque, *mut Opaque, *mut uframes, *mut c_int) -> c_int;
    hw_can_disable_period_wakeup = "snd_pcm_hw_params_can_disable_period_wakeup": fn(*const Opaque) -> c_int;
    hw_set_period_wakeup = "snd_pcm_hw_params_set_period_wakeup": fn(*mut Opaque, *mut Opaque, c_uint) -> c_int;
    hw_get_buffer_size_max = "snd_pcm_hw_params_get_buffer_size_max": fn(*const Opaque, *mut uframes) -> c_int;
    hw_commit = "snd_pcm_hw_params": fn(*mut Opaque, *mut Opaque) -> c_int;
    hw_get_format = "snd_pcm_hw_params_get_format": fn(*const Opaque, *mut c_int) -> c_int;
    hw_get_channels = "snd_pcm_hw_params_get_channels": fn(*const Opaque, *mut c_uint) -> c_int;
    hw_get_rate = "snd_pcm_hw_params_get_rate": fn(*const Opaque, *mut c_uint, *mut c_int) -> c_int;
    hw_get_buffer_size = "snd_pcm_hw_params_get_buffer_size": fn(*const Opaque, *mut uframes) -> c_int;
    hw_get_period_size = "snd_pcm_hw_params_get_period_size": fn(*const Opaque, *mut uframes, *mut c_int) -> c_int;

    sw_malloc = "snd_pcm_sw_params_malloc": fn(*mut *mut Opaque) -> c_int;
    sw_free = "snd_pcm_sw_params_free": fn(*mut Opaque);
    sw_current = "snd_pcm_sw_params_current": fn(*mut Opaque, *mut Opaque) -> c_int;
    sw_get_boundary = "snd_pcm_sw_params_get_boundary": fn(*const Opaque, *mut uframes) -> c_int;
    sw_set_avail_min = "snd_pcm_sw_params_set_avail_min": fn(*mut Opaque, *mut Opaque, uframes) -> c_int;
    sw_set_start_threshold = "snd_pcm_sw_params_set_start_threshold": fn(*mut Opaque, *mut Opaque, uframes) -> c_int;
    sw_set_stop_threshold = "snd_pcm_sw_params_set_stop_threshold": fn(*mut Opaque, *mut Opaque, uframes) -> c_int;
    sw_set_silence_threshold = "snd_pcm_sw_params_set_silence_threshold": fn(*mut Opaque, *mut Opaque, uframes) -> c_int;
    sw_set_silence_size = "snd_pcm_sw_params_set_silence_size": fn(*mut Opaque, *mut Opaque, uframes) -> c_int;
    sw_get_silence_size = "snd_pcm_sw_params_get_silence_size": fn(*const Opaque, *mut uframes) -> c_int;
    sw_set_tstamp_mode = "snd_pcm_sw_params_set_tstamp_mode": fn(*mut Opaque, *mut Opaque, c_int) -> c_int;
    sw_set_tstamp_type = "snd_pcm_sw_params_set_tstamp_type": fn(*mut Opaque, *mut Opaque, c_int) -> c_int;
    sw_commit = "snd_pcm_sw_params": fn(*mut Opaque, *mut Opaque) -> c_int;

    pcm_prepare = "snd_pcm_prepare": fn(*mut Opaque) -> c_int;
    pcm_start = "snd_pcm_start": fn(*mut Opaque) -> c_int;
    pcm_drop = "snd_pcm_drop": fn(*mut Opaque) -> c_int;
    pcm_drain = "snd_pcm_drain": fn(*mut Opaque) -> c_int;
    pcm_resume = "snd_pcm_resume": fn(*mut Opaque) -> c_int;
    pcm_recover = "snd_pcm_recover": fn(*mut Opaque, c_int, c_int) -> c_int;
    pcm_state = "snd_pcm_state": fn(*mut Opaque) -> c_int;
    pcm_link = "snd_pcm_link": fn(*mut Opaque, *mut Opaque) -> c_int;

    pcm_writei = "snd_pcm_writei": fn(*mut Opaque, *const c_void, uframes) -> sframes;
    pcm_readi = "snd_pcm_readi": fn(*mut Opaque, *mut c_void, uframes) -> sframes;
    pcm_mmap_begin = "snd_pcm_mmap_begin": fn(*mut Opaque, *mut *const ChannelArea, *mut uframes, *mut uframes) -> c_int;
    pcm_mmap_commit = "snd_pcm_mmap_commit": fn(*mut Opaque, uframes, uframes) -> sframes;
    pcm_avail_update = "snd_pcm_avail_update": fn(*mut Opaque) -> sframes;
    pcm_delay = "snd_pcm_delay": fn(*mut Opaque, *mut sframes) -> c_int;
    pcm_rewindable = "snd_pcm_rewindable": fn(*mut Opaque) -> sframes;
    pcm_rewind = "snd_pcm_rewind": fn(*mut Opaque, uframes) -> sframes;

    status_malloc = "snd_pcm_status_malloc": fn(*mut *mut Opaque) -> c_int;
    status_free = "snd_pcm_status_free": fn(*mut Opaque);
    pcm_status = "snd_pcm_status": fn(*mut Opaque, *mut Opaque) -> c_int;
    status_get_state = "snd_pcm_status_get_state": fn(*const Opaque) -> c_int;
    status_get_avail = "snd_pcm_status_get_avail": fn(*const Opaque) -> uframes;
    status_get_htstamp = "snd_pcm_status_get_htstamp": fn(*const Opaque, *mut libc::timespec);

    poll_descriptors_count = "snd_pcm_poll_descriptors_count": fn(*mut Opaque) -> c_int;
    poll_descriptors = "snd_pcm_poll_descriptors": fn(*mut Opaque, *mut libc::pollfd, c_uint) -> c_int;
    poll_descriptors_revents = "snd_pcm_poll_descriptors_revents": fn(*mut Opaque, *mut libc::pollfd, c_uint, *mut c_ushort) -> c_int;

    strerror = "snd_strerror": fn(c_int) -> *const c_char;
    card_next = "snd_card_next": fn(*mut c_int) -> c_int;
    card_get_name = "snd_card_get_name": fn(c_int, *mut *mut c_char) -> c_int;
    device_name_hint = "snd_device_name_hint": fn(c_int, *const c_char, *mut *mut *mut c_void) -> c_int;
    device_name_get_hint = "snd_device_name_get_hint": fn(*const c_void, *const c_char) -> *mut c_char;
    device_name_free_hint = "snd_device_name_free_hint": fn(*mut *mut c_void) -> c_int;

    // Card discovery (cards.rs): the control interface's card and PCM info, and the
    // ranges of a PCM's configuration space.
    ctl_open = "snd_ctl_open": fn(*mut *mut Opaque, *const c_char, c_int) -> c_int;
    ctl_close = "snd_ctl_close": fn(*mut Opaque) -> c_int;
    ctl_card_info_malloc = "snd_ctl_card_info_malloc": fn(*mut *mut Opaque) -> c_int;
    ctl_card_info_free = "snd_ctl_card_info_free": fn(*mut Opaque);
    ctl_card_info = "snd_ctl_card_info": fn(*mut Opaque, *mut Opaque) -> c_int;
    ctl_card_info_get_id = "snd_ctl_card_info_get_id": fn(*const Opaque) -> *const c_char;
    ctl_card_info_get_name = "snd_ctl_card_info_get_name": fn(*const Opaque) -> *const c_char;
    ctl_card_info_get_longname = "snd_ctl_card_info_get_longname": fn(*const Opaque) -> *const c_char;
    ctl_card_info_get_driver = "snd_ctl_card_info_get_driver": fn(*const Opaque) -> *const c_char;
    ctl_pcm_next_device = "snd_ctl_pcm_next_device": fn(*mut Opaque, *mut c_int) -> c_int;
    ctl_pcm_info = "snd_ctl_pcm_info": fn(*mut Opaque, *mut Opaque) -> c_int;
    pcm_info_malloc = "snd_pcm_info_malloc": fn(*mut *mut Opaque) -> c_int;
    pcm_info_free = "snd_pcm_info_free": fn(*mut Opaque);
    pcm_info_set_device = "snd_pcm_info_set_device": fn(*mut Opaque, c_uint);
    pcm_info_set_subdevice = "snd_pcm_info_set_subdevice": fn(*mut Opaque, c_uint);
    pcm_info_set_stream = "snd_pcm_info_set_stream": fn(*mut Opaque, c_int);
    pcm_info_get_id = "snd_pcm_info_get_id": fn(*const Opaque) -> *const c_char;
    pcm_info_get_name = "snd_pcm_info_get_name": fn(*const Opaque) -> *const c_char;
    pcm_info_get_subdevices_count = "snd_pcm_info_get_subdevices_count": fn(*const Opaque) -> c_uint;
    pcm_info_get_subdevices_avail = "snd_pcm_info_get_subdevices_avail": fn(*const Opaque) -> c_uint;
    hw_get_channels_min = "snd_pcm_hw_params_get_channels_min": fn(*const Opaque, *mut c_uint) -> c_int;
    hw_get_channels_max = "snd_pcm_hw_params_get_channels_max": fn(*const Opaque, *mut c_uint) -> c_int;
    hw_get_rate_min = "snd_pcm_hw_params_get_rate_min": fn(*const Opaque, *mut c_uint, *mut c_int) -> c_int;
    hw_get_rate_max = "snd_pcm_hw_params_get_rate_max": fn(*const Opaque, *mut c_uint, *mut c_int) -> c_int;
    hw_test_channels = "snd_pcm_hw_params_test_channels": fn(*mut Opaque, *mut Opaque, c_uint) -> c_int;
    hw_test_rate = "snd_pcm_hw_params_test_rate": fn(*mut Opaque, *mut Opaque, c_uint, c_int) -> c_int;

    // Simple mixer (mixer.rs): hardware volume and mute of a card's elements.
    mixer_open = "snd_mixer_open": fn(*mut *mut Opaque, c_int) -> c_int;
    mixer_close = "snd_mixer_close": fn(*mut Opaque) -> c_int;
    mixer_attach = "snd_mixer_attach": fn(*mut Opaque, *const c_char) -> c_int;
    mixer_selem_register = "snd_mixer_selem_register": fn(*mut Opaque, *mut c_void, *mut *mut c_void) -> c_int;
    mixer_load = "snd_mixer_load": fn(*mut Opaque) -> c_int;
    mixer_first_elem = "snd_mixer_first_elem": fn(*mut Opaque) -> *mut Opaque;
    mixer_elem_next = "snd_mixer_elem_next": fn(*mut Opaque) -> *mut Opaque;
    mixer_handle_events = "snd_mixer_handle_events": fn(*mut Opaque) -> c_int;
    mixer_poll_descriptors_count = "snd_mixer_poll_descriptors_count": fn(*mut Opaque) -> c_int;
    mixer_poll_descriptors = "snd_mixer_poll_descriptors": fn(*mut Opaque, *mut libc::pollfd, c_uint) -> c_int;
    mixer_poll_descriptors_revents = "snd_mixer_poll_descriptors_revents": fn(*mut Opaque, *mut libc::pollfd, c_uint, *mut c_ushort) -> c_int;
    selem_get_name = "snd_mixer_selem_get_name": fn(*mut Opaque) -> *const c_char;
    selem_get_index = "snd_mixer_selem_get_index": fn(*mut Opaque) -> c_uint;
    selem_is_active = "snd_mixer_selem_is_active": fn(*mut Opaque) -> c_int;
    selem_has_playback_volume = "snd_mixer_selem_has_playback_volume": fn(*mut Opaque) -> c_int;
    selem_has_capture_volume = "snd_mixer_selem_has_capture_volume": fn(*mut Opaque) -> c_int;
    selem_has_playback_switch = "snd_mixer_selem_has_playback_switch": fn(*mut Opaque) -> c_int;
    selem_has_capture_switch = "snd_mixer_selem_has_capture_switch": fn(*mut Opaque) -> c_int;
    selem_has_playback_channel = "snd_mixer_selem_has_playback_channel": fn(*mut Opaque, c_int) -> c_int;
    selem_has_capture_channel = "snd_mixer_selem_has_capture_channel": fn(*mut Opaque, c_int) -> c_int;
    selem_get_playback_volume_range = "snd_mixer_selem_get_playback_volume_range": fn(*mut Opaque, *mut c_long, *mut c_long) -> c_int;
    selem_get_capture_volume_range = "snd_mixer_selem_get_capture_volume_range": fn(*mut Opaque, *mut c_long, *mut c_long) -> c_int;
    selem_get_playback_db_range = "snd_mixer_selem_get_playback_dB_range": fn(*mut Opaque, *mut c_long, *mut c_long) -> c_int;
    selem_get_capture_db_range = "snd_mixer_selem_get_capture_dB_range": fn(*mut Opaque, *mut c_long, *mut c_long) -> c_int;
    selem_get_playback_db = "snd_mixer_selem_get_playback_dB": fn(*mut Opaque, c_int, *mut c_long) -> c_int;
    selem_get_capture_db = "snd_mixer_selem_get_capture_dB": fn(*mut Opaque, c_int, *mut c_long) -> c_int;
    selem_set_playback_db_all = "snd_mixer_selem_set_playback_dB_all": fn(*mut Opaque, c_long, c_int) -> c_int;
    selem_set_capture_db_all = "snd_mixer_selem_set_capture_dB_all": fn(*mut Opaque, c_long, c_int) -> c_int;
    selem_get_playback_switch = "snd_mixer_selem_get_playback_switch": fn(*mut Opaque, c_int, *mut c_int) -> c_int;
    selem_get_capture_switch = "snd_mixer_selem_get_capture_switch": fn(*mut Opaque, c_int, *mut c_int) -> c_int;
    selem_set_playback_switch_all = "snd_mixer_selem_set_playback_switch_all": fn(*mut Opaque, c_int) -> c_int;
    selem_set_capture_switch_all = "snd_mixer_selem_set_capture_switch_all": fn(*mut Opaque, c_int) -> c_int;

    // Control interface (alsa/jack.rs): jack controls and their events.
    // (ctl_open and ctl_close are in the card discovery block above.)
    ctl_subscribe_events = "snd_ctl_subscribe_events": fn(*mut Opaque, c_int) -> c_int;
    ctl_poll_descriptors_count = "snd_ctl_poll_descriptors_count": fn(*mut Opaque) -> c_int;
    ctl_poll_descriptors = "snd_ctl_poll_descriptors": fn(*mut Opaque, *mut libc::pollfd, c_uint) -> c_int;
    ctl_poll_descriptors_revents = "snd_ctl_poll_descriptors_revents": fn(*mut Opaque, *mut libc::pollfd, c_uint, *mut c_ushort) -> c_int;
    ctl_read = "snd_ctl_read": fn(*mut Opaque, *mut Opaque) -> c_int;
    ctl_event_malloc = "snd_ctl_event_malloc": fn(*mut *mut Opaque) -> c_int;
    ctl_event_free = "snd_ctl_event_free": fn(*mut Opaque);
    ctl_event_get_type = "snd_ctl_event_get_type": fn(*const Opaque) -> c_int;
    ctl_event_elem_get_mask = "snd_ctl_event_elem_get_mask": fn(*const Opaque) -> c_uint;
    ctl_event_elem_get_id = "snd_ctl_event_elem_get_id": fn(*const Opaque, *mut Opaque);
    ctl_elem_id_malloc = "snd_ctl_elem_id_malloc": fn(*mut *mut Opaque) -> c_int;
    ctl_elem_id_free = "snd_ctl_elem_id_free": fn(*mut Opaque);
    ctl_elem_id_get_interface = "snd_ctl_elem_id_get_interface": fn(*const Opaque) -> c_int;
    ctl_elem_id_get_name = "snd_ctl_elem_id_get_name": fn(*const Opaque) -> *const c_char;
    ctl_elem_id_get_index = "snd_ctl_elem_id_get_index": fn(*const Opaque) -> c_uint;
    ctl_elem_value_malloc = "snd_ctl_elem_value_malloc": fn(*mut *mut Opaque) -> c_int;
    ctl_elem_value_free = "snd_ctl_elem_value_free": fn(*mut Opaque);
    ctl_elem_value_set_id = "snd_ctl_elem_value_set_id": fn(*mut Opaque, *const Opaque);
    ctl_elem_value_get_boolean = "snd_ctl_elem_value_get_boolean": fn(*const Opaque, c_uint) -> c_long;
    ctl_elem_read = "snd_ctl_elem_read": fn(*mut Opaque, *mut Opaque) -> c_int;
    ctl_elem_list_malloc = "snd_ctl_elem_list_malloc": fn(*mut *mut Opaque) -> c_int;
    ctl_elem_list_free = "snd_ctl_elem_list_free": fn(*mut Opaque);
    ctl_elem_list = "snd_ctl_elem_list": fn(*mut Opaque, *mut Opaque) -> c_int;
    ctl_elem_list_alloc_space = "snd_ctl_elem_list_alloc_space": fn(*mut Opaque, c_uint) -> c_int;
    ctl_elem_list_free_space = "snd_ctl_elem_list_free_space": fn(*mut Opaque);
    ctl_elem_list_get_count = "snd_ctl_elem_list_get_count": fn(*const Opaque) -> c_uint;
    ctl_elem_list_get_used = "snd_ctl_elem_list_get_used": fn(*const Opaque) -> c_uint;
    ctl_elem_list_get_id = "snd_ctl_elem_list_get_id": fn(*const Opaque, c_uint, *mut Opaque);
}

// SAFETY: the table holds plain function pointers into a library that is never unloaded.
unsafe impl Send for Lib {}
unsafe impl Sync for Lib {}

/// Opens `name` and resolves the table (not cached; [`lib`] caches the default).
pub(crate) fn load(name: &str) -> Result<Lib, String> {
    let handle = open_library(name)?;
    // SAFETY: `handle` is live and stays loaded for the life of the process (we never
    // call dlclose on success).
    match unsafe { Lib::resolve(handle) } {
        Ok(lib) => Ok(lib),
        Err(e) => {
            // SAFETY: nothing from this handle escapes.
            unsafe { libc::dlclose(handle) };
            Err(e)
        }
    }
}

/// The library name in use: [`LIBRARY`] or `$QUAVER_ALSA_LIBRARY`.
pub(crate) fn library_name() -> String {
    std::env::var(LIBRARY_ENV).unwrap_or_else(|_| LIBRARY.to_string())
}

/// `dlopen`s `name` (a second open of the same library shares the first's handle).
pub(crate) fn open_library(name: &str) -> Result<*mut c_void, String> {
    let cname = CString::new(name).map_err(|_| format!("bad library name '{name}'"))?;
    // SAFETY: NUL-terminated name. RTLD_LOCAL keeps alsa-lib's symbols out of the global
    // namespace; alsa-lib's own plugins (libasound_module_*.so) link against it directly.
    let handle = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a thread-local C string or null.
        let why = unsafe { cstr_lossy(libc::dlerror()) }.unwrap_or_default();
        return Err(format!("{name} not found ({why})"));
    }
    Ok(handle)
}

/// alsa-lib, loaded once per process from [`LIBRARY`] (or `$QUAVER_ALSA_LIBRARY`). The
/// error says why it is unavailable.
pub(crate) fn lib() -> Result<&'static Lib, &'static str> {
    static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();
    LIB.get_or_init(|| load(&library_name()))
        .as_ref()
        .map_err(|e| e.as_str())
}

/// Copies a C string (possibly null) into an owned `String`.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string.
pub(crate) unsafe fn cstr_lossy(p: *const c_char) -> Option<String> {
    if p.is_null() {
        None
    } else {
        // SAFETY: per the contract.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

impl Lib {
    /// alsa-lib's text for a negative error code (`snd_strerror`).
    pub(crate) fn error_text(&self, err: c_int) -> String {
        // SAFETY: snd_strerror returns a static string for any value.
        unsafe { cstr_lossy((self.strerror)(err)) }.unwrap_or_else(|| format!("error {err}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_reported_by_name() {
        let err = load("libasound-does-not-exist.so.2").err().unwrap();
        assert!(
            err.starts_with("libasound-does-not-exist.so.2 not found"),
            "{err}"
        );
    }

    #[test]
    fn a_library_without_the_symbols_is_refused() {
        // libc loads fine but has no snd_pcm_open.
        let err = load("libc.so.6").err().unwrap();
        assert!(err.contains("has no snd_pcm_open"), "{err}");
    }

    #[test]
    fn the_installed_alsa_lib_resolves_and_translates_errors() {
        let Ok(lib) = lib() else {
            eprintln!("libasound.so.2 is not installed here; skipping");
            return;
        };
        assert_eq!(lib.error_text(-libc::EPIPE), "Broken pipe");
        assert_eq!(lib.error_text(-libc::ESTRPIPE), "Streams pipe error");
    }
}
