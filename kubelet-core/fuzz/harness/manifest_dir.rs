//! The static pod manifest *directory* reader (`config::file::scan`, upstream
//! `extractFromDir`): several files the kubelet does not control, some of them symlinks
//! (to each other, to a directory, to a device, in a loop, dangling, out of the directory),
//! sub-directories and hidden files.
//!
//! The input is split at lines `%%`; each part becomes one entry, named `NN.yaml`, whose
//! kind is chosen by the part's first byte and whose content is the rest. Checked:
//! the scan never fails for an existing directory, every entry that is not hidden is either
//! a pod or an error naming it (never both, never left out), pods have distinct full names
//! and UIDs, and a second scan gives the same pods and UIDs.

use std::collections::BTreeSet;
use std::path::PathBuf;

use kubelet_core::PodExt;
use kubelet_core::config::file::scan;

/// Reads `data` as a manifest directory.
pub fn run(data: &[u8]) {
    let work = super::scratch::dir("manifest_dir");
    let dir = work.join("manifests");
    std::fs::create_dir(&dir).expect("scratch manifest directory");
    let outside = work.join("outside.yaml");
    std::fs::write(&outside, GOOD).expect("scratch file");
    let parts = super::split::parts(data);
    let mut expected = BTreeSet::new();
    for (i, part) in parts.iter().enumerate().take(64) {
        let (kind, body) = part.split_first().map_or((0, &[][..]), |(k, b)| (*k, b));
        let entry = Entry::from(kind);
        let name = format!("{i:02}.yaml");
        let path = dir.join(&name);
        let made = match entry {
            Entry::File => std::fs::write(&path, body),
            Entry::Hidden => std::fs::write(dir.join(format!(".{name}")), body),
            Entry::SymlinkToSibling => {
                // Another entry by number: a file, a directory, a symlink, itself, or a
                // hidden name that does not exist.
                let n = body.first().copied().unwrap_or(0);
                let to = format!("{:02}.yaml", usize::from(n) % parts.len().min(64));
                std::os::unix::fs::symlink(to, &path)
            }
            Entry::SymlinkHostile => {
                let n = body.first().copied().unwrap_or(0);
                let to: PathBuf = match n % 7 {
                    0 => outside.clone(),
                    1 => PathBuf::from("/dev/zero"),
                    2 => PathBuf::from("/"),
                    3 => path.clone(),
                    4 => PathBuf::from("../outside.yaml"),
                    5 => PathBuf::from(".."),
                    _ => PathBuf::from("does-not-exist.yaml"),
                };
                std::os::unix::fs::symlink(to, &path)
            }
            Entry::Directory => std::fs::create_dir(&path)
                .and_then(|()| std::fs::write(path.join("inner.yaml"), body)),
        };
        made.expect("scratch entry");
        if entry != Entry::Hidden {
            expected.insert(path);
        }
    }
    let first = scan(&dir, "node-1").expect("the directory exists");
    let mut seen = BTreeSet::new();
    let mut names = BTreeSet::new();
    let mut uids = BTreeSet::new();
    for (path, pod) in &first.pods {
        assert!(seen.insert(path.clone()), "{} twice", path.display());
        assert!(
            names.insert(pod.full_name()),
            "two pods named {}",
            pod.full_name()
        );
        assert!(uids.insert(pod.uid()), "two pods with UID {:?}", pod.uid());
    }
    for e in &first.errors {
        assert!(
            seen.insert(e.path().to_owned()),
            "{} twice: {e}",
            e.path().display()
        );
        assert!(
            e.to_string().contains(&*e.path().to_string_lossy()),
            "{e} does not name its file"
        );
    }
    assert_eq!(seen, expected, "every entry is a pod or an error");
    let again = scan(&dir, "node-1").expect("the directory exists");
    let pods = |s: &kubelet_core::config::file::Scan| -> Vec<(PathBuf, String)> {
        s.pods
            .iter()
            .map(|(p, pod)| (p.clone(), pod.uid().0))
            .collect()
    };
    assert_eq!(
        pods(&first),
        pods(&again),
        "a second scan reads the same pods"
    );
}

/// What an input part becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    File,
    Hidden,
    SymlinkToSibling,
    SymlinkHostile,
    Directory,
}

impl From<u8> for Entry {
    fn from(kind: u8) -> Self {
        match kind % 10 {
            0..=4 => Entry::File,
            5 => Entry::Hidden,
            6 | 7 => Entry::SymlinkToSibling,
            8 => Entry::SymlinkHostile,
            _ => Entry::Directory,
        }
    }
}

/// A valid manifest, the target of some symlinks.
const GOOD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: outside\nspec:\n  containers:\n  - name: c\n    image: busybox\n";
