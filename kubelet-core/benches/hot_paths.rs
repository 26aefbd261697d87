//! Criterion micro-benchmarks of `kubelet-core`'s hot paths: decoding a static pod manifest
//! (every file-source scan and change) and hashing a container spec (every `sync_pod`, per
//! container). `cargo bench -p kubelet-core` or `cargo xtask bench --micro`.

// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use kubelet_core::config::static_pod;
use kubelet_core::container::hash_container;

/// A static pod of the size people write: two containers, env, ports, probes, volumes.
const MANIFEST: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
  labels:
    app: web
    tier: frontend
  annotations:
    example.com/owner: team-a
spec:
  terminationGracePeriodSeconds: 10
  restartPolicy: Always
  containers:
  - name: app
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c"]
    args: ["echo $(GREETING) && sleep 3600"]
    env:
    - name: GREETING
      value: hello
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    ports:
    - name: http
      containerPort: 8080
      protocol: TCP
    readinessProbe:
      httpGet:
        path: /healthz
        port: 8080
      periodSeconds: 5
    livenessProbe:
      exec:
        command: ["true"]
      periodSeconds: 10
    resources:
      requests:
        cpu: 100m
        memory: 64Mi
      limits:
        memory: 128Mi
    volumeMounts:
    - name: data
      mountPath: /data
    - name: config
      mountPath: /etc/app
      readOnly: true
  - name: sidecar
    image: docker.io/library/busybox:1.36
    command: ["sleep", "3600"]
    volumeMounts:
    - name: data
      mountPath: /data
  volumes:
  - name: data
    emptyDir: {}
  - name: config
    hostPath:
      path: /etc/app
      type: DirectoryOrCreate
"#;

fn manifest_decode(c: &mut Criterion) {
    let path = Path::new("/etc/kubernetes/manifests/web.yaml");
    c.bench_function("static_pod::decode (2 containers, probes, volumes)", |b| {
        b.iter(|| static_pod::decode(black_box(MANIFEST.as_bytes()), path, "node-1"))
    });
}

fn container_hash(c: &mut Criterion) {
    let pod = static_pod::decode(
        MANIFEST.as_bytes(),
        Path::new("/etc/kubernetes/manifests/web.yaml"),
        "node-1",
    )
    .expect("the benchmark manifest decodes");
    let container = &pod.spec.as_ref().expect("spec").containers[0];
    c.bench_function("hash_container (env, ports, probes, mounts)", |b| {
        b.iter(|| hash_container(black_box(container)))
    });
}

criterion_group!(benches, manifest_decode, container_hash);
criterion_main!(benches);
