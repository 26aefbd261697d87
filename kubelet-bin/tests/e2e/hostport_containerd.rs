//! `hostPort` against a real containerd (issue 3, namespaces and networking): the kubelet
//! passes the pod's port mappings to the sandbox (CRI `PortMapping`), and the testbed's CNI
//! chain (`portmap`) makes the container's port answer on the node's own address.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use support::{Node, phase};

/// `GET /` on `addr`, returning the body when the response is a 200.
fn http_get(addr: &str) -> Option<String> {
    let mut stream =
        TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .write_all(b"GET / HTTP/1.0\r\nHost: test\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.lines().next()?;
    (status.starts_with("HTTP/1.") && status.split_whitespace().nth(1) == Some("200"))
        .then(|| body.to_owned())
}

#[test]
fn host_port_reaches_the_container() {
    let node = Node::start("hostport");
    // The bridge's gateway is one of the node's own addresses.
    let subnet = node.testbed.subnet().to_owned();
    let gateway = subnet
        .strip_suffix(".0/24")
        .map(|net| format!("{net}.1"))
        .expect("a /24 testbed subnet");
    let host_port = support::free_port();
    node.write_manifest(
        "web.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: docker.io/library/busybox:1.36
    command: [sh, -c, 'mkdir -p /www && echo hello-from-hostport > /www/index.html && exec httpd -f -p 8080 -h /www']
    ports:
    - containerPort: 8080
      hostPort: {host_port}
"#
        ),
    );
    node.wait_for(Duration::from_secs(30), "web Running", |n| {
        (phase(&n.pod("web")?) == "Running").then_some(())
    });
    let addr = format!("{gateway}:{host_port}");
    let body = node.wait_for(Duration::from_secs(15), "hostPort answers", |_| {
        http_get(&addr)
    });
    assert_eq!(body.trim(), "hello-from-hostport");

    // The mapping goes with the pod.
    node.remove_manifest("web.yaml");
    node.wait_for(Duration::from_secs(30), "web gone", |n| {
        n.pod("web").is_none().then_some(())
    });
    // Panics (fails) when the port still answers after 15 s.
    node.wait_for(Duration::from_secs(15), "hostPort closed", |_| {
        http_get(&addr).is_none().then_some(())
    });
}
