//! Fetching: new entries without a script while nothing lapsed, else the fetch script
//! (promotions, reclaims, new entries); what the last look learned (reclaimable entries, the
//! next due time, the consumer's tenure); reaping idle consumers.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use leasehold_core::{
    BackendError, BackendResult, Fence, Fetched, LeaseRef, SettleResult, Tenure, Undeliverable,
};
use redis::Value;

use super::reply::{parse_entries, parse_fetch, parse_probe, parse_streams, ScriptFetch};
use super::wait::Woken;
use super::{millis, RedisBackend, SCRIPT_BATCH};
use crate::config::FenceCheck;
use crate::error::{error, is_nogroup};
use crate::replicas::evalsha_cmd;
use crate::scripts::{FETCH, PROMOTE, REAP};

/// How long a fetch that may wait trusts what the last look at the stream learned (nothing
/// reclaimable, the next due time) and waits without looking again.
const LOOK_AGAIN: Duration = Duration::from_millis(100);

impl RedisBackend {
    /// One run of the fetch script, never blocking: the entries it took, whether anything was
    /// reclaimable, and (when it took nothing) the group's last-delivered id, to wait after.
    pub(super) async fn fetch_once(&self, max: usize) -> BackendResult<ScriptFetch> {
        // Reclaims and new entries take turns going first; the first takes at most half (all,
        // when max is 1) and the other the rest, so a backlog of either never starves the other.
        let reclaim_first = self.reclaim_turn.fetch_xor(true, Ordering::Relaxed);
        let share = if max == 1 { 1 } else { max / 2 };
        let cursor = self
            .cursor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let min_idle = millis(self.config.claim_timeout);
        let stream = &self.config.target.stream;
        let mut cmd = evalsha_cmd(
            &FETCH,
            &[
                stream,
                &self.dead_key,
                &self.delayed_keys.delayed,
                &self.delayed_keys.wake,
                &self.tenure_key,
            ],
        );
        cmd.arg(&self.config.group)
            .arg(&self.consumer)
            .arg(min_idle)
            .arg(&cursor)
            .arg(share)
            .arg(max)
            .arg(&self.config.target.field)
            .arg(if reclaim_first { "1" } else { "0" })
            .arg(self.config.target.max_len_arg())
            .arg(SCRIPT_BATCH)
            .arg(&self.retention()[..]);
        let reply: Value = match self.write(&cmd, Some(&FETCH)).await {
            Err(e) if is_nogroup(&e) => {
                tracing::warn!(%stream, "consumer group vanished; recreating");
                self.ensure_group().await?;
                self.write(&cmd, Some(&FETCH))
                    .await
                    .map_err(|e| error("fetch", e))?
            }
            other => other.map_err(|e| error("fetch", e))?,
        };
        let mut fetched = parse_fetch(reply)
            .ok_or_else(|| BackendError::fatal("unexpected reply from the fetch script"))?;
        self.learn_tenure(fetched.tenure);
        for id in std::mem::take(&mut fetched.undeliverable) {
            self.undeliverable(id);
        }
        *self.cursor.lock().unwrap_or_else(|e| e.into_inner()) =
            std::mem::take(&mut fetched.cursor);
        self.set_delayed(fetched.next_due, fetched.wake_id.take());
        self.due_seen
            .store(fetched.next_due == Some(Duration::ZERO), Ordering::Relaxed);
        // While anything is reclaimable the next fetch runs the script again, to share it.
        self.reclaims_seen
            .store(fetched.reclaimable, Ordering::Relaxed);
        Ok(fetched)
    }

    /// New entries only, in one round trip and without a script (a script's reply goes
    /// through Lua tables twice, which cost more than the read itself; and even a script that
    /// finds nothing to do costs several times a plain command): `ZRANGE … 0 0 WITHSCORES` of
    /// the delayed set and `TIME` (when is the next delayed message due?), `XPENDING … IDLE`
    /// (is anything reclaimable?) and `XREADGROUP … >`, pipelined. Entries without the
    /// payload field are dead-lettered and left out, as the fetch script does. Once a fetch
    /// saw a delayed message due, the probe's place goes to the promote script, so this read
    /// takes the promoted messages (each promoted exactly once: the script moves and removes
    /// them in one step). The second value says the next fetch must run the fetch script:
    /// something is reclaimable.
    pub(super) async fn read_new(&self, max: usize) -> BackendResult<(Vec<Fetched<Bytes>>, bool)> {
        let tenure = self.known_tenure();
        let promote = self.due_seen.load(Ordering::Relaxed);
        let mut pipe = redis::pipe();
        if promote {
            // EVALSHA built as one command, its error kept apart (`ignore_errors`): should the
            // server not know the script, the read still counts and the next fetch loads it.
            pipe.cmd("EVALSHA")
                .arg(PROMOTE.get_hash())
                .arg(2)
                .arg(&self.config.target.stream)
                .arg(&self.delayed_keys.delayed)
                .arg(&self.config.target.field)
                .arg(self.config.target.max_len_arg())
                .arg(SCRIPT_BATCH)
                .cmd("ECHO")
                .arg("");
        } else {
            pipe.cmd("ZRANGE")
                .arg(&self.delayed_keys.delayed)
                .arg(0)
                .arg(0)
                .arg("WITHSCORES")
                .cmd("TIME");
        }
        pipe.cmd("XPENDING")
            .arg(&self.config.target.stream)
            .arg(&self.config.group)
            .arg("IDLE")
            .arg(millis(self.config.claim_timeout))
            .arg("-")
            .arg("+")
            .arg(1)
            .cmd("XREADGROUP")
            .arg("GROUP")
            .arg(&self.config.group)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(max)
            .arg("STREAMS")
            .arg(&self.config.target.stream)
            .arg(">");
        let wait = self.config.target.wait;
        if let Some(wait) = wait {
            pipe.add_command(wait.cmd());
        }
        let mut replies = self
            .commands
            .pipeline_at(&pipe, self.config.target.stream.as_bytes())
            .await
            .map_err(|e| error("fetch", e))?;
        if let Some(wait) = wait {
            // Entries this read took but replicas may not hold stay pending with this
            // consumer, unseen by the engine, and are reclaimed after the claim timeout.
            let acked = replies.pop().unwrap_or(Value::Nil);
            acked
                .extract_error()
                .and_then(|acked| wait.check(&acked))
                .map_err(|e| error("fetch", e))?;
        }
        let replies: Vec<redis::RedisResult<Value>> =
            replies.into_iter().map(Value::extract_error).collect();
        let [first, second, idle, read]: [redis::RedisResult<Value>; 4] = replies
            .try_into()
            .map_err(|_| BackendError::fatal("fetch: wrong number of replies"))?;
        let idle = idle.map_err(|e| error("fetch", e))?;
        let read = read.map_err(|e| error("fetch", e))?;
        let next_due = match (promote, first) {
            (true, Ok(Value::Int(ms))) => Some(u64::try_from(ms).ok().map(Duration::from_millis)),
            // A restarted server forgot the script: load it; the next fetch promotes.
            (true, Err(e)) if e.code() == Some("NOSCRIPT") => {
                PROMOTE
                    .load_async(&mut self.commands.clone())
                    .await
                    .map_err(|e| error("load the promote script", e))?;
                Some(Some(Duration::ZERO))
            }
            (true, Err(e)) => return Err(error("promote", e)),
            (true, Ok(_)) => None,
            (false, first) => parse_probe(
                first.map_err(|e| error("fetch", e))?,
                second.map_err(|e| error("fetch", e))?,
            ),
        };
        let next_due = next_due
            .ok_or_else(|| BackendError::fatal("unexpected reply from the delayed-set probe"))?;
        self.set_delayed(next_due, None);
        self.due_seen
            .store(next_due == Some(Duration::ZERO), Ordering::Relaxed);
        let reclaimable = matches!(&idle, Value::Array(rows) if !rows.is_empty());
        let read = parse_streams(read)
            .and_then(|mut streams| match streams.pop() {
                None => Some(Vec::new()),
                Some((_, entries)) => parse_entries(entries, self.config.target.field.as_bytes()),
            })
            .ok_or_else(|| BackendError::fatal("unexpected reply from XREADGROUP"))?;
        let fetched = self.deliver_read(read, tenure).await;
        Ok((fetched, reclaimable))
    }

    /// New entries an `XREADGROUP … >` sent under `tenure` delivered (delivery count 1, so
    /// fence 1), as deliveries; those without the payload field are dead-lettered and left
    /// out, as the fetch script does.
    pub(super) async fn deliver_read(
        &self,
        read: Vec<(String, Option<Bytes>)>,
        tenure: Tenure,
    ) -> Vec<Fetched<Bytes>> {
        let mut fetched = Vec::with_capacity(read.len());
        for (id, payload) in read {
            match payload {
                Some(payload) => {
                    fetched.push(Fetched::new(id.into(), payload, 1, Fence(1)).with_tenure(tenure))
                }
                None => {
                    let lease = LeaseRef::new(id.into(), Fence(1)).with_tenure(tenure);
                    // Never deliverable. Should this fail, the entry stays pending with us
                    // and the fetch script dead-letters it when it is reclaimed.
                    let reason = self.no_field();
                    match self.dead_letter_as(&lease, &reason).await {
                        Ok(SettleResult::Ok) => self.undeliverable(lease.id.to_string()),
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(id = %lease.id, %e, "dead-lettering an entry failed")
                        }
                    }
                }
            }
        }
        fetched
    }

    /// One fetch as `Backend::fetch` describes it, failing when the server cannot be reached.
    pub(super) async fn fetch_within(
        &self,
        max: usize,
        wait: Duration,
    ) -> BackendResult<Vec<Fetched<Bytes>>> {
        self.reap_consumers().await;
        // While nothing is reclaimable, new entries come without a script (due delayed
        // messages are promoted in the same pipeline, once a fetch saw them due; the engine
        // fetches again at once after a short fetch, and when something is due, as `next_due`
        // is then zero). When that read finds reclaimable entries, the next fetch runs the
        // script, and so does every fetch while the script sees reclaimable entries (it shares
        // each fetch between reclaims and new entries) or to learn where to wait for a delayed
        // message due before the wait ends. Entries in
        // hand are returned at once, never held across another call that could fail or be
        // dropped.
        let deadline = Instant::now().checked_add(wait);
        // Whether the next step is the script. Not after a read that found nothing
        // reclaimable: with no delayed message due before the wait ends, the wait begins at once.
        let mut script = true;
        if self.fresh_enough(wait) {
            // What the last look learned still holds: straight to the wait, which takes what
            // is there at once (`XREADGROUP … BLOCK` blocks only when nothing is new).
            script = false;
        } else if !self.reclaims_seen.load(Ordering::Relaxed) {
            match self.read_new(max).await {
                Ok((read, reclaimable)) => {
                    self.reclaims_seen.store(reclaimable, Ordering::Relaxed);
                    if !read.is_empty() {
                        return Ok(read);
                    }
                    script = reclaimable;
                }
                // The script reports errors, and recreates a vanished group.
                Err(e) => {
                    tracing::debug!(%e, "fetch without a script failed; trying the script");
                }
            }
        }
        // Then wait for new entries until `wait` passes (see the module docs): consuming them,
        // unless a delayed message is due before the wait ends; then without consuming until
        // it is due, and the script promotes and reads. Again after a wake-up that brought
        // nothing to take (a publisher delayed a message due earlier: the next wait learns it).
        let mut last = None;
        loop {
            if script {
                let fetched = self.fetch_once(max).await?;
                if !fetched.entries.is_empty() {
                    return Ok(fetched.entries);
                }
                let Some(delivered) = fetched.last_delivered else {
                    return Ok(fetched.entries);
                };
                last = Some(delivered);
            }
            let now = Instant::now();
            let left = deadline.map_or(wait, |at| at.saturating_duration_since(now));
            let delayed = self.delayed_state();
            let (next_due, wake_id) = (delayed.next_due(now), delayed.wake_id);
            match (next_due, &last) {
                // The script just ran: more are due than it promoted, or the wait is over.
                (Some(due), Some(_)) if due.is_zero() || left.is_zero() => return Ok(Vec::new()),
                (Some(due), Some(last)) if due <= left => {
                    self.wait_for_new(last, &wake_id, due).await?;
                    script = true;
                }
                // Due before the wait ends: the script promotes, and tells where to wait.
                (Some(due), None) if due <= left => script = true,
                _ if left.is_zero() => return Ok(Vec::new()),
                _ => match self.wait_consuming(max, left).await? {
                    Woken::Took(entries) => return Ok(entries),
                    Woken::TimedOut => return Ok(Vec::new()),
                    Woken::Again => script = true,
                },
            }
        }
    }

    /// Whether a fetch that may wait `wait` can begin its consuming wait without a look first:
    /// a read or the script looked less than [`LOOK_AGAIN`] ago, found nothing reclaimable and
    /// nothing due before the wait would end. So a busy idle worker (one message at a time,
    /// each answer short of `max`) costs one round trip per message in its fetches, the wait,
    /// where a look before every wait would add one; lapsed entries are noticed at most
    /// [`LOOK_AGAIN`] later, a negligible part of a claim timeout. A message delayed sooner than
    /// all others still ends the wait (the wake stream).
    pub(super) fn fresh_enough(&self, wait: Duration) -> bool {
        if wait.is_zero()
            || self.reclaims_seen.load(Ordering::Relaxed)
            || self.due_seen.load(Ordering::Relaxed)
        {
            return false;
        }
        let now = Instant::now();
        let delayed = self.delayed_state();
        delayed
            .learned_at
            .is_some_and(|at| now.saturating_duration_since(at) < LOOK_AGAIN)
            && delayed.next_due(now).is_none_or(|due| due > wait)
    }

    /// The tenure a fenced script may vouch for leases delivered under `tenures` with:
    /// theirs when they share one and the configuration trusts tenures, else none (the
    /// script checks each lease).
    pub(super) fn vouching(&self, tenures: impl IntoIterator<Item = Tenure>) -> Tenure {
        if self.config.fence_check != FenceCheck::Tenure {
            return Tenure::NONE;
        }
        let mut tenures = tenures.into_iter();
        let first = tenures.next().unwrap_or(Tenure::NONE);
        if tenures.all(|tenure| tenure == first) {
            first
        } else {
            Tenure::NONE
        }
    }

    /// This consumer's tenure as last learned ([`Tenure::NONE`] before any script replied).
    pub(super) fn known_tenure(&self) -> Tenure {
        Tenure(self.tenure.load(Ordering::Relaxed))
    }

    /// A script replied with this consumer's tenure. Tenures only grow, so the largest is the
    /// latest (replies may arrive out of order).
    pub(super) fn learn_tenure(&self, tenure: Tenure) {
        self.tenure.fetch_max(tenure.0, Ordering::Relaxed);
    }

    /// What a promotion learned; the wake id comes only with a fetch script that took nothing.
    pub(super) fn set_delayed(&self, next_due: Option<Duration>, wake_id: Option<String>) {
        let now = Instant::now();
        let mut state = self.delayed.lock().unwrap_or_else(|e| e.into_inner());
        // A due time too far to represent is as good as none for the next hour's waits.
        state.due_at = next_due.and_then(|due| now.checked_add(due));
        state.learned_at = Some(now);
        if let Some(wake_id) = wake_id {
            state.wake_id = wake_id;
        }
    }

    pub(super) fn delayed_state(&self) -> DelayedState {
        self.delayed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Why an entry without the payload field can never be delivered.
    pub(super) fn no_field(&self) -> String {
        format!("entry has no field \"{}\"", self.config.target.field)
    }

    /// A fetch dead-lettered entry `id` (it has no payload field), for the worker to count.
    pub(super) fn undeliverable(&self, id: String) {
        let reason = self.no_field();
        self.undeliverable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Undeliverable::new(id.into(), reason));
    }

    /// Now and then, removes consumers of dead workers that hold nothing.
    pub(super) async fn reap_consumers(&self) {
        let Some(idle) = self.config.reap_idle_consumers else {
            return;
        };
        let now = Instant::now();
        {
            let mut last = self.last_reap.lock().unwrap_or_else(|e| e.into_inner());
            let every = (idle / 2).clamp(Duration::from_secs(1), Duration::from_secs(600));
            if last.is_some_and(|at| now.duration_since(at) < every) {
                return;
            }
            *last = Some(now);
        }
        let reaped: Result<i64, _> = REAP
            .key(&self.config.target.stream)
            .key(&self.delayed_keys.wake)
            .key(&self.tenure_key)
            .arg(&self.config.group)
            .arg(millis(idle))
            .arg(&self.consumer)
            .invoke_async(&mut self.commands.clone())
            .await;
        match reaped {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(stream = %self.config.target.stream, n, "removed idle consumers")
            }
            Err(e) => tracing::debug!(%e, "reaping idle consumers failed"),
        }
    }
}

/// What the promotions of delayed messages learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DelayedState {
    /// When the next delayed message is due, on the local clock (the server's due time less
    /// its `TIME`, from when the answer came; at that instant: one is, more than a promotion
    /// moves at once); `None` when none is delayed.
    pub(super) due_at: Option<Instant>,
    /// When a read or the script last looked (`None`: never).
    pub(super) learned_at: Option<Instant>,
    /// The wake stream's last id (`0-0` when it has none), as the last fetch script that took
    /// nothing saw it: a wait blocks for entries after it.
    pub(super) wake_id: String,
}

impl DelayedState {
    /// How long from `now` until the next delayed message is due (zero if it is).
    pub(super) fn next_due(&self, now: Instant) -> Option<Duration> {
        self.due_at.map(|at| at.saturating_duration_since(now))
    }
}

impl Default for DelayedState {
    fn default() -> Self {
        Self {
            due_at: None,
            learned_at: None,
            wake_id: "0-0".into(),
        }
    }
}
