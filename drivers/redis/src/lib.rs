//! # leasehold-redis: the Redis Streams backend
//!
//! One [`RedisBackend`] is one consumer of one stream's consumer group. Its lease operations
//! are Lua scripts that check, per entry, that this consumer owns it **and** that its delivery
//! count still equals the lease's fence, then act, answering per entry:
//!
//! - renew = owner-checked `XCLAIM … 0 id JUSTID` (resets idle, keeps the count): a late
//!   heartbeat can never steal back an entry a peer reclaimed;
//! - ack = owner-checked `XACK`, then the stream is trimmed as its [`Retention`] says: by
//!   default below the first entry some consumer group of the stream still needs, with one
//!   `XTRIM MINID`, so several groups can read one stream and none loses an entry to
//!   another's ack (see [`Retention`] for the policy and its trade-offs). A stale worker's ack
//!   never removes the new owner's delivery;
//! - release with delay `d` = owner-checked `XCLAIM … IDLE (claim_timeout - d) JUSTID`: anyone
//!   may reclaim it once `d` has passed, with no extra keys (delays cap at the claim timeout);
//! - dead-letter = owner-checked copy to the dead-letter stream (reason, delivery count,
//!   fields) + `XACK` + the same trim, atomically.
//!
//! A fetch reads new entries with `XREADGROUP … >`, pipelined with an `XPENDING … IDLE` that
//! tells whether any entry has lapsed and a look at when the next delayed message is due
//! (below). While some entry has lapsed, the fetch is one script: it promotes the due delayed
//! messages, then reclaims: `XPENDING … IDLE` (min-idle = claim timeout) lists lapsed
//! entries from a cursor carried between calls (moved up to the first lapsed entry, so no scan
//! is spent on live entries ahead of it) and `XCLAIM` takes them, each previous owner's tenure
//! ended (below); and `XREADGROUP … >`, taking turns going first with at most half of `max`, the other kind
//! taking the rest, so neither starves the other. Every delivery carries its delivery count,
//! which is its fence. Entries without the payload field are dead-lettered on the spot. When
//! nothing is there, the fetch waits on a **dedicated connection**, so it never delays a
//! heartbeat on the command connection: with `XREADGROUP … BLOCK` on the stream and the wake
//! stream (below; it has a consumer group of the same name), so a new entry is picked up by the
//! wait itself, in one round trip (delivery count 1), or, while a delayed message is due before
//! the wait would end, with an `XREAD BLOCK` that consumes nothing until it is due. A local
//! timer ends each wait on time (`CLIENT UNBLOCK`, where Redis alone would answer up to 1/`hz`
//! late); a dropped wait closes its connection, so it takes nothing afterwards. Both
//! connections reconnect (attempts at most about 100 ms apart); a wrong password
//! or TLS setup fails `connect` at once. A fetch that meets a server gone away (killed,
//! restarting, loading) sends no read meanwhile and waits for it within its wait, so a worker
//! fetches again within about 100 ms of the server answering; a fetch answered late (a server
//! paused by `CLIENT PAUSE`) hands its deliveries over with the next fetch, renewed, rather than
//! with leases the engine would find spent (`tests/recovery.rs` measures both). A vanished group (`NOGROUP`) is recreated by the next
//! fetch; its leases are reported lost. Every key a script touches is in the stream's Redis
//! Cluster hash slot (below).
//!
//! ## Tenures: fences vouched for without reading them back
//!
//! Reading each lease's owner and delivery count back (the ranged `XPENDING`, and turning its
//! reply into Lua values) is most of what a fenced ack costs Redis: about twice a raw
//! `XACK`-and-`XREADGROUP` loop per message. So the backend also keeps a **tenure** per
//! consumer (in `{orders}:tenure:<group>`): a number that changes, never to a value it had
//! before, every time a leasehold worker takes an entry from that consumer, and that a group
//! made anew starts afresh. Every delivery carries the tenure it was made under
//! ([`Tenure`](leasehold_core::Tenure)); while that is still the consumer's tenure, nothing
//! was taken from it since, so the delivery is held with its fence. With
//! [`FenceCheck::Tenure`] the scripts then act on the batch without reading it back (and check
//! per lease otherwise). That holds only if every takeover goes through a leasehold worker: a
//! consumer of another library, or an `XCLAIM` by hand, leaves the tenure as it was. So the
//! default stays [`FenceCheck::PerLease`]; choose `Tenure` for a group only leasehold workers
//! consume. Measured (`--bench fenced-cost`, same run): a drain costs Redis 1.45× the raw
//! loop per message instead of 1.97×, a heartbeat 1.16× a raw `XCLAIM … JUSTID` instead of
//! 1.46×.
//!
//! ## Keys and hash slots
//!
//! A stream's keys, for `orders`:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `orders` | stream | the messages; consumer groups |
//! | `{orders}:dead` | stream | dead letters (or the configured [`RedisConfig::dead_letter_stream`]) |
//! | `{orders}:delayed` | sorted set | delayed messages: score = due time (Unix ms, the server's clock), member = `<seq>:<payload>` |
//! | `{orders}:delayed:seq` | string | the counter giving each delayed message its `<seq>` |
//! | `{orders}:delayed:wake` | stream (one entry) | appended to when a newly delayed message is due before all others |
//! | `{orders}:dedupe:<key>` | string, with the key's ttl | the id the first publish with `<key>` returned |
//! | `{orders}:tenure:<group>` | hash | each consumer's tenure (field `''`: the last one made) |
//!
//! Redis Cluster runs a script only if all its keys are in one hash slot, and hashes a key by
//! its *hash tag* — the bytes between its first `{` and the first `}` after that, when there is
//! at least one — or, without one, the whole key (this crate computes it as `CLUSTER KEYSLOT`
//! does: CRC16-XMODEM mod 16384). So the prefix of a stream's other keys is:
//!
//! - the stream's name when it has a hash tag: `{app}:orders` → `{app}:orders:dead`, … (a
//!   suffix changes neither the first `{` nor the first `}` after it: all hash by `app`);
//! - `{name}` when it has none and holds no `}`: `orders` → `{orders}:dead`, … (the tag is the
//!   whole name, the bytes Redis hashes for the tagless name itself);
//! - nothing, when it has no tag but holds a `}` (`a}b`, or `odd{}name`, whose tag is empty):
//!   Redis hashes the whole name, a tag cannot hold `}`, so no key derived from the name lands
//!   in its slot (`{a}b}:dead` would hash by `a`). Such a stream is
//!   [`RedisConfigError::UntaggableStream`]: name it with a tag, or without `}`.
//!
//! [`RedisBackend::connect`] and [`RedisPublisher::connect`] check every key's slot before
//! sending anything, and refuse one in another slot — a
//! [`RedisConfig::dead_letter_stream`] such as `orders-dead` for `orders` — with
//! [`RedisConfigError::CrossSlot`], naming both keys and slots ([`RedisConfig::validate`]
//! checks without connecting). The first two rules are the keys earlier versions derived, so
//! existing dead letters and delayed messages stay where they are; [`RedisInspector`] still
//! reads the old keys (`{a}b}:dead`) of a refused name.
//!
//! ## Redis Cluster
//!
//! With the `cluster` feature, [`Servers::cluster`] names a cluster by the URLs of some of its
//! nodes (one that answers is enough), for `RedisConfig::new`, `PublisherConfig::new` and
//! `RedisInspector::connect`, which take any [`Servers`] (a URL is one server). The
//! connections are then redis-rs's async cluster connections behind the same connection
//! type: every command, pipeline and script is routed to the master serving its first key's
//! slot — all of one stream's keys share it (above), so a stream lives on one master — and the
//! client follows `MOVED` and `ASK` (refreshing its slot map) and retries `TRYAGAIN` a few
//! times, soon, before an error reaches the worker, which retries transient errors
//! (`TRYAGAIN`, `CLUSTERDOWN`, `READONLY`, `LOADING`, … see `error`) with backoff. A script
//! the node does not know (`NOSCRIPT`: a new master) is loaded on every node and run again.
//!
//! **Slot migration.** While a stream's slot is being moved (`MIGRATING` / `IMPORTING`),
//! single-key calls (renew, ack, release, `XREADGROUP`) follow `ASK` to wherever the stream is;
//! a script over several keys of which some do not exist yet (a stream without delayed
//! messages has no delayed set) is answered `TRYAGAIN` until the move completes, so fetches
//! and dead-lettering pause for that long, then go on; leases keep being renewed. On a
//! cluster a publisher sends every batch as its script, so a batch is appended whole or not at
//! all (a pipeline of `XADD`s cut by a migration would fail with `ASK` halfway, and a retry
//! would append its first messages twice).
//!
//! **Connections.** A [`RedisBackend`] holds two cluster connections — its commands' and its
//! blocking wait's, so a waiting read never delays a heartbeat — and a cluster connection
//! holds one link per master: a backend (one stream of a worker) holds **2 connections per
//! master** (6 on 3 masters), plus a short-lived one per node given at connect to check the
//! credentials. A [`RedisPublisher`] and a [`RedisInspector`] hold one per master each. On a
//! cluster a wait's local timer does not send `CLIENT UNBLOCK` (it would have to reach the
//! stream's master with this connection's client id there): a wait ends by the server's
//! timeout, up to 1/`hz` late.
//!
//! **Sharded queues.** [`RedisBackend::connect_shards`] gives a backend per shard of a
//! [`Shards`](leasehold_core::Shards) queue over **one** command connection, and each shard
//! opens its blocking connection only when its first wait begins, and closes it while the
//! shard is assigned to other workers ([`Backend::set_fetching`](leasehold_core::Backend::set_fetching)):
//! a worker of a queue of `n` shards holds 1 + (the shards it fetches from) connections (on a
//! cluster, each a link per master), however large `n` is. A worker whose budget cannot cover
//! a fetch on every due shard at once fetches without waiting, and so holds none. The
//! queue's membership is the sorted set [`members_key`]`(queue)` = `{queue}:members`:
//! consumer names scored by the server's `TIME` (Unix ms) at their last heartbeat, pruned of
//! those older than the member ttl by every heartbeat's script.
//!
//! A single-server URL of a cluster node whose stream another master serves fails at once with
//! a fatal error that says to connect as a cluster: such a connection cannot follow `MOVED`.
//! [`RedisInspector::streams`] walks every master's keyspace.
//!
//! ## Redis Sentinel
//!
//! With the `sentinel` feature, the same constructors take the sentinels' URLs and the
//! master's name (`Servers::sentinel`; `Servers::sentinel_with_master_auth` for a master with a password
//! or another database). A connection asks the sentinels for the master (and checks it
//! answers `ROLE` as one), and asks again after a connection error, a timeout, or a reply
//! that says the node is no master any more (`READONLY`, `UNBLOCKED`, `MASTERDOWN`); the call
//! that met it fails as a transient error, which the worker retries, on the new master. A
//! failover does not always reach the old master: after `SENTINEL FAILOVER` or a partition it
//! stays up as a master, taking writes that are lost, until a sentinel's next look at it
//! (every 10 s) demotes it. So a connection also asks a sentinel where the master is on its
//! first call a second or more after the last look, and moves when it moved: it leaves a
//! demoted master within about a second. That look is given up after 250 ms, so sentinels that
//! hang do not hold up a master that works. The blocking connection is opened anew once the
//! command connection moved. Not supported yet: TLS to the master (`rediss://` sentinels are
//! reached with TLS, the master without), and replicas for reads.
//!
//! ## Failover and `wait_replicas`
//!
//! Redis replicates asynchronously: a master acknowledges a write before any replica has it,
//! and a failover (Sentinel, Redis Cluster) promotes a replica that may lack the last writes.
//! **Without [`RedisConfig::wait_replicas`]**, what a failover can undo:
//!
//! - a fetch: the new master never delivered the entry, so another worker (or the same one)
//!   fetches it again with the **same fence** (delivery count 1): the message runs twice at
//!   once until the first worker's next renew answers `Lost` (within a heartbeat), which
//!   cancels it; a fence handed to a downstream system is then reused by the second run;
//! - a renew: the entry looks idle since the last renew the replica had, so it may be taken
//!   over early by as long as the renews it missed (a duplicate runner until the first
//!   worker's next renew answers `Lost`);
//! - an ack, a release or a dead-letter: the entry is pending again on the new master, taken
//!   over after the claim timeout and run again (at-least-once, never lost);
//! - a publish: the message is gone;
//! - a command's state write (the command store): the state rolls back to an earlier one (a
//!   result, a cancel, the submit itself lost).
//!
//! The Sentinel test (`tests/failover.rs`) shows the third kind: 400 messages through
//! `SENTINEL FAILOVER`, none lost, 80–92 run a second time (their acks went to the old master
//! before the worker moved). With `wait_replicas(1, …)` and two replicas, 72–80 ran twice
//! all the same: the replica not promoted acknowledged the old master's writes until the
//! sentinels pointed it at the new one. When the master is killed instead (no split brain),
//! 0–2 ran twice, after a pause of about 2.4 s while the sentinels agreed and promoted.
//!
//! **With `wait_replicas(n, timeout)`**, every write is followed, on the same connection and
//! in the same pipeline, by `WAIT n timeout` (on a cluster the pair is routed to the master
//! serving the stream's slot), and fails as a transient `NOREPLICAS` error when fewer than `n`
//! replicas acknowledged it in time: fetch (the entries it took stay pending with this
//! consumer, unseen, and are taken over after the claim timeout), renew, ack, release,
//! dead-letter, publish, and the command store's submit and compare-and-set; a consuming
//! blocking read that took entries sends its `WAIT` after the read, on its own connection. A
//! write that succeeded is on `n` replicas, so a failover that promotes one of them keeps it:
//! with `n` equal to the number of replicas, any promoted replica holds every acknowledged
//! write. With fewer, Sentinel may promote one that does not, and while an old master is still
//! up after a failover, a replica not yet pointed at the new master acknowledges writes that
//! are then lost (`WAIT` is no consensus). A failed write may still have happened on the
//! master: a retried ack then answers `Lost`, a retried publish may append twice (a
//! deduplication key makes it safe), a retried submit is idempotent. What it costs: a wait on
//! every write until `n` replicas have it, a master-to-replica round trip (`WAIT` asks them
//! for an acknowledgement at once), and writes fail while fewer than `n` are connected.
//! Measured (`tests/failover.rs`, master and replica on loopback, debug build, a loaded
//! 2-core machine): the median fetch + ack, two writes, went from 296–382 µs to 365–448 µs
//! (+65 µs, about a sixth). A `CLUSTER FAILOVER` with `wait_replicas(1, 500 ms)` under two
//! workers: 400 messages, none lost, none run twice.
//!
//! ## Publishing: delayed and deduplicated messages
//!
//! A [`RedisPublisher`] appends and needs no consumer group; it uses the keys above.
//!
//! A batch of plain messages is one pipeline of `XADD`s. A batch with any due time or
//! deduplication key is one script (a server that forgot it answers `NOSCRIPT` having run
//! nothing, so it is loaded and the call retried): in order, a message whose deduplication
//! key is held enqueues nothing and answers the id stored there; one due later than the
//! server's `TIME` goes to the delayed set with id `delayed:<seq>`, the rest to the stream; a
//! new key is set to the id with its ttl. A batch with a message [`Outgoing::check`] refuses
//! (a delay over a year, an empty key) is refused whole, with nothing sent.
//!
//! **Promotion**: the fetch script first moves up to 1000 due messages, earliest first, from
//! the delayed set into the stream (`XADD`, trimmed like a publish) and removes them, in the
//! same script, so each is promoted exactly once however many consumers race, and is then
//! delivered like any new entry (delivery count 1). It answers how long until the next one is
//! due (zero while more are due), which the fetch's answer carries
//! ([`FetchAnswer::next_due`](leasehold_core::FetchAnswer::next_due)) so the worker fetches
//! again then, and, when it took nothing, the wake stream's last
//! id: the wait blocks on the wake stream too, so an idle consumer learns of a message
//! delayed after it began waiting and due sooner than its wait (with the consuming wait, one
//! consumer of the group learns it, and acknowledges the wake entry). The scriptless read pipelines
//! a `ZRANGE … 0 0 WITHSCORES` of the delayed set and `TIME` (a fraction of what even an idle
//! script costs); once that shows a message due, the next read pipelines a small promote
//! script in their place, before its `XREADGROUP`, which then takes the promoted entries
//! natively (a read inside a script pays for Lua tables twice). The wait for the due time is
//! ended by a local timer: Redis times a `BLOCK` out only `hz` times a second.
//!
//! ## The command queue's store (feature `commands`)
//!
//! `RedisCommandStore` is `leasehold-commands`' `CommandStore` on Redis, here with everything
//! else that speaks Redis (`leasehold-commands` itself knows none): `RedisStoreConfig::new`
//! takes a URL or any [`Servers`], like the constructors above. Each command is a state hash,
//! each status a sorted set of ids, beside the queue's stream, all under the queue's hash tag
//! (`leasehold:{q}:…`, one tag per shard of a sharded queue), so every state write is one
//! script (`lua/commands/`) that also moves the command between the status indexes; its
//! workers consume the stream with [`RedisBackend`]s, and cancels go out over pub/sub.
//! `leasehold::commands` re-exports it when the `redis` and `commands` features are on.
//!
//! [`Outgoing::check`]: leasehold_core::Outgoing::check
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
#[cfg(feature = "commands")]
mod commands;
mod config;
mod conn;
mod error;
mod inspect;
mod keys;
mod publisher;
mod replicas;
mod retention;
mod scripts;
mod sharded;
mod slot;

pub use backend::RedisBackend;
#[cfg(feature = "commands")]
#[cfg_attr(docsrs, doc(cfg(feature = "commands")))]
pub use commands::{RedisCommandStore, RedisStoreConfig};
pub use config::{FenceCheck, PublisherConfig, RedisConfig};
pub use conn::Servers;
pub use error::{ConnectError, RedisConfigError};
pub use inspect::RedisInspector;
pub use publisher::RedisPublisher;
pub use replicas::WaitReplicas;
pub use retention::Retention;
pub use sharded::members_key;
