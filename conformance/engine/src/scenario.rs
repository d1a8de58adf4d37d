//! What a run is made of: a configuration choice ([`Setup`]) and a bounded list of [`Step`]s.
//!
//! Every type here implements [`arbitrary::Arbitrary`] so that any byte string decodes into a
//! valid, small scenario ([`Scenario::from_bytes`]); the fuzz target and the proptest both use
//! that path. Steps name what they act on by a `pick` index taken modulo the matching list of
//! outstanding requests, so every decoded step means something (a step whose list is empty is a
//! no-op).
//!
//! Decoding stays compatible with the committed fuzz corpus where it can: what was added since
//! (bursts, fatal failures, ack answers leaving a lease out, failed calls) took byte values its
//! inputs (almost) never use, so they decode as before.

use std::time::Duration;

use arbitrary::{Arbitrary, Result, Unstructured};
use leasehold_core::{Config, ErrorKind, RetryPolicy};

/// Most steps decoded into one scenario.
pub const MAX_STEPS: usize = 96;
/// Most messages in one fetch answer (more than any `max` the engine can ask for with
/// `concurrency ≤ 4`, so overflow happens).
pub const MAX_ITEMS: usize = 6;
/// Most per-lease answers listed in one renew or ack answer (cycled over the leases).
pub const MAX_ANSWERS: usize = 4;
/// Size of the pool of message ids `Item::Pool` draws from, per stream.
pub const POOL: u8 = 4;
/// Most inputs in one [`Step::Burst`].
pub const MAX_BURST: usize = 8;
/// A failure step whose `pick` byte is in this range fails fatally ([`ErrorKind::Fatal`]):
/// 7 in 256, so most scenarios keep every stream's intake. (`0xFF`, the fuzzer's favourite
/// byte, stays transient: the committed corpus keeps its meaning.)
pub const FATAL_PICKS: std::ops::RangeInclusive<u8> = 0xF8..=0xFE;

/// A run: a configuration choice and the steps applied to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// The engine's configuration.
    pub setup: Setup,
    /// The steps, applied in order.
    pub steps: Vec<Step>,
}

impl Scenario {
    /// Decodes any bytes into a scenario (the fuzz target's and proptest's entry point).
    pub fn from_bytes(data: &[u8]) -> Self {
        let mut u = Unstructured::new(data);
        Self::arbitrary(&mut u).unwrap_or_else(|_| Self {
            setup: Setup::default(),
            steps: Vec::new(),
        })
    }
}

impl Scenario {
    /// [`from_bytes`](Self::from_bytes), every run of consecutive inputs fed as bursts of at
    /// most 2 to [`MAX_BURST`] inputs (as the first byte says): the second way the fuzz target
    /// and the corpus replay run each input.
    pub fn from_bytes_in_bursts(data: &[u8]) -> Self {
        let max = 2 + usize::from(data.first().copied().unwrap_or(0)) % (MAX_BURST - 1);
        Self::from_bytes(data).in_bursts(max)
    }

    /// The same steps with every run of consecutive inputs (and the `Skew`s among them) fed as
    /// bursts of at most `max` inputs: a worker that always drains late. Time passing ends a
    /// run; a run of one input stays as it is.
    pub fn in_bursts(&self, max: usize) -> Self {
        let max = max.max(1);
        let mut steps = Vec::with_capacity(self.steps.len());
        let mut run: Vec<Step> = Vec::new();
        let flush = |run: &mut Vec<Step>, steps: &mut Vec<Step>| {
            if run.iter().filter(|s| s.is_input()).count() > 1 {
                steps.push(Step::Burst(std::mem::take(run)));
            } else {
                steps.append(run);
            }
        };
        for step in &self.steps {
            let joins = step.is_input() || matches!(step, Step::Skew { .. });
            if !joins {
                flush(&mut run, &mut steps);
                steps.push(step.clone());
                continue;
            }
            if step.is_input() && run.iter().filter(|s| s.is_input()).count() == max {
                flush(&mut run, &mut steps);
            }
            run.push(step.clone());
        }
        flush(&mut run, &mut steps);
        Self {
            setup: self.setup.clone(),
            steps,
        }
    }
}

impl<'a> Arbitrary<'a> for Scenario {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let setup = Setup::arbitrary(u)?;
        let mut steps = Vec::new();
        while steps.len() < MAX_STEPS && !u.is_empty() {
            steps.push(Step::arbitrary(u)?);
        }
        Ok(Self { setup, steps })
    }
}

/// A small configuration: durations in milliseconds, few slots and streams, tiny renew chunks.
///
/// [`Setup::config`] turns it into a [`Config`]; the `Arbitrary` impl only produces setups that
/// validate.
#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    /// Invocations at once (1-4).
    pub concurrency: usize,
    /// Messages fetched ahead of free slots (0, or 1-3), when not adaptive.
    pub prefetch: usize,
    /// The prefetch is left unset: it adapts to the observed handler times and fetch round
    /// trips, within `max_leases - concurrency`.
    pub adaptive_prefetch: bool,
    /// Largest fetch (1-3, or 500: no cap at these sizes).
    pub fetch_batch_size: usize,
    /// Leases held at once (`concurrency..=concurrency + 3`).
    pub max_leases: usize,
    /// Streams served (1-3).
    pub streams: u16,
    /// Claim timeout (20-300 ms).
    pub claim_ms: u64,
    /// Heartbeat (`None`: the default `claim / 3`).
    pub heartbeat_ms: Option<u64>,
    /// Expiry margin (`None`: the default `claim / 10`).
    pub margin_ms: Option<u64>,
    /// Poll interval (1-40 ms).
    pub poll_ms: u64,
    /// Re-poll interval (`None`: the poll interval).
    pub repoll_ms: Option<u64>,
    /// How much earlier a delivery's first re-poll may come (0, 0.5 or 1).
    pub repoll_spread: f64,
    /// Max processing time of one invocation (5-600 ms).
    pub max_processing_ms: u64,
    /// First retry backoff (1-50 ms).
    pub retry_initial_ms: u64,
    /// Backoff cap (≥ initial, ≤ 200 ms).
    pub retry_max_ms: u64,
    /// Backoff growth factor (1, 1.5 or 2).
    pub retry_multiplier: f64,
    /// Backoff jitter (0, 0.25 or 1).
    pub retry_jitter: f64,
    /// Deliveries before dead-lettering (1-4).
    pub max_deliveries: u32,
    /// Renew chunk size (1-3), so heartbeats are chunked.
    pub renew_batch_size: usize,
    /// Cap of the fetch-failure backoff (1-100 ms).
    pub fetch_backoff_max_ms: u64,
    /// Seed of the engine's jitter generator.
    pub seed: u64,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            concurrency: 2,
            prefetch: 0,
            adaptive_prefetch: false,
            fetch_batch_size: 500,
            max_leases: 4,
            streams: 2,
            claim_ms: 60,
            heartbeat_ms: None,
            margin_ms: None,
            poll_ms: 5,
            repoll_ms: None,
            repoll_spread: 0.0,
            max_processing_ms: 100,
            retry_initial_ms: 5,
            retry_max_ms: 40,
            retry_multiplier: 2.0,
            retry_jitter: 0.25,
            max_deliveries: 3,
            renew_batch_size: 2,
            fetch_backoff_max_ms: 20,
            seed: 1,
        }
    }
}

impl Setup {
    /// The engine configuration this setup stands for. A prefetch beyond what `max_leases`
    /// leaves room for is lowered to that room (a config refuses it), which is what the held
    /// leases allow anyway.
    pub fn config(&self) -> Config {
        let ms = Duration::from_millis;
        let prefetch = self
            .prefetch
            .min(self.max_leases.saturating_sub(self.concurrency));
        let mut config = Config::default().concurrency(self.concurrency);
        if !self.adaptive_prefetch {
            config = config.prefetch(prefetch);
        }
        let mut config = config
            .fetch_batch_size(self.fetch_batch_size)
            .max_leases(self.max_leases)
            .claim_timeout(ms(self.claim_ms))
            .poll_interval(ms(self.poll_ms))
            .max_processing_time(ms(self.max_processing_ms))
            .repoll_spread(self.repoll_spread)
            .retry(RetryPolicy {
                initial: ms(self.retry_initial_ms),
                multiplier: self.retry_multiplier,
                max: ms(self.retry_max_ms),
                jitter: self.retry_jitter,
            })
            .max_deliveries(self.max_deliveries)
            .renew_batch_size(self.renew_batch_size)
            .fetch_backoff_max(ms(self.fetch_backoff_max_ms))
            .seed(self.seed);
        if let Some(hb) = self.heartbeat_ms {
            config = config.heartbeat_interval(ms(hb));
        }
        if let Some(margin) = self.margin_ms {
            config = config.expiry_margin(ms(margin));
        }
        if let Some(repoll) = self.repoll_ms {
            config = config.repoll_interval(ms(repoll));
        }
        config
    }
}

impl<'a> Arbitrary<'a> for Setup {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let concurrency = u.int_in_range(1..=4usize)?;
        let max_leases = concurrency + u.int_in_range(0..=3usize)?;
        let claim_ms = u.int_in_range(20..=300u64)?;
        let heartbeat_ms = if bool::arbitrary(u)? {
            Some(u.int_in_range(1..=claim_ms / 2)?)
        } else {
            None
        };
        let hb = heartbeat_ms.unwrap_or(claim_ms / 3);
        // Valid iff 0 < margin and margin + heartbeat < claim.
        let margin_ms = if bool::arbitrary(u)? {
            Some(u.int_in_range(1..=claim_ms - hb - 1)?)
        } else {
            None
        };
        let retry_initial_ms = u.int_in_range(1..=50u64)?;
        Ok(Self {
            concurrency,
            max_leases,
            streams: u.int_in_range(1..=3u16)?,
            claim_ms,
            heartbeat_ms,
            margin_ms,
            poll_ms: u.int_in_range(1..=40u64)?,
            repoll_ms: if bool::arbitrary(u)? {
                Some(u.int_in_range(1..=40u64)?)
            } else {
                None
            },
            repoll_spread: *u.choose(&[0.0, 0.0, 0.5, 1.0])?,
            max_processing_ms: u.int_in_range(5..=600u64)?,
            retry_initial_ms,
            retry_max_ms: u.int_in_range(retry_initial_ms..=200u64)?,
            retry_multiplier: *u.choose(&[1.0, 1.5, 2.0])?,
            retry_jitter: *u.choose(&[0.0, 0.25, 1.0])?,
            max_deliveries: u.int_in_range(1..=4u32)?,
            renew_batch_size: u.int_in_range(1..=3usize)?,
            fetch_backoff_max_ms: u.int_in_range(1..=100u64)?,
            seed: u64::arbitrary(u)?,
            // Drawn last, so inputs from before this knob keep their meaning.
            prefetch: *u.choose(&[0, 0, 1, 2, 3])?,
            fetch_batch_size: *u.choose(&[500, 500, 1, 2, 3])?,
            // Last again: an input that ends before it means a fixed prefetch, as it did.
            adaptive_prefetch: bool::arbitrary(u)?,
        })
    }
}

/// One step of a scenario: an input to the engine, or time passing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Time passes; the harness fires `handle_timeout` at every `poll_timeout` on the way.
    Wait(Jump),
    /// Jump to the next `poll_timeout` (if any) and fire it.
    Tick,
    /// A spurious wake-up: `handle_timeout` at the current clock, whether or not a timer is due.
    Wake,
    /// Time passes while the driver is busy: no timeout fires, so the next input arrives with
    /// timers already overdue (the engine must run them first, or order them correctly).
    Stall(Jump),
    /// Answer an outstanding fetch (the `pick`-th stream with one) with these messages,
    /// possibly more than it asked for.
    Fetched {
        /// Which outstanding fetch.
        pick: u8,
        /// The messages delivered (at most [`MAX_ITEMS`] are used).
        items: Vec<Item>,
    },
    /// Report an outstanding fetch failed: transiently, or fatally (which halts its stream).
    FetchFailed {
        /// Which outstanding fetch.
        pick: u8,
        /// Fatal instead of transient (decoded: `pick` in [`FATAL_PICKS`]).
        fatal: bool,
    },
    /// Deliver fresh messages on a stream with no fetch outstanding (a late answer of a fetch
    /// the driver gave up on); ignored once shutdown began.
    Unsolicited {
        /// The stream (modulo the number of streams).
        stream: u8,
        /// How many fresh messages (at most [`MAX_ITEMS`]).
        count: u8,
    },
    /// Report the outcome of a running invocation (cancelled ones included).
    Finish {
        /// Which running invocation.
        pick: u8,
        /// What it came to.
        outcome: Finish,
    },
    /// Report an outcome again for an invocation that already reported (a stale result).
    FinishStale {
        /// Which earlier invocation.
        pick: u8,
        /// What it came to.
        outcome: Finish,
    },
    /// Answer an outstanding `Renew` chunk lease by lease (answers cycle over the leases; none
    /// given means all kept).
    Renewed {
        /// Which outstanding chunk.
        pick: u8,
        /// Per-lease answers.
        answers: Vec<RenewAnswer>,
    },
    /// Fail an outstanding `Renew` chunk as a whole: transiently, or fatally (which halts the
    /// chunk's stream).
    RenewFailed {
        /// Which outstanding chunk.
        pick: u8,
        /// Fatal instead of transient (decoded: `pick` in [`FATAL_PICKS`]).
        fatal: bool,
    },
    /// Answer an already answered chunk again (stale), all kept or all lost.
    RenewStale {
        /// Which earlier chunk.
        pick: u8,
        /// All lost instead of all kept.
        lost: bool,
    },
    /// Answer an outstanding `Ack` lease by lease (answers cycle; none given means all ok;
    /// [`SettleAnswer::Omit`] leaves a lease out of the answer). When the first answer is a call
    /// failure ([`SettleAnswer::CallFailed`], [`SettleAnswer::CallFatal`]) the whole call fails
    /// instead (`handle_ack_failed`).
    Acked {
        /// Which outstanding ack.
        pick: u8,
        /// Per-lease answers.
        answers: Vec<SettleAnswer>,
    },
    /// Answer an outstanding `Release`.
    Released {
        /// Which outstanding release.
        pick: u8,
        /// The answer.
        answer: SettleAnswer,
    },
    /// Answer an outstanding `DeadLetter`.
    DeadLettered {
        /// Which outstanding dead-letter.
        pick: u8,
        /// The answer.
        answer: SettleAnswer,
    },
    /// Answer an already answered ack, release or dead-letter again: an ack batch answered
    /// twice is unexpected; a release or dead-letter answer is stale once the lease is gone, and
    /// is taken as the answer to a re-sent call still in flight.
    SettleStale {
        /// Which earlier answer.
        pick: u8,
        /// The answer.
        answer: SettleAnswer,
    },
    /// Begin (or hasten) shutdown with a deadline `grace_ms % 400` ms after the input's `now`.
    Shutdown {
        /// Grace period in ms (modulo 400).
        grace_ms: u16,
    },
    /// The next input carries a `now` this much older than the clock (out-of-order time).
    Skew {
        /// How far back, in ms (modulo 500).
        back_ms: u16,
    },
    /// The stream stops or starts being fetched from (`handle_assignment`): a shard of a
    /// sharded queue handed to another worker, or back.
    Assign {
        /// The stream (modulo the number of streams).
        stream: u8,
        /// Fetch from it from now on.
        fetching: bool,
    },
    /// Several inputs fed back to back at the same clock, and the effects drained once after the
    /// last of them, as a worker does when handlers finish together or several answers arrive at
    /// once. Decoded with 2 to [`MAX_BURST`] inputs, mostly outcomes and answers, and `Skew`
    /// (an input older than the clock); time passing and nested bursts are ignored in one built
    /// by hand. Each input acts on what was outstanding before the burst.
    Burst(Vec<Step>),
}

impl Step {
    /// Whether the step is an engine input (time passing, `Skew` and bursts are not).
    pub fn is_input(&self) -> bool {
        !matches!(
            self,
            Step::Wait(_) | Step::Tick | Step::Stall(_) | Step::Skew { .. } | Step::Burst(_)
        )
    }

    /// One step of a burst: an input, mostly outcomes and answers (what arrives together).
    fn burst_input(u: &mut Unstructured<'_>) -> Result<Self> {
        // The selector of `decode` standing for each kind of input.
        let selector = match u8::arbitrary(u)? {
            // Handlers finishing together mostly succeed: their acks go out as one batch.
            0..=59 => {
                return Ok(Step::Finish {
                    pick: u8::arbitrary(u)?,
                    outcome: Finish::Done,
                })
            }
            60..=89 => 99,    // Finish
            90..=129 => 144,  // Renewed
            130..=169 => 194, // Acked
            170..=189 => 214, // Released
            190..=199 => 229, // DeadLettered
            200..=224 => 50,  // Fetched
            225..=229 => 90,  // FetchFailed
            230..=234 => 184, // RenewFailed
            235..=239 => 139, // FinishStale
            240..=243 => 190, // RenewStale
            244..=247 => 237, // SettleStale
            248..=249 => 96,  // Unsolicited
            250..=251 => 241, // Shutdown
            252..=253 => 243, // Skew
            254 => 252,       // Assign
            _ => 251,         // Wake
        };
        Step::decode_selected(selector, u)
    }

    /// One step, with the weights of [`Step`]'s `Arbitrary` impl.
    fn decode(u: &mut Unstructured<'_>) -> Result<Self> {
        // Weighted choice: the steps that move a lease's life on are the common ones.
        let selector = u8::arbitrary(u)?;
        Step::decode_selected(selector, u)
    }

    /// The step `selector` chooses, its fields decoded from `u`.
    fn decode_selected(selector: u8, u: &mut Unstructured<'_>) -> Result<Self> {
        let pick = |u: &mut Unstructured<'_>| u8::arbitrary(u);
        Ok(match selector {
            0..=24 => Step::Wait(Jump::arbitrary(u)?),
            25..=44 => Step::Tick,
            45..=49 => Step::Stall(Jump::arbitrary(u)?),
            50..=89 => Step::Fetched {
                pick: pick(u)?,
                items: bounded(u, MAX_ITEMS)?,
            },
            90..=95 => {
                let pick = pick(u)?;
                Step::FetchFailed {
                    pick,
                    fatal: FATAL_PICKS.contains(&pick),
                }
            }
            96..=98 => Step::Unsolicited {
                stream: pick(u)?,
                count: pick(u)?,
            },
            99..=138 => Step::Finish {
                pick: pick(u)?,
                outcome: Finish::arbitrary(u)?,
            },
            139..=143 => Step::FinishStale {
                pick: pick(u)?,
                outcome: Finish::arbitrary(u)?,
            },
            144..=183 => Step::Renewed {
                pick: pick(u)?,
                answers: bounded(u, MAX_ANSWERS)?,
            },
            184..=189 => {
                let pick = pick(u)?;
                Step::RenewFailed {
                    pick,
                    fatal: FATAL_PICKS.contains(&pick),
                }
            }
            190..=193 => Step::RenewStale {
                pick: pick(u)?,
                lost: bool::arbitrary(u)?,
            },
            194..=213 => Step::Acked {
                pick: pick(u)?,
                answers: bounded(u, MAX_ANSWERS)?,
            },
            214..=228 => Step::Released {
                pick: pick(u)?,
                answer: SettleAnswer::arbitrary(u)?,
            },
            229..=236 => Step::DeadLettered {
                pick: pick(u)?,
                answer: SettleAnswer::arbitrary(u)?,
            },
            237..=240 => Step::SettleStale {
                pick: pick(u)?,
                answer: SettleAnswer::arbitrary(u)?,
            },
            241..=242 => Step::Shutdown {
                grace_ms: u16::arbitrary(u)?,
            },
            243..=249 => Step::Skew {
                back_ms: u16::arbitrary(u)?,
            },
            // Assignments take another selector of the old `Wake` range.
            252 => Step::Assign {
                stream: pick(u)?,
                fetching: bool::arbitrary(u)?,
            },
            // Bursts take the two selectors of the old `Wake` range that the committed corpus
            // (almost) never uses, so its inputs keep their meaning.
            250 | 253 => {
                let len = u.int_in_range(2..=MAX_BURST)?;
                let steps = (0..len)
                    .map(|_| Step::burst_input(u))
                    .collect::<Result<_>>()?;
                Step::Burst(steps)
            }
            _ => Step::Wake,
        })
    }
}

impl<'a> Arbitrary<'a> for Step {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Step::decode(u)
    }
}

/// Decodes a vector of at most `max` elements.
fn bounded<'a, T: Arbitrary<'a>>(u: &mut Unstructured<'a>, max: usize) -> Result<Vec<T>> {
    let len = u.int_in_range(0..=max)?;
    (0..len).map(|_| T::arbitrary(u)).collect()
}

/// How far a [`Step::Wait`] or [`Step::Stall`] moves the clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum Jump {
    /// 0-3 ms.
    Tiny(u8),
    /// Up to one heartbeat interval (`n / 255` of it).
    Short(u8),
    /// Up to two claim timeouts (`2n / 255` of one).
    Long(u8),
}

/// One message of a fetch answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum Item {
    /// A message never delivered before, with delivery count `1 + count % (max_deliveries + 1)`.
    Fresh {
        /// Delivery count selector.
        count: u8,
    },
    /// A message from a small per-stream pool of ids (so it may be held already, or have a
    /// cancelled invocation still winding down), same delivery count rule.
    Pool {
        /// Pool index (modulo [`POOL`]).
        n: u8,
        /// Delivery count selector.
        count: u8,
    },
    /// A redelivery of a message this worker holds on this stream (new fence, count + 1);
    /// a fresh message when it holds none.
    Redeliver {
        /// Which held message.
        pick: u8,
    },
    /// The previous message of this answer again, same fence (a duplicate).
    Duplicate,
}

/// What a finished invocation reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum Finish {
    /// `Outcome::Done`.
    Done,
    /// `Outcome::Pending`.
    Pending,
    /// `Outcome::Retry { delay: None }`.
    Retry,
    /// `Outcome::Retry { delay: Some(n ms) }`.
    RetryAfter(u8),
    /// `Outcome::Reject`.
    Reject,
    /// `Outcome::Failed`.
    Failed,
}

/// A backend's answer for one lease of a renew chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewAnswer {
    /// Still ours.
    Kept,
    /// Taken by someone else.
    Lost,
    /// Left out of the answer.
    Omit,
}

impl<'a> Arbitrary<'a> for RenewAnswer {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        // Mostly kept: leases must live long enough to do something.
        Ok(match u8::arbitrary(u)? {
            0..=199 => Self::Kept,
            200..=229 => Self::Lost,
            _ => Self::Omit,
        })
    }
}

/// A backend's answer for an ack, release or dead-letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleAnswer {
    /// Done.
    Ok,
    /// Refused: not ours any more.
    Lost,
    /// Transient failure of this lease (`SettleResult::Failed`).
    Failed,
    /// Left out of an ack's answer (counts as failed); `Failed` for a release or dead-letter.
    Omit,
    /// The call failed transiently as a whole (`Err(ErrorKind::Transient)`).
    CallFailed,
    /// The call failed fatally (`Err(ErrorKind::Fatal)`): the lease is given up and its stream
    /// halted.
    CallFatal,
}

impl SettleAnswer {
    /// The error kind of a failed call, if this answer is one.
    pub fn call_error(self) -> Option<ErrorKind> {
        match self {
            Self::CallFailed => Some(ErrorKind::Transient),
            Self::CallFatal => Some(ErrorKind::Fatal),
            _ => None,
        }
    }
}

impl<'a> Arbitrary<'a> for SettleAnswer {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(match u8::arbitrary(u)? {
            0..=179 => Self::Ok,
            180..=214 => Self::Lost,
            // The new answers take bytes the committed corpus (almost) never uses.
            243..=246 => Self::Omit,
            247..=252 => Self::CallFailed,
            253 => Self::CallFatal,
            _ => Self::Failed,
        })
    }
}
