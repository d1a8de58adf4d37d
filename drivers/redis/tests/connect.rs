//! Connecting the way production does: an ACL user with a password, and `rediss://` (TLS, the
//! server's certificate verified against a CA). Each test starts its own `redis-server`.

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use leasehold_core::{Backend, ErrorKind, LeaseRef, SettleResult};
use leasehold_redis::{RedisBackend, RedisConfig};
use leasehold_redis_harness::RedisServer;

/// Publish, fetch, ack: the connection really carries lease operations.
async fn round_trip(backend: &RedisBackend) {
    let id = backend.publish(Bytes::from_static(b"hi")).await.unwrap();
    let batch = backend.fetch(10, Duration::ZERO).await.unwrap();
    assert_eq!(batch.len(), 1);
    assert_eq!((&batch[0].id, &batch[0].payload[..]), (&id, &b"hi"[..]));
    let lease = LeaseRef::from(&batch[0]);
    assert_eq!(backend.ack(&[lease]).await.unwrap(), [SettleResult::Ok]);
}

#[tokio::test]
async fn an_acl_user_with_a_password_connects_and_a_wrong_password_is_a_fatal_error() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("needs redis-server: {e}"));
    server
        .command([
            "ACL", "SETUSER", "worker", "on", ">s3cret", "~*", "&*", "+@all",
        ])
        .unwrap();
    let port = server.port();
    let url = format!("redis://worker:s3cret@127.0.0.1:{port}/");
    let backend = RedisBackend::connect(RedisConfig::new(url, "jobs", "workers"))
        .await
        .expect("an ACL user connects");
    round_trip(&backend).await;

    let wrong = format!("redis://worker:nope@127.0.0.1:{port}/");
    let error = RedisBackend::connect(RedisConfig::new(wrong, "jobs", "workers"))
        .await
        .expect_err("a wrong password must not connect");
    assert_eq!(
        error.kind(),
        ErrorKind::Fatal,
        "retrying will not help: {error}"
    );
}

/// Runs `openssl` with `args` in `dir`, failing the test with its output if it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("this test needs the openssl command line tool: {e}"));
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA, and a server certificate for 127.0.0.1 that it signed.
fn certificates(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=leasehold test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.pem",
        ],
    );
}

#[tokio::test]
async fn rediss_urls_connect_over_verified_tls() {
    let certs = tempdir();
    certificates(&certs);
    let tls_port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let path = |name: &str| certs.join(name).to_string_lossy().into_owned();
    let server = RedisServer::builder()
        .args([
            "--tls-port".to_owned(),
            tls_port.to_string(),
            "--tls-cert-file".to_owned(),
            path("server.pem"),
            "--tls-key-file".to_owned(),
            path("server.key"),
            "--tls-ca-cert-file".to_owned(),
            path("ca.pem"),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
        ])
        .start()
        .unwrap_or_else(|e| panic!("needs redis-server built with TLS (Debian's is): {e}"));
    // rustls trusts the platform's roots; SSL_CERT_FILE points them at the test CA. This test
    // binary holds no other test that connects with TLS, so the variable stays local to it.
    std::env::set_var("SSL_CERT_FILE", path("ca.pem"));
    let url = format!("rediss://127.0.0.1:{tls_port}/");
    let backend = RedisBackend::connect(RedisConfig::new(url, "jobs", "workers"))
        .await
        .unwrap_or_else(|e| panic!("rediss:// must connect: {e}\n{}", server.log_tail()));
    round_trip(&backend).await;
    std::fs::remove_dir_all(&certs).ok();
}

/// A fresh directory under the system's temp dir.
fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "leasehold-tls-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A configuration that cannot work is a `ConnectError::Config` before anything is sent, and
/// its text never repeats the URL, which may hold a password.
#[tokio::test]
async fn a_bad_configuration_is_a_config_error_that_keeps_the_password_out() {
    use leasehold_redis::{ConnectError, RedisConfigError};
    for url in [
        "redis://:hunter2@127.0.0.1:notaport/",
        "ftp://:hunter2@127.0.0.1/",
    ] {
        let error = RedisBackend::connect(RedisConfig::new(url, "jobs", "workers"))
            .await
            .expect_err("no such URL connects");
        assert!(
            matches!(error, ConnectError::Config(RedisConfigError::Url(_))),
            "{error:?}"
        );
        assert_eq!(error.kind(), ErrorKind::Fatal);
        assert!(!error.to_string().contains("hunter2"), "{error}");
        assert!(!format!("{error:?}").contains("hunter2"), "{error:?}");
    }
    let error = RedisBackend::connect(RedisConfig::new("redis://127.0.0.1:1/", "", "workers"))
        .await
        .expect_err("an empty stream name");
    assert!(
        matches!(
            error,
            ConnectError::Config(RedisConfigError::Empty("stream"))
        ),
        "{error:?}"
    );
}
