//! Issue 16 item 4: a generated suite of malformed static pod manifests (wrong types,
//! missing and duplicate fields, huge strings, deep nesting, invalid names and quantities,
//! unicode, NUL bytes, symlinks and special files, files replaced while the kubelet reads
//! them) in one manifest directory beside good pods, on a node as the binary wires it with
//! the fake runtime. Each bad file gets a log line naming it and the reason (bounded in
//! length); the good pods start and keep running (their containers are never restarted);
//! nothing panics.
//!
//! Found on the way (a deviation, kept): the YAML decoder (serde-saphyr) reads a scalar into
//! a string field (`name: 123` is the name "123") and a quoted `"yes"` into a bool, where
//! upstream's YAML-to-JSON step keeps the number or string and its JSON decoder refuses the
//! type; JSON manifests are refused as upstream. Wrong types of scalars are generated as JSON
//! only.

use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kubelet::NodeBuilder;
use kubelet_core::PodUid;
use kubelet_core::testing::FakeRuntime;
use serde_json::{Value, json};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Log lines, captured.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned()
    }
}

/// Why a manifest is refused: a phrase of the error's message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reason {
    Parse,
    NotAPod,
    Invalid,
    NotAFile,
    Read,
    Empty,
    TooLarge,
    Duplicate,
    ApiReference,
}

impl Reason {
    fn phrase(self) -> &'static str {
        match self {
            Reason::Parse => "couldn't parse as pod: ",
            Reason::NotAPod => "couldn't parse as pod: kind ",
            Reason::Invalid => "invalid pod: ",
            Reason::NotAFile => "not a regular file (",
            Reason::Read => "could not read manifest: ",
            Reason::Empty => "empty manifest",
            Reason::TooLarge => "manifest is larger than 10485760 bytes",
            Reason::Duplicate => "duplicate pod name",
            Reason::ApiReference => "static pods may not reference ",
        }
    }
}

/// One bad entry of the directory.
struct Case {
    category: &'static str,
    file: String,
    reason: Reason,
}

/// Writes the bad entries; returns them.
struct Suite {
    dir: PathBuf,
    outside: PathBuf,
    cases: Vec<Case>,
}

fn good_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "restartPolicy": "Always",
            "containers": [{
                "name": "app",
                "image": "busybox:1.36",
                "command": ["sleep", "3600"],
                "env": [{"name": "A", "value": "1"}],
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "resources": {"limits": {"cpu": "100m", "memory": "64Mi"},
                              "requests": {"cpu": "50m", "memory": "32Mi"}},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 10}
            }],
            "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "1Gi"}}]
        }
    })
}

/// `doc` as JSON, or as YAML (JSON is YAML; a leading comment makes the decoder take the YAML
/// path).
fn render(doc: &Value, yaml: bool) -> Vec<u8> {
    let json = serde_json::to_string_pretty(doc).expect("serializable");
    if yaml {
        format!("# generated\n{json}\n").into_bytes()
    } else {
        json.into_bytes()
    }
}

/// `good_pod(name)` with the value at `pointer` set (`None`: removed).
fn with(name: &str, pointer: &str, value: Option<Value>) -> Value {
    let mut doc = good_pod(name);
    let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
    let target = doc.pointer_mut(parent).expect("the parent exists");
    match (target, value) {
        (Value::Object(map), Some(v)) => {
            map.insert(key.to_owned(), v);
        }
        (Value::Object(map), None) => {
            map.remove(key);
        }
        (Value::Array(list), Some(v)) => list[key.parse::<usize>().expect("an index")] = v,
        (Value::Array(list), None) => {
            list.remove(key.parse::<usize>().expect("an index"));
        }
        _ => panic!("{pointer}: not a container"),
    }
    doc
}

impl Suite {
    fn add(&mut self, category: &'static str, reason: Reason, content: impl AsRef<[u8]>) {
        let file = format!("{:03}-{category}.yaml", self.cases.len());
        std::fs::write(self.dir.join(&file), content).expect("write manifest");
        self.cases.push(Case {
            category,
            file,
            reason,
        });
    }

    /// A bad entry made by `make` at its path.
    fn add_with(&mut self, category: &'static str, reason: Reason, make: impl FnOnce(&Path)) {
        let file = format!("{:03}-{category}.yaml", self.cases.len());
        make(&self.dir.join(&file));
        self.cases.push(Case {
            category,
            file,
            reason,
        });
    }

    /// Each pointer set to each value, in JSON and YAML (YAML only for a value that is no
    /// scalar: the YAML decoder reads a scalar into a string or bool field as upstream's
    /// YAML-to-JSON step does not, see the module docs).
    fn variants(&mut self, category: &'static str, reason: Reason, edits: &[(&str, Value)]) {
        for (pointer, value) in edits {
            let scalar = !(value.is_array() || value.is_object());
            let formats: &[bool] = if scalar && reason == Reason::Parse {
                &[false]
            } else {
                &[false, true]
            };
            for &yaml in formats {
                let n = self.cases.len();
                let doc = with(&format!("bad-{n}"), pointer, Some(value.clone()));
                self.add(category, reason, render(&doc, yaml));
            }
        }
    }

    fn wrong_types(&mut self) {
        use Reason::Parse;
        let c = "/spec/containers/0";
        let edits: Vec<(String, Value)> = vec![
            ("/metadata/name".into(), json!(123)),
            ("/metadata/name".into(), json!(["a"])),
            ("/metadata/name".into(), json!({"a": "b"})),
            ("/metadata/name".into(), json!(true)),
            ("/metadata/labels".into(), json!("app")),
            ("/metadata/labels".into(), json!([1])),
            ("/metadata/annotations".into(), json!(5)),
            ("/metadata/namespace".into(), json!(7)),
            ("/metadata".into(), json!("meta")),
            ("/spec".into(), json!("spec")),
            ("/spec".into(), json!([])),
            ("/spec/containers".into(), json!("app")),
            ("/spec/containers".into(), json!({"name": "app"})),
            (c.to_owned(), json!("app")),
            (format!("{c}/name"), json!(5)),
            (format!("{c}/image"), json!({"name": "busybox"})),
            (format!("{c}/image"), json!(["busybox"])),
            (format!("{c}/command"), json!("sleep 3600")),
            (format!("{c}/args"), json!({"a": 1})),
            (format!("{c}/env"), json!({"A": "1"})),
            (format!("{c}/env/0/value"), json!(1)),
            (format!("{c}/ports"), json!([8080])),
            (format!("{c}/ports/0/containerPort"), json!("http")),
            (format!("{c}/ports/0/containerPort"), json!(1.5)),
            (
                format!("{c}/ports/0/containerPort"),
                json!(99_999_999_999_i64),
            ),
            (format!("{c}/resources"), json!("lots")),
            (format!("{c}/resources/limits"), json!(["1"])),
            (format!("{c}/livenessProbe"), json!("exec")),
            (format!("{c}/livenessProbe/periodSeconds"), json!("10s")),
            (
                format!("{c}/securityContext"),
                json!({"privileged": ["yes"]}),
            ),
            ("/spec/restartPolicy".into(), json!(5)),
            ("/spec/terminationGracePeriodSeconds".into(), json!("30s")),
            ("/spec/hostNetwork".into(), json!("yes")),
            ("/spec/volumes".into(), json!("data")),
            ("/spec/volumes/0/emptyDir".into(), json!("memory")),
            ("/spec/activeDeadlineSeconds".into(), json!([1])),
            ("/spec/nodeSelector".into(), json!(["a"])),
            ("/spec/tolerations".into(), json!({"key": "a"})),
            ("/spec/securityContext".into(), json!({"runAsUser": "root"})),
            ("/apiVersion".into(), json!(1)),
            ("/kind".into(), json!(["Pod"])),
        ];
        let edits: Vec<(&str, Value)> =
            edits.iter().map(|(p, v)| (p.as_str(), v.clone())).collect();
        self.variants("wrong-type", Parse, &edits);
    }

    fn missing_fields(&mut self) {
        let c = "/spec/containers/0";
        let cases: Vec<(String, Reason)> = vec![
            ("/apiVersion".into(), Reason::NotAPod),
            ("/kind".into(), Reason::NotAPod),
            ("/metadata".into(), Reason::Invalid),
            ("/metadata/name".into(), Reason::Invalid),
            ("/spec".into(), Reason::Invalid),
            ("/spec/containers".into(), Reason::Invalid),
            (format!("{c}/name"), Reason::Invalid),
            (format!("{c}/image"), Reason::Invalid),
            (format!("{c}/volumeMounts/0/name"), Reason::Invalid),
            (format!("{c}/volumeMounts/0/mountPath"), Reason::Invalid),
            // k8s-openapi reads a missing required field as its default (0, "").
            (format!("{c}/ports/0/containerPort"), Reason::Invalid),
            (format!("{c}/env/0/name"), Reason::Invalid),
            ("/spec/volumes/0/name".into(), Reason::Invalid),
            ("/spec/volumes".into(), Reason::Invalid),
        ];
        for (pointer, reason) in cases {
            for yaml in [false, true] {
                let n = self.cases.len();
                let doc = with(&format!("bad-{n}"), &pointer, None);
                self.add("missing-field", reason, render(&doc, yaml));
            }
        }
        let n = self.cases.len();
        let empty_containers = with(&format!("bad-{n}"), "/spec/containers", Some(json!([])));
        self.add(
            "missing-field",
            Reason::Invalid,
            render(&empty_containers, true),
        );
        let n = self.cases.len();
        let empty_image = with(
            &format!("bad-{n}"),
            "/spec/containers/0/image",
            Some(json!("")),
        );
        self.add(
            "missing-field",
            Reason::Invalid,
            render(&empty_image, false),
        );
    }

    fn duplicate_fields(&mut self) {
        let c = "/spec/containers";
        let app = good_pod("x")["spec"]["containers"][0].clone();
        let volume = good_pod("x")["spec"]["volumes"][0].clone();
        let edits = [
            (c.to_owned(), json!([app.clone(), app.clone()])),
            ("/spec/initContainers".to_owned(), json!([app.clone()])),
            (
                "/spec/volumes".to_owned(),
                json!([volume.clone(), volume.clone()]),
            ),
        ];
        let edits: Vec<(&str, Value)> =
            edits.iter().map(|(p, v)| (p.as_str(), v.clone())).collect();
        self.variants("duplicate-field", Reason::Invalid, &edits);
        // The same pod name as a good pod, in a file that sorts after it: the first wins.
        for i in 0..3_usize {
            let doc = good_pod(&format!("good-{i}"));
            let file = format!("zz-duplicate-of-good-{i}.yaml");
            let mut doc = doc;
            doc["spec"]["containers"][0]["command"] = json!(["sleep", "1"]);
            std::fs::write(self.dir.join(&file), render(&doc, i.is_multiple_of(2))).expect("write");
            self.cases.push(Case {
                category: "duplicate-name",
                file,
                reason: Reason::Duplicate,
            });
        }
    }

    fn huge_strings(&mut self) {
        use Reason::{Invalid, TooLarge};
        let c = "/spec/containers/0";
        let long = |n: usize| "a".repeat(n);
        let edits = [
            ("/metadata/name".to_owned(), json!(long(254))),
            ("/metadata/name".to_owned(), json!(long(100_000))),
            ("/metadata/namespace".to_owned(), json!(long(64))),
            (format!("{c}/name"), json!(long(64))),
            (format!("{c}/name"), json!(long(50_000))),
            ("/metadata/labels".to_owned(), json!({"app": long(64)})),
            ("/metadata/labels".to_owned(), json!({long(300): "x"})),
            (
                "/metadata/annotations".to_owned(),
                json!({"a": long(300 * 1024)}),
            ),
            ("/spec/volumes/0/name".to_owned(), json!(long(100))),
        ];
        let edits: Vec<(&str, Value)> =
            edits.iter().map(|(p, v)| (p.as_str(), v.clone())).collect();
        self.variants("huge-string", Invalid, &edits);
        // Past the 10 MiB cap, in YAML and JSON.
        let n = self.cases.len();
        let mut doc = good_pod(&format!("bad-{n}"));
        doc["metadata"]["annotations"] = json!({"big": long(11 * 1024 * 1024)});
        self.add("huge-file", TooLarge, render(&doc, false));
        self.add("huge-file", TooLarge, render(&doc, true));
    }

    fn deep_nesting(&mut self) {
        use Reason::{Invalid, Parse};
        let n = self.cases.len();
        let head = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: deep-{n}\nspec:\n  containers: [{{name: a, image: b}}]\n"
        );
        for depth in [100, 10_000, 100_000] {
            self.add(
                "deep-nesting",
                Parse,
                format!("{head}x: {}{}\n", "[".repeat(depth), "]".repeat(depth)),
            );
            self.add(
                "deep-nesting",
                Parse,
                format!("{head}x: {}1{}\n", "{a: ".repeat(depth), "}".repeat(depth)),
            );
            // JSON skips an unknown field however deep (serde_json ignores values without
            // recursing); this pod has no spec.
            let json = format!(
                "{{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{{\"name\":\"deep\"}},\"x\":{}{}}}",
                "[".repeat(depth),
                "]".repeat(depth)
            );
            self.add("deep-nesting", Invalid, json);
        }
        let mut block = head.clone();
        block.push_str("x:\n");
        for i in 0..200 {
            let _ = writeln!(block, "{}k:", " ".repeat(2 * i + 2));
        }
        self.add("deep-nesting", Parse, block);
        // Billion laughs: refused by the parser's alias budget.
        let mut bomb = head.replace(
            "spec:",
            "bomb:\n  a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\nspec:",
        );
        for (i, name) in ["b", "c", "d", "e", "f", "g", "h", "i"].iter().enumerate() {
            let prev = ["a", "b", "c", "d", "e", "f", "g", "h"][i];
            bomb = bomb.replace(
                "spec:",
                &format!(
                    "  {name}: &{name} [{}]\nspec:",
                    vec![format!("*{prev}"); 9].join(",")
                ),
            );
        }
        self.add("alias-bomb", Parse, bomb);
    }

    fn invalid_names(&mut self) {
        use Reason::Invalid;
        let pod_names = [
            "UPPER",
            "under_score",
            "-lead",
            "dot..dot",
            "a b",
            ".",
            "..",
            "a/b",
            "pöd",
            "😀",
            "tab\tname",
            "new\nline",
            "semi;colon",
            "a:b",
            "ünï.cödé",
            "x.-y",
        ];
        for name in pod_names {
            let n = self.cases.len();
            let doc = with(&format!("bad-{n}"), "/metadata/name", Some(json!(name)));
            self.add("invalid-name", Invalid, render(&doc, n.is_multiple_of(2)));
        }
        let container_names = ["Upper", "a.b", "under_score", "-x", "ü", "a b", "x-"];
        for name in container_names {
            let n = self.cases.len();
            let doc = with(
                &format!("bad-{n}"),
                "/spec/containers/0/name",
                Some(json!(name)),
            );
            self.add(
                "invalid-container-name",
                Invalid,
                render(&doc, n.is_multiple_of(2)),
            );
        }
        for ns in ["Kube-System", "a.b", "ns_1", "ä"] {
            let n = self.cases.len();
            let doc = with(&format!("bad-{n}"), "/metadata/namespace", Some(json!(ns)));
            self.add(
                "invalid-namespace",
                Invalid,
                render(&doc, n.is_multiple_of(2)),
            );
        }
        for v in ["Data", "da_ta", "dätä"] {
            let n = self.cases.len();
            let mut doc = with(&format!("bad-{n}"), "/spec/volumes/0/name", Some(json!(v)));
            doc["spec"]["containers"][0]["volumeMounts"][0]["name"] = json!(v);
            self.add(
                "invalid-volume-name",
                Invalid,
                render(&doc, n.is_multiple_of(2)),
            );
        }
        let labels = [
            json!({"-app": "x"}),
            json!({"Example.com/app": "x"}),
            json!({"a/b/c": "x"}),
            json!({"äpp": "x"}),
            json!({"app": "-x"}),
            json!({"app": "x y"}),
            json!({"app": "wért"}),
            json!({"": "x"}),
        ];
        for l in labels {
            let n = self.cases.len();
            let doc = with(&format!("bad-{n}"), "/metadata/labels", Some(l));
            self.add("invalid-label", Invalid, render(&doc, n.is_multiple_of(2)));
        }
        for a in [json!({"a b": "x"}), json!({"/x": "y"}), json!({"ä": "x"})] {
            let n = self.cases.len();
            let doc = with(&format!("bad-{n}"), "/metadata/annotations", Some(a));
            self.add(
                "invalid-annotation",
                Invalid,
                render(&doc, n.is_multiple_of(2)),
            );
        }
    }

    fn invalid_quantities(&mut self) {
        use Reason::Invalid;
        let c = "/spec/containers/0/resources";
        let values = [
            "lots", "1.2.3", "1XB", "1 Gi", " 1", "∞", "-1", "0x10", "1e", "--1", "", "1Gi ",
            "1,5", "1KiB",
        ];
        let places = [
            format!("{c}/limits/cpu"),
            format!("{c}/limits/memory"),
            format!("{c}/requests/cpu"),
            format!("{c}/requests/memory"),
            format!("{c}/limits/ephemeral-storage"),
            format!("{c}/requests/ephemeral-storage"),
            "/spec/volumes/0/emptyDir/sizeLimit".to_owned(),
        ];
        for place in &places {
            for v in values {
                let n = self.cases.len();
                let doc = with(&format!("bad-{n}"), place, Some(json!(v)));
                self.add(
                    "invalid-quantity",
                    Invalid,
                    render(&doc, n.is_multiple_of(2)),
                );
            }
        }
        for (pointer, v) in [
            (format!("{c}/requests/cpu"), "2"),
            (format!("{c}/requests/memory"), "1Gi"),
            (format!("{c}/requests/gpu"), "1"),
        ] {
            let n = self.cases.len();
            let doc = with(&format!("bad-{n}"), &pointer, Some(json!(v)));
            self.add(
                "invalid-requirements",
                Invalid,
                render(&doc, n.is_multiple_of(2)),
            );
        }
    }

    fn unicode(&mut self) {
        use Reason::{Invalid, Parse};
        let n = self.cases.len();
        let mut bom = b"\xef\xbb\xbf".to_vec();
        bom.extend(render(
            &with(&format!("bad-{n}"), "/metadata/name", Some(json!("Bom"))),
            true,
        ));
        self.add("unicode", Invalid, bom);
        for name in ["pod\u{200b}", "pod\u{202e}x", "ｐｏｄ", "pod\u{301}", "ℙod"] {
            let n = self.cases.len();
            let doc = with(&format!("bad-{n}"), "/metadata/name", Some(json!(name)));
            self.add("unicode", Invalid, render(&doc, true));
        }
        let n = self.cases.len();
        let doc = with(
            &format!("bad-{n}"),
            "/spec/restartPolicy",
            Some(json!("Alwayѕ")),
        );
        self.add("unicode", Invalid, render(&doc, true));
        let n = self.cases.len();
        let doc = with(
            &format!("bad-{n}"),
            "/spec/containers/0/ports/0/protocol",
            Some(json!("ТCP")),
        );
        self.add("unicode", Invalid, render(&doc, false));
        let mut invalid_utf8 = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: \xff\xfe\n".to_vec();
        invalid_utf8.extend(b"spec:\n  containers: [{name: a, image: b}]\n");
        self.add("unicode", Parse, &invalid_utf8);
        let utf16: Vec<u8> = "\u{feff}apiVersion: v1\nkind: Pod\n"
            .encode_utf16()
            .flat_map(u16::to_le_bytes)
            .collect();
        self.add("unicode", Parse, utf16);
        self.add(
            "unicode",
            Parse,
            b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: \xc0\xaf\n",
        );
    }

    fn nul_bytes(&mut self) {
        use Reason::{Invalid, Parse};
        self.add("nul", Parse, b"\0apiVersion: v1\nkind: Pod\n");
        self.add(
            "nul",
            Parse,
            b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\0b\nspec: {}\n",
        );
        self.add("nul", Parse, [0u8; 4096]);
        let n = self.cases.len();
        let doc = with(
            &format!("bad-{n}"),
            "/metadata/name",
            Some(json!("a\u{0}b")),
        );
        self.add("nul", Invalid, render(&doc, false));
        let n = self.cases.len();
        let doc = with(
            &format!("bad-{n}"),
            "/spec/containers/0/name",
            Some(json!("\u{0}")),
        );
        self.add("nul", Invalid, render(&doc, false));
        let n = self.cases.len();
        let mut trailing = render(&good_pod(&format!("bad-{n}")), false);
        trailing.extend(b"\0\0");
        self.add("nul", Parse, trailing);
    }

    fn special_files(&mut self) {
        use Reason::{NotAFile, Parse, Read};
        let outside_bad = self.outside.join("bad.yaml");
        std::fs::write(&outside_bad, "kind: [").expect("write");
        let fifo = self.outside.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .expect("mkfifo");
        let sym =
            |to: PathBuf| move |p: &Path| std::os::unix::fs::symlink(&to, p).expect("symlink");
        self.add_with(
            "symlink-dangling",
            Read,
            sym(PathBuf::from("does-not-exist.yaml")),
        );
        let n = self.cases.len();
        self.add_with(
            "symlink-self",
            Read,
            sym(PathBuf::from(format!("{n:03}-symlink-self.yaml"))),
        );
        let n = self.cases.len();
        self.add_with(
            "symlink-loop",
            Read,
            sym(PathBuf::from(format!("{:03}-symlink-loop.yaml", n + 1))),
        );
        self.add_with(
            "symlink-loop",
            Read,
            sym(PathBuf::from(format!("{n:03}-symlink-loop.yaml"))),
        );
        self.add_with("symlink-dir", NotAFile, sym(PathBuf::from("/")));
        self.add_with("symlink-device", NotAFile, sym(PathBuf::from("/dev/zero")));
        self.add_with("symlink-device", NotAFile, sym(PathBuf::from("/dev/null")));
        self.add_with("symlink-fifo", NotAFile, sym(fifo.clone()));
        self.add_with("symlink-bad-file", Parse, sym(outside_bad));
        self.add_with("fifo", NotAFile, |p| {
            nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600))
                .expect("mkfifo");
        });
        self.add_with("socket", NotAFile, |p| {
            // The listener closes; the socket file stays.
            std::os::unix::net::UnixListener::bind(p).expect("bind");
        });
        self.add_with("directory", NotAFile, |p| {
            std::fs::create_dir(p).expect("mkdir");
            std::fs::write(p.join("pod.yaml"), render(&good_pod("in-a-dir"), true)).expect("write");
        });
    }

    fn other_documents(&mut self) {
        use Reason::{Empty, Invalid, NotAPod, Parse};
        let n = self.cases.len();
        let pod = String::from_utf8(render(&good_pod(&format!("bad-{n}")), true)).expect("utf8");
        self.add("empty", Empty, "");
        self.add("empty", Empty, " \n\t\n  ");
        self.add("not-a-pod", Parse, "---\n");
        self.add("not-a-pod", Parse, "# only a comment\n");
        self.add("multi-document", Parse, format!("{pod}\n---\n{pod}"));
        self.add("not-a-pod", Parse, "- a\n- b\n");
        self.add("not-a-pod", Parse, "hello\n");
        self.add("not-a-pod", Parse, "[1, 2]");
        self.add("not-a-pod", Parse, "42");
        for (api_version, kind) in [
            ("apps/v1", "Deployment"),
            ("v1", "ConfigMap"),
            ("v2", "Pod"),
            ("v1", "pod"),
            ("v1", "PodList"),
            ("", "Pod"),
            ("v1", ""),
        ] {
            let n = self.cases.len();
            let mut doc = good_pod(&format!("bad-{n}"));
            doc["apiVersion"] = json!(api_version);
            doc["kind"] = json!(kind);
            self.add("not-a-pod", NotAPod, render(&doc, n.is_multiple_of(2)));
        }
        let json = String::from_utf8(render(&good_pod("trailing"), false)).expect("utf8");
        self.add("trailing-garbage", Parse, format!("{json} x"));
        self.add("truncated", Parse, &json[..json.len() / 2]);
        self.add("truncated", Parse, &pod[..pod.len() / 2]);
        self.add(
            "tabs",
            Parse,
            "apiVersion: v1\nkind: Pod\nmetadata:\n\tname: tabs\nspec:\n  containers: [{name: a, image: b}]\n",
        );
        self.add(
            "bad-indent",
            Parse,
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n name: y\n",
        );
        self.add(
            "unclosed",
            Parse,
            "apiVersion: v1\nkind: Pod\nmetadata: {name: x\n",
        );
        self.add(
            "bad-anchor",
            Parse,
            "apiVersion: v1\nkind: Pod\nmetadata: *nothing\n",
        );
        // Random bytes, from a fixed seed.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for len in [1, 7, 64, 512, 4096, 65_536] {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 24) as u8
                })
                .collect();
            self.add("random-bytes", Parse, bytes);
        }
        for (field, value) in [
            ("/spec/restartPolicy", json!("Sometimes")),
            ("/spec/containers/0/ports/0/containerPort", json!(0)),
            ("/spec/containers/0/ports/0/containerPort", json!(70_000)),
            ("/spec/containers/0/ports/0/hostPort", json!(70_000)),
            ("/spec/containers/0/ports/0/protocol", json!("HTTP")),
            ("/spec/containers/0/image", json!(" busybox")),
            ("/spec/containers/0/volumeMounts/0/name", json!("nothing")),
        ] {
            let n = self.cases.len();
            let doc = with(&format!("bad-{n}"), field, Some(value));
            self.add("invalid-value", Invalid, render(&doc, n.is_multiple_of(2)));
        }
    }

    fn api_references(&mut self) {
        use Reason::ApiReference;
        let c = "/spec/containers/0";
        for (pointer, value) in [
            ("/spec/serviceAccountName".to_owned(), json!("default")),
            (
                "/spec/volumes/0".to_owned(),
                json!({"name": "data", "secret": {"secretName": "s"}}),
            ),
            (
                "/spec/volumes/0".to_owned(),
                json!({"name": "data", "configMap": {"name": "c"}}),
            ),
            (
                "/spec/volumes/0".to_owned(),
                json!({"name": "data", "persistentVolumeClaim": {"claimName": "c"}}),
            ),
            (
                format!("{c}/env/0"),
                json!({"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}),
            ),
            (
                "/spec/volumes/0".to_owned(),
                json!({"name": "data", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}),
            ),
        ] {
            let n = self.cases.len();
            let doc = with(&format!("bad-{n}"), &pointer, Some(value));
            self.add(
                "api-reference",
                ApiReference,
                render(&doc, n.is_multiple_of(2)),
            );
        }
    }
}

/// Rewrites `path` between good and bad content many ways while the kubelet reads it: in
/// place a few bytes at a time, truncated, renamed over, removed and recreated; ends with
/// `last`.
fn churn(path: &Path, good: &[u8], bad: &[u8], last: &[u8], until: Instant) {
    let tmp = path.with_extension("tmp");
    let mut round = 0usize;
    while Instant::now() < until {
        let content = if round.is_multiple_of(2) { good } else { bad };
        match round % 4 {
            0 => {
                let mut f = std::fs::File::create(path).expect("create");
                for chunk in content.chunks(37) {
                    f.write_all(chunk).expect("write");
                    f.flush().expect("flush");
                }
            }
            1 => {
                std::fs::write(&tmp, content).expect("write");
                std::fs::rename(&tmp, path).expect("rename");
            }
            2 => {
                let _ = std::fs::remove_file(path);
                std::fs::write(path, &content[..content.len() / 3]).expect("write");
            }
            _ => {
                std::fs::write(path, content).expect("write");
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .and_then(|f| f.set_len(10))
                    .expect("truncate");
            }
        }
        round += 1;
        std::thread::sleep(Duration::from_millis(7));
    }
    std::fs::write(&tmp, last).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// The pods the fake runtime runs, by name: UID and running containers.
fn running(runtime: &FakeRuntime) -> Vec<(String, PodUid, usize)> {
    runtime
        .running_pods()
        .into_iter()
        .map(|p| {
            let live = p
                .containers
                .iter()
                .filter(|c| c.state == kubelet_core::runtime::ContainerState::Running)
                .count();
            (p.name, p.uid, live)
        })
        .collect()
}

fn wait_for<T>(what: &str, log: &Capture, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(t) = check() {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "{what}; log:\n{}",
            tail(&log.text())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(60)..]
        .iter()
        .map(|l| l.chars().take(400).collect::<String>() + "\n")
        .collect()
}

#[test]
fn malformed_manifests_are_logged_and_the_good_pods_keep_running() {
    let log = Capture::default();
    let writer = log.clone();
    tracing_subscriber::registry()
        .with(tracing_subscriber::EnvFilter::new("info"))
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || writer.clone()),
        )
        .init();
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("manifests");
    let outside = root.path().join("outside");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::create_dir(&outside).expect("mkdir");
    let good: Vec<String> = (0..5).map(|i| format!("good-{i}")).collect();
    for (i, name) in good.iter().enumerate() {
        std::fs::write(
            dir.join(format!("{name}.yaml")),
            render(&good_pod(name), i.is_multiple_of(2)),
        )
        .expect("write");
    }
    let mut suite = Suite {
        dir: dir.clone(),
        outside,
        cases: Vec::new(),
    };
    suite.wrong_types();
    suite.missing_fields();
    suite.duplicate_fields();
    suite.huge_strings();
    suite.deep_nesting();
    suite.invalid_names();
    suite.invalid_quantities();
    suite.unicode();
    suite.nul_bytes();
    suite.special_files();
    suite.other_documents();
    suite.api_references();
    let cases = suite.cases;
    assert!(cases.len() >= 300, "{} malformed manifests", cases.len());

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let fake = Arc::new(FakeRuntime::new());
    let mut node = runtime
        .block_on(
            NodeBuilder::with_runtime(fake.clone())
                .node_name("malformed-node")
                .root_dir(root.path().join("root"))
                .pod_manifest_path(&dir)
                .file_check_frequency(Duration::from_secs(1))
                .build(),
        )
        .expect("builds");
    runtime.block_on(node.spawn());
    let node_pod = |name: &str| format!("{name}-malformed-node");
    let started = wait_for("the good pods run", &log, || {
        let now = running(&fake);
        let all: Option<Vec<(String, PodUid)>> = good
            .iter()
            .map(|g| {
                now.iter()
                    .find(|(n, _, live)| *n == node_pod(g) && *live == 1)
                    .map(|(n, uid, _)| (n.clone(), uid.clone()))
            })
            .collect();
        all
    });

    // Files replaced while the kubelet reads them: one ends good, one bad.
    let churn_good = good_pod("churn");
    let churn_bad = with("churn", "/spec/containers/0/name", Some(json!("Bad_Name")));
    let (good_bytes, bad_bytes) = (render(&churn_good, true), render(&churn_bad, true));
    let until = Instant::now() + Duration::from_secs(4);
    std::thread::scope(|s| {
        s.spawn(|| {
            churn(
                &dir.join("zz-churn-0.yaml"),
                &good_bytes,
                &bad_bytes,
                &good_bytes,
                until,
            )
        });
        s.spawn(|| {
            churn(
                &dir.join("zz-churn-1.yaml"),
                &good_bytes,
                &bad_bytes,
                &bad_bytes,
                until,
            )
        });
    });

    // Every bad file is logged once with its path and the reason.
    let rejected = |text: &str| -> Vec<(String, String)> {
        text.lines()
            .filter(|l| l.contains("could not process manifest file"))
            .filter_map(|l| {
                let path = l
                    .split(" path=")
                    .nth(1)?
                    .split(" error=")
                    .next()?
                    .to_owned();
                let error = l.split(" error=").nth(1)?.to_owned();
                Some((path, error))
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let seen = rejected(&log.text());
        let missing: Vec<String> = cases
            .iter()
            .filter(|c| {
                let path = dir.join(&c.file).display().to_string();
                !seen
                    .iter()
                    .any(|(p, e)| *p == path && e.contains(c.reason.phrase()))
            })
            .map(|c| {
                let path = dir.join(&c.file).display().to_string();
                let logged: Vec<&str> = seen
                    .iter()
                    .filter(|(p, _)| *p == path)
                    .map(|(_, e)| e.as_str())
                    .collect();
                format!("{} ({:?}): logged {logged:?}", c.file, c.reason)
            })
            .collect();
        let churned = seen.iter().any(|(p, _)| p.ends_with("zz-churn-1.yaml"));
        if missing.is_empty() && churned {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} bad files not logged with their reason:\n{}",
            missing.len(),
            missing.join("\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let text = log.text();
    for (path, error) in rejected(&text) {
        assert!(error.contains(&path), "the error names the file: {error}");
        assert!(
            error.len() < 4096,
            "a log line of {} bytes for {path}",
            error.len()
        );
    }

    // The pod of the manifest that ended good runs; the good pods never restarted.
    wait_for("the churned good manifest's pod runs", &log, || {
        running(&fake)
            .iter()
            .any(|(n, _, live)| *n == node_pod("churn") && *live == 1)
            .then_some(())
    });
    let now = running(&fake);
    for (name, uid) in &started {
        assert!(
            now.iter()
                .any(|(n, u, live)| n == name && u == uid && *live == 1),
            "{name} still runs"
        );
        assert_eq!(
            fake.container_count(uid),
            1,
            "{name}'s container never restarted"
        );
    }
    let running_names: Vec<&String> = now.iter().map(|(n, _, _)| n).collect();
    assert_eq!(
        running_names.len(),
        good.len() + 1,
        "only the good pods run: {running_names:?}"
    );
    assert!(!text.contains("panicked"), "a panic:\n{}", tail(&text));

    let mut by_category: Vec<(&str, usize)> = Vec::new();
    for c in &cases {
        match by_category.iter_mut().find(|(k, _)| *k == c.category) {
            Some((_, n)) => *n += 1,
            None => by_category.push((c.category, 1)),
        }
    }
    println!(
        "{} malformed manifests, each logged with its reason:",
        cases.len()
    );
    for (category, n) in by_category {
        println!("  {category:<24} {n}");
    }
    assert!(runtime.block_on(node.stop()), "every task stops");
}
