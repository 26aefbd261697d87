//! The atomic writer's payload paths and contents (`kubelet_volumes::atomic_writer`,
//! upstream `pkg/volume/util/atomic_writer.go`): a Secret's, ConfigMap's, downward API's or
//! projected volume's keys and `items[].path` come from the API, written by users.
//!
//! The input is split at lines `%%` into files: a part's first line is the path, the next
//! byte the mode, the rest the content; a part `NEXT` starts the second payload. Checked:
//! a payload with an invalid path is refused before anything is written; a written payload
//! reads back through `<target>/<path>` with its content and mode, its top-level names are
//! the only visible entries, writing it again changes nothing, and nothing appears outside
//! the target; a second payload that fails leaves the first one whole (atomicity).

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use kubelet_volumes::atomic_writer::{AtomicWriter, FileProjection, Payload, validate_path};

/// Writes the payloads of `data` into a scratch target.
pub fn run(data: &[u8]) {
    let work = super::scratch::dir("atomic_writer");
    let target = work.join("target");
    std::fs::create_dir(&target).expect("scratch target");
    let (first, second) = payloads(data);
    let writer = AtomicWriter::new(target.clone());
    let valid = |p: &Payload| p.keys().all(|k| validate_path(k).is_ok());

    let written = writer.write(&first);
    if !valid(&first) {
        assert!(
            written.is_err(),
            "an invalid path was accepted: {:?}",
            first.keys()
        );
        assert_eq!(
            listing(&target),
            BTreeSet::new(),
            "a refused payload wrote something"
        );
        return;
    }
    let first_ok = written.is_ok();
    if first_ok {
        assert!(matches!(written, Ok(true)));
        check(&target, &first);
        assert!(
            matches!(writer.write(&first), Ok(false)),
            "the same payload again is a no-op"
        );
    }
    assert_eq!(
        listing(&work),
        BTreeSet::from(["target".to_owned()]),
        "wrote outside the target"
    );
    let Some(second) = second else { return };
    match writer.write(&second) {
        Ok(_) => check(&target, &second),
        Err(_) if first_ok => check(&target, &first),
        Err(_) => {}
    }
    assert_eq!(
        listing(&work),
        BTreeSet::from(["target".to_owned()]),
        "wrote outside the target"
    );
}

/// Every file of `payload` reads back through the target; only its top-level names show.
fn check(target: &Path, payload: &Payload) {
    for (path, file) in payload {
        let full = target.join(path);
        let data = std::fs::read(&full).unwrap_or_else(|e| panic!("{path:?} unreadable: {e}"));
        assert_eq!(data, file.data, "{path:?} content");
        let mode = std::fs::metadata(&full)
            .expect("metadata")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, file.mode & 0o777, "{path:?} mode");
    }
    let top: BTreeSet<String> = payload
        .keys()
        .filter_map(|k| k.split('/').next())
        .map(str::to_owned)
        .collect();
    let visible: BTreeSet<String> = listing(target)
        .into_iter()
        .filter(|n| !n.starts_with(".."))
        .collect();
    assert_eq!(visible, top, "visible entries");
}

fn listing(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("listing")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// The first payload and, after a part `NEXT`, the second.
fn payloads(data: &[u8]) -> (Payload, Option<Payload>) {
    let mut first = BTreeMap::new();
    let mut second: Option<Payload> = None;
    for part in super::split::parts(data).into_iter().take(64) {
        if part == b"NEXT" {
            second.get_or_insert_with(BTreeMap::new);
            continue;
        }
        let (path, rest) = match part.iter().position(|&b| b == b'\n') {
            Some(at) => (&part[..at], &part[at + 1..]),
            None => (part, &[][..]),
        };
        let (mode, content) = rest.split_first().map_or((0o644, &[][..]), |(m, c)| {
            // Owner read and write always: the kubelet runs as root, a test may not.
            (u32::from(*m) | 0o600, c)
        });
        let file = FileProjection {
            data: content.to_vec(),
            mode,
            fs_user: None,
        };
        let path = String::from_utf8_lossy(path).into_owned();
        match &mut second {
            Some(p) => p.insert(path, file),
            None => first.insert(path, file),
        };
    }
    (first, second)
}
