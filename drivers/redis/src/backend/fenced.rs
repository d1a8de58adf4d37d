//! The fenced operations: renew, ack, release and dead-letter act only on leases this
//! consumer still holds with their fence, one script per batch (see `lua/fenced_batch.lua`).

use std::sync::atomic::Ordering;

use leasehold_core::{BackendError, BackendResult, LeaseRef, SettleResult, Tenure};
use redis::Script;

use super::reply::EntryId;
use super::{RedisBackend, SCRIPT_BATCH};
use crate::error::{error, is_nogroup};
use crate::replicas::evalsha_cmd;
use crate::scripts::DEAD_LETTER;

impl RedisBackend {
    /// Runs a fenced per-id script over `leases` in batches of ids sorted ascending, each with
    /// its id span (the script's one ranged `XPENDING`); a vanished group means every lease is
    /// lost, and so is a lease whose id is no entry id.
    ///
    /// The fences go as runs (fence, how many leases in a row have it), the ids one argument
    /// each, then the script's own `tail`; the script answers with the consumer's tenure, its
    /// flags (bit 0: deleting on ack found another group) and the positions of the leases it
    /// found lost (usually none), so neither side makes a value per lease that only says
    /// "kept". A batch whose leases were all delivered under one tenure names it: while that is
    /// still the consumer's tenure, the script reads no fence back.
    pub(super) async fn fenced(
        &self,
        script: &Script,
        what: &str,
        lease_refs: &[LeaseRef],
        tail: &[&str],
    ) -> BackendResult<Vec<bool>> {
        let mut results = vec![false; lease_refs.len()];
        // Only ids as Redis writes them (the script compares them as strings): any other
        // spelling names no entry, so that lease is not held.
        let mut order: Vec<(EntryId, usize)> = lease_refs
            .iter()
            .enumerate()
            .filter_map(|(i, lease_ref)| {
                Some((EntryId::parse_canonical(lease_ref.id.as_str())?, i))
            })
            .collect();
        order.sort_unstable();
        for chunk in order.chunks(SCRIPT_BATCH) {
            let (Some((low, _)), Some((high, _))) = (chunk.first(), chunk.last()) else {
                continue;
            };
            let runs = fence_runs(chunk.iter().map(|&(_, i)| lease_refs[i].fence.0));
            let tenure = self.vouching(chunk.iter().map(|&(_, i)| lease_refs[i].tenure));
            // EVALSHA built as one command: its arguments go into one buffer (a script
            // invocation would allocate each of them, then copy them).
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(script.get_hash())
                .arg(2)
                .arg(&self.config.target.stream)
                .arg(&self.tenure_key)
                .arg(&self.config.group)
                .arg(&self.consumer)
                .arg(tenure.0)
                .arg(low.to_string())
                .arg(high.to_string())
                .arg(runs.len());
            for &(fence, len) in &runs {
                cmd.arg(fence).arg(len);
            }
            for &(_, i) in chunk {
                cmd.arg(lease_refs[i].id.as_str());
            }
            cmd.arg(tail);
            match self.write::<Vec<u64>>(&cmd, Some(script)).await {
                Ok(reply) => {
                    let [tenure, flags, lost @ ..] = &reply[..] else {
                        return Err(BackendError::fatal(format!("{what}: a short reply")));
                    };
                    self.learn_tenure(Tenure(*tenure));
                    if flags & 1 == 1 && !self.shared.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            stream = %self.config.target.stream,
                            group = %self.config.group,
                            "another consumer group reads this stream: no longer deleting \
                             entries on ack (they would be lost to it); removing only what \
                             every group consumed, as Retention::Consumed does"
                        );
                    }
                    let mut kept = vec![true; chunk.len()];
                    for &position in lost {
                        // 1-based positions in the batch as sent.
                        let Some(slot) = usize::try_from(position)
                            .ok()
                            .and_then(|p| p.checked_sub(1))
                            .and_then(|p| kept.get_mut(p))
                        else {
                            return Err(BackendError::fatal(format!(
                                "{what}: the script named lease {position} of {}",
                                chunk.len()
                            )));
                        };
                        *slot = false;
                    }
                    for (&(_, i), kept) in chunk.iter().zip(kept) {
                        results[i] = kept;
                    }
                }
                Err(e) if is_nogroup(&e) => {}
                Err(e) => return Err(error(what, e)),
            }
        }
        Ok(results)
    }

    /// Dead-letters `lease` with `reason`, trimming as the retention says.
    pub(super) async fn dead_letter_as(
        &self,
        lease_ref: &LeaseRef,
        reason: &str,
    ) -> BackendResult<SettleResult> {
        let [mode, len, age] = self.retention();
        self.fenced_one(
            &DEAD_LETTER,
            "dead-letter",
            lease_ref,
            &[reason, mode, len, age],
        )
        .await
    }

    pub(super) async fn fenced_one(
        &self,
        script: &Script,
        what: &str,
        lease_ref: &LeaseRef,
        extra: &[&str],
    ) -> BackendResult<SettleResult> {
        let mut cmd = evalsha_cmd(script, &[&self.config.target.stream, &self.dead_key]);
        cmd.arg(&self.config.group)
            .arg(&self.consumer)
            .arg(lease_ref.id.as_str())
            .arg(lease_ref.fence.0);
        for arg in extra {
            cmd.arg(arg);
        }
        match self.write::<i64>(&cmd, Some(script)).await {
            Ok(1) => Ok(SettleResult::Ok),
            Ok(_) => Ok(SettleResult::Lost),
            Err(e) if is_nogroup(&e) => Ok(SettleResult::Lost),
            Err(e) => Err(error(what, e)),
        }
    }
}

/// Consecutive equal fences as (fence, how many), in order.
pub(super) fn fence_runs(fences: impl IntoIterator<Item = u64>) -> Vec<(u64, usize)> {
    let mut runs: Vec<(u64, usize)> = Vec::new();
    for fence in fences {
        match runs.last_mut() {
            Some((last, len)) if *last == fence => *len += 1,
            _ => runs.push((fence, 1)),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::fence_runs;

    #[test]
    fn fences_go_as_runs_in_order() {
        assert_eq!(fence_runs([]), []);
        assert_eq!(fence_runs([1, 1, 1]), [(1, 3)]);
        assert_eq!(
            fence_runs([1, 1, 3, 1, 2, 2]),
            [(1, 2), (3, 1), (1, 1), (2, 2)]
        );
    }
}
