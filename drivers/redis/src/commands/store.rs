//! [`CommandStore`] for [`RedisCommandStore`]: the scripts of the parent module, pub/sub for
//! cancels, and a [`RedisBackend`] per shard for the workers.

use std::time::Duration;

use futures::StreamExt;
use leasehold_commands::{
    merge_listings, CancelFeed, CommandState, CommandStore, Listing, Page, Status, StatusCounts,
    StoreError, Submit,
};

use super::{decode, to_json, RedisCommandStore, FIELD};
use crate::backend::RedisBackend;
use crate::error::error as redis_error;
use crate::keys::{command_state_key, command_status_key};
use crate::scripts::COMMAND_SUBMIT;

impl CommandStore for RedisCommandStore {
    type Backend = RedisBackend;
    type Payload = bytes::Bytes;

    fn queue(&self) -> &str {
        &self.config.queue
    }

    async fn submit(&self, state: &CommandState, entry: &[u8]) -> Result<Submit, StoreError> {
        let (mut cmd, stream) = self.writing(&COMMAND_SUBMIT, &state.id);
        cmd.arg(state.version)
            .arg(to_json(state))
            .arg(self.ttl_ms())
            .arg(FIELD)
            .arg(entry)
            .arg(&state.id)
            .arg(state.status.to_string())
            .arg(state.status_changed_at)
            .arg(command_state_key(self.tag_of(&state.id), ""));
        let (created, existing): (i64, Option<String>) = self
            .write(&COMMAND_SUBMIT, &cmd, stream)
            .await
            .map_err(|e| redis_error("submit", e))?;
        match (created, existing) {
            (1, _) => Ok(Submit::Created),
            (_, Some(json)) => Ok(Submit::Exists(Box::new(decode(&json)?))),
            (_, None) => Err(StoreError::fatal("submit script: unexpected reply")),
        }
    }

    async fn load(&self, id: &str) -> Result<Option<CommandState>, StoreError> {
        let json: Option<String> = redis::cmd("HGET")
            .arg(self.state_key(id))
            .arg("state")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| redis_error("load", e))?;
        json.as_deref().map(decode).transpose()
    }

    async fn compare_and_set(&self, state: &CommandState) -> Result<bool, StoreError> {
        self.cas(state, None).await
    }

    async fn requeue(&self, state: &CommandState, entry: &[u8]) -> Result<bool, StoreError> {
        self.cas(state, Some(entry)).await
    }

    async fn counts(&self) -> Result<StatusCounts, StoreError> {
        let mut all = [0; 5];
        // One pipeline per shard: on a cluster, a pipeline's keys must share a slot.
        for tag in &self.tags {
            let mut pipe = redis::pipe();
            for status in Status::ALL {
                pipe.zcard(command_status_key(tag, status));
            }
            let counts: Vec<u64> = pipe
                .query_async(&mut self.conn.clone())
                .await
                .map_err(|e| redis_error("counts", e))?;
            for (slot, count) in all.iter_mut().zip(counts) {
                *slot += count;
            }
        }
        Ok(StatusCounts::new(all))
    }

    async fn list(&self, status: Status, page: &Page) -> Result<Listing, StoreError> {
        if let [tag] = self.tags.as_slice() {
            return self.list_shard(tag, status, page).await;
        }
        let pages = self
            .tags
            .iter()
            .map(|tag| self.list_shard(tag, status, page));
        let listings = futures::future::try_join_all(pages).await?;
        Ok(merge_listings(listings, page))
    }

    async fn announce_cancel(&self, id: &str) -> Result<(), StoreError> {
        redis::cmd("PUBLISH")
            .arg(&self.channel)
            .arg(id)
            .query_async::<i64>(&mut self.conn.clone())
            .await
            .map(drop)
            .map_err(|e| redis_error("announce cancel", e))
    }

    async fn cancels(&self) -> Result<CancelFeed, StoreError> {
        let mut pubsub = self.config.servers.pubsub().await?;
        pubsub
            .subscribe(&self.channel)
            .await
            .map_err(|e| redis_error("subscribe", e))?;
        Ok(Box::pin(pubsub.into_on_message().filter_map(
            |msg| async move { msg.get_payload::<String>().ok() },
        )))
    }

    async fn consumer(&self, claim_timeout: Duration) -> Result<RedisBackend, StoreError> {
        if self.streams.len() > 1 {
            return Err(StoreError::fatal(format!(
                "command queue {:?} has {} shards: a worker consumes each \
                 (CommandStore::consumers)",
                self.config.queue,
                self.streams.len()
            )));
        }
        self.shard_consumer(0, claim_timeout).await
    }

    async fn consumers(
        &self,
        claim_timeout: Duration,
    ) -> Result<Vec<(String, RedisBackend)>, StoreError> {
        if self.streams.len() == 1 {
            let backend = self.shard_consumer(0, claim_timeout).await?;
            return Ok(vec![(self.config.queue.clone(), backend)]);
        }
        let mut consumers = Vec::with_capacity(self.streams.len());
        for (shard, name) in self.routing.streams().enumerate() {
            let backend = self.shard_consumer(shard, claim_timeout).await?;
            consumers.push((name, backend));
        }
        Ok(consumers)
    }
}

impl RedisCommandStore {
    /// A consumer of shard `shard`'s stream.
    async fn shard_consumer(
        &self,
        shard: usize,
        claim_timeout: Duration,
    ) -> Result<RedisBackend, StoreError> {
        let config = self
            .config
            .stream_config(&self.streams[shard])
            .claim_timeout(claim_timeout);
        Ok(RedisBackend::connect(config).await?)
    }
}
