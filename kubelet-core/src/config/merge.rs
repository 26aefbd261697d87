//! The pod config merger: turns the snapshots of several pod sources into one ordered stream
//! of incremental updates.
//!
//! Mirrors upstream `pkg/kubelet/config/config.go` (`PodConfig`, `podStorage.merge`,
//! `filterInvalidPods`, `checkAndUpdatePod`, `SeenAllSources`) in
//! `PodConfigNotificationIncremental` mode, and the per-source channels of
//! `pkg/kubelet/config/mux.go`.
//!
//! Each source gets a sender from [`PodConfig::channel`] and sends [`Operation::Set`]
//! snapshots (incremental `Add`/`Update`/`Delete`/`Remove` are accepted too, as upstream). For
//! every update the merger emits, in upstream's order:
//!
//! 1. [`Operation::Remove`] for pods gone from their source;
//! 2. [`Operation::Add`] for new pods (an *empty* `Add` on a source's first snapshot when
//!    nothing else is emitted, so the consumer learns that the source is ready);
//! 3. [`Operation::Update`] for pods whose spec, labels, deletion grace period or annotations
//!    (other than the kubelet's own `config.source`, `config.mirror` and `config.seen`)
//!    changed;
//! 4. [`Operation::Delete`] for such changes that carry a `deletionTimestamp`;
//! 5. [`Operation::Reconcile`] for pods whose status alone changed.
//!
//! Within one source, pods are keyed by UID and the first pod of a full name
//! (`<name>_<namespace>`) wins; later ones are dropped with a "duplicate pod name" warning.
//! Across sources, the source that provided a full name first keeps it; another source's pod
//! of the same name is held back with a warning and admitted as soon as the name is free.
//! Mirror pods (annotation [`CONFIG_MIRROR_ANNOTATION`]) share their static pod's name by
//! design and are exempt from that check.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use futures::stream::{self, Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{
    CONFIG_MIRROR_ANNOTATION, CONFIG_SEEN_ANNOTATION, CONFIG_SOURCE_ANNOTATION, Operation,
    PodUpdate,
};
use crate::pod::{PodExt, PodUid};

/// Annotations the kubelet sets itself; they never make a pod "changed" (upstream
/// `localAnnotations`).
const LOCAL_ANNOTATIONS: [&str; 3] = [
    CONFIG_SOURCE_ANNOTATION,
    CONFIG_MIRROR_ANNOTATION,
    CONFIG_SEEN_ANNOTATION,
];

/// A cheap, cloneable view of which sources have delivered their first snapshot (upstream
/// `PodConfig.SeenAllSources`, which gates housekeeping).
#[derive(Clone, Debug, Default)]
pub struct SourcesReady {
    inner: Arc<Mutex<ReadyState>>,
}

#[derive(Debug, Default)]
struct ReadyState {
    registered: BTreeSet<String>,
    seen: BTreeSet<String>,
}

impl SourcesReady {
    /// `true` once every source registered with [`PodConfig::channel`] has sent at least one
    /// [`Operation::Set`] (vacuously `true` with no sources, as upstream).
    pub fn seen_all_sources(&self) -> bool {
        let s = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        s.registered.is_subset(&s.seen)
    }

    /// `true` once `source` has sent at least one [`Operation::Set`].
    pub fn has_seen(&self, source: &str) -> bool {
        let s = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        s.seen.contains(source)
    }

    fn register(&self, source: &str) {
        let mut s = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        s.registered.insert(source.to_owned());
    }

    /// Marks `source` seen; returns `true` if it was not seen before.
    fn mark_seen(&self, source: &str) -> bool {
        let mut s = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        s.seen.insert(source.to_owned())
    }
}

type SourceStream = Pin<Box<dyn Stream<Item = (Arc<str>, PodUpdate)> + Send>>;

/// Merges the updates of several pod sources into one stream of incremental
/// [`PodUpdate`]s (upstream `PodConfig` with `PodConfigNotificationIncremental`).
///
/// ```no_run
/// use kubelet_core::config::{merge::PodConfig, file::FileSource, PodSource};
/// use tokio_util::sync::CancellationToken;
/// # async fn demo() {
/// let token = CancellationToken::new();
/// let (mut config, mut updates) = PodConfig::new();
/// let ready = config.sources_ready();
/// let file = FileSource::new("/etc/kubernetes/manifests", "node-1");
/// let tx = config.channel(file.name());
/// tokio::spawn(Box::new(file).run(tx, token.child_token()));
/// tokio::spawn(config.run(token.child_token()));
/// while let Some(update) = updates.recv().await {
///     println!("{:?} {} pods from {}", update.op, update.pods.len(), update.source);
///     let _ = ready.seen_all_sources();
/// }
/// # }
/// ```
#[doc(alias = "podStorage")]
#[derive(Debug)]
pub struct PodConfig {
    sources: Vec<(
        String,
        mpsc::Receiver<PodUpdate>,
        mpsc::WeakSender<PodUpdate>,
    )>,
    updates: mpsc::Sender<PodUpdate>,
    ready: SourcesReady,
    storage: Storage,
}

impl PodConfig {
    /// Capacity of the merged update channel (upstream uses 50).
    pub const DEFAULT_CAPACITY: usize = 50;

    /// Capacity of each source's channel into the merger: one update.
    ///
    /// Upstream's source channels are unbuffered: the merger applies each update as it comes
    /// and queues only the merged, incremental updates (a pod added, one removed). The file
    /// and API sources send every pod each time, so while the sync loop does not read (it
    /// skips pod syncs while the runtime or the PLEG is unhealthy) a deep source channel fills
    /// with whole snapshots: fifty of 130 pods held about 35 MiB in the soak (issue 16). With
    /// one, a source waits with at most one snapshot queued and sends its newest state later.
    pub const SOURCE_CAPACITY: usize = 1;

    /// A merger with no sources, and the receiver of its merged updates.
    pub fn new() -> (Self, mpsc::Receiver<PodUpdate>) {
        Self::with_capacity(Self::DEFAULT_CAPACITY)
    }

    /// As [`PodConfig::new`], with `capacity` for the merged channel (each source's channel
    /// holds [`PodConfig::SOURCE_CAPACITY`]).
    ///
    /// # Panics
    ///
    /// If `capacity` is zero.
    pub fn with_capacity(capacity: usize) -> (Self, mpsc::Receiver<PodUpdate>) {
        let (updates, rx) = mpsc::channel(capacity);
        let config = Self {
            sources: Vec::new(),
            updates,
            ready: SourcesReady::default(),
            storage: Storage::default(),
        };
        (config, rx)
    }

    /// The sender for `source` (e.g. [`super::FILE_SOURCE`]), registering the source so that
    /// [`SourcesReady::seen_all_sources`] waits for it. Calling it again for the same source
    /// returns another sender of the same channel while one is alive.
    ///
    /// The channel's name is authoritative: the `source` field of updates sent on it is
    /// ignored.
    pub fn channel(&mut self, source: &str) -> mpsc::Sender<PodUpdate> {
        self.ready.register(source);
        if let Some(tx) = self
            .sources
            .iter()
            .find(|(name, ..)| name == source)
            .and_then(|(_, _, weak)| weak.upgrade())
        {
            return tx;
        }
        self.sources.retain(|(name, ..)| name != source);
        let (tx, rx) = mpsc::channel(Self::SOURCE_CAPACITY);
        self.sources
            .push((source.to_owned(), rx, tx.clone().downgrade()));
        tx
    }

    /// A handle that tells whether every registered source has sent a snapshot.
    pub fn sources_ready(&self) -> SourcesReady {
        self.ready.clone()
    }

    /// Merges source updates until `token` is cancelled, the merged receiver is dropped, or
    /// every source sender is dropped.
    ///
    /// Cancel behaviour: cancellation is checked before each source update and while waiting
    /// to deliver a merged update (the merged channel is bounded, so a slow consumer applies
    /// back-pressure to the sources). On cancellation the merger returns at once; merged
    /// updates not yet delivered are dropped and the merged channel closes. The merged state
    /// lives only in memory: a new `PodConfig` starts empty, as upstream.
    pub async fn run(self, token: CancellationToken) {
        let Self {
            sources,
            updates,
            ready,
            mut storage,
            ..
        } = self;
        let streams: Vec<SourceStream> = sources
            .into_iter()
            .map(|(name, rx, _)| {
                let name: Arc<str> = name.into();
                let s =
                    stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|u| (u, rx)) })
                        .map(move |u| (name.clone(), u));
                Box::pin(s) as SourceStream
            })
            .collect();
        let mut inbox = stream::select_all(streams);

        loop {
            let (source, update) = tokio::select! {
                biased;
                _ = token.cancelled() => return,
                next = inbox.next() => match next {
                    Some(item) => item,
                    None => {
                        debug!("every pod source closed its channel; pod config stops");
                        return;
                    }
                },
            };
            for out in storage.merge(&source, update, &ready) {
                tokio::select! {
                    biased;
                    _ = token.cancelled() => return,
                    sent = updates.send(out) => if sent.is_err() {
                        debug!("pod update receiver dropped; pod config stops");
                        return;
                    },
                }
            }
        }
    }
}

/// The merged state: per source, the admitted pods by UID, and the pods held back because
/// another source provides their full name.
#[derive(Debug, Default)]
struct Storage {
    pods: HashMap<String, HashMap<PodUid, Pod>>,
    shadowed: HashMap<String, Vec<Pod>>,
}

#[derive(Default)]
struct Changes {
    adds: Vec<Pod>,
    updates: Vec<Pod>,
    deletes: Vec<Pod>,
    removes: Vec<Pod>,
    reconciles: Vec<Pod>,
}

impl Storage {
    /// Applies one update from `source` and returns the updates to emit, in order.
    fn merge(&mut self, source: &str, update: PodUpdate, ready: &SourcesReady) -> Vec<PodUpdate> {
        let mut changes = Changes::default();
        let mut first_set = false;
        match update.op {
            Operation::Set => {
                first_set = ready.mark_seen(source);
                let (admitted, shadowed) = self.filter(source, update.pods);
                let mut old = self.pods.remove(source).unwrap_or_default();
                let mut new = HashMap::with_capacity(admitted.len());
                for pod in admitted {
                    apply(source, pod, &mut old, &mut new, &mut changes);
                }
                let mut gone: Vec<_> = old.into_values().collect();
                gone.sort_by_key(PodExt::full_name);
                changes.removes = gone;
                self.pods.insert(source.to_owned(), new);
                self.shadowed.insert(source.to_owned(), shadowed);
            }
            Operation::Add | Operation::Update | Operation::Delete => {
                let (admitted, shadowed) = self.filter(source, update.pods);
                let mut pods = self.pods.remove(source).unwrap_or_default();
                for pod in admitted {
                    let uid = pod.uid();
                    let mut existing = HashMap::new();
                    if let Some(p) = pods.remove(&uid) {
                        existing.insert(uid, p);
                    }
                    apply(source, pod, &mut existing, &mut pods, &mut changes);
                }
                self.pods.insert(source.to_owned(), pods);
                let held = self.shadowed.entry(source.to_owned()).or_default();
                let uids: HashSet<_> = shadowed.iter().map(PodExt::uid).collect();
                held.retain(|p| !uids.contains(&p.uid()));
                held.extend(shadowed);
            }
            Operation::Remove => {
                let pods = self.pods.entry(source.to_owned()).or_default();
                for pod in &update.pods {
                    if let Some(existing) = pods.remove(&pod.uid()) {
                        changes.removes.push(existing);
                    }
                }
                let uids: HashSet<_> = update.pods.iter().map(PodExt::uid).collect();
                if let Some(s) = self.shadowed.get_mut(source) {
                    s.retain(|p| !uids.contains(&p.uid()));
                }
            }
            Operation::Reconcile => {
                warn!(
                    source,
                    "pod source sent an update of type Reconcile, ignoring"
                );
            }
        }

        let mut out = Vec::new();
        let mut emit = |op, pods: Vec<Pod>, always: bool| {
            if always || !pods.is_empty() {
                out.push(PodUpdate {
                    pods,
                    op,
                    source: source.to_owned(),
                });
            }
        };
        let quiet =
            changes.adds.is_empty() && changes.updates.is_empty() && changes.deletes.is_empty();
        emit(Operation::Remove, changes.removes, false);
        emit(Operation::Add, changes.adds, first_set && quiet);
        emit(Operation::Update, changes.updates, false);
        emit(Operation::Delete, changes.deletes, false);
        emit(Operation::Reconcile, changes.reconciles, false);
        out.extend(self.admit_shadowed(source));
        out
    }

    /// Drops pods whose full name repeats within the batch or is owned by another source
    /// (upstream `filterInvalidPods`, extended across sources). Returns (admitted, held back).
    fn filter(&self, source: &str, pods: Vec<Pod>) -> (Vec<Pod>, Vec<Pod>) {
        let taken: HashMap<String, &str> = self
            .pods
            .iter()
            .filter(|(s, _)| s.as_str() != source)
            .flat_map(|(s, pods)| pods.values().map(move |p| (s.as_str(), p)))
            .filter(|(_, p)| !crate::pod::is_mirror_pod(p))
            .map(|(s, p)| (p.full_name(), s))
            .collect();
        let mut names = HashSet::new();
        let mut uids = HashSet::new();
        let mut admitted = Vec::with_capacity(pods.len());
        let mut shadowed = Vec::new();
        for (i, pod) in pods.into_iter().enumerate() {
            let name = pod.full_name();
            if !names.insert(name.clone()) {
                warn!(
                    index = i,
                    pod = %name,
                    source,
                    "pod failed validation due to duplicate pod name {name:?}, ignoring"
                );
                continue;
            }
            if !uids.insert(pod.uid()) {
                warn!(index = i, pod = %name, uid = %pod.uid(), source, "duplicate pod uid, ignoring");
                continue;
            }
            if !crate::pod::is_mirror_pod(&pod)
                && let Some(owner) = taken.get(&name)
            {
                warn!(
                    pod = %name,
                    source,
                    owner,
                    "pod name already provided by source {owner:?}, ignoring until it is gone"
                );
                shadowed.push(pod);
                continue;
            }
            admitted.push(pod);
        }
        (admitted, shadowed)
    }

    /// Admits held-back pods of sources other than `changed` whose names became free.
    fn admit_shadowed(&mut self, changed: &str) -> Vec<PodUpdate> {
        let mut out = Vec::new();
        let candidates: BTreeSet<String> = self
            .shadowed
            .iter()
            .filter(|(s, pods)| s.as_str() != changed && !pods.is_empty())
            .map(|(s, _)| s.clone())
            .collect();
        for source in candidates {
            let Some(held) = self.shadowed.remove(&source) else {
                continue;
            };
            let (admitted, still) = self.filter(&source, held);
            self.shadowed.insert(source.clone(), still);
            if admitted.is_empty() {
                continue;
            }
            let pods = self.pods.entry(source.clone()).or_default();
            let own: HashSet<String> = pods.values().map(PodExt::full_name).collect();
            let mut adds = Vec::new();
            for mut pod in admitted {
                if own.contains(&pod.full_name()) || pods.contains_key(&pod.uid()) {
                    continue;
                }
                annotate(&source, &mut pod);
                adds.push(pod.clone());
                pods.insert(pod.uid(), pod);
            }
            if !adds.is_empty() {
                out.push(PodUpdate {
                    pods: adds,
                    op: Operation::Add,
                    source,
                });
            }
        }
        out
    }
}

/// Merges `pod` from `source` against `old` (consuming its entry) into `new`, recording what
/// changed (upstream `updatePodsFunc` + `checkAndUpdatePod`).
fn apply(
    source: &str,
    mut pod: Pod,
    old: &mut HashMap<PodUid, Pod>,
    new: &mut HashMap<PodUid, Pod>,
    changes: &mut Changes,
) {
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(CONFIG_SOURCE_ANNOTATION.into(), source.into());
    let uid = pod.uid();
    match old.remove(&uid) {
        Some(mut existing) => {
            match check_and_update(&mut existing, pod) {
                Change::None => {}
                Change::Update => changes.updates.push(existing.clone()),
                Change::Delete => changes.deletes.push(existing.clone()),
                Change::Reconcile => changes.reconciles.push(existing.clone()),
            }
            new.insert(uid, existing);
        }
        None => {
            annotate(source, &mut pod);
            changes.adds.push(pod.clone());
            new.insert(uid, pod);
        }
    }
}

/// Sets the source annotation and, unless the source set it, the first-seen time (upstream
/// `recordFirstSeenTime`).
fn annotate(source: &str, pod: &mut Pod) {
    let annotations = pod
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(CONFIG_SOURCE_ANNOTATION.into(), source.into());
    annotations
        .entry(CONFIG_SEEN_ANNOTATION.into())
        .or_insert_with(seen_now);
}

/// The current time in RFC 3339 with nanoseconds, the format of
/// [`CONFIG_SEEN_ANNOTATION`] (upstream `kubetypes.NewTimestamp().GetString()`).
pub(crate) fn seen_now() -> String {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(0));
    k8s_openapi::jiff::Timestamp::from_nanosecond(since_epoch)
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

enum Change {
    None,
    Update,
    Delete,
    Reconcile,
}

/// Upstream `checkAndUpdatePod`: updates `existing` from `new` and says what kind of change
/// it was.
fn check_and_update(existing: &mut Pod, new: Pod) -> Change {
    if !differ_semantically(existing, &new) {
        if existing.status != new.status {
            existing.status = new.status;
            return Change::Reconcile;
        }
        return Change::None;
    }
    existing.spec = new.spec;
    existing.metadata.labels = new.metadata.labels;
    existing.metadata.deletion_timestamp = new.metadata.deletion_timestamp;
    existing.metadata.deletion_grace_period_seconds = new.metadata.deletion_grace_period_seconds;
    existing.status = new.status;
    // The new annotations, with the kubelet's local ones kept from the existing pod.
    let mut annotations = new.metadata.annotations.unwrap_or_default();
    for key in LOCAL_ANNOTATIONS {
        if let Some(v) = existing.annotation(key) {
            annotations.insert(key.to_owned(), v.to_owned());
        }
    }
    existing.metadata.annotations = Some(annotations);
    if existing.metadata.deletion_timestamp.is_some() {
        Change::Delete
    } else {
        Change::Update
    }
}

/// Upstream `podsDifferSemantically`. A missing map and an empty one are equal.
fn differ_semantically(existing: &Pod, new: &Pod) -> bool {
    let empty = BTreeMap::new();
    let labels =
        |p: &Pod| -> BTreeMap<String, String> { p.metadata.labels.clone().unwrap_or_default() };
    let annotations = |p: &Pod| -> BTreeMap<String, String> {
        p.metadata
            .annotations
            .as_ref()
            .unwrap_or(&empty)
            .iter()
            .filter(|(k, _)| !LOCAL_ANNOTATIONS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    existing.spec != new.spec
        || labels(existing) != labels(new)
        || existing.metadata.deletion_timestamp != new.metadata.deletion_timestamp
        || existing.metadata.deletion_grace_period_seconds
            != new.metadata.deletion_grace_period_seconds
        || annotations(existing) != annotations(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing as fixtures;
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const FILE: &str = "file";
    const API: &str = "api";

    fn set(source: &str, pods: Vec<Pod>) -> PodUpdate {
        PodUpdate {
            pods,
            op: Operation::Set,
            source: source.into(),
        }
    }

    fn ops(out: &[PodUpdate]) -> Vec<(Operation, Vec<String>)> {
        out.iter()
            .map(|u| {
                (
                    u.op,
                    u.pods
                        .iter()
                        .map(|p| p.name_or_empty().to_owned())
                        .collect(),
                )
            })
            .collect()
    }

    fn with_uid(name: &str, uid: &str) -> Pod {
        let mut p = fixtures::pod(name);
        p.metadata.uid = Some(uid.into());
        p
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn set_add_update_reconcile_delete_remove() {
        let ready = SourcesReady::default();
        let mut s = Storage::default();

        let out = s.merge(
            FILE,
            set(FILE, vec![fixtures::pod("a"), fixtures::pod("b")]),
            &ready,
        );
        assert_eq!(ops(&out), [(Operation::Add, names(&["a", "b"]))]);
        let added = &out[0].pods[0];
        assert_eq!(added.annotation(CONFIG_SOURCE_ANNOTATION), Some(FILE));
        let seen = added
            .annotation(CONFIG_SEEN_ANNOTATION)
            .expect("first seen")
            .to_owned();
        assert!(
            seen.parse::<k8s_openapi::jiff::Timestamp>().is_ok(),
            "{seen}"
        );

        // The same snapshot again: nothing to say.
        let out = s.merge(
            FILE,
            set(FILE, vec![fixtures::pod("a"), fixtures::pod("b")]),
            &ready,
        );
        assert!(out.is_empty(), "{out:?}");

        // Spec change of a → UPDATE, keeping the first-seen time.
        let mut a = fixtures::pod("a");
        a.spec.as_mut().expect("spec").containers[0].image = Some("busybox:1.37".into());
        let out = s.merge(FILE, set(FILE, vec![a.clone(), fixtures::pod("b")]), &ready);
        assert_eq!(ops(&out), [(Operation::Update, names(&["a"]))]);
        assert_eq!(
            out[0].pods[0].annotation(CONFIG_SEEN_ANNOTATION),
            Some(seen.as_str())
        );

        // A changed config.seen alone is not a change.
        let mut a2 = a.clone();
        a2.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(CONFIG_SEEN_ANNOTATION.into(), "2001-01-01T00:00:00Z".into());
        assert!(
            s.merge(FILE, set(FILE, vec![a2, fixtures::pod("b")]), &ready)
                .is_empty()
        );

        // Label change → UPDATE; user annotation change → UPDATE.
        let mut a3 = a.clone();
        a3.metadata.labels = Some([("x".to_owned(), "y".to_owned())].into());
        let out = s.merge(
            FILE,
            set(FILE, vec![a3.clone(), fixtures::pod("b")]),
            &ready,
        );
        assert_eq!(ops(&out), [(Operation::Update, names(&["a"]))]);

        // Status only → RECONCILE.
        let mut b = fixtures::pod("b");
        b.status = Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        let out = s.merge(FILE, set(FILE, vec![a3.clone(), b.clone()]), &ready);
        assert_eq!(ops(&out), [(Operation::Reconcile, names(&["b"]))]);

        // deletionTimestamp newly set → DELETE.
        let mut b2 = b.clone();
        b2.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let out = s.merge(FILE, set(FILE, vec![a3.clone(), b2]), &ready);
        assert_eq!(ops(&out), [(Operation::Delete, names(&["b"]))]);

        // Gone from the snapshot → REMOVE; a new pod → ADD, REMOVE first.
        let out = s.merge(FILE, set(FILE, vec![fixtures::pod("c")]), &ready);
        assert_eq!(
            ops(&out),
            [
                (Operation::Remove, names(&["a", "b"])),
                (Operation::Add, names(&["c"])),
            ]
        );
    }

    #[test]
    fn incremental_ops_from_a_source() {
        let ready = SourcesReady::default();
        let mut s = Storage::default();
        let add = |pods| PodUpdate {
            pods,
            op: Operation::Add,
            source: API.into(),
        };
        assert_eq!(
            ops(&s.merge(API, add(vec![fixtures::pod("a")]), &ready)),
            [(Operation::Add, names(&["a"]))]
        );
        assert_eq!(
            ops(&s.merge(API, add(vec![fixtures::pod("b")]), &ready)),
            [(Operation::Add, names(&["b"]))]
        );
        let remove = PodUpdate {
            pods: vec![fixtures::pod("a")],
            op: Operation::Remove,
            source: API.into(),
        };
        assert_eq!(
            ops(&s.merge(API, remove, &ready)),
            [(Operation::Remove, names(&["a"]))]
        );
        assert!(!ready.has_seen(API), "only SET marks a source seen");
    }

    #[test]
    fn duplicate_names_within_a_source_first_wins() {
        let ready = SourcesReady::default();
        let mut s = Storage::default();
        let out = s.merge(
            FILE,
            set(
                FILE,
                vec![with_uid("a", "1"), with_uid("a", "2"), with_uid("b", "3")],
            ),
            &ready,
        );
        assert_eq!(ops(&out), [(Operation::Add, names(&["a", "b"]))]);
        assert_eq!(out[0].pods[0].uid().as_str(), "1");
        // Same name in another namespace is another pod.
        let mut other_ns = with_uid("a", "4");
        other_ns.metadata.namespace = Some("kube-system".into());
        let out = s.merge(FILE, set(FILE, vec![with_uid("a", "1"), other_ns]), &ready);
        assert_eq!(
            ops(&out),
            [
                (Operation::Remove, names(&["b"])),
                (Operation::Add, names(&["a"]))
            ]
        );
    }

    #[test]
    fn name_owned_by_another_source_is_held_back_until_free() {
        let ready = SourcesReady::default();
        let mut s = Storage::default();
        s.merge(API, set(API, vec![with_uid("web", "api-1")]), &ready);
        let out = s.merge(
            FILE,
            set(
                FILE,
                vec![with_uid("web", "file-1"), with_uid("x", "file-2")],
            ),
            &ready,
        );
        assert_eq!(ops(&out), [(Operation::Add, names(&["x"]))]);

        // A mirror pod shares its static pod's name by design.
        let mut mirror = with_uid("x", "mirror-1");
        mirror.metadata.annotations =
            Some([(CONFIG_MIRROR_ANNOTATION.to_owned(), "h".to_owned())].into());
        let out = s.merge(
            API,
            set(API, vec![with_uid("web", "api-1"), mirror]),
            &ready,
        );
        assert_eq!(ops(&out), [(Operation::Add, names(&["x"]))]);
        assert_eq!(out[0].source, API);

        // The API pod goes away: the file pod gets the name.
        let out = s.merge(API, set(API, vec![]), &ready);
        assert_eq!(
            ops(&out),
            [
                (Operation::Remove, names(&["web", "x"])),
                (Operation::Add, names(&["web"])),
            ]
        );
        assert_eq!(out[1].source, FILE);
        assert_eq!(out[1].pods[0].uid().as_str(), "file-1");
        assert_eq!(
            out[1].pods[0].annotation(CONFIG_SOURCE_ANNOTATION),
            Some(FILE)
        );
    }

    #[test]
    fn sources_ready_after_every_first_set() {
        let (mut config, _rx) = PodConfig::new();
        let ready = config.sources_ready();
        let _file = config.channel(FILE);
        let _api = config.channel(API);
        assert!(!ready.seen_all_sources());
        let out = config.storage.merge(FILE, set(FILE, vec![]), &config.ready);
        // The first, empty snapshot still tells the consumer the source is there.
        assert_eq!(ops(&out), [(Operation::Add, vec![])]);
        assert!(ready.has_seen(FILE));
        assert!(!ready.seen_all_sources());
        let out = config.storage.merge(FILE, set(FILE, vec![]), &config.ready);
        assert!(out.is_empty(), "only the first empty SET is announced");
        config.storage.merge(API, set(API, vec![]), &config.ready);
        assert!(ready.seen_all_sources());
        assert!(ready.clone().seen_all_sources());
    }

    #[tokio::test]
    async fn run_merges_channels_and_stops_on_cancel() {
        let (mut config, mut rx) = PodConfig::new();
        let ready = config.sources_ready();
        let file = config.channel(FILE);
        let again = config.channel(FILE);
        let api = config.channel(API);
        let token = CancellationToken::new();
        let task = tokio::spawn(config.run(token.clone()));

        // The update's own source field is ignored: the channel names the source.
        file.send(set("bogus", vec![fixtures::pod("a")]))
            .await
            .expect("send");
        let u = rx.recv().await.expect("update");
        assert_eq!((u.op, u.source.as_str()), (Operation::Add, FILE));
        again.send(set(FILE, vec![])).await.expect("same channel");
        let u = rx.recv().await.expect("update");
        assert_eq!(u.op, Operation::Remove);
        assert!(!ready.seen_all_sources());
        api.send(set(API, vec![fixtures::pod("b")]))
            .await
            .expect("send");
        let u = rx.recv().await.expect("update");
        assert_eq!((u.op, u.source.as_str()), (Operation::Add, API));
        assert!(ready.seen_all_sources());

        token.cancel();
        task.await.expect("run returns");
        assert!(rx.recv().await.is_none(), "merged channel closes");
    }

    /// A stalled consumer holds back a snapshot source after the merged channel fills: the
    /// source channel queues one snapshot, not [`PodConfig::DEFAULT_CAPACITY`] of them.
    #[tokio::test]
    async fn a_stalled_consumer_holds_back_snapshot_sources() {
        let (mut config, _rx) = PodConfig::new();
        let file = config.channel(FILE);
        let token = CancellationToken::new();
        let task = tokio::spawn(config.run(token.clone()));
        let mut accepted = 0;
        for i in 0..200 {
            // Each snapshot replaces the last pod with a new one: an add and a remove.
            if file
                .try_send(set(FILE, vec![fixtures::pod(&format!("p{i}"))]))
                .is_err()
            {
                break;
            }
            accepted += 1;
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
        }
        // 25 snapshots fill the merged channel (two updates each), one waits in the merger
        // and one in the source channel.
        assert!(
            accepted <= PodConfig::DEFAULT_CAPACITY / 2 + 2,
            "{accepted} snapshots queued behind a stalled consumer"
        );
        token.cancel();
        task.await.expect("run returns");
    }

    #[tokio::test]
    async fn run_returns_when_all_sources_are_gone() {
        let (mut config, mut rx) = PodConfig::new();
        drop(config.channel(FILE));
        config.run(CancellationToken::new()).await;
        assert!(rx.recv().await.is_none());
    }
}
