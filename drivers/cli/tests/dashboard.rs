//! `leasehold dashboard` as a process: it serves a stream on a throwaway redis-server until it
//! is stopped, and refuses to listen beyond loopback without a token (exit 2).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use leasehold_redis_harness::RedisServer;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn get(port: u16, path: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("receive");
    answer
}

#[test]
fn serves_a_stream_until_stopped() {
    let server =
        RedisServer::start().unwrap_or_else(|e| panic!("this test needs redis-server: {e}"));
    server
        .command(["XADD", "jobs", "*", "data", "{}"])
        .expect("XADD");
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["dashboard", "--stream", "jobs", "--bind"])
        .arg(format!("127.0.0.1:{port}"))
        .env("LEASEHOLD_REDIS_URL", server.url())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut stderr = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut stderr)
                .ok();
            panic!("exited {status}: {stderr}");
        }
        assert!(start.elapsed() < Duration::from_secs(30), "never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let page = get(port, "/");
    child.kill().expect("stop it");
    let _ = child.wait();
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("data-stream=\"jobs\""), "{page}");
    assert!(page.contains("data-field=\"length\">1<"), "{page}");
}

#[test]
fn an_open_bind_needs_a_token() {
    let output = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "dashboard",
            "--redis",
            "redis://127.0.0.1:1",
            "--bind",
            "0.0.0.0:0",
        ])
        .env_remove("LEASEHOLD_DASHBOARD_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("not a loopback address") && stderr.contains("--token"),
        "{stderr}"
    );
}
