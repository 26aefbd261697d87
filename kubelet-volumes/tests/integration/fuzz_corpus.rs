//! The cargo-fuzz targets of `kubelet-core/fuzz` for this crate (issue 16: atomic-writer
//! payload paths, subPath resolution) over their checked-in inputs, as a normal test on
//! stable Rust (see `kubelet-core/tests/fuzz_corpus.rs`).
#![allow(clippy::disallowed_methods)]

#[path = "../../../kubelet-core/fuzz/harness/atomic_writer.rs"]
mod atomic_writer;
#[path = "../../../kubelet-core/fuzz/harness/corpus.rs"]
mod corpus;
#[path = "../../../kubelet-core/fuzz/harness/scratch.rs"]
mod scratch;
#[path = "../../../kubelet-core/fuzz/harness/split.rs"]
mod split;
#[path = "../../../kubelet-core/fuzz/harness/subpath.rs"]
mod subpath;

#[test]
fn atomic_writer_inputs() {
    corpus::run_all("kubelet-core", "atomic_writer", &[], atomic_writer::run);
}

#[test]
fn subpath_inputs() {
    corpus::run_all("kubelet-core", "subpath", &[], subpath::run);
}
