//! # leasehold-redis: the Redis Streams backend
//!
//! One [`RedisBackend`] is one consumer of one stream's consumer group. Its lease operations
//! are Lua scripts that check, per entry, that this consumer owns it **and** that its delivery
//! count still equals the lease's fence, then act, answering per entry:
//!
//! - renew = owner-checked `XCLAIM … 0 id JUSTID` (resets idle, keeps the count): a late
//!   heartbeat can never steal back an entry a peer reclaimed;
//! - ack = owner-checked `XACK`, then the entry is deleted: entries below the group's oldest
//!   pending one go with one exact `XTRIM MINID`, the rest by `XDEL`. A stale worker's ack
//!   never deletes the new owner's delivery. Like `XDEL`, this assumes the stream is consumed by
//!   this one group (an entry the group skipped with `XGROUP SETID` is trimmed too);
//! - release with delay `d` = owner-checked `XCLAIM … IDLE (claim_timeout - d) JUSTID`: anyone
//!   may reclaim it once `d` has passed, with no extra keys (delays cap at the claim timeout);
//! - dead-letter = owner-checked copy to `{stream}:dead` (reason, delivery count, fields) +
//!   `XACK` + `XDEL`, atomically.
//!
//! A fetch reads new entries with `XREADGROUP … >`, pipelined with an `XPENDING … IDLE` that
//! tells whether any entry has lapsed. While some have, the fetch is one script: `XAUTOCLAIM`
//! (min-idle = claim timeout, cursor carried between calls, moved up to the first lapsed
//! entry that the script's `XPENDING … IDLE` finds, so its bounded scan is not spent on live
//! entries ahead of it) and `XREADGROUP … >`, taking turns
//! going first with at most half of `max`, the other kind taking the rest, so neither starves
//! the other. Every delivery carries its delivery count, which is its fence. Entries without
//! the payload field are dead-lettered on the spot. When nothing is there, the fetch waits on a
//! **dedicated connection** with `XREAD BLOCK`, which consumes nothing (so a dropped wait loses
//! nothing) and never delays a heartbeat on the command connection. Both connections reconnect
//! with backoff; a wrong password or TLS setup fails `connect` at once. A vanished group
//! (`NOGROUP`) is recreated by the next fetch; its leases are reported lost. Keys are
//! hash-tagged so every script is Redis Cluster safe.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod config;
mod error;
mod inspect;

pub use backend::{check_credentials, client, RedisBackend};
pub use config::{ConnectError, RedisConfig, RedisConfigError};
pub use error::{classify, error as backend_error};
pub use inspect::RedisInspector;
