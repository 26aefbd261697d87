//! The kubelet's own view, for arm A only: its read-only `/pods` (a v1 `PodList`), polled once
//! CRI already shows the containers running, so the polling cannot slow the start itself.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::cri::Error;

/// Pause between two `/pods` requests.
const PERIOD: Duration = Duration::from_millis(2);

/// `GET /pods` on 127.0.0.1:`port` (HTTP/1.0), parsed.
async fn pods(port: u16) -> Result<Value, Error> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).await?;
    conn.write_all(format!("GET /pods HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes())
        .await?;
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("malformed response")?;
    if head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        != Some("200")
    {
        return Err(format!("GET /pods: {}", head.lines().next().unwrap_or_default()).into());
    }
    Ok(serde_json::from_str(body)?)
}

/// Whether the kubelet reports `pod` as `Running` with every container running.
fn reports_running(pod: &Value) -> bool {
    let status = &pod["status"];
    let containers = status["containerStatuses"].as_array();
    status["phase"] == "Running"
        && containers.is_some_and(|cs| {
            !cs.is_empty() && cs.iter().all(|c| c["state"]["running"].is_object())
        })
}

/// Waits until the kubelet's `/pods` reports each pod `(namespace, name)` running; returns, in
/// order, the time from `t0` to the first poll that saw it.
pub async fn wait_reported(
    port: u16,
    keys: &[(String, String)],
    t0: Instant,
    timeout: Duration,
) -> Result<Vec<Duration>, Error> {
    let index: HashMap<(&str, &str), usize> = keys
        .iter()
        .enumerate()
        .map(|(i, (ns, name))| ((ns.as_str(), name.as_str()), i))
        .collect();
    let mut seen: Vec<Option<Duration>> = vec![None; keys.len()];
    loop {
        let list = pods(port).await?;
        let at = t0.elapsed();
        for pod in list["items"].as_array().into_iter().flatten() {
            let meta = &pod["metadata"];
            let key = (
                meta["namespace"].as_str().unwrap_or("default"),
                meta["name"].as_str().unwrap_or_default(),
            );
            if let Some(&i) = index.get(&key)
                && reports_running(pod)
            {
                seen[i].get_or_insert(at);
            }
        }
        if seen.iter().all(Option::is_some) {
            return Ok(seen.into_iter().flatten().collect());
        }
        if at > timeout {
            return Err(
                format!("the kubelet did not report all pods running within {timeout:?}").into(),
            );
        }
        tokio::time::sleep(PERIOD).await;
    }
}
