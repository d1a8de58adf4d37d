//! What a worker tells operators, captured for a test: its log lines (a `tracing` subscriber
//! for the current thread) and its metrics (a `metrics` recorder local to the worker's start).
//!
//! Both are scoped to one test, so tests running in parallel do not see each other's output:
//! the log capture is the thread's default subscriber (the suite runs each behaviour on one
//! thread), and the metric handles a worker makes at its start bind to the recorder installed
//! then ([`Metrics::start`]).

use std::io;
use std::sync::{Arc, Mutex};

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use tracing::subscriber::DefaultGuard;

/// Every log line of the current thread while it lives, formatted as `fmt` prints them
/// (level, spans with their fields, target, message, fields), without time or colour.
pub struct Logs {
    buffer: Arc<Mutex<Vec<u8>>>,
    _guard: DefaultGuard,
}

impl Logs {
    /// Captures everything down to TRACE.
    pub fn capture() -> Self {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = {
            let buffer = buffer.clone();
            move || Writer(buffer.clone())
        };
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .without_time()
            .with_writer(writer)
            .finish();
        Self {
            buffer,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    /// The lines so far.
    pub fn lines(&self) -> Vec<String> {
        let bytes = self.buffer.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(|line| line.trim_start().to_owned())
            .collect()
    }

    /// The lines at `level` ("ERROR", "WARN", "INFO", "DEBUG", "TRACE").
    pub fn at(&self, level: &str) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|line| line.split_whitespace().next() == Some(level))
            .collect()
    }

    /// The lines above DEBUG (INFO, WARN, ERROR).
    pub fn above_debug(&self) -> Vec<String> {
        let mut lines = self.at("INFO");
        lines.extend(self.at("WARN"));
        lines.extend(self.at("ERROR"));
        lines
    }

    /// The lines containing every one of `parts`.
    pub fn with(&self, parts: &[&str]) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|line| parts.iter().all(|part| line.contains(part)))
            .collect()
    }
}

struct Writer(Arc<Mutex<Vec<u8>>>);

impl io::Write for Writer {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The metrics of the workers started through it, or of the whole process
/// ([`Metrics::global`]).
pub struct Metrics {
    /// `None` once installed as the process's recorder.
    recorder: Option<DebuggingRecorder>,
    snapshotter: Snapshotter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// An empty recorder.
    pub fn new() -> Self {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        Self {
            recorder: Some(recorder),
            snapshotter,
        }
    }

    /// A recorder for everything the process records, wherever: for a test binary of one
    /// test whose metrics are recorded on many threads. Panics if a recorder is installed.
    pub fn global() -> Self {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::set_global_recorder(recorder).expect("no metrics recorder installed yet");
        Self {
            recorder: None,
            snapshotter,
        }
    }

    /// Runs `start` (a worker's start) with this recorder installed, so the handles the worker
    /// makes record here for its whole life.
    pub fn start<T>(&self, start: impl FnOnce() -> T) -> T {
        match &self.recorder {
            Some(recorder) => metrics::with_local_recorder(recorder, start),
            None => start(),
        }
    }

    /// What was recorded so far. Histograms hand their values to one snapshot only: take one
    /// when the scenario is over.
    pub fn snapshot(&self) -> Recorded {
        Recorded(
            self.snapshotter
                .snapshot()
                .into_vec()
                .into_iter()
                .map(|(key, _, _, value)| (key, value))
                .collect(),
        )
    }
}

/// A snapshot of what a [`Metrics`] recorded.
pub struct Recorded(Vec<(metrics_util::CompositeKey, DebugValue)>);

impl Recorded {
    fn find(&self, kind: MetricKind, name: &str, labels: &[(&str, &str)]) -> Option<&DebugValue> {
        self.0
            .iter()
            .find(|(key, _)| {
                key.kind() == kind
                    && key.key().name() == name
                    && labels.iter().all(|(k, v)| {
                        key.key()
                            .labels()
                            .any(|label| label.key() == *k && label.value() == *v)
                    })
            })
            .map(|(_, value)| value)
    }

    /// A counter's value (0 if it was never registered).
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        match self.find(MetricKind::Counter, name, labels) {
            Some(DebugValue::Counter(n)) => *n,
            _ => 0,
        }
    }

    /// A gauge's value, if it was registered.
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        match self.find(MetricKind::Gauge, name, labels) {
            Some(DebugValue::Gauge(v)) => Some(v.into_inner()),
            _ => None,
        }
    }

    /// The values a histogram recorded.
    pub fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        match self.find(MetricKind::Histogram, name, labels) {
            Some(DebugValue::Histogram(values)) => values.iter().map(|v| v.into_inner()).collect(),
            _ => Vec::new(),
        }
    }

    /// Every metric name registered, sorted, without duplicates.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .0
            .iter()
            .map(|(key, _)| key.key().name().to_owned())
            .collect();
        names.sort();
        names.dedup();
        names
    }
}
