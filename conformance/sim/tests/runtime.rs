//! The simulated runtime: timers, pause, kill, stall, spawning, determinism, the busy-loop
//! guard, and the real worker draining a memory stream on it.

use std::collections::BTreeSet;
use std::future::{poll_fn, Future};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use leasehold_memory::{Clock, MemoryStream, StreamConfig};
use leasehold_sim::rng::Rng;
use leasehold_sim::runtime::{NodeId, SimRuntime, Step, Traced, World, WorldConfig};
use leasehold_worker::{Config, Delivery, Outcome, Runtime, WorkerBuilder};

const MS: Duration = Duration::from_millis(1);
const LATE_MAX: Duration = Duration::from_millis(2);

/// A shared, appendable record.
#[derive(Clone)]
struct Log<T>(Arc<Mutex<Vec<T>>>);

impl<T> Default for Log<T> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<T: Clone> Log<T> {
    fn push(&self, item: T) {
        self.0.lock().unwrap().push(item);
    }

    fn get(&self) -> Vec<T> {
        self.0.lock().unwrap().clone()
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

fn world<E>(seed: u64) -> World<E> {
    World::new(Instant::now(), Rng::new(seed))
}

async fn sleep(rt: &SimRuntime, duration: Duration) {
    rt.sleep_until(rt.now() + duration).await;
}

/// Completes on its second poll, having woken itself on the first.
async fn yield_now() {
    let mut yielded = false;
    poll_fn(|cx| {
        if std::mem::replace(&mut yielded, true) {
            Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await;
}

/// A wake-up one task sends another (possibly on another node).
#[derive(Clone, Default)]
struct Signal(Arc<Mutex<(u64, Option<Waker>)>>);

impl Signal {
    fn notify(&self) {
        let waker = {
            let mut inner = self.0.lock().unwrap();
            inner.0 += 1;
            inner.1.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Completes once the signal was sent more than `seen` times; the new count.
    fn wait(&self, seen: u64) -> impl Future<Output = u64> + '_ {
        poll_fn(move |cx| {
            let mut inner = self.0.lock().unwrap();
            if inner.0 > seen {
                Poll::Ready(inner.0)
            } else {
                inner.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        })
    }
}

/// Steps until the mark scheduled at `at` comes back; `Advanced` instants are returned.
fn run_until(world: &mut World<&'static str>, at: Instant) -> Vec<Instant> {
    world.schedule(at, "mark");
    let mut advanced = Vec::new();
    for _ in 0..1_000_000 {
        match world.step().expect("no busy loop") {
            Step::Event("mark") => return advanced,
            Step::Event(other) => panic!("unexpected event {other}"),
            Step::Advanced(to) => advanced.push(to),
            Step::Idle => panic!("idle before the mark"),
        }
    }
    panic!("the mark never came");
}

/// Steps until nothing can move; the instants the clock moved to.
fn run_idle<E: std::fmt::Debug>(world: &mut World<E>) -> Vec<Instant> {
    let mut advanced = Vec::new();
    for _ in 0..1_000_000 {
        match world.step().expect("no busy loop") {
            Step::Advanced(to) => advanced.push(to),
            Step::Idle => return advanced,
            Step::Event(event) => panic!("unexpected event {event:?}"),
        }
    }
    panic!("never idle");
}

/// Ticks every 10 ms forever, logging its node's time at each tick.
async fn ticker(rt: SimRuntime, ticks: Log<Instant>) {
    loop {
        sleep(&rt, 10 * MS).await;
        ticks.push(rt.now());
    }
}

#[test]
fn timers_fire_in_deadline_order_at_their_instants_and_never_early() {
    let mut lateness = BTreeSet::new();
    for seed in 0..40 {
        let mut world = world::<()>(seed);
        let node = world.new_node();
        let base = world.now();
        let woke: Log<(u32, Instant)> = Log::default();
        // Registered out of deadline order; 0 is a deadline already reached.
        for ms in [30, 10, 0, 20] {
            let (rt, woke) = (world.runtime(node), woke.clone());
            let _ = world.spawn(node, async move {
                rt.sleep_until(base + ms * MS).await;
                woke.push((ms, rt.now()));
            });
        }
        let mut advanced = Vec::new();
        while let Step::Advanced(to) = world.step().unwrap() {
            // A step returns a quiet world: the task its timer woke has run.
            assert_eq!(woke.get().last().map(|w| w.1), Some(to), "seed {seed}");
            advanced.push(to);
        }
        let woke = woke.get();
        let order: Vec<u32> = woke.iter().map(|&(ms, _)| ms).collect();
        assert_eq!(order, [0, 10, 20, 30], "seed {seed}: deadline order");
        assert_eq!(
            woke[0].1, base,
            "a passed deadline completes without the clock moving"
        );
        for &(ms, at) in &woke[1..] {
            let deadline = base + ms * MS;
            assert!(at >= deadline, "seed {seed}: timer {ms} ms fired early");
            assert!(
                at <= deadline + LATE_MAX,
                "seed {seed}: timer {ms} ms too late"
            );
            lateness.insert(at - deadline);
        }
        // The clock only ever moved to a timer's instant, and forward.
        assert_eq!(advanced.len(), 3, "seed {seed}: one move per timer");
        assert!(advanced.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(advanced, woke[1..].iter().map(|w| w.1).collect::<Vec<_>>());
        assert_eq!(world.tasks(node), 0);
    }
    assert!(
        lateness.len() > 10,
        "lateness is drawn per timer: {lateness:?}"
    );
}

#[test]
fn a_paused_node_makes_no_progress_and_catches_up_at_resume() {
    let mut world = world(3);
    let (a, b) = (world.new_node(), world.new_node());
    let base = world.now();
    let (ticks_a, ticks_b) = (Log::default(), Log::default());
    let _ = world.spawn(a, ticker(world.runtime(a), ticks_a.clone()));
    let _ = world.spawn(b, ticker(world.runtime(b), ticks_b.clone()));
    // A task of `a` woken by one of `b` while `a` is paused.
    let signal = Signal::default();
    let woken: Log<Instant> = Log::default();
    let (rt_a, rt_b) = (world.runtime(a), world.runtime(b));
    let (s, w) = (signal.clone(), woken.clone());
    let _ = world.spawn(a, async move {
        s.wait(0).await;
        w.push(rt_a.now());
    });
    let s = signal.clone();
    let _ = world.spawn(b, async move {
        sleep(&rt_b, 25 * MS).await;
        s.notify();
    });

    run_until(&mut world, base + 15 * MS);
    assert_eq!(ticks_a.len(), 1);
    world.pause(a);
    assert!(world.is_paused(a));
    let polls = world.node_polls(a);
    run_until(&mut world, base + 100 * MS);
    assert_eq!(
        world.node_polls(a),
        polls,
        "a paused node's tasks are not polled"
    );
    assert_eq!(ticks_a.len(), 1, "its due timer did not fire");
    assert!(woken.get().is_empty(), "its woken task did not run");
    assert!(ticks_b.len() >= 8, "other nodes run on: {}", ticks_b.len());

    let resumed = world.now();
    world.resume(a);
    run_until(&mut world, resumed);
    // Both take effect at resume, at the resume instant, once each.
    assert_eq!(
        ticks_a.get()[1..],
        [resumed],
        "the due timer fired at resume"
    );
    assert_eq!(woken.get(), [resumed], "the remembered wake ran at resume");
    run_until(&mut world, resumed + 25 * MS);
    let after: Vec<Instant> = ticks_a.get()[2..].to_vec();
    assert_eq!(
        after.len(),
        2,
        "it ticks on its own cadence from the resume"
    );
    assert!(after[0] >= resumed + 10 * MS && after[0] <= resumed + 10 * MS + LATE_MAX);
}

/// Logs its name when dropped, then runs `then`.
struct Guard {
    name: &'static str,
    log: Log<&'static str>,
    then: Option<Box<dyn FnOnce() + Send>>,
}

impl Guard {
    fn new(name: &'static str, log: &Log<&'static str>) -> Self {
        Self {
            name,
            log: log.clone(),
            then: None,
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.log.push(self.name);
        if let Some(then) = self.then.take() {
            then();
        }
    }
}

#[test]
fn kill_drops_the_nodes_tasks_in_spawn_order_and_nothing_of_it_runs_after() {
    let mut world = World::with_config(
        Instant::now(),
        Rng::new(5),
        WorldConfig {
            trace_len: 10_000,
            ..WorldConfig::default()
        },
    );
    let (a, b) = (world.new_node(), world.new_node());
    let base = world.now();
    let dropped = Log::default();
    let (rt_a, rt_b) = (world.runtime(a), world.runtime(b));

    let (rt, guard) = (rt_a.clone(), Guard::new("sleeper", &dropped));
    rt_a.spawn(Box::pin(async move {
        let _guard = guard;
        sleep(&rt, Duration::from_secs(3600)).await;
    }));
    let ticks_a = Log::default();
    let (tick, guard) = (
        ticker(rt_a.clone(), ticks_a.clone()),
        Guard::new("ticker", &dropped),
    );
    rt_a.spawn(Box::pin(async move {
        let _guard = guard;
        tick.await;
    }));
    // Its drop spawns on the dying node: refused, and that future is dropped at once.
    let mut guard = Guard::new("respawner", &dropped);
    let (rt, log) = (rt_a.clone(), dropped.clone());
    guard.then = Some(Box::new(move || {
        let late = Guard::new("spawned during kill", &log);
        rt.spawn(Box::pin(async move {
            let _late = late;
            panic!("a dead node's task ran");
        }));
    }));
    rt_a.spawn(Box::pin(async move {
        let _guard = guard;
        std::future::pending::<()>().await;
    }));
    let ticks_b = Log::default();
    rt_b.spawn(Box::pin(ticker(rt_b.clone(), ticks_b.clone())));

    run_until(&mut world, base + 35 * MS);
    assert_eq!(ticks_a.len(), 3);
    assert_eq!(world.tasks(a), 3);
    world.kill(a);
    assert_eq!(
        dropped.get(),
        ["sleeper", "ticker", "respawner", "spawned during kill"],
        "every task dropped, in spawn order"
    );
    assert!(!world.is_alive(a));
    assert_eq!(world.tasks(a), 0);

    let later = Guard::new("spawned after kill", &dropped);
    rt_a.spawn(Box::pin(async move {
        let _later = later;
        panic!("a dead node's task ran");
    }));
    assert_eq!(
        dropped.len(),
        5,
        "a spawn on a dead node drops the future at once"
    );
    let polls = world.node_polls(a);
    let b_before = ticks_b.len();
    run_until(&mut world, base + 200 * MS);
    assert_eq!(
        world.node_polls(a),
        polls,
        "nothing of the dead node is polled"
    );
    assert_eq!(ticks_a.len(), 3);
    assert!(ticks_b.len() > b_before + 10, "the other node runs on");
    let trace = world.trace();
    let of_a = |what: &Traced| {
        trace
            .iter()
            .filter(|e| e.node == a && e.what == *what)
            .count()
    };
    assert_eq!(of_a(&Traced::Kill { tasks: 3 }), 1);
    assert_eq!(of_a(&Traced::SpawnRefused), 2);
    let killed_at = trace
        .iter()
        .position(|e| matches!(e.what, Traced::Kill { .. }));
    assert!(
        trace[killed_at.unwrap()..]
            .iter()
            .all(|e| e.node != a || !matches!(e.what, Traced::Poll { .. })),
        "no poll of the dead node is traced after its kill"
    );
}

#[test]
fn a_stalled_clock_freezes_then_jumps_and_its_timers_fire_only_after() {
    let mut world = world(11);
    let (a, b) = (world.new_node(), world.new_node());
    let base = world.now();
    let store_clock = world.clock();
    world.stall_clock(a, 50 * MS);
    assert!(world.is_stalled(a));
    let (rt_a, rt_b) = (world.runtime(a), world.runtime(b));

    let fired: Log<(Instant, Instant)> = Log::default();
    let (rt, f, clock) = (rt_a.clone(), fired.clone(), store_clock.clone());
    let _ = world.spawn(a, async move {
        rt.sleep_until(rt.now() + 10 * MS).await;
        f.push((rt.now(), clock.now()));
    });
    // A deadline the frozen clock has reached completes at once, even while stalled.
    let passed = Log::default();
    let (rt, p) = (rt_a.clone(), passed.clone());
    let _ = world.spawn(a, async move {
        rt.sleep_until(rt.now()).await;
        p.push(rt.now());
    });
    // `a`'s tasks still run while stalled: one woken every 5 ms by `b` reads a's clock.
    let signal = Signal::default();
    let seen: Log<Instant> = Log::default();
    let (rt, s, log) = (rt_a.clone(), signal.clone(), seen.clone());
    let _ = world.spawn(a, async move {
        let mut count = 0;
        loop {
            count = s.wait(count).await;
            log.push(rt.now());
        }
    });
    let s = signal.clone();
    let _ = world.spawn(b, async move {
        for _ in 0..20 {
            sleep(&rt_b, 5 * MS).await;
            s.notify();
        }
    });

    run_until(&mut world, base + 40 * MS);
    assert_eq!(passed.get(), [base]);
    assert!(
        fired.get().is_empty(),
        "a stalled node's timer does not fire"
    );
    assert_eq!(world.node_now(a), base, "its clock is frozen");
    assert!(seen.len() >= 6, "its tasks still run: {}", seen.len());
    assert!(
        seen.get().iter().all(|&t| t == base),
        "and read the frozen clock"
    );
    assert_eq!(
        store_clock.now(),
        world.now(),
        "the store's clock is the world's"
    );
    assert!(world.node_now(b) >= base + 40 * MS);

    run_until(&mut world, base + 80 * MS);
    assert!(!world.is_stalled(a));
    let stall_end = base + 50 * MS;
    assert_eq!(
        fired.get(),
        [(stall_end, stall_end)],
        "the timer fires when the stall ends, on a clock that jumped to the world's"
    );
    let after: Vec<Instant> = seen.get().into_iter().filter(|&t| t > base).collect();
    assert!(!after.is_empty() && after.iter().all(|&t| t > stall_end));
    assert_eq!(world.node_now(a), world.now());
}

#[test]
fn tasks_spawned_from_tasks_run_on_their_nodes() {
    let mut world = world::<()>(2);
    let (a, b) = (world.new_node(), world.new_node());
    let log: Log<(&'static str, NodeId)> = Log::default();
    let (rt_a, rt_b) = (world.runtime(a), world.runtime(b));
    let l = log.clone();
    let mut root = world.spawn(a, async move {
        l.push(("root", rt_a.node()));
        let (rt, l) = (rt_a.clone(), l.clone());
        rt_a.spawn(Box::pin(async move {
            l.push(("child", rt.node()));
            let l = l.clone();
            let rt_b2 = rt_b.clone();
            rt_b.spawn(Box::pin(async move {
                sleep(&rt_b2, 5 * MS).await;
                l.push(("grandchild", rt_b2.node()));
            }));
        }));
        7
    });
    run_idle(&mut world);
    assert_eq!(root.try_take(), Some(7));
    assert_eq!(root.try_take(), None, "an output is taken once");
    assert_eq!(
        log.get(),
        [("root", a), ("child", a), ("grandchild", b)],
        "each ran, on the node it was spawned on"
    );
    assert_eq!(world.tasks_alive(), 0);
    assert!(world.node_polls(b) >= 2);
}

/// Two nodes, two tasks each taking turns with yields and sleeps: the order they ran in, and
/// the world's trace.
fn interleaving(seed: u64, sleeps: bool) -> (Vec<String>, Vec<String>) {
    let mut world = World::<()>::with_config(
        Instant::now(),
        Rng::new(seed),
        WorldConfig {
            trace_len: 100_000,
            ..WorldConfig::default()
        },
    );
    let order: Log<String> = Log::default();
    for _ in 0..2 {
        let node = world.new_node();
        for name in ["x", "y"] {
            let (rt, order) = (world.runtime(node), order.clone());
            let _ = world.spawn(node, async move {
                for round in 0..10 {
                    order.push(format!("{}{name}{round}", rt.node()));
                    if sleeps && round % 4 == 3 {
                        sleep(&rt, MS).await;
                    } else {
                        yield_now().await;
                    }
                }
            });
        }
    }
    run_idle(&mut world);
    let trace = world.trace().iter().map(ToString::to_string).collect();
    (order.get(), trace)
}

#[test]
fn a_seed_replays_exactly_and_seeds_vary_the_interleaving() {
    let (order, trace) = interleaving(42, true);
    assert_eq!(order.len(), 40);
    assert!(trace.iter().any(|line| line.contains("timer")));
    assert_eq!(
        interleaving(42, true),
        (order, trace),
        "same seed, same run"
    );
    // Without timers only the draw among ready tasks can vary the order.
    let orders: BTreeSet<Vec<String>> = (0..16).map(|seed| interleaving(seed, false).0).collect();
    assert!(
        orders.len() > 8,
        "seeds vary the interleaving of ready tasks: {} distinct in 16",
        orders.len()
    );
}

#[test]
fn a_busy_loop_is_reported_naming_its_node_not_hung_on() {
    let mut world = World::<()>::with_config(
        Instant::now(),
        Rng::new(9),
        WorldConfig {
            busy_poll_limit: 10_000,
            ..WorldConfig::default()
        },
    );
    let (calm, spinner) = (world.new_node(), world.new_node());
    // Many polls, but the clock moves between them: not a busy loop.
    let rt = world.runtime(calm);
    let mut calm_done = world.spawn(calm, async move {
        for _ in 0..300 {
            for _ in 0..100 {
                yield_now().await;
            }
            sleep(&rt, MS).await;
        }
    });
    let rt = world.runtime(spinner);
    let _ = world.spawn(spinner, async move {
        sleep(&rt, 50 * MS).await;
        loop {
            yield_now().await;
        }
    });
    let report = (0..100_000)
        .find_map(|_| world.step().err())
        .expect("the busy loop is reported");
    assert_eq!(report.node, spinner);
    assert!(report.polls >= 5_000, "{report}");
    assert!(report.at >= 50 * MS && report.at < 60 * MS, "{report}");
    assert!(report.to_string().contains("busy loop"));
    // The world is still usable: without the spinner the rest runs to its end.
    world.kill(spinner);
    run_idle(&mut world);
    assert!(calm_done.try_take().is_some());
    assert!(world.polls() > 30_000);
}

/// What one run of the real worker over 20 messages came to.
struct Drained {
    report: leasehold_worker::ShutdownReport,
    handled: Vec<u64>,
    elapsed: Duration,
    tasks_left: usize,
    trace: Vec<String>,
}

/// Publishes 20 JSON messages on a memory stream on the world's clock, runs the real worker
/// over them (concurrency 4, handlers sleeping 3 ms of virtual time), steps until the stream
/// is empty, then shuts the worker down as a task of its node.
fn drain_with_worker(seed: u64) -> Drained {
    let mut world = World::<()>::with_config(
        Instant::now(),
        Rng::new(seed),
        WorldConfig {
            trace_len: 100_000,
            ..WorldConfig::default()
        },
    );
    let node = world.new_node();
    let stream =
        MemoryStream::with_clock(StreamConfig::new(Duration::from_secs(10)), world.clock())
            .expect("a valid stream");
    for n in 0..20 {
        stream.publish(serde_json::to_vec(&serde_json::json!({ "n": n })).unwrap());
    }
    let backend = stream.consumer("worker-1").expect("a new consumer");
    let rt = world.runtime(node);
    let handled: Log<u64> = Log::default();
    let (h, handler_rt) = (handled.clone(), rt.clone());
    let worker = WorkerBuilder::new(rt)
        .config(Config::default().concurrency(4))
        .stream(
            "s",
            backend,
            move |delivery: Delivery<serde_json::Value>| {
                let (rt, handled) = (handler_rt.clone(), h.clone());
                async move {
                    sleep(&rt, 3 * MS).await;
                    handled.push(delivery.message()["n"].as_u64().expect("a number"));
                    Outcome::Done
                }
            },
        )
        .start()
        .expect("the worker starts");
    let started = world.now();

    let mut steps = 0;
    while !stream.is_empty() {
        assert_ne!(
            world.step().expect("no busy loop"),
            Step::Idle,
            "the worker stalled"
        );
        steps += 1;
        assert!(steps < 100_000, "the stream never emptied");
    }
    let mut shutdown = world.spawn(node, worker.shutdown(Duration::from_secs(5)));
    let report = loop {
        let step = world.step().expect("no busy loop");
        if let Some(report) = shutdown.try_take() {
            break report;
        }
        assert_ne!(step, Step::Idle, "shutdown hung");
    };
    assert_eq!(stream.pending_len(), 0);
    let elapsed = world.now() - started;
    run_idle(&mut world);
    let mut handled = handled.get();
    handled.sort_unstable();
    Drained {
        report,
        handled,
        elapsed,
        tasks_left: world.tasks(node),
        trace: world.trace().iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn the_real_worker_drains_a_memory_stream_on_virtual_time() {
    let run = drain_with_worker(7);
    let report = run.report;
    assert_eq!(report.acked, 20, "{report:?}");
    assert_eq!((report.lost, report.abandoned), (0, 0), "{report:?}");
    assert_eq!(
        run.handled,
        (0..20).collect::<Vec<_>>(),
        "each handled once"
    );
    // Five rounds of four 3 ms handlers at least; far less than a poll interval more.
    assert!(
        run.elapsed >= 15 * MS && run.elapsed < Duration::from_secs(60),
        "virtual time elapsed: {:?}",
        run.elapsed
    );
    assert_eq!(
        run.tasks_left, 0,
        "once stopped, the worker leaves no task behind"
    );
}

#[test]
fn the_real_worker_replays_exactly_on_a_seed() {
    let (a, b) = (drain_with_worker(21), drain_with_worker(21));
    assert!(a.trace.len() > 50);
    assert_eq!(a.trace, b.trace, "same seed, same polls and timers");
    assert_ne!(
        a.trace,
        drain_with_worker(22).trace,
        "another seed, another run"
    );
}
