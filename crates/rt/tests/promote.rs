//! Promotes real threads. Works with or without privileges: what the kernel reports
//! afterwards must match the outcome, whichever it is.

use std::sync::mpsc;
use std::time::Duration;

use quaver_rt::sched::current_policy;
use quaver_rt::{Request, RtOutcome, Scheduler, promote, spawn};

fn parked() -> (
    std::thread::JoinHandle<()>,
    quaver_rt::Tid,
    mpsc::Sender<()>,
) {
    let (tx, rx) = mpsc::channel::<()>();
    let (h, tid, _) = spawn("rt-test".into(), true, move || {
        let _ = rx.recv_timeout(Duration::from_secs(30));
    })
    .expect("spawn");
    (h, tid, tx)
}

#[test]
fn fifo_outcome_matches_the_kernel() {
    let (h, tid, stop) = parked();
    let mut req = Request::fifo(10);
    req.rtkit = false; // no system bus in the test environment
    let p = promote(tid, &req);
    let policy = current_policy(tid).unwrap();
    match p.outcome {
        RtOutcome::Fifo { priority, .. } => {
            assert_eq!(priority, 10);
            assert_eq!(policy, "SCHED_FIFO");
        }
        RtOutcome::Refused(why) | RtOutcome::Nice { refused: why, .. } => {
            assert!(why.contains("SCHED_FIFO"), "{why}");
            assert_eq!(policy, "SCHED_OTHER");
        }
        other => panic!("unexpected {other:?}"),
    }
    stop.send(()).unwrap();
    h.join().unwrap();
}

#[test]
fn deadline_or_a_reasoned_fallback() {
    let (h, tid, stop) = parked();
    let req = Request {
        scheduler: Scheduler::Deadline,
        priority: 10,
        period: Some(Duration::from_micros(5333)),
        rtkit: false,
    };
    let p = promote(tid, &req);
    let policy = current_policy(tid).unwrap();
    eprintln!("{p:?} -> {policy}");
    match &p.outcome {
        RtOutcome::Deadline(d) => {
            assert_eq!(policy, "SCHED_DEADLINE");
            assert_eq!(d.period_ns, 5_333_000);
            assert!(d.runtime_ns <= d.deadline_ns && d.deadline_ns <= d.period_ns);
            // A new period (the quantum changed) is accepted on the running thread.
            let q = quaver_rt::DeadlineParams::for_period(Duration::from_micros(1333));
            quaver_rt::set_deadline(tid, q).unwrap();
        }
        RtOutcome::Fifo { .. } => {
            assert_eq!(policy, "SCHED_FIFO");
            assert!(p.refusals[0].starts_with("SCHED_DEADLINE"));
        }
        RtOutcome::Refused(_) | RtOutcome::Nice { .. } => assert_eq!(policy, "SCHED_OTHER"),
        RtOutcome::Disabled => panic!("not disabled"),
    }
    stop.send(()).unwrap();
    h.join().unwrap();
}

#[test]
fn priority_zero_disables() {
    let p = promote(quaver_rt::Tid::current(), &Request::fifo(0));
    assert_eq!(p.outcome, RtOutcome::Disabled);
}
