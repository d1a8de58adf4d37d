//! Loom model of the driver's completion path: a handler finishing races the driver cancelling
//! it (max processing time). Every interleaving is explored, with the real engine deciding.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p leasehold-worker --test loom --release`
#![cfg(loom)]

use std::time::{Duration, Instant};

use leasehold_core::{Config, Effect, Fence, Fetched, Invocation, LeaseEngine, Outcome, StreamId};
use leasehold_worker::{CancelReason, Cancellation};
use loom::sync::{Arc, Mutex};
use loom::thread;

#[test]
fn outcome_racing_cancel_is_never_acked_when_cancel_wins() {
    loom::model(|| {
        let t0 = Instant::now();
        let config = Config::default().max_processing_time(Duration::from_secs(10));
        let mut engine = LeaseEngine::<()>::new(&config, t0).unwrap();
        assert!(matches!(engine.poll_effect(), Some(Effect::Fetch { .. })));
        let delivery = Fetched::new("1-0".into(), (), 1, Fence(1));
        engine.handle_fetched(t0, StreamId(0), vec![delivery]);
        let Some(Effect::Run(Invocation { id: invocation, .. })) = engine.poll_effect() else {
            panic!("the delivery runs")
        };
        while engine.poll_effect().is_some() {}

        // The handler task: finishes with Done, unless a cancel beat it (then its result is void).
        let cancellation = Cancellation::new();
        let outbox = Arc::new(Mutex::new(None));
        let handler = {
            let (cancellation, outbox) = (cancellation.clone(), outbox.clone());
            thread::spawn(move || {
                let won = cancellation.finish();
                let outcome = if won {
                    Outcome::Done
                } else {
                    Outcome::Failed {
                        error: "cancelled".into(),
                    }
                };
                *outbox.lock().unwrap() = Some(outcome);
                won
            })
        };

        // The driver: an outcome that already arrived is handled before the deadline; then the
        // deadline passes and the engine's Cancel is executed; a later outcome is handled last.
        let mut effects = Vec::new();
        let mut handled_before_deadline = false;
        if let Some(outcome) = outbox.lock().unwrap().take() {
            engine.handle_outcome(t0 + Duration::from_secs(1), invocation, outcome);
            handled_before_deadline = true;
        }
        effects.extend(std::iter::from_fn(|| engine.poll_effect()));
        engine.handle_timeout(t0 + Duration::from_secs(10));
        let mut cancel_won = false;
        while let Some(effect) = engine.poll_effect() {
            if let Effect::Cancel { reason, .. } = &effect {
                assert_eq!(*reason, CancelReason::MaxProcessingTime);
                cancel_won = cancellation.cancel(*reason);
            }
            effects.push(effect);
        }
        let finish_won = handler.join().unwrap();
        if let Some(outcome) = outbox.lock().unwrap().take() {
            engine.handle_outcome(t0 + Duration::from_secs(11), invocation, outcome);
        }
        effects.extend(std::iter::from_fn(|| engine.poll_effect()));

        let acked = effects.iter().any(|e| matches!(e, Effect::Ack { .. }));
        let released = effects.iter().any(|e| matches!(e, Effect::Release { .. }));
        let cancelled = effects.iter().any(|e| matches!(e, Effect::Cancel { .. }));
        // Exactly one of finish and cancel wins; a cancel is only tried if the engine sent one.
        assert!(!(finish_won && cancel_won), "both won");
        assert!(finish_won || cancel_won, "neither won");
        assert_eq!(cancelled, !handled_before_deadline);
        // A cancelled result is never acked; the message is settled exactly once.
        assert_eq!(
            acked, handled_before_deadline,
            "ack iff Done reached the engine first"
        );
        assert!(!(cancel_won && acked), "a cancelled invocation was acked");
        assert!(
            acked ^ released,
            "settled exactly once: ack {acked}, release {released}"
        );
    });
}
