//! The admin listener's status page in a real browser (headless Chromium driven over WebDriver
//! by chromedriver): it loads, shows the replicas of a running router with their health, lists
//! a routing decision with each candidate's scores, and changes by itself when a replica dies.
//!
//! Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them). Where they are
//! missing the test says so loudly and passes, unless `WARMPATH_BROWSER_REQUIRED=1` (set by CI),
//! which makes it fail. `WARMPATH_SCREENSHOT_DIR=DIR` saves the page as PNGs (the docs' pictures).

mod common;

use common::*;
use fantoccini::{ClientBuilder, Locator};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// chromedriver, killed with the test.
struct Driver {
    child: Child,
    port: u16,
    profile: PathBuf,
}

impl Driver {
    fn start(driver: &str) -> Driver {
        let port = warmpath_testkit::free_port();
        let profile =
            std::env::temp_dir().join(format!("warmpath-chromium-{}-{port}", std::process::id()));
        // Its own process group: the browser it starts is in it too, so that a test that fails
        // before closing its session still takes the browser down with the driver.
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{driver}: {e}"));
        Driver {
            child,
            port,
            profile,
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

fn browser_paths() -> Option<(String, String)> {
    let chromium = std::env::var("WARMPATH_CHROMIUM").unwrap_or_else(|_| CHROMIUM.into());
    let driver = std::env::var("WARMPATH_CHROMEDRIVER").unwrap_or_else(|_| CHROMEDRIVER.into());
    if std::path::Path::new(&chromium).exists() && std::path::Path::new(&driver).exists() {
        return Some((chromium, driver));
    }
    warmpath_testkit::optional::skip(
        "the status page's browser test",
        "WARMPATH_BROWSER_REQUIRED",
        &format!("{chromium} or {driver} is missing (apt-get install chromium chromium-driver)"),
    );
    None
}

async fn session(driver: &Driver, chromium: &str) -> fantoccini::Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": chromium,
            // The machine's network is closed: Chromium's background fetches only fail.
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
                format!("--user-data-dir={}", driver.profile.display()),
            ],
        }),
    );
    let url = format!("http://127.0.0.1:{}", driver.port);
    // chromedriver takes a moment to listen.
    for attempt in 0.. {
        match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps.clone())
            .connect(&url)
            .await
        {
            Ok(c) => return c,
            Err(e) if attempt < 100 => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no WebDriver session at {url}: {e}"),
        }
    }
    unreachable!()
}

fn screenshot(name: &str, png: &[u8]) {
    if let Ok(dir) = std::env::var("WARMPATH_SCREENSHOT_DIR") {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(PathBuf::from(dir).join(name), png).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_replicas_and_decisions_and_follows_a_death() {
    let Some((chromium, driver_bin)) = browser_paths() else {
        return;
    };
    let mut sims = Vec::new();
    for _ in 0..3 {
        sims.push(sim(&["--timing", "zero"]).await);
    }
    let addrs: Vec<SocketAddr> = sims.iter().map(|s| s.addrs()[0]).collect();
    let extra =
        "explain: { header: true }\nscrape: { interval_ms: 100, failures_before_unready: 1 }\n";
    let router = router(&config_yaml("tiny", &addrs, extra)).await;
    wait_ready(router.admin_addr).await;
    let body = serde_json::json!({
        "model": "tiny", "max_tokens": 4,
        "messages": [{"role": "user", "content": text(3, 1500)}],
    })
    .to_string();
    for _ in 0..2 {
        let r = send(
            router.addr,
            "POST",
            "/v1/chat/completions",
            &[("x-warmpath-explain", "1")],
            body.clone(),
        )
        .await
        .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
    }

    let driver = Driver::start(&driver_bin);
    let client = session(&driver, &chromium).await;
    let page = format!("http://{}/", router.admin_addr);
    client.goto(&page).await.unwrap();
    let wait = Duration::from_secs(15);
    for r in ["r0", "r1", "r2"] {
        client
            .wait()
            .at_most(wait)
            .for_element(Locator::Css(&format!(
                "tr[data-replica='{r}'][data-ready='true']"
            )))
            .await
            .unwrap_or_else(|e| panic!("{r} not shown ready: {e}"));
    }
    let pools = client
        .find(Locator::Id("pools"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        pools.contains("ready") && pools.contains("policy prefix"),
        "{pools}"
    );
    // The decisions: the explained requests, each with every candidate; the second matched.
    let decision = client
        .find(Locator::Css("#decisions details"))
        .await
        .unwrap();
    decision
        .find(Locator::Css("summary"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let rows = decision.find_all(Locator::Css("tbody tr")).await.unwrap();
    assert_eq!(rows.len(), 3);
    let chosen = decision
        .find(Locator::Css("tr.chosen"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(chosen.starts_with("→ r"), "{chosen}");
    screenshot("status-page.png", &client.screenshot().await.unwrap());

    // A replica dies; the page, not reloaded, shows it.
    drop(sims.remove(1));
    client
        .wait()
        .at_most(wait)
        .for_element(Locator::Css("tr[data-replica='r1'][data-ready='false']"))
        .await
        .expect("the dead replica is shown not ready without a reload");
    let row = client
        .find(Locator::Css("tr[data-replica='r1']"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(row.contains("not ready"), "{row}");
    let models = client
        .find(Locator::Id("models"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(models.contains("2 / 3 ready"), "{models}");
    screenshot(
        "status-page-replica-down.png",
        &client.screenshot().await.unwrap(),
    );

    // The router goes away: the page says it cannot reach it, and keeps what it last saw.
    router.shutdown().await;
    for _ in 0..150 {
        let b = client.find(Locator::Id("banner")).await.unwrap();
        if b.is_displayed().await.unwrap() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let banner = client
        .find(Locator::Id("banner"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(banner.contains("Cannot reach"), "{banner:?}");
    client.close().await.unwrap();
}
