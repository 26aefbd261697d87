//! The static pod manifest decoder (`config::static_pod::decode`, upstream
//! `tryDecodeSinglePod`): YAML or JSON bytes from a file the kubelet does not control. Any
//! input must give a pod or an error naming the file, never a panic; a pod decoded twice is
//! the same pod (its UID is stable).

use std::path::Path;

use kubelet_core::PodExt;

/// Decodes `data` as a manifest.
pub fn run(data: &[u8]) {
    let path = Path::new("/fuzz/pod.yaml");
    match kubelet_core::config::static_pod::decode(data, path, "node-1") {
        Ok(pod) => {
            let again = kubelet_core::config::static_pod::decode(data, path, "node-1")
                .expect("decodes twice");
            assert_eq!(pod.uid(), again.uid(), "the UID is stable");
        }
        Err(e) => assert!(e.to_string().starts_with("/fuzz/pod.yaml: "), "{e}"),
    }
}
