//! What a worker tells operators, through the `metrics` facade: the application installs a
//! recorder (a Prometheus exporter, say) before it starts workers, and every name below shows
//! up there with the label `stream`. Handles are made once per stream when the worker starts,
//! so recording costs an atomic add on the hot path, never a registry lookup; without a
//! recorder they do nothing.
//!
//! The names and what they measure are listed in the `leasehold` crate's GUIDE.md, "Observability" table; the
//! constants here are the one place they are spelled.

use std::cell::Cell;
use std::time::Duration;

use leasehold_core::{ErrorKind, LossReason, Outcome};
use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram};

/// Messages fetched.
pub const DELIVERIES: &str = "leasehold_deliveries_total";
/// Messages acked (the backend confirmed the ack).
pub const ACKS: &str = "leasehold_acks_total";
/// Invocations ended, by `outcome`.
pub const INVOCATIONS: &str = "leasehold_invocations_total";
/// Invocations running now.
pub const RUNNING: &str = "leasehold_invocations_running";
/// Leases held now.
pub const HELD: &str = "leasehold_leases_held";
/// How long a handler ran, seconds.
pub const HANDLER_DURATION: &str = "leasehold_handler_duration_seconds";
/// How long a renew call took, seconds.
pub const RENEW_RTT: &str = "leasehold_renew_rtt_seconds";
/// Time left before local expiry when a renew's answer lands, seconds (the least of its
/// confirmed leases).
pub const LEASE_MARGIN: &str = "leasehold_lease_margin_seconds";
/// Leases lost, by `reason`.
pub const LEASES_LOST: &str = "leasehold_leases_lost_total";
/// Messages dead-lettered, by `reason`.
pub const DEAD_LETTERS: &str = "leasehold_dead_letters_total";
/// Failed backend calls, by `op` and `kind`.
pub const BACKEND_ERRORS: &str = "leasehold_backend_errors_total";
/// How long a fetch call took, seconds (a blocking fetch includes its wait).
pub const FETCH_RTT: &str = "leasehold_fetch_rtt_seconds";
/// From a message's enqueue time to its handler's start, seconds.
pub const PICKUP_DELAY: &str = "leasehold_pickup_delay_seconds";

/// How an invocation ended, as the `outcome` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    Done,
    Pending,
    Retry,
    Failed,
    Rejected,
    Cancelled,
}

impl Ended {
    const ALL: [Ended; 6] = [
        Ended::Done,
        Ended::Pending,
        Ended::Retry,
        Ended::Failed,
        Ended::Rejected,
        Ended::Cancelled,
    ];

    fn label(self) -> &'static str {
        match self {
            Ended::Done => "done",
            Ended::Pending => "pending",
            Ended::Retry => "retry",
            Ended::Failed => "failed",
            Ended::Rejected => "rejected",
            Ended::Cancelled => "cancelled",
        }
    }

    /// What `outcome` counts as; any outcome of a cancelled invocation is discarded.
    pub(crate) fn of(outcome: &Outcome, cancelled: bool) -> Self {
        match outcome {
            _ if cancelled => Ended::Cancelled,
            Outcome::Done => Ended::Done,
            Outcome::Pending => Ended::Pending,
            Outcome::Retry { .. } => Ended::Retry,
            Outcome::Failed { .. } => Ended::Failed,
            Outcome::Reject { .. } => Ended::Rejected,
        }
    }
}

/// Every reason a lease is lost, in the order of its discriminants (the `reason` label).
const LOSSES: [LossReason; 3] = [
    LossReason::Expired,
    LossReason::TakenOver,
    LossReason::LostAtSettle,
];

/// Why a message was dead-lettered, as the `reason` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dead {
    /// The handler rejected it, or its payload did not decode.
    Rejected,
    /// It failed on its last allowed delivery.
    MaxDeliveries,
    /// The backend could never deliver it (no payload) and dead-lettered it by itself.
    Undeliverable,
}

impl Dead {
    const ALL: [Dead; 3] = [Dead::Rejected, Dead::MaxDeliveries, Dead::Undeliverable];

    fn label(self) -> &'static str {
        match self {
            Dead::Rejected => "rejected",
            Dead::MaxDeliveries => "max_deliveries",
            Dead::Undeliverable => "undeliverable",
        }
    }
}

/// A backend call, as the `op` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Fetch,
    Renew,
    Ack,
    Release,
    DeadLetter,
}

impl Op {
    const ALL: [Op; 5] = [Op::Fetch, Op::Renew, Op::Ack, Op::Release, Op::DeadLetter];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Op::Fetch => "fetch",
            Op::Renew => "renew",
            Op::Ack => "ack",
            Op::Release => "release",
            Op::DeadLetter => "dead_letter",
        }
    }
}

fn kind_label(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Transient => "transient",
        ErrorKind::Fatal => "fatal",
    }
}

/// What a stream's handler tasks record of each invocation they run: off the driver, whose
/// thread is the serial part of a worker.
#[derive(Clone)]
pub(crate) struct HandlerMeters {
    duration: Histogram,
    invocations: [Counter; 6],
    pickup_delay: Histogram,
}

impl HandlerMeters {
    /// A message's first invocation starts, `waited` after it was enqueued.
    pub(crate) fn picked_up(&self, waited: Duration) {
        self.pickup_delay.record(seconds(waited));
    }

    /// One invocation ended with `ended` after running for `ran`.
    pub(crate) fn ended(&self, ended: Ended, ran: Duration) {
        self.duration.record(seconds(ran));
        self.invocations[ended as usize].increment(1);
    }
}

/// One stream's metric handles.
pub(crate) struct StreamMeters {
    pub(crate) deliveries: Counter,
    pub(crate) acks: Counter,
    /// Recorded by the handler tasks.
    pub(crate) handler: HandlerMeters,
    running: Gauge,
    held: Gauge,
    /// What the gauges were last set to: they are set again only when it changes.
    load: Cell<(usize, usize)>,
    pub(crate) renew_rtt: Histogram,
    pub(crate) lease_margin: Histogram,
    pub(crate) fetch_rtt: Histogram,
    lost: [Counter; 3],
    dead: [Counter; 3],
    errors: [[Counter; 2]; 5],
}

impl StreamMeters {
    /// The handles of stream `name`, registered with the recorder installed now.
    pub(crate) fn new(name: &str) -> Self {
        let stream = name.to_owned();
        let labelled = |metric: &'static str, key: &'static str, value: &'static str| counter!(metric, "stream" => stream.clone(), key => value);
        let (running, held) = (
            gauge!(RUNNING, "stream" => stream.clone()),
            gauge!(HELD, "stream" => stream.clone()),
        );
        running.set(0.0);
        held.set(0.0);
        Self {
            deliveries: counter!(DELIVERIES, "stream" => stream.clone()),
            acks: counter!(ACKS, "stream" => stream.clone()),
            handler: HandlerMeters {
                duration: histogram!(HANDLER_DURATION, "stream" => stream.clone()),
                invocations: Ended::ALL.map(|e| labelled(INVOCATIONS, "outcome", e.label())),
                pickup_delay: histogram!(PICKUP_DELAY, "stream" => stream.clone()),
            },
            running,
            held,
            load: Cell::new((0, 0)),
            renew_rtt: histogram!(RENEW_RTT, "stream" => stream.clone()),
            lease_margin: histogram!(LEASE_MARGIN, "stream" => stream.clone()),
            fetch_rtt: histogram!(FETCH_RTT, "stream" => stream.clone()),
            lost: LOSSES.map(|l| labelled(LEASES_LOST, "reason", l.label())),
            dead: Dead::ALL.map(|d| labelled(DEAD_LETTERS, "reason", d.label())),
            errors: Op::ALL.map(|op| {
                [ErrorKind::Transient, ErrorKind::Fatal].map(|kind| {
                    counter!(BACKEND_ERRORS, "stream" => stream.clone(),
                        "op" => op.label(), "kind" => kind_label(kind))
                })
            }),
        }
    }

    /// Sets the gauges to `running` invocations and `held` leases, if that changed.
    pub(crate) fn load(&self, running: usize, held: usize) {
        if self.load.replace((running, held)) != (running, held) {
            self.running.set(running as f64);
            self.held.set(held as f64);
        }
    }

    pub(crate) fn lost(&self, reason: LossReason) {
        self.lost[reason as usize].increment(1);
    }

    pub(crate) fn dead_lettered(&self, dead: Dead) {
        self.dead[dead as usize].increment(1);
    }

    pub(crate) fn backend_error(&self, op: Op, kind: ErrorKind) {
        let kind = match kind {
            ErrorKind::Transient => 0,
            ErrorKind::Fatal => 1,
        };
        self.errors[op as usize][kind].increment(1);
    }
}

/// Seconds, as histograms take them.
pub(crate) fn seconds(duration: Duration) -> f64 {
    duration.as_secs_f64()
}
