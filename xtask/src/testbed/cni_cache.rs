//! libcni's result cache, and the empty files a killed containerd leaves in it.
//!
//! containerd's CNI library writes each sandbox's network result to
//! `/var/lib/cni/results/<network>-<sandbox id>-<interface>` when it sets the network up, and
//! reads it back to tear the network down (containerd 1.6 has no setting for the directory,
//! containerd/containerd#9825). The write is not atomic: a containerd SIGKILLed during it leaves
//! an empty file, and from then on every `StopPodSandbox` of that sandbox fails with "failed to
//! get network … cached result: decoding version from network config: unexpected end of JSON
//! input" (containernetworking/cni#1055). No CRI call repairs that, so the upstream kubelet and
//! ours retry the pod's kill forever. The remedy operators use (Bottlerocket clears the cache
//! at boot) is removing the file; an empty file holds nothing the teardown could use.

use std::{
    collections::HashSet,
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};

use crate::util;

/// libcni's default cache directory for network results.
const RESULTS_DIR: &str = "/var/lib/cni/results";
/// containerd's CRI plugin keeps one directory per sandbox here, under its root.
const SANDBOXES_UNDER_ROOT: &str = "io.containerd.grpc.v1.cri/sandboxes";

/// Where libcni caches the result of `network` for `sandbox_id`'s `eth0`.
pub(crate) fn result_file(network: &str, sandbox_id: &str) -> PathBuf {
    Path::new(RESULTS_DIR).join(format!("{network}-{sandbox_id}-eth0"))
}

/// Removes the empty result files in libcni's cache of `network` for the sandboxes
/// containerd's `root` knows; returns their paths.
pub(crate) fn remove_empty_results(root: &Path, network: &str) -> Result<Vec<PathBuf>> {
    remove_empty_results_in(root, Path::new(RESULTS_DIR), network)
}

/// [`remove_empty_results`] over the cache directory `results_dir`. Run it while containerd
/// is stopped: libcni creates a file empty before writing it, so a running containerd's file
/// may be empty for a moment.
fn remove_empty_results_in(root: &Path, results_dir: &Path, network: &str) -> Result<Vec<PathBuf>> {
    let sandbox_ids: HashSet<String> = util::dir_entries(&root.join(SANDBOXES_UNDER_ROOT))?
        .into_iter()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    let mut removed = Vec::new();
    for entry in util::dir_entries(results_dir)? {
        // `<network>-<sandbox id>-<interface>`
        let name = entry.file_name();
        let sandbox = name
            .to_str()
            .and_then(|n| n.strip_prefix(network)?.strip_prefix('-')?.rsplit_once('-'))
            .map(|(id, _interface)| id);
        let ours = sandbox.is_some_and(|id| sandbox_ids.contains(id));
        let empty = entry.metadata().is_ok_and(|m| m.is_file() && m.len() == 0);
        if ours && empty {
            let path = entry.path();
            fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
            removed.push(path);
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_empty_files_of_known_sandboxes_go() -> Result<()> {
        let root = tempfile::tempdir()?;
        let results = tempfile::tempdir()?;
        for id in ["aaa", "bbb"] {
            fs::create_dir_all(root.path().join(SANDBOXES_UNDER_ROOT).join(id))?;
        }
        let file = |name: &str, body: &str| fs::write(results.path().join(name), body);
        file("testbed-aaa-eth0", "")?;
        file("testbed-bbb-eth0", r#"{"kind":"cniCacheV1"}"#)?;
        file("testbed-ccc-eth0", "")?;
        file("other-aaa-eth0", "")?;

        let removed = remove_empty_results_in(root.path(), results.path(), "testbed")?;

        assert_eq!(removed, vec![results.path().join("testbed-aaa-eth0")]);
        let mut left: Vec<String> = fs::read_dir(results.path())?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["other-aaa-eth0", "testbed-bbb-eth0", "testbed-ccc-eth0"]
        );
        Ok(())
    }

    #[test]
    fn nothing_to_do_without_the_directories() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let missing = dir.path().join("missing");
        assert!(remove_empty_results_in(&missing, &missing, "testbed")?.is_empty());
        Ok(())
    }
}
