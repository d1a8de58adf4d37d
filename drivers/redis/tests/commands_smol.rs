//! The command queue's Redis store on smol: the same worker, another runtime. Starts its own
//! `redis-server` on a free port and fails, never skips, if it cannot.

// The command queue's scenarios are leasehold-commands' own, written once for every store:
// included from there, run here on the Redis store.
#[path = "../../commands/tests/common/mod.rs"]
mod common;

use common::on_smol::polled_commands_and_a_cancel;
use leasehold_redis::{RedisCommandStore, RedisStoreConfig};
use leasehold_redis_harness::RedisServer;

#[test]
fn redis_store_on_smol() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
    smol::block_on(async {
        let store = RedisCommandStore::connect(RedisStoreConfig::new(server.url(), "smol"))
            .await
            .unwrap();
        polled_commands_and_a_cancel(store).await;
    });
}
