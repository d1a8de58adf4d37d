//! Where the dashboard reads and acts: a [`Source`] names the streams and command queues to
//! show and hands out the inspector and the queues. [`RedisSource`] finds them on a Redis (or
//! is told); [`MemorySource`] shows an in-process backend, e.g. a demo's.

use std::future::Future;

use leasehold_commands::{CommandQueue, CommandStore};
use leasehold_core::{InspectError, Inspector};
use leasehold_tokio::TokioRuntime;

/// What to show: stream names and command queue names, each sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    /// Streams, by name.
    pub streams: Vec<String>,
    /// Command queues, by name.
    pub queues: Vec<String>,
}

/// A command queue the dashboard reads and acts on.
pub type Queue<S> = CommandQueue<S, TokioRuntime>;

/// Where the dashboard reads and acts.
pub trait Source: Send + Sync + 'static {
    /// Reads streams and acts on their dead letters.
    type Inspector: Inspector;
    /// Where command states live.
    type Store: CommandStore;

    /// The inspector.
    fn inspector(&self) -> &Self::Inspector;

    /// The streams and queues to show now. Called at start and then seldom (see
    /// [`Options::discover_every`](crate::Options::discover_every)).
    fn catalog(&self) -> impl Future<Output = Result<Catalog, InspectError>> + Send;

    /// The command queue `name`, one of the catalog's. Called once per queue; the dashboard
    /// keeps it.
    fn queue(&self, name: &str) -> impl Future<Output = Result<Queue<Self::Store>, String>> + Send;
}

#[cfg(feature = "redis")]
pub use self::redis::RedisSource;

#[cfg(feature = "redis")]
mod redis {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use leasehold_core::{InspectError, Shards};
    use leasehold_redis::{ConnectError, RedisCommandStore, RedisInspector, RedisStoreConfig};
    use leasehold_tokio::TokioRuntime;

    use super::{Catalog, Queue, Source};

    /// Most streams a discovery shows: each costs one inspector round per refresh.
    const DISCOVERED: usize = 200;

    /// Streams and command queues on one Redis.
    ///
    /// Named ones, or, when none is named, every stream of the database (a `SCAN … TYPE
    /// stream`, dead-letter and wake-up streams left out, at most 200), of which those named
    /// `leasehold:{q}:stream` are also shown as command queue `q`, and those named
    /// `leasehold:{q:i}:stream` as the shards of command queue `q` (its shard count: the
    /// highest shard found, plus one). Discovery needs no
    /// cooperation from the workers, so it sees deployments that predate the dashboard; its
    /// cost is one keyspace walk per discovery, which is why it runs seldom, and why naming
    /// the streams turns it off.
    #[derive(Debug, Clone)]
    pub struct RedisSource {
        url: String,
        inspector: RedisInspector,
        named: Option<Catalog>,
        /// The shard counts of the sharded command queues discovered.
        shards: Arc<Mutex<BTreeMap<String, u32>>>,
    }

    impl RedisSource {
        /// Connects to `url`; shows `streams` and `queues`, or discovers both if both are
        /// empty.
        ///
        /// # Errors
        ///
        /// A URL that does not parse, a server that refuses the credentials, or one that
        /// cannot be reached.
        pub async fn connect(
            url: &str,
            streams: Vec<String>,
            queues: Vec<String>,
        ) -> Result<Self, ConnectError> {
            let inspector = RedisInspector::connect(url).await?;
            let named = (!streams.is_empty() || !queues.is_empty()).then(|| {
                let (mut streams, mut queues) = (streams, queues);
                streams.sort();
                streams.dedup();
                queues.sort();
                queues.dedup();
                Catalog { streams, queues }
            });
            Ok(Self {
                url: url.into(),
                inspector,
                named,
                shards: Arc::default(),
            })
        }
    }

    /// The queue whose stream `key` is, and its shard if it is one (`leasehold:{q}:stream` →
    /// `q`, `leasehold:{q:3}:stream` → `q`, 3).
    fn queue_of(key: &str) -> Option<(&str, Option<u16>)> {
        let tag = key.strip_prefix("leasehold:")?.strip_suffix(":stream")?;
        if let Some((queue, shard)) = Shards::parse(tag) {
            return Some((queue, Some(shard)));
        }
        let queue = tag.strip_prefix('{')?.strip_suffix('}')?;
        (!queue.is_empty() && !queue.contains(['{', '}'])).then_some((queue, None))
    }

    impl Source for RedisSource {
        type Inspector = RedisInspector;
        type Store = RedisCommandStore;

        fn inspector(&self) -> &RedisInspector {
            &self.inspector
        }

        async fn catalog(&self) -> Result<Catalog, InspectError> {
            if let Some(named) = &self.named {
                return Ok(named.clone());
            }
            let streams = self.inspector.streams(DISCOVERED).await?;
            let mut queues: BTreeMap<String, u32> = BTreeMap::new();
            for (queue, shard) in streams.iter().filter_map(|key| queue_of(key)) {
                let count = shard.map_or(1, |shard| u32::from(shard) + 1);
                let known = queues.entry(queue.to_owned()).or_insert(count);
                *known = (*known).max(count);
            }
            let catalog = Catalog {
                streams,
                queues: queues.keys().cloned().collect(),
            };
            *self.shards.lock().unwrap_or_else(|e| e.into_inner()) = queues;
            Ok(catalog)
        }

        async fn queue(&self, name: &str) -> Result<Queue<RedisCommandStore>, String> {
            let shards = self
                .shards
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(name)
                .copied()
                .unwrap_or(1);
            let config = RedisStoreConfig::new(self.url.as_str(), name)
                .shards(shards)
                .map_err(|e| e.to_string())?;
            let store = RedisCommandStore::connect(config)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Queue::new(TokioRuntime::current(), store))
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn a_queue_is_known_by_its_stream() {
            assert_eq!(
                super::queue_of("leasehold:{vms}:stream"),
                Some(("vms", None))
            );
            assert_eq!(
                super::queue_of("leasehold:{vms:2}:stream"),
                Some(("vms", Some(2)))
            );
            assert_eq!(super::queue_of("leasehold:{vms}:stream:dead"), None);
            assert_eq!(super::queue_of("leasehold:{}:stream"), None);
            assert_eq!(super::queue_of("orders"), None);
        }
    }
}

#[cfg(feature = "memory")]
pub use self::memory::MemorySource;

#[cfg(feature = "memory")]
mod memory {
    use std::collections::BTreeMap;

    use leasehold_commands::MemoryCommandStore;
    use leasehold_core::InspectError;
    use leasehold_memory::MemoryInspector;

    use super::{Catalog, Queue, Source};

    /// The in-process backend: the streams a [`MemoryInspector`] knows, and command queues
    /// on [`MemoryCommandStore`]s.
    #[derive(Debug, Clone, Default)]
    pub struct MemorySource {
        inspector: MemoryInspector,
        queues: BTreeMap<String, Queue<MemoryCommandStore>>,
    }

    impl MemorySource {
        /// Shows the streams `inspector` knows.
        pub fn new(inspector: MemoryInspector) -> Self {
            Self {
                inspector,
                queues: BTreeMap::new(),
            }
        }

        /// Shows `queue` as `name` too.
        #[must_use]
        pub fn with_queue(
            mut self,
            name: impl Into<String>,
            queue: Queue<MemoryCommandStore>,
        ) -> Self {
            self.queues.insert(name.into(), queue);
            self
        }
    }

    impl Source for MemorySource {
        type Inspector = MemoryInspector;
        type Store = MemoryCommandStore;

        fn inspector(&self) -> &MemoryInspector {
            &self.inspector
        }

        async fn catalog(&self) -> Result<Catalog, InspectError> {
            Ok(Catalog {
                streams: self.inspector.names().map(str::to_owned).collect(),
                queues: self.queues.keys().cloned().collect(),
            })
        }

        async fn queue(&self, name: &str) -> Result<Queue<MemoryCommandStore>, String> {
            self.queues
                .get(name)
                .cloned()
                .ok_or_else(|| format!("no command queue named {name:?}"))
        }
    }
}
