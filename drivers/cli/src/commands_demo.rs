//! `leasehold commands`: the command queue provisioning simulated VMs.
//!
//! A simulated cloud takes a random time (seeded) to provision each VM, and some requests fail
//! (quota) or hit a flaky API (an error: retried with backoff). Several replicas share one
//! in-memory queue: `execute` asks the cloud for the VM and returns at once, `check_status`
//! follows it every `status_interval`. Midway one replica is replaced (graceful shutdown: its
//! RUNNING commands are handed over and resumed with `check_status`), and a fraction of the
//! commands is cancelled mid-flight. The summary shows where every command ended, that no VM
//! was requested twice, and how long after the cloud finished a VM its command showed it
//! (the lag the status interval bounds).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::commands::{
    Command, CommandContext, CommandHandler, CommandQueue, CommandStats, CommandWorker,
    HandlerError, MemoryCommandStore, Status, Step,
};
use leasehold::memory::{MemoryStream, StreamConfig};
use leasehold::tokio::TokioRuntime;
use leasehold::Config;
use serde::{Deserialize, Serialize};

use crate::exec;
use crate::stats::{Human, Percentiles};
use crate::CliError;

/// How the command-queue demo runs.
#[derive(Debug, Clone)]
pub struct CommandsOptions {
    /// VMs to provision (one command each).
    pub commands: usize,
    /// Replicas serving the queue.
    pub replicas: usize,
    /// How often a RUNNING command is checked.
    pub status_interval: Duration,
    /// Fraction (0..=1) of the commands cancelled mid-flight.
    pub cancel_fraction: f64,
    /// Seed of provisioning times, failures and cancels.
    pub seed: u64,
    /// Give up (and fail) if the commands have not all ended after this long.
    pub timeout: Duration,
}

impl Default for CommandsOptions {
    fn default() -> Self {
        Self {
            commands: 300,
            replicas: 3,
            status_interval: Duration::from_millis(200),
            cancel_fraction: 0.1,
            seed: 7,
            timeout: Duration::from_secs(120),
        }
    }
}

/// The parameters of a `provision_vm` command.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct VmSpec {
    name: String,
    cpus: u32,
}

/// What a SUCCEEDED `provision_vm` command returns.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Vm {
    name: String,
    address: String,
}

/// One provisioning operation in the simulated cloud.
struct Operation {
    ready_at: Instant,
    outcome: Planned,
    torn_down: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Planned {
    Ready,
    QuotaExceeded,
}

/// The simulated cloud: operations by command id, and what the demo measures.
#[derive(Default)]
struct Cloud {
    seed: u64,
    operations: Mutex<HashMap<String, Operation>>,
    duplicate_requests: Mutex<u64>,
    torn_down: Mutex<u64>,
    /// Cloud finished → `check_status` saw it.
    lag: Mutex<Vec<Duration>>,
}

/// splitmix64: the seeded randomness of the workload.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn roll(seed: u64, key: &str, salt: u64) -> f64 {
    let hash = key
        .bytes()
        .fold(mix(seed ^ salt), |h, b| mix(h ^ u64::from(b)));
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

struct ProvisionVm(Arc<Cloud>);

impl CommandHandler for ProvisionVm {
    type Params = VmSpec;
    type Output = Vm;

    async fn execute(&self, ctx: CommandContext, spec: VmSpec) -> Result<Step<Vm>, HandlerError> {
        let cloud = &self.0;
        // A flaky API: some first attempts fail before anything is requested (retried).
        if ctx.errors_count() == 0 && roll(cloud.seed, ctx.id(), 1) < 0.05 {
            return Err("cloud API: 503 Service Unavailable".into());
        }
        let mut operations = cloud.operations.lock().expect("cloud lock");
        if operations.contains_key(ctx.id()) {
            *cloud.duplicate_requests.lock().expect("cloud lock") += 1;
        } else {
            let seconds = 0.2 + 2.0 * roll(cloud.seed, ctx.id(), 2) + 0.1 * f64::from(spec.cpus);
            let outcome = if roll(cloud.seed, ctx.id(), 3) < 0.08 {
                Planned::QuotaExceeded
            } else {
                Planned::Ready
            };
            operations.insert(
                ctx.id().to_owned(),
                Operation {
                    ready_at: Instant::now() + Duration::from_secs_f64(seconds),
                    outcome,
                    torn_down: false,
                },
            );
        }
        Ok(Step::running_with(format!("op-{}", ctx.id()))?)
    }

    async fn check_status(
        &self,
        ctx: CommandContext,
        spec: VmSpec,
    ) -> Result<Step<Vm>, HandlerError> {
        let operation: String = ctx.checkpoint()?.ok_or("no operation id")?;
        let cloud = &self.0;
        let operations = cloud.operations.lock().expect("cloud lock");
        let op = operations
            .get(ctx.id())
            .ok_or_else(|| format!("{operation}: unknown operation"))?;
        let now = Instant::now();
        if now < op.ready_at {
            return Ok(Step::Running);
        }
        cloud
            .lag
            .lock()
            .expect("cloud lock")
            .push(now - op.ready_at);
        Ok(match op.outcome {
            Planned::Ready => Step::Succeeded(Vm {
                address: format!("10.0.{}.{}", spec.cpus, ctx.id().len()),
                name: spec.name,
            }),
            Planned::QuotaExceeded => Step::Failed(format!("{operation}: CPU quota exceeded")),
        })
    }

    async fn on_cancel(&self, ctx: CommandContext, _: VmSpec) {
        let cloud = &self.0;
        if let Some(op) = cloud
            .operations
            .lock()
            .expect("cloud lock")
            .get_mut(ctx.id())
        {
            if !op.torn_down {
                op.torn_down = true;
                *cloud.torn_down.lock().expect("cloud lock") += 1;
            }
        }
    }
}

/// What the demo saw.
#[derive(Debug)]
pub struct CommandsReport {
    options: CommandsOptions,
    statuses: HashMap<Status, usize>,
    not_terminal: usize,
    stats: CommandStats,
    cancels_accepted: usize,
    duplicate_requests: u64,
    torn_down: u64,
    lag: Percentiles,
    elapsed: Duration,
}

impl CommandsReport {
    /// Whether every command ended and no VM was requested twice.
    pub fn passed(&self) -> bool {
        self.not_terminal == 0 && self.duplicate_requests == 0
    }
}

/// Runs the demo on tokio and the memory store.
pub fn run(options: &CommandsOptions) -> Result<CommandsReport, CliError> {
    if options.commands == 0 || options.replicas == 0 {
        return Err(CliError::Invalid(
            "commands and replicas must be at least 1".into(),
        ));
    }
    if !(0.0..=1.0).contains(&options.cancel_fraction) {
        return Err(CliError::Invalid(format!(
            "cancel fraction must be between 0 and 1, got {}",
            options.cancel_fraction
        )));
    }
    exec::on_tokio(|runtime| drive(runtime, options.clone()))?
}

type Queue = CommandQueue<MemoryCommandStore, TokioRuntime>;

async fn replica(
    queue: &Queue,
    cloud: &Arc<Cloud>,
    options: &CommandsOptions,
) -> Result<CommandWorker<MemoryCommandStore>, CliError> {
    queue
        .worker()
        .config(
            Config::default()
                .concurrency(32)
                .max_leases(10_000)
                .claim_timeout(Duration::from_secs(5))
                .poll_interval(Duration::from_millis(50)),
        )
        .status_interval(options.status_interval)
        .handler("provision_vm", ProvisionVm(Arc::clone(cloud)))
        .start()
        .await
        .map_err(|e| CliError::Invalid(format!("command worker: {e}")))
}

fn queue_error(error: leasehold::commands::QueueError) -> CliError {
    CliError::Invalid(format!("command queue: {error}"))
}

async fn drive(
    runtime: TokioRuntime,
    options: CommandsOptions,
) -> Result<CommandsReport, CliError> {
    let started = Instant::now();
    let stream = MemoryStream::new(StreamConfig::new(Duration::from_secs(5)))?;
    let queue = CommandQueue::new(runtime, MemoryCommandStore::new(stream));
    let cloud = Arc::new(Cloud {
        seed: options.seed,
        ..Cloud::default()
    });
    let mut replicas = Vec::new();
    for _ in 0..options.replicas {
        replicas.push(replica(&queue, &cloud, &options).await?);
    }
    let mut ids = Vec::with_capacity(options.commands);
    for n in 0..options.commands {
        let spec = VmSpec {
            name: format!("vm-{n:04}"),
            cpus: 1 << (n % 4),
        };
        let command = Command::new("provision_vm", &spec)
            .map_err(|e| CliError::Invalid(e.to_string()))?
            .with_id(format!("provision-{n:04}"));
        ids.push(queue.submit(command).await.map_err(queue_error)?.state.id);
        // Submissions arrive over about a second.
        if n % 20 == 19 {
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
    }
    // Midway: cancel some commands in flight, and replace a replica (its RUNNING commands are
    // handed over and resumed with check_status on the others).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut cancels_accepted = 0;
    for id in &ids {
        if roll(options.seed, id, 4) < options.cancel_fraction
            && queue.cancel(id).await.map_err(queue_error)?
        {
            cancels_accepted += 1;
        }
    }
    let mut stats = CommandStats::default();
    let leaving = replicas.remove(0);
    let (_, left) = leaving.shutdown_with_stats(Duration::from_secs(5)).await;
    stats = stats + left;
    replicas.push(replica(&queue, &cloud, &options).await?);

    let mut statuses: HashMap<Status, usize> = HashMap::new();
    let mut not_terminal = 0;
    for id in &ids {
        let left = options.timeout.saturating_sub(started.elapsed());
        match queue.wait(id, left).await {
            Ok(state) => *statuses.entry(state.status).or_default() += 1,
            Err(_) => not_terminal += 1,
        }
    }
    for replica in replicas {
        let (_, left) = replica.shutdown_with_stats(Duration::from_secs(5)).await;
        stats = stats + left;
    }
    let elapsed = started.elapsed();
    let lag = Percentiles::of(cloud.lag.lock().expect("cloud lock").clone());
    let duplicate_requests = *cloud.duplicate_requests.lock().expect("cloud lock");
    let torn_down = *cloud.torn_down.lock().expect("cloud lock");
    Ok(CommandsReport {
        options,
        statuses,
        not_terminal,
        stats,
        cancels_accepted,
        duplicate_requests,
        torn_down,
        lag,
        elapsed,
    })
}

impl fmt::Display for CommandsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        let count = |s| self.statuses.get(&s).copied().unwrap_or(0);
        writeln!(
            f,
            "leasehold commands: {} VM provisioning commands, {} replicas (one replaced midway), \
             status_interval {}, memory store, tokio",
            o.commands,
            o.replicas,
            Human(o.status_interval)
        )?;
        writeln!(f)?;
        writeln!(f, "  status                          commands")?;
        for status in [Status::Succeeded, Status::Failed, Status::Cancelled] {
            writeln!(f, "  {:<30} {:>9}", status.to_string(), count(status))?;
        }
        writeln!(
            f,
            "  {:<30} {:>9}",
            "not finished (must be 0)", self.not_terminal
        )?;
        writeln!(f)?;
        let s = &self.stats;
        let rows: [(&str, String); 9] = [
            ("execute calls", s.executed.to_string()),
            ("check_status calls", s.checked.to_string()),
            ("handler errors (retried)", s.errors.to_string()),
            ("cancels accepted", self.cancels_accepted.to_string()),
            ("cancels that hit a handler", s.cancel_signals.to_string()),
            (
                "results dropped after cancel",
                s.dropped_after_cancel.to_string(),
            ),
            ("VMs torn down on cancel", self.torn_down.to_string()),
            (
                "VMs requested twice (must be 0)",
                self.duplicate_requests.to_string(),
            ),
            ("wall time", Human(self.elapsed).to_string()),
        ];
        for (what, value) in rows {
            writeln!(f, "  {what:<30} {value:>9}")?;
        }
        writeln!(f)?;
        write!(
            f,
            "  cloud done -> command observed: p50 {}  p99 {}  max {}  ({} samples; bounded by \
             status_interval {})",
            Human(self.lag.p50),
            Human(self.lag.p99),
            Human(self.lag.max),
            self.lag.count,
            Human(o.status_interval)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_ends_every_command_and_requests_no_vm_twice() {
        let report = run(&CommandsOptions {
            commands: 60,
            replicas: 2,
            status_interval: Duration::from_millis(50),
            ..CommandsOptions::default()
        })
        .expect("the demo runs");
        assert!(report.passed(), "{report}");
        let total: usize = report.statuses.values().sum();
        assert_eq!(total, 60, "{report}");
        assert!(report.stats.checked > 0, "{report}");
        assert!(report.lag.max < Duration::from_secs(5), "{report}");
    }

    #[test]
    fn bad_options_are_errors() {
        let bad = CommandsOptions {
            cancel_fraction: 2.0,
            ..CommandsOptions::default()
        };
        assert!(matches!(run(&bad), Err(CliError::Invalid(_))));
        let none = CommandsOptions {
            replicas: 0,
            ..CommandsOptions::default()
        };
        assert!(matches!(run(&none), Err(CliError::Invalid(_))));
    }
}
