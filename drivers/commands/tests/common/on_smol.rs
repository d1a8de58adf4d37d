//! A scenario on smol, for every store: the same worker on another runtime.

use std::time::{Duration, Instant};

use leasehold_commands::{Command, CommandQueue, CommandStore, Status};
use leasehold_core::Config;
use leasehold_smol::SmolRuntime;

use super::{Calls, Polled, Stubborn, CLAIM, PATIENCE, STATUS};

async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "timed out waiting for: {what}");
        smol::Timer::after(Duration::from_millis(10)).await;
    }
}

pub async fn polled_commands_and_a_cancel<S: CommandStore>(store: S) {
    let queue =
        CommandQueue::new(SmolRuntime::global(), store).with_wait_poll(Duration::from_millis(10));
    let calls = Calls::default();
    let stubborn = Stubborn {
        calls: calls.clone(),
        ..Stubborn::new(false)
    };
    let worker = queue
        .worker()
        .config(
            Config::default()
                .concurrency(8)
                .claim_timeout(CLAIM)
                .poll_interval(Duration::from_millis(20)),
        )
        .status_interval(STATUS)
        .handler("polled", Polled(calls.clone()))
        .handler("stubborn", stubborn)
        .start()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..20 {
        let submitted = queue
            .submit(Command::new("polled", 3u32).unwrap())
            .await
            .unwrap();
        ids.push(submitted.state.id);
    }
    for id in &ids {
        let state = queue.wait(id, PATIENCE).await.unwrap();
        assert_eq!(state.status, Status::Succeeded);
        assert_eq!((calls.get(id, "execute"), calls.get(id, "check")), (1, 3));
    }
    queue
        .submit(Command::new("stubborn", ()).unwrap().with_id("victim"))
        .await
        .unwrap();
    eventually("execute running", || calls.get("victim", "execute") == 1).await;
    assert!(queue.cancel("victim").await.unwrap());
    eventually("the late result dropped", || {
        worker.stats().dropped_after_cancel == 1
    })
    .await;
    let state = queue.state("victim").await.unwrap().unwrap();
    assert_eq!((state.status, state.result), (Status::Cancelled, None));
    let report = worker.shutdown(Duration::from_secs(2)).await;
    assert_eq!(report.acked, 21, "every command's lease acked");
}
