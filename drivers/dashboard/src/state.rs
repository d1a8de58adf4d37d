//! What the handlers share: the source, the latest snapshot, the open command queues, a
//! short-lived cache of rendered pages, the notices of finished actions, the CSRF secret.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::sampler::Snapshot;
use crate::source::{Queue, Source};
use crate::Options;

/// Everything a request may touch.
pub(crate) struct Shared<S: Source> {
    pub source: Arc<S>,
    pub options: Options,
    pub queues: Arc<Queues<S>>,
    pub snapshot: watch::Receiver<Arc<Snapshot>>,
    pub pages: Cache,
    pub notices: Notices,
    /// Put in every form and checked on every POST: another site's page cannot read it, so
    /// it cannot forge an action.
    pub csrf: String,
}

impl<S: Source> Shared<S> {
    pub fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(&self.snapshot.borrow())
    }
}

/// The command queues opened so far, by name.
pub(crate) struct Queues<S: Source> {
    open: tokio::sync::Mutex<BTreeMap<String, Queue<S::Store>>>,
}

impl<S: Source> Default for Queues<S> {
    fn default() -> Self {
        Self {
            open: tokio::sync::Mutex::default(),
        }
    }
}

impl<S: Source> Queues<S> {
    /// Queue `name`, opened through `source` the first time.
    pub async fn get(&self, source: &S, name: &str) -> Result<Queue<S::Store>, String> {
        let mut open = self.open.lock().await;
        if let Some(queue) = open.get(name) {
            return Ok(queue.clone());
        }
        let queue = source.queue(name).await?;
        open.insert(name.to_owned(), queue.clone());
        Ok(queue)
    }
}

/// Rendered pages by URL, kept for one refresh interval: viewers of the same page within it
/// share one read (the lock is held while reading, so they never race to read it twice).
pub(crate) struct Cache {
    ttl: Duration,
    entries: tokio::sync::Mutex<HashMap<String, (Instant, Arc<str>)>>,
}

impl Cache {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: tokio::sync::Mutex::default(),
        }
    }

    /// The page at `key`, rendered by `render` unless a fresh copy is kept. Failures are not
    /// kept.
    pub async fn get_or<F>(&self, key: &str, render: F) -> Result<Arc<str>, String>
    where
        F: Future<Output = Result<String, String>>,
    {
        let mut entries = self.entries.lock().await;
        let now = Instant::now();
        if let Some((at, page)) = entries.get(key) {
            if now.duration_since(*at) < self.ttl {
                return Ok(Arc::clone(page));
            }
        }
        let page: Arc<str> = render.await?.into();
        entries.retain(|_, (at, _)| now.duration_since(*at) < self.ttl);
        entries.insert(key.to_owned(), (now, Arc::clone(&page)));
        Ok(page)
    }

    /// Forgets every page: an action changed what they show.
    pub async fn clear(&self) {
        self.entries.lock().await.clear();
    }
}

/// What an action did, shown once on the page it returns to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Notice {
    pub ok: bool,
    pub text: String,
}

/// Notices waiting to be shown, by number (the last 100 at most, for 5 minutes).
#[derive(Default)]
pub(crate) struct Notices {
    inner: Mutex<NoticeLog>,
}

#[derive(Default)]
struct NoticeLog {
    last: u64,
    kept: VecDeque<(u64, Instant, Notice)>,
}

impl Notices {
    const KEPT: usize = 100;
    const FOR: Duration = Duration::from_secs(300);

    /// Keeps `notice`; its number, for the page's URL.
    pub fn add(&self, notice: Notice) -> u64 {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.last += 1;
        let number = inner.last;
        if inner.kept.len() == Self::KEPT {
            inner.kept.pop_front();
        }
        inner.kept.push_back((number, Instant::now(), notice));
        number
    }

    /// Notice `number`, if it is still kept.
    pub fn get(&self, number: u64) -> Option<Notice> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .kept
            .iter()
            .find(|(n, at, _)| *n == number && at.elapsed() < Self::FOR)
            .map(|(_, _, notice)| notice.clone())
    }
}

/// 128 random bits as hex.
pub(crate) fn secret() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `a` and `b` are equal, in time that does not depend on where they differ.
pub(crate) fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_page_is_read_once_per_interval() {
        let cache = Cache::new(Duration::from_secs(3600));
        let reads = std::sync::atomic::AtomicUsize::new(0);
        let render = || async {
            reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, String>("page".to_owned())
        };
        for _ in 0..3 {
            assert_eq!(&*cache.get_or("/a", render()).await.unwrap(), "page");
        }
        cache.get_or("/b", render()).await.unwrap();
        assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 2);
        cache.clear().await;
        cache.get_or("/a", render()).await.unwrap();
        assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 3);
        let failed = cache.get_or("/c", async { Err("down".to_owned()) }).await;
        assert_eq!(failed, Err("down".to_owned()));
    }

    #[test]
    fn notices_are_shown_by_number_and_kept_a_while() {
        let notices = Notices::default();
        let first = notices.add(Notice {
            ok: true,
            text: "requeued 3".into(),
        });
        assert_eq!(
            notices.get(first).map(|n| n.text),
            Some("requeued 3".into())
        );
        assert_eq!(notices.get(first + 1), None);
        for i in 0..Notices::KEPT {
            notices.add(Notice {
                ok: false,
                text: i.to_string(),
            });
        }
        assert_eq!(notices.get(first), None, "only the last 100 are kept");
    }

    #[test]
    fn secrets_are_random_and_compared_whole() {
        let (a, b) = (secret().unwrap(), secret().unwrap());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(same_secret(&a, &a.clone()));
        assert!(!same_secret(&a, &b));
        assert!(!same_secret(&a, &a[..31]));
    }
}
