//! hostPath type checks (upstream `pkg/volume/hostpath/host_path.go`, `checkType`).

// Reviewed (issue 16): blocking by contract (stats and creation of hostPaths);
// DefaultVolumeManager calls this module on the blocking pool only.
#![allow(clippy::disallowed_methods)]

use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

use crate::error::{Error, Result};

/// Checks (and for the `*OrCreate` types, creates) `path` for a hostPath volume of `kind`
/// (`""`, `DirectoryOrCreate`, `Directory`, `FileOrCreate`, `File`, `Socket`, `CharDevice`,
/// `BlockDevice`). Created directories get mode 0755 and files 0644, as upstream.
pub fn check_host_path(path: &Path, kind: &str) -> Result<()> {
    let meta = std::fs::metadata(path);
    let not = |expected| Error::HostPathType {
        path: path.to_path_buf(),
        expected,
    };
    let create = |what| {
        move |source| Error::HostPathCreate {
            what,
            path: path.to_path_buf(),
            source,
        }
    };
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" => match meta {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(not("a directory")),
            Err(_) => std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(path)
                .map_err(create("hostPath directory")),
        },
        "Directory" => match meta {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(not("a directory")),
            Err(_) => Err(not("a directory (it does not exist)")),
        },
        "FileOrCreate" => match meta {
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => Err(not("a file")),
            Err(_) => {
                if let Some(parent) = path.parent() {
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o755)
                        .create(parent)
                        .map_err(create("parent of hostPath file"))?;
                }
                std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .mode(0o644)
                    .open(path)
                    .map(drop)
                    .map_err(create("hostPath file"))
            }
        },
        "File" => match meta {
            Ok(m) if m.is_file() => Ok(()),
            _ => Err(not("a file")),
        },
        "Socket" => match meta {
            Ok(m) if m.file_type().is_socket() => Ok(()),
            _ => Err(not("a socket file")),
        },
        "CharDevice" => match meta {
            Ok(m) if m.file_type().is_char_device() => Ok(()),
            _ => Err(not("a character device")),
        },
        "BlockDevice" => match meta {
            Ok(m) if m.file_type().is_block_device() => Ok(()),
            _ => Err(not("a block device")),
        },
        other => Err(Error::HostPathKind(other.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn each_type_is_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").expect("write");
        assert!(check_host_path(dir.path(), "Directory").is_ok());
        assert!(check_host_path(&file, "Directory").is_err());
        assert!(check_host_path(&file, "File").is_ok());
        assert!(check_host_path(dir.path(), "File").is_err());
        assert!(check_host_path(&file, "Socket").is_err());
        assert!(check_host_path(&file, "CharDevice").is_err());
        assert!(check_host_path(Path::new("/dev/null"), "CharDevice").is_ok());
        assert!(check_host_path(&file, "BlockDevice").is_err());
        assert!(check_host_path(&dir.path().join("missing"), "").is_ok());
        assert!(check_host_path(&file, "Bogus").is_err());
    }

    #[test]
    fn or_create_types_create_with_upstream_modes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path().join("a/b");
        check_host_path(&d, "DirectoryOrCreate").expect("dir");
        let mode = std::fs::metadata(&d).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode & !0o022, 0o755 & !0o022); // umask may clear group/other write only
        let f = dir.path().join("c/file");
        check_host_path(&f, "FileOrCreate").expect("file");
        assert!(std::fs::metadata(&f).expect("meta").is_file());
        assert!(check_host_path(&f, "DirectoryOrCreate").is_err());
    }
}
