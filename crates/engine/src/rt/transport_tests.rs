use super::*;
use std::sync::Arc;

const Q: u32 = 256;
const RATE: u32 = 48000;

fn engine() -> (TransportEngine, Arc<TransportShared>) {
    let sh = Arc::new(TransportShared::default());
    (TransportEngine::new(sh.clone()), sh)
}

/// One cycle; returns what the clients of that cycle see.
fn cycle(e: &mut TransportEngine) -> TransportSnapshot {
    e.cycle(Q, RATE, 0);
    e.shared().snapshot()
}

fn at(frame: u32) -> Position {
    Position {
        frame,
        ..Position::default()
    }
}

#[test]
fn start_without_slow_sync_clients_rolls_after_one_starting_cycle() {
    let (mut e, sh) = engine();
    assert_eq!(cycle(&mut e).state, TransportState::Stopped);
    sh.start();
    let s = cycle(&mut e);
    assert_eq!((s.state, s.current.frame), (TransportState::Starting, 0));
    let s = cycle(&mut e);
    assert_eq!((s.state, s.current.frame), (TransportState::Rolling, 0));
    assert_eq!(
        s.next.frame, Q,
        "the master computes BBT for the next cycle"
    );
    let s = cycle(&mut e);
    assert_eq!((s.state, s.current.frame), (TransportState::Rolling, Q));
    sh.stop();
    let s = cycle(&mut e);
    assert_eq!((s.state, s.current.frame), (TransportState::Stopped, 2 * Q));
    let s = cycle(&mut e);
    assert_eq!(s.current.frame, 2 * Q, "stopped: the frame stands still");
}

#[test]
fn a_slow_sync_client_holds_starting_until_ready() {
    let (mut e, sh) = engine();
    sh.start();
    let first = cycle(&mut e);
    assert_eq!(first.state, TransportState::Starting);
    for _ in 0..10 {
        sh.report_unready();
        let s = cycle(&mut e);
        assert_eq!((s.state, s.current.frame), (TransportState::Starting, 0));
        assert_eq!(s.sync_epoch, first.sync_epoch, "one start, one epoch");
    }
    // Ready (no report) in this cycle: rolling from the next.
    assert_eq!(cycle(&mut e).state, TransportState::Rolling);
}

#[test]
fn the_sync_timeout_starts_without_the_slow_client() {
    let (mut e, sh) = engine();
    // 256 frames at 48 kHz is 5333 µs: 100 ms is 18 cycles.
    sh.set_sync_timeout(100_000);
    sh.start();
    cycle(&mut e);
    let mut starting = 1;
    loop {
        sh.report_unready();
        if cycle(&mut e).state == TransportState::Rolling {
            break;
        }
        starting += 1;
        assert!(starting < 100, "never timed out");
    }
    assert_eq!(starting, 18);
}

#[test]
fn locate_while_rolling_goes_through_starting_to_the_new_frame() {
    let (mut e, sh) = engine();
    sh.start();
    cycle(&mut e);
    cycle(&mut e);
    cycle(&mut e);
    assert_eq!(cycle(&mut e).current.frame, 2 * Q);
    sh.request(&at(96_000)).unwrap();
    // The request is taken at this cycle start and seen from the next.
    let s = cycle(&mut e);
    assert_eq!((s.state, s.current.frame), (TransportState::Rolling, 3 * Q));
    assert_eq!(s.next.frame, 96_000);
    let s = cycle(&mut e);
    assert_eq!(
        (s.state, s.current.frame),
        (TransportState::Starting, 96_000)
    );
    sh.report_unready();
    let s = cycle(&mut e);
    assert_eq!(
        (s.state, s.current.frame),
        (TransportState::Starting, 96_000)
    );
    let s = cycle(&mut e);
    assert_eq!(
        (s.state, s.current.frame),
        (TransportState::Rolling, 96_000)
    );
    assert_eq!(cycle(&mut e).current.frame, 96_000 + Q);
}

#[test]
fn locate_while_stopped_moves_without_starting() {
    let (mut e, sh) = engine();
    cycle(&mut e);
    let tb = cycle(&mut e).timebase_epoch;
    sh.request(&at(1000)).unwrap();
    cycle(&mut e);
    let s = cycle(&mut e);
    assert_eq!((s.state, s.current.frame), (TransportState::Stopped, 1000));
    assert_ne!(s.timebase_epoch, tb, "the master hears of the new position");
}

#[test]
fn a_stop_while_starting_stops() {
    let (mut e, sh) = engine();
    sh.start();
    cycle(&mut e);
    sh.stop();
    sh.report_unready();
    assert_eq!(cycle(&mut e).state, TransportState::Stopped);
    // The same command twice is one command (jackd2 compares with the previous one).
    sh.stop();
    assert_eq!(cycle(&mut e).state, TransportState::Stopped);
}

#[test]
fn bad_position_bits_are_refused() {
    let (mut e, sh) = engine();
    let mut p = at(5);
    p.valid = 0x1;
    assert_eq!(sh.request(&p), Err(libc::EINVAL));
    assert!(!sh.request_rt(&p));
    assert_eq!(sh.refused(), 2);
    cycle(&mut e);
    assert_eq!(cycle(&mut e).current.frame, 0);
}

#[test]
fn the_masters_bbt_reaches_everyone_in_the_next_cycle_and_goes_with_it() {
    let (mut e, sh) = engine();
    let (a, b) = (sh.new_token(), sh.new_token());
    assert_eq!(sh.set_master(a, true), Ok(()));
    assert_eq!(sh.set_master(b, true), Err(TimebaseError::Busy));
    assert_eq!(TimebaseError::Busy.errno(), libc::EBUSY);
    assert_eq!(sh.set_master(a, true), Ok(()), "already the master");
    assert_eq!(sh.release_master(b), Err(TimebaseError::NotMaster));
    sh.start();
    let s = cycle(&mut e);
    assert_eq!(s.master, a);
    let tb = s.timebase_epoch;
    let mut bbt = s.next;
    bbt.frame = 123_456; // ignored: the frame is the server's
    bbt.valid = 0x10;
    bbt.extra[0] = 3; // bar
    assert!(sh.report_master(a, &bbt));
    assert!(!sh.report_master(b, &bbt), "only the master writes BBT");
    let s = cycle(&mut e);
    assert_eq!(
        (s.current.frame, s.current.valid, s.current.extra[0]),
        (0, 0x10, 3)
    );
    assert_eq!(s.timebase_epoch, tb);
    let rolling = cycle(&mut e);
    assert_eq!(rolling.state, TransportState::Rolling);
    // Lost (released or closed): as in jackd2 a relocation without BBT to where the
    // transport is, through starting once.
    sh.release_master(a).unwrap();
    let s = cycle(&mut e);
    assert_eq!((s.master, s.current.valid), (0, 0));
    assert_eq!(s.next.valid, 0);
    assert_eq!(s.next.frame, s.current.frame);
    let s = cycle(&mut e);
    assert_eq!((s.state, s.current.valid), (TransportState::Starting, 0));
    assert_eq!(cycle(&mut e).state, TransportState::Rolling);
    // A non-conditional request takes over from anyone.
    sh.set_master(a, false).unwrap();
    sh.set_master(b, false).unwrap();
    assert_eq!(sh.master(), b);
    assert_ne!(cycle(&mut e).timebase_epoch, tb);
}
