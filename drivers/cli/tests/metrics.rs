//! `--metrics-addr` serves Prometheus text while a demo runs (and for `--metrics-linger`
//! after it): scraped once the summary is printed, the counters add up to the summary.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Kills the demo when the test ends, however it ends.
struct Demo(Child);

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `leasehold ARGS --metrics-addr … --metrics-linger 60s`, waits for its summary, and
/// returns the summary and one scrape taken then.
fn run_and_scrape(args: &[&str]) -> (String, HashMap<String, f64>) {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut demo = Demo(
        Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args(args)
            .args(["--metrics-addr", &addr, "--metrics-linger", "60s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary starts"),
    );
    let stdout = demo.0.stdout.take().expect("piped");
    let mut summary = String::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("utf-8 output");
        summary.push_str(&line);
        summary.push('\n');
        if line.starts_with("OK:") || line.starts_with("FAILED:") || line.contains("observed:") {
            break;
        }
    }
    assert!(!summary.is_empty(), "the demo printed nothing");
    (summary, scrape(&addr))
}

/// `GET /metrics`, parsed into `name{labels}` → value.
fn scrape(addr: &str) -> HashMap<String, f64> {
    let mut stream = TcpStream::connect(addr).expect("the exporter listens");
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("a response");
    let (head, body) = response.split_once("\r\n\r\n").expect("headers and a body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            Some((key.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The sum of every series of `name` whose labels include each of `labels` (`k="v"`).
fn sum(metrics: &HashMap<String, f64>, name: &str, labels: &[&str]) -> f64 {
    metrics
        .iter()
        .filter(|(key, _)| {
            key.split('{').next() == Some(name) && labels.iter().all(|l| key.contains(l))
        })
        .map(|(_, v)| v)
        .sum()
}

/// The number in the summary row `name`.
fn row(summary: &str, name: &str) -> f64 {
    summary
        .lines()
        .find_map(|l| {
            let rest = l.trim_start().strip_prefix(name)?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no row {name:?} in\n{summary}"))
}

#[test]
fn the_demo_serves_metrics_that_add_up_to_its_summary() {
    let (summary, m) =
        run_and_scrape(&["demo", "--messages", "300", "--rate", "0", "--no-progress"]);
    assert!(summary.contains("OK:"), "{summary}");
    let (published, retries) = (row(&summary, "messages"), row(&summary, "retries"));
    assert_eq!(sum(&m, "leasehold_acks_total", &[]), row(&summary, "acked"));
    assert_eq!(
        sum(&m, "leasehold_dead_letters_total", &[]),
        row(&summary, "dead-lettered")
    );
    assert_eq!(
        sum(&m, "leasehold_deliveries_total", &[]),
        published + retries,
        "every message once, and once more per retry"
    );
    assert_eq!(
        sum(&m, "leasehold_invocations_total", &[]),
        row(&summary, "invocations")
    );
    assert_eq!(sum(&m, "leasehold_invocations_running", &[]), 0.0);
    assert!(m
        .keys()
        .any(|k| k.starts_with("leasehold_handler_duration_seconds_bucket")));
}

#[test]
fn the_command_queue_demo_serves_metrics_that_add_up_to_its_summary() {
    let (summary, m) = run_and_scrape(&["commands", "--commands", "60"]);
    let status = |s: &str| {
        sum(
            &m,
            "leasehold_commands_total",
            &[&format!("status=\"{s}\"")],
        )
    };
    assert_eq!(status("submitted"), 60.0, "{summary}");
    assert_eq!(status("succeeded"), row(&summary, "SUCCEEDED"));
    assert_eq!(status("failed"), row(&summary, "FAILED"));
    assert_eq!(status("cancelled"), row(&summary, "CANCELLED"));
    assert_eq!(
        sum(&m, "leasehold_command_checks_total", &[]),
        row(&summary, "check_status calls")
    );
}
