//! The harness against the real `redis-server`: start, parallel servers, kill/restart with and
//! without AOF, clean stop, cleanup on drop, and the errors a test author would meet.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use leasehold_redis_harness::{Error, RedisServer, Reply};

/// PING over a raw socket, independent of the harness's own client.
fn raw_ping(port: u16) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"*1\r\n$4\r\nPING\r\n")?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    Ok(line)
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(Some(s.as_bytes().to_vec()))
}

#[test]
fn start_answers_ping_then_stop_ends_the_process() {
    let server = RedisServer::start().unwrap();
    let port = server.port();
    assert_ne!(port, 6379);
    assert_eq!(server.url(), format!("redis://127.0.0.1:{port}/"));
    assert_eq!(server.addr().port(), port);
    assert!(server.dir().is_dir());
    assert!(server.is_running());
    assert_eq!(raw_ping(port).unwrap(), "+PONG\r\n");
    assert_eq!(
        server.command(["PING"]).unwrap(),
        Reply::Simple("PONG".into())
    );

    // Persistence is off by default; the log goes to the temp dir.
    let save = server.command(["CONFIG", "GET", "save"]).unwrap();
    assert_eq!(save, Reply::Array(Some(vec![bulk("save"), bulk("")])));
    let aof = server.command(["CONFIG", "GET", "appendonly"]).unwrap();
    assert_eq!(
        aof,
        Reply::Array(Some(vec![bulk("appendonly"), bulk("no")]))
    );
    assert!(server.dir().join("redis.log").is_file());

    server.stop().unwrap();
    assert!(!server.is_running());
    assert_eq!(server.pid(), None);
    assert!(
        server.log_tail().contains("ready to exit"),
        "{}",
        server.log_tail()
    );
    assert!(matches!(
        server.command(["PING"]),
        Err(Error::NotRunning { port: p }) if p == port
    ));
    // Stopping or killing a stopped server is a no-op.
    server.stop().unwrap();
    server.kill().unwrap();
}

#[test]
fn parallel_servers_get_their_own_ports_and_data() {
    let handles: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(|| RedisServer::start().unwrap()))
        .collect();
    let servers: Vec<RedisServer> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let mut ports: Vec<u16> = servers.iter().map(RedisServer::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), servers.len(), "ports collided: {ports:?}");

    for (i, server) in servers.iter().enumerate() {
        let reply = server.command(["SET", "who", &i.to_string()]).unwrap();
        assert_eq!(reply, Reply::Simple("OK".into()));
    }
    for (i, server) in servers.iter().enumerate() {
        assert_eq!(
            server.command(["GET", "who"]).unwrap(),
            bulk(&i.to_string())
        );
        assert_ne!(server.dir(), servers[(i + 1) % servers.len()].dir());
    }
}

#[test]
fn kill_then_restart_with_aof_keeps_acknowledged_writes() {
    let server = RedisServer::builder().aof(true).start().unwrap();
    let port = server.port();
    let url = server.url();
    let aof = server.command(["CONFIG", "GET", "appendfsync"]).unwrap();
    assert_eq!(
        aof,
        Reply::Array(Some(vec![bulk("appendfsync"), bulk("always")]))
    );

    // Written over a raw socket, as a client under test would.
    let mut stream = TcpStream::connect(server.addr()).unwrap();
    stream
        .write_all(b"*3\r\n$3\r\nSET\r\n$7\r\ndurable\r\n$3\r\nyes\r\n")
        .unwrap();
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line).unwrap();
    assert_eq!(line, "+OK\r\n");
    let xadd = server
        .command(["XADD", "{s}", "*", "data", "payload"])
        .unwrap();
    assert!(matches!(xadd, Reply::Bulk(Some(_))), "{xadd:?}");

    let old_pid = server.pid().unwrap();
    server.kill().unwrap();
    assert!(!server.is_running());
    drop(stream);

    server.restart().unwrap();
    assert!(server.is_running());
    assert_ne!(server.pid(), Some(old_pid));
    assert_eq!(server.port(), port);
    assert_eq!(server.url(), url);
    assert_eq!(server.command(["GET", "durable"]).unwrap(), bulk("yes"));
    assert_eq!(server.command(["XLEN", "{s}"]).unwrap(), Reply::Integer(1));

    // And once more after a clean stop.
    server.command(["SET", "second", "2"]).unwrap();
    server.stop().unwrap();
    server.restart().unwrap();
    assert_eq!(server.command(["GET", "second"]).unwrap(), bulk("2"));
    assert_eq!(server.command(["GET", "durable"]).unwrap(), bulk("yes"));
}

#[test]
fn without_aof_a_killed_server_restarts_empty() {
    let server = RedisServer::start().unwrap();
    server.command(["SET", "k", "v"]).unwrap();
    server.kill().unwrap();
    server.restart().unwrap();
    assert_eq!(server.command(["GET", "k"]).unwrap(), Reply::Bulk(None));
}

#[test]
fn restart_of_a_running_server_stops_it_first() {
    let server = RedisServer::start().unwrap();
    let old_pid = server.pid().unwrap();
    server.restart().unwrap();
    let new_pid = server.pid().unwrap();
    assert_ne!(old_pid, new_pid);
    assert_eq!(raw_ping(server.port()).unwrap(), "+PONG\r\n");
}

#[test]
fn drop_kills_the_process_and_removes_the_dir() {
    let server = RedisServer::builder().aof(true).start().unwrap();
    server.command(["SET", "k", "v"]).unwrap();
    let dir = server.dir().to_path_buf();
    let pid = server.pid().unwrap();
    let port = server.port();
    assert!(dir.join("appendonlydir").is_dir());
    drop(server);
    assert!(!dir.exists(), "{} still exists", dir.display());
    // Whatever answers on the port now (normally nothing), it is not our process.
    if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) {
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream
            .write_all(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")
            .unwrap();
        let mut info = String::new();
        let _ = std::io::Read::read_to_string(&mut stream, &mut info);
        assert!(!info.contains(&format!("process_id:{pid}\r\n")));
    }
}

#[test]
fn drop_after_kill_and_stop_is_fine() {
    let killed = RedisServer::start().unwrap();
    killed.kill().unwrap();
    let dir = killed.dir().to_path_buf();
    drop(killed);
    assert!(!dir.exists());

    let stopped = RedisServer::start().unwrap();
    stopped.stop().unwrap();
    drop(stopped);
}

#[test]
fn missing_binary_says_how_to_install_redis() {
    let err = RedisServer::builder()
        .binary("/nonexistent/redis-server")
        .start()
        .unwrap_err();
    assert!(matches!(err, Error::NotInstalled { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("/nonexistent/redis-server"), "{msg}");
    assert!(msg.contains("apt-get install -y redis-server"), "{msg}");
    assert!(msg.contains(".ci/run"), "{msg}");
    assert!(std::error::Error::source(&err).is_some());
}

#[test]
fn a_server_that_exits_at_startup_reports_its_log() {
    let err = RedisServer::builder()
        .arg("--no-such-directive")
        .arg("1")
        .start()
        .unwrap_err();
    match &err {
        Error::Exited { log_tail, .. } => {
            assert!(log_tail.contains("no-such-directive"), "{log_tail}");
        }
        other => panic!("expected Exited, got {other:?}"),
    }
    assert!(err.to_string().contains("no-such-directive"));
}

#[test]
fn extra_args_reach_the_server() {
    let server = RedisServer::builder()
        .args(["--maxmemory", "7mb"])
        .start()
        .unwrap();
    let reply = server.command(["CONFIG", "GET", "maxmemory"]).unwrap();
    assert_eq!(
        reply,
        Reply::Array(Some(vec![
            bulk("maxmemory"),
            bulk(&(7 * 1024 * 1024).to_string())
        ]))
    );
}

#[test]
fn password_protects_the_server_and_is_in_the_url() {
    let server = RedisServer::builder().password("s3cret/@").start().unwrap();
    assert_eq!(
        server.url(),
        format!("redis://:s3cret%2F%40@127.0.0.1:{}/", server.port())
    );
    // The harness authenticates; a raw client does not get in.
    assert_eq!(
        server.command(["PING"]).unwrap(),
        Reply::Simple("PONG".into())
    );
    let raw = raw_ping(server.port()).unwrap();
    assert!(raw.starts_with("-NOAUTH"), "{raw}");
    server.kill().unwrap();
    server.restart().unwrap();
    server.stop().unwrap();
}

#[test]
fn the_server_can_be_shared_across_threads() {
    let server = std::sync::Arc::new(RedisServer::builder().aof(true).start().unwrap());
    server.command(["SET", "k", "v"]).unwrap();
    let killer = {
        let server = std::sync::Arc::clone(&server);
        std::thread::spawn(move || {
            server.kill().unwrap();
            server.restart().unwrap();
        })
    };
    killer.join().unwrap();
    assert_eq!(server.command(["GET", "k"]).unwrap(), bulk("v"));
}

#[test]
fn restart_waits_for_a_busy_port_then_reports_it() {
    let server = RedisServer::builder()
        .startup_timeout(Duration::from_secs(2))
        .start()
        .unwrap();
    server.kill().unwrap();
    // Someone else takes the port while the server is down.
    let squatter = std::net::TcpListener::bind(server.addr()).unwrap();
    let err = server.restart().unwrap_err();
    match &err {
        Error::PortInUse { port, log_tail } => {
            assert_eq!(*port, server.port());
            assert!(log_tail.contains("Address already in use"), "{log_tail}");
        }
        other => panic!("expected PortInUse, got {other:?}"),
    }
    assert!(!server.is_running());
    drop(squatter);
    server.restart().unwrap();
    assert_eq!(raw_ping(server.port()).unwrap(), "+PONG\r\n");
}
