//! The liveness bound and the drain bound (derivation in the crate documentation).

use std::time::Duration;

use leasehold_core::Settings;

use crate::behaviour::Behaviour;
use crate::SimConfig;

/// How long after the last fault effect ended all work must be complete:
///
/// `fetch_backoff_max + rtt + Σ busy(m) / slots + max_m (busy(m) + gap(m))`, with
/// `busy(m) = (D + P(m)) · H(m)` and
/// `gap(m) = claim_timeout + D · (2·poll_interval + 2·rtt + cancel_grace + claim_timeout)
///           + P(m) · (repoll_interval + H_max + rtt)`,
/// where `D = max_deliveries + 1` (with `prefetch`, each delivery may also wait
/// `ceil(max_leases / concurrency) · H_max` for a slot on its replica), `P(m)` is how often
/// `m`'s handler may answer `Pending`,
/// `H(m)` the longest one of its invocations can hold a slot, `H_max` the largest `H`, `rtt`
/// twice the largest fault-free one-way latency and `slots = replicas × concurrency`.
pub(crate) fn liveness_bound(
    cfg: &SimConfig,
    settings: &Settings,
    behaviours: &[Behaviour],
    replicas: usize,
) -> Duration {
    let rtt = cfg.latency * 2;
    let slots = (replicas * settings.concurrency) as u32;
    let deliveries = settings.max_deliveries + 1;
    let claim = settings.claim_timeout;
    let h_max = behaviours
        .iter()
        .map(|b| b.max_invocation(cfg))
        .max()
        .unwrap_or_default();
    // One delivery's waits: the next fetch (poll interval, plus a fetch blocking up to its
    // wait), request and answer of the fetch and of the settle call, the wind-down of a
    // cancelled invocation, and the release delay (the store caps it at the claim timeout).
    let mut per_delivery = settings.poll_interval * 2 + rtt * 2 + cfg.cancel_grace + claim;
    if settings.prefetch > 0 {
        // A prefetched delivery waits for a slot on its replica while another may have one
        // free: behind at most `max_leases` held leases, `concurrency` at a time.
        let rounds = settings.max_leases.div_ceil(settings.concurrency.max(1));
        per_delivery += h_max * u32::try_from(rounds).unwrap_or(u32::MAX);
    }
    // One re-poll's wait: the re-poll interval, a free slot on its replica, the answer.
    let per_pending = settings.repoll_interval + h_max + rtt;
    let mut busy_sum = Duration::ZERO;
    let mut longest = Duration::ZERO;
    for b in behaviours {
        let pending = b.max_pending();
        let busy = b.max_invocation(cfg) * (deliveries + pending);
        let gap = claim + per_delivery * deliveries + per_pending * pending;
        busy_sum += busy;
        longest = longest.max(busy + gap);
    }
    settings.fetch_backoff_max + rtt + busy_sum / slots.max(1) + longest
}

/// How long shutdown may take to drain every replica once all work is complete: the grace for
/// running invocations, a cancelled one's wind-down, an outstanding fetch (up to its wait), and
/// the release of leftover leases.
pub(crate) fn drain_bound(cfg: &SimConfig, settings: &Settings) -> Duration {
    settings.shutdown_grace + cfg.cancel_grace + settings.poll_interval + cfg.latency * 4
}
