//! Why a filter refuses something, the limits it checks, and small shared helpers.

/// Why a filter could not be built or a parameter was refused.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum FilterError {
    /// A corner or centre frequency outside (0, rate/2).
    #[error("frequency {freq} Hz is outside (0, {nyquist}) Hz, the range at sample rate {rate} Hz")]
    Frequency {
        /// The frequency asked for.
        freq: f64,
        /// Half the sample rate.
        nyquist: f64,
        /// The sample rate.
        rate: f64,
    },
    /// A quality factor that is not a finite number above zero.
    #[error("Q {0} is not a finite number above 0")]
    Q(f64),
    /// A gain that is not finite or is beyond what a filter should be asked for.
    #[error("gain {0} dB is not a finite number within ±{max} dB", max = MAX_GAIN_DB)]
    Gain(f64),
    /// A sample rate that is not a finite number above zero.
    #[error("sample rate {0} is not a finite number above 0")]
    Rate(f64),
    /// A delay longer than the line built for it.
    #[error("delay of {frames} frames is longer than the {max} frames this delay line holds")]
    Delay {
        /// The delay asked for.
        frames: usize,
        /// The longest delay the line was built for.
        max: usize,
    },
    /// An impulse response with no samples, or with NaN or infinity in it.
    #[error("impulse response for channel {channel} {what}")]
    Impulse {
        /// Which channel's response.
        channel: usize,
        /// What is wrong with it.
        what: &'static str,
    },
    /// A partition size the convolver cannot use.
    #[error("convolver partition of {0} frames: must be a power of two from 16 to 65536")]
    Partition(usize),
    /// The number of impulse responses does not fit the channel count.
    #[error("{irs} impulse responses for {channels} channels: give one for all or one per channel")]
    ImpulseCount {
        /// Responses given.
        irs: usize,
        /// Channels of the convolver.
        channels: usize,
    },
    /// A control name the filter does not have. The name is not kept, so the error
    /// never allocates (it may be made and dropped on the RT thread); callers add it.
    #[error("no such control: this filter has {known}")]
    UnknownControl {
        /// The filter's controls, for the message.
        known: &'static str,
    },
    /// A control value that is not a finite number in range.
    #[error("control {name} = {value}: {why}")]
    ControlValue {
        /// The control.
        name: &'static str,
        /// The value refused.
        value: f64,
        /// The range it must be in.
        why: &'static str,
    },
    /// A filter index past the end of the chain.
    #[error("no filter {index}: the chain has {len}")]
    NoFilter {
        /// The index asked for.
        index: usize,
        /// Filters in the chain.
        len: usize,
    },
    /// A limiter setting out of range.
    #[error("limiter {what}")]
    Limiter {
        /// What is wrong.
        what: &'static str,
    },
    /// A channel mixer's matrix or preset that cannot be used.
    #[error("channel mixer: {what}")]
    Mixer {
        /// What is wrong.
        what: &'static str,
    },
    /// A crossover setting that cannot be used.
    #[error("crossover: {what}")]
    Crossover {
        /// What is wrong.
        what: &'static str,
    },
    /// A filter that takes a fixed number of channels placed where another number
    /// flows.
    #[error(
        "filter {index} (from 0) takes {takes} channels, but {gets} reach it \
         (the chain starts with the sink's channels; a channel mixer or crossover changes the count)"
    )]
    ChannelsIn {
        /// The filter's place in the chain.
        index: usize,
        /// Channels it takes.
        takes: usize,
        /// Channels flowing at that point.
        gets: usize,
    },
    /// A chain that does not end with the channels it started with.
    #[error(
        "the chain ends with {ends} channels but runs on {channels} \
         (end it with a channel mixer back to {channels})"
    )]
    ChannelsOut {
        /// Channels after the last filter.
        ends: usize,
        /// Channels the chain runs on (the sink's).
        channels: usize,
    },
}

/// The largest boost or cut a gain or biquad accepts, in dB: beyond it a setting is
/// almost certainly a typo, and +120 dB would turn the noise floor into full scale.
pub const MAX_GAIN_DB: f64 = 120.0;

/// Frames a biquad's coefficient change or a delay change crossfades over by default:
/// 1024 frames (21 ms at 48 kHz) lets a low shelf's transient die down under the fade.
pub const DEFAULT_FADE_FRAMES: usize = 1024;

/// The error for a control name a filter lacks.
pub(crate) fn unknown_control(_name: &str, known: &'static str) -> FilterError {
    FilterError::UnknownControl { known }
}

/// Sets values too small to matter to zero, so a decaying state never reaches the
/// subnormal range, where x86 arithmetic runs up to a hundred times slower.
#[inline]
pub(crate) fn flush_tiny(x: f64) -> f64 {
    if x.abs() < 1e-30 { 0.0 } else { x }
}

pub(crate) fn check_rate(rate: f64) -> Result<(), FilterError> {
    if rate.is_finite() && rate > 0.0 {
        Ok(())
    } else {
        Err(FilterError::Rate(rate))
    }
}

pub(crate) fn check_gain_db(db: f64) -> Result<(), FilterError> {
    if db.is_finite() && db.abs() <= MAX_GAIN_DB {
        Ok(())
    } else {
        Err(FilterError::Gain(db))
    }
}
