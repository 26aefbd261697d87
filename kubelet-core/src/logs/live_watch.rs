//! The inotify watch of a followed live log file (upstream `ReadLogs` watches it with
//! fsnotify), and the check that rotation has not replaced it unseen.

use std::path::Path;

use inotify::{EventStream, Inotify, WatchDescriptor, WatchMask};

use super::Error;
use super::reader::read_error;

/// The inotify watch of the live log file being read.
pub(super) struct LiveWatch {
    events: EventStream<Vec<u8>>,
    /// The watch of the file read now; rotated files are not watched.
    current: Option<WatchDescriptor>,
}

impl LiveWatch {
    /// A new inotify instance, watching nothing yet.
    pub(super) fn new(path: &Path) -> Result<Self, Error> {
        let watch_error = |source| Error::Watch {
            path: path.to_owned(),
            source,
        };
        let events = Inotify::init()
            .map_err(watch_error)?
            .into_event_stream(vec![0; 4096])
            .map_err(watch_error)?;
        Ok(Self {
            events,
            current: None,
        })
    }

    /// Watches `path`, the live log read through `file`, instead of the file read before,
    /// and tells whether `path` already names another file: a rotation between reading
    /// `file` to its end and adding the watch puts the watch on the new file, and no event
    /// would ever say that `file` was moved.
    pub(super) async fn watch(
        &mut self,
        path: &Path,
        file: &tokio::fs::File,
    ) -> Result<bool, Error> {
        let mut watches = self.events.watches();
        if let Some(old) = self.current.take() {
            // Gone with its file when rotation removed it: nothing to remove then.
            let _ = watches.remove(old);
        }
        let wd = watches
            .add(
                path,
                WatchMask::MODIFY
                    | WatchMask::MOVE_SELF
                    | WatchMask::DELETE_SELF
                    | WatchMask::ATTRIB,
            )
            .map_err(|source| Error::Watch {
                path: path.to_owned(),
                source,
            })?;
        self.current = Some(wd);
        replaced(path, file).await
    }

    /// The events of the watched files.
    pub(super) fn events(&mut self) -> &mut EventStream<Vec<u8>> {
        &mut self.events
    }
}

/// Whether `path` no longer names `file` (rotation moved or removed it).
pub(super) async fn replaced(path: &Path, file: &tokio::fs::File) -> Result<bool, Error> {
    use std::os::unix::fs::MetadataExt;
    let open = file.metadata().await.map_err(|e| read_error(path, e))?;
    match tokio::fs::metadata(path).await {
        Ok(named) => Ok((named.dev(), named.ino()) != (open.dev(), open.ino())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(read_error(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_rotation_before_the_watch_is_seen() {
        let dir = tempfile::tempdir().expect("test step");
        let path = dir.path().join("0.log");
        tokio::fs::write(&path, "old\n").await.expect("test step");
        let file = tokio::fs::File::open(&path).await.expect("test step");
        let mut watch = LiveWatch::new(&path).expect("test step");
        assert!(!watch.watch(&path, &file).await.expect("test step"));
        // Rotated after the file was read to its end, before the watch of the new one.
        tokio::fs::rename(&path, dir.path().join("0.log.1"))
            .await
            .expect("test step");
        assert!(replaced(&path, &file).await.expect("test step"));
        tokio::fs::write(&path, "new\n").await.expect("test step");
        assert!(watch.watch(&path, &file).await.expect("test step"));
        let new = tokio::fs::File::open(&path).await.expect("test step");
        assert!(!watch.watch(&path, &new).await.expect("test step"));
    }
}
