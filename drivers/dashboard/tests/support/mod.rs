//! What the dashboard's end-to-end tests start and stop: headless Chromium behind
//! chromedriver, on a free loopback port; and a bare HTTP/1.1 client for status codes and
//! headers.

#![allow(dead_code)] // each test file uses part of it

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};

use hyper_util::client::legacy::connect::HttpConnector;

/// How the tests' browser is installed where it is missing.
pub const INSTALL: &str = "apt-get install -y chromium chromium-driver";

/// How long a test waits for something that should happen soon (never asserted as a time).
pub const PATIENCE: Duration = Duration::from_secs(20);

/// chromedriver with a headless Chromium session; both stop when it is dropped.
pub struct Browser {
    pub client: Client,
    driver: Child,
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| PathBuf::from(dir).join(name))
        .find(|path| path.is_file())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Browser {
    /// Starts chromedriver (`LEASEHOLD_CHROMEDRIVER`, or `chromedriver` on the PATH) and a
    /// headless session. A missing browser fails the test with the command that installs it.
    pub async fn start() -> Self {
        let driver = std::env::var_os("LEASEHOLD_CHROMEDRIVER")
            .map(PathBuf::from)
            .or_else(|| on_path("chromedriver"))
            .unwrap_or_else(|| {
                panic!("the dashboard's browser tests need chromedriver and chromium: {INSTALL}")
            });
        let chromium = ["chromium", "chromium-browser", "google-chrome"]
            .into_iter()
            .find_map(on_path)
            .unwrap_or_else(|| {
                panic!("the dashboard's browser tests need chromium and chromedriver: {INSTALL}")
            });
        let port = free_port();
        let mut child = Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}; {INSTALL}", driver.display()));
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if start.elapsed() > PATIENCE || child.try_wait().ok().flatten().is_some() {
                let _ = child.kill();
                panic!("chromedriver did not start on port {port}; {INSTALL}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,860",
                         "--force-device-scale-factor=1"],
            }),
        );
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| {
                let _ = child.kill();
                panic!("chromedriver could not start chromium: {e}; {INSTALL}")
            });
        Self {
            client,
            driver: child,
        }
    }

    /// The text of the first element matching `css`, as shown. Read in one script, so a
    /// swap of the page's live part cannot come between finding and reading.
    pub async fn text(&self, css: &str) -> String {
        let script =
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : null";
        match self.client.execute(script, vec![css.into()]).await {
            Ok(serde_json::Value::String(text)) => text.trim().to_owned(),
            other => panic!("no {css}: {other:?}"),
        }
    }

    /// Waits until the first element matching `css` shows `expected` (the page updates itself
    /// once per refresh), and fails with what it shows if it never does.
    pub async fn wait_text(&self, css: &str, expected: &str) {
        let start = Instant::now();
        loop {
            let script =
                "const e = document.querySelector(arguments[0]); return e ? e.innerText : null";
            let shown = self.client.execute(script, vec![css.into()]).await;
            match shown {
                Ok(serde_json::Value::String(text)) if text.trim() == expected => return,
                other if start.elapsed() > PATIENCE => {
                    panic!("{css} shows {other:?}, not {expected:?}")
                }
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// How many elements match `css`.
    pub async fn count(&self, css: &str) -> usize {
        let script = "return document.querySelectorAll(arguments[0]).length";
        match self.client.execute(script, vec![css.into()]).await {
            Ok(serde_json::Value::Number(n)) => n.as_u64().unwrap_or_default() as usize,
            other => panic!("cannot count {css}: {other:?}"),
        }
    }

    /// Waits until an element matches `css` (the page updating itself, or loading).
    pub async fn wait_for(&self, css: &str) {
        let found = self
            .client
            .wait()
            .at_most(PATIENCE)
            .for_element(Locator::Css(css))
            .await;
        if let Err(e) = found {
            let url = self.client.current_url().await.map(|u| u.to_string());
            let source = self.client.source().await.unwrap_or_default();
            panic!("{css} never appeared ({e}) on {url:?}:\n{source}");
        }
    }

    /// Clicks the first element matching `css`, finding it again if the page's live part
    /// was swapped between finding and clicking.
    pub async fn click(&self, css: &str) {
        let mut tries = 0;
        loop {
            let element = self
                .client
                .find(Locator::Css(css))
                .await
                .unwrap_or_else(|e| panic!("no {css}: {e}"));
            match element.click().await {
                Ok(()) => return,
                Err(e) if tries < 10 && e.to_string().contains("stale element") => tries += 1,
                Err(e) => panic!("cannot click {css}: {e}"),
            }
        }
    }

    /// Saves a screenshot of the page as `target/dashboard-screenshots/<name>.png`.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("a screenshot");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .expect("the target dir")
            .join("dashboard-screenshots");
        std::fs::create_dir_all(&dir).expect("the screenshot dir");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("the screenshot");
    }

    /// Ends the session, then chromedriver.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
    }
}

/// An HTTP answer: status, headers (lower-case names), body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request to `addr`, its answer read to the end.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() {
        request.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("receive");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}
