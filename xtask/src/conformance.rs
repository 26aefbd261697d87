//! `cargo xtask conformance`: the upstream conformance suite (`e2e.test` v1.20.2 with `ginkgo`)
//! on a one-node kubeadm cluster whose node runs this workspace's kubelet or, with
//! `--kubelet upstream`, the Go kubelet v1.20.2 built from the same source, so that the two can
//! be compared on the same bed (issue 31).
//!
//! The cluster is `xtask/kubeadm/scenario.sh conformance`: `kubeadm init` in namespaces of its
//! own (see [`crate::kubeadm`]), the control-plane taint lifted. The images the suite names
//! (`test/utils/image/manifest.go`) come from the registry on the node's loopback through
//! `KUBE_TEST_REPO_LIST`; where the real image is only a server, a busybox-based stand-in
//! behaves like it ([`suite_images`]). Results: `target/conformance/<kubelet>.json` and
//! `target/conformance/results.md`, a per-spec table with the other kubelet's column when it has
//! run too.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use serde_json::{Value, json};
use xtask::{images, target_dir};

use crate::kubeadm::{self, ImageLine};

/// The focus of issue 31's first comparison: node conformance and sig-node conformance specs.
const DEFAULT_FOCUS: &str = r"\[NodeConformance\]|\[sig-node\].*\[Conformance\]";
/// What a shared one-node bed cannot run in parallel or at all.
const DEFAULT_SKIP: &str = r"\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Slow\]";

/// `cargo xtask conformance` options.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// ginkgo's `-focus` (a regular expression over spec names).
    #[arg(long, default_value = DEFAULT_FOCUS)]
    focus: String,
    /// ginkgo's `-skip`.
    #[arg(long, default_value = DEFAULT_SKIP)]
    skip: String,
    /// The kubelet on the node: `ours` (this workspace's) or `upstream` (Go, v1.20.2).
    #[arg(long, default_value = "ours", value_parser = ["ours", "upstream"])]
    kubelet: String,
    /// ginkgo's parallel nodes.
    #[arg(long, default_value_t = 4)]
    nodes: u32,
}

/// Builds what the suite needs, runs it and writes the results.
pub(crate) fn run(args: Args) -> Result<()> {
    let upstream = (args.kubelet == "upstream").then(|| {
        xtask::apiserver::cache_dir().join("kubelet") // built below with the others
    });
    let built = kubeadm::prepare(
        &["e2e.test", "ginkgo", "agnhost", "nonewprivs", "kubelet"],
        upstream,
    )?;
    let mut images = kubeadm::control_plane_images(&built)?;
    images.extend(suite_images(
        &built.images,
        built.binary("agnhost")?,
        built.binary("nonewprivs")?,
    )?);
    let nodes = args.nodes.to_string();
    kubeadm::scenario(
        "conformance",
        &built,
        &images,
        &[
            ("E2E_TEST", built.binary("e2e.test")?.as_os_str()),
            ("GINKGO", built.binary("ginkgo")?.as_os_str()),
            ("FOCUS", args.focus.as_ref()),
            ("SKIP", args.skip.as_ref()),
            ("NODES", nodes.as_ref()),
        ],
    )?;
    let results = read_junit(&built.work.join("report"))?;
    let out = target_dir().join("conformance");
    fs::create_dir_all(&out)?;
    let record = json!({
        "kubelet": args.kubelet,
        "focus": args.focus,
        "skip": args.skip,
        "specs": results.iter().map(|(name, r)| (name.clone(), json!({"outcome": r.outcome, "message": r.message}))).collect::<serde_json::Map<_, _>>(),
    });
    fs::write(
        out.join(format!("{}.json", args.kubelet)),
        serde_json::to_vec_pretty(&record)?,
    )?;
    let counts = count(&results);
    println!(
        "{}: {} passed, {} failed, {} skipped",
        args.kubelet, counts.0, counts.1, counts.2
    );
    let table = comparison_table(&out)?;
    fs::write(out.join("results.md"), &table)?;
    println!("per-spec table: {}", out.join("results.md").display());
    Ok(())
}

/// A `curl` for the agnhost stand-in: the suite's hooks and networking checks run `curl [flags]
/// URL` in agnhost containers; busybox's `wget` fetches the URL and prints the body (under
/// `timeout`: Debian 12's static busybox `wget -T` crashes).
const CURL: &[u8] = b"#!/bin/sh\n# curl stand-in (busybox wget): the argument with :// is the URL; flags are ignored\nfor arg; do case \"$arg\" in *://*) url=$arg ;; esac; done\nexec timeout 15 wget -q -O - \"$url\"\n";

/// The suite's images that the default focus pulls, under the registries `KUBE_TEST_REPO_LIST`
/// points at (the scenario writes that file with the same prefixes).
fn suite_images(dir: &Path, agnhost: &Path, nonewprivs: &Path) -> Result<Vec<ImageLine>> {
    const REGISTRY: &str = "127.0.0.1:5000";
    let read =
        |path: &Path| fs::read(path).with_context(|| format!("cannot read {}", path.display()));
    let html = |title: &str| format!("<html><body><h1>{title}</h1></body></html>\n").into_bytes();
    let httpd_foreground =
        b"#!/bin/sh\nexec httpd -f -p 80 -h /usr/local/apache2/htdocs\n".to_vec();
    let specs: Vec<(String, Vec<images::ExtraFile>, Value)> = vec![
        (
            format!("{REGISTRY}/e2e-test-images/agnhost:2.21"),
            // The real image has a second copy, which "override the image's default command"
            // runs.
            vec![
                ("agnhost".into(), read(agnhost)?, 0o755),
                ("agnhost-2".into(), read(agnhost)?, 0o755),
                ("usr/bin/curl".into(), CURL.to_vec(), 0o755),
            ],
            json!({ "Entrypoint": ["/agnhost"], "Cmd": ["pause"] }),
        ),
        (
            format!("{REGISTRY}/library/busybox:1.29"),
            vec![],
            json!({ "Cmd": ["sh"] }),
        ),
        (
            format!("{REGISTRY}/kubernetes-e2e-test-images/nonewprivs:1.0"),
            vec![("usr/local/bin/nnp".into(), read(nonewprivs)?, 0o4755)],
            json!({ "Cmd": ["nnp"] }),
        ),
        (
            format!("{REGISTRY}/kubernetes-e2e-test-images/nonroot:1.0"),
            vec![],
            json!({ "Cmd": ["sh"], "User": "1234" }),
        ),
    ];
    let mut specs = specs;
    for tag in ["1.14-alpine", "1.15-alpine"] {
        // nginx stand-in: a web server on port 80 serving an index page.
        specs.push((
            format!("{REGISTRY}/library/nginx:{tag}"),
            vec![(
                "usr/share/nginx/html/index.html".into(),
                html("Welcome to nginx!"),
                0o644,
            )],
            json!({ "Cmd": ["httpd", "-f", "-p", "80", "-h", "/usr/share/nginx/html"] }),
        ));
    }
    for tag in ["2.4.38-alpine", "2.4.39-alpine"] {
        specs.push((
            format!("{REGISTRY}/library/httpd:{tag}"),
            vec![
                (
                    "usr/local/apache2/htdocs/index.html".into(),
                    html("It works!"),
                    0o644,
                ),
                (
                    "usr/local/bin/httpd-foreground".into(),
                    httpd_foreground.clone(),
                    0o755,
                ),
            ],
            json!({ "Cmd": ["httpd-foreground"] }),
        ));
    }
    specs
        .into_iter()
        .map(|(reference, extra, config)| {
            let archive = images::busybox_derived(dir, &reference, &extra, config)?;
            let tag = reference
                .rsplit_once(':')
                .map_or("latest", |(_, t)| t)
                .to_owned();
            Ok(ImageLine {
                archive,
                tag,
                destination: reference,
            })
        })
        .collect()
}

/// One spec's result.
#[derive(Debug, Clone, PartialEq)]
struct SpecResult {
    /// `passed`, `failed` or `skipped`.
    outcome: &'static str,
    /// The failure message (first line), if it failed.
    message: String,
}

/// The specs of every `junit_*.xml` under `report`, by name. ginkgo's parallel nodes each write
/// a file; a spec run by one node and skipped by the others counts as run.
fn read_junit(report: &Path) -> Result<BTreeMap<String, SpecResult>> {
    let mut results: BTreeMap<String, SpecResult> = BTreeMap::new();
    let mut files: Vec<PathBuf> = fs::read_dir(report)
        .with_context(|| format!("no JUnit reports in {}", report.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "xml"))
        .collect();
    files.sort();
    for file in files {
        let text =
            fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
        for (name, result) in testcases(&text) {
            let keep = match results.get(&name) {
                None => true,
                Some(old) => old.outcome == "skipped" && result.outcome != "skipped",
            };
            if keep {
                results.insert(name, result);
            }
        }
    }
    Ok(results)
}

/// The `<testcase>` elements of a ginkgo JUnit report: name and outcome.
fn testcases(xml: &str) -> Vec<(String, SpecResult)> {
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find("<testcase ") {
        rest = &rest[start..];
        let head_end = rest.find('>').unwrap_or(rest.len());
        let head = &rest[..head_end];
        let self_closing = head.ends_with('/');
        let body_end = if self_closing {
            head_end
        } else {
            rest.find("</testcase>").unwrap_or(rest.len())
        };
        let body = &rest[head_end.min(body_end)..body_end];
        let name = attribute(head, "name").map(unescape).unwrap_or_default();
        let failure = body.find("<failure").or_else(|| body.find("<error"));
        let (outcome, message) = if let Some(at) = failure {
            let text = body[at..].split_once('>').map_or("", |(_, text)| text);
            let text = text
                .split("</")
                .next()
                .unwrap_or(text)
                .replace("&#xA;", "\n");
            // The reason, without the source paths ginkgo puts around it.
            let reason: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('/'))
                .take(3)
                .collect();
            let mut message = unescape(&reason.join(" "));
            if message.len() > 300 {
                let cut = (0..=300)
                    .rev()
                    .find(|i| message.is_char_boundary(*i))
                    .unwrap_or(0);
                message.truncate(cut);
                message.push('…');
            }
            ("failed", message)
        } else if body.contains("<skipped") {
            ("skipped", String::new())
        } else {
            ("passed", String::new())
        };
        out.push((name, SpecResult { outcome, message }));
        rest = &rest[body_end.max(1)..];
    }
    out
}

fn attribute<'a>(head: &'a str, key: &str) -> Option<&'a str> {
    let start = head.find(&format!(" {key}=\""))? + key.len() + 3;
    let len = head[start..].find('"')?;
    Some(&head[start..start + len])
}

fn unescape(text: &str) -> String {
    text.replace("&#34;", "\"")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// (passed, failed, skipped).
fn count(results: &BTreeMap<String, SpecResult>) -> (usize, usize, usize) {
    let n = |o: &str| results.values().filter(|r| r.outcome == o).count();
    (n("passed"), n("failed"), n("skipped"))
}

/// The specs either kubelet ran, one row each, with both kubelets' outcomes side by side.
fn comparison_table(dir: &Path) -> Result<String> {
    let load = |which: &str| -> Result<Option<Value>> {
        let path = dir.join(format!("{which}.json"));
        if !path.exists() {
            return Ok(None);
        }
        Ok(Some(serde_json::from_slice(&fs::read(&path)?)?))
    };
    let (ours, upstream) = (load("ours")?, load("upstream")?);
    let specs = |v: &Option<Value>| {
        v.as_ref()
            .and_then(|v| v["specs"].as_object().cloned())
            .unwrap_or_default()
    };
    let (ours_specs, upstream_specs) = (specs(&ours), specs(&upstream));
    let mut names: Vec<&String> = ours_specs.keys().chain(upstream_specs.keys()).collect();
    names.sort();
    names.dedup();
    let outcome = |m: &serde_json::Map<String, Value>, name: &str| {
        m.get(name)
            .and_then(|s| s["outcome"].as_str())
            .unwrap_or("–")
            .to_owned()
    };
    let mut table =
        String::from("# Conformance: this kubelet and the Go kubelet v1.20.2 on one bed\n\n");
    for (label, value, map) in [
        ("ours", &ours, &ours_specs),
        ("upstream", &upstream, &upstream_specs),
    ] {
        if let Some(v) = value {
            let n = |o: &str| map.values().filter(|s| s["outcome"] == o).count();
            table.push_str(&format!(
                "- {label}: {} passed, {} failed, {} skipped (focus `{}`, skip `{}`)\n",
                n("passed"),
                n("failed"),
                n("skipped"),
                v["focus"].as_str().unwrap_or(""),
                v["skip"].as_str().unwrap_or("")
            ));
        }
    }
    table.push_str("\n| spec | ours | upstream | failure (ours) |\n|---|---|---|---|\n");
    for name in names {
        let (o, u) = (outcome(&ours_specs, name), outcome(&upstream_specs, name));
        let not_run = |outcome: &str| outcome == "skipped" || outcome == "–";
        if not_run(&o) && not_run(&u) {
            continue; // outside the focus for both
        }
        let message = ours_specs
            .get(name.as_str())
            .and_then(|s| s["message"].as_str())
            .unwrap_or("")
            .replace('|', "\\|");
        table.push_str(&format!(
            "| {} | {o} | {u} | {message} |\n",
            name.replace('|', "\\|")
        ));
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn testcases_reads_outcomes_and_names() {
        let xml = r#"<testsuite><testcase name="[sig-node] Pods should run &#34;x&#34;" classname="Kubernetes e2e suite" time="3"></testcase>
<testcase name="[sig-node] B" classname="k" time="0"><skipped></skipped></testcase>
<testcase name="[sig-node] C" classname="k" time="1"><failure type="Failure">/src/framework.go:629&#xA;boom: it broke&#xA;/src/x.go:1</failure></testcase></testsuite>"#;
        let cases = testcases(xml);
        let outcomes: Vec<(&str, &str)> =
            cases.iter().map(|(n, r)| (n.as_str(), r.outcome)).collect();
        assert_eq!(
            outcomes,
            vec![
                ("[sig-node] Pods should run \"x\"", "passed"),
                ("[sig-node] B", "skipped"),
                ("[sig-node] C", "failed"),
            ]
        );
        assert_eq!(cases[2].1.message, "boom: it broke");
    }
}
