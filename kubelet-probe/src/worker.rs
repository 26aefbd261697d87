//! One probe worker: a task probing one container with one probe type (upstream
//! `pkg/kubelet/prober/worker.go`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, ObjectReference, Probe};
use kubelet_core::PodUid;
use kubelet_core::cache::PodCache;
use kubelet_core::events::{EventRecorder, EventType, reasons};
use kubelet_core::metrics::{KubeletMetrics, ProbeLabels};
use kubelet_core::probe::{ProbeKind, ProbeResult, ResultsManager};
use kubelet_core::runtime::{ContainerState, Runtime};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, trace};

use crate::prober::{self, Timing};
use crate::schedule::{Schedule, Wake};

/// `result` of `prober_probe_total` (upstream `probeResultSuccessful`…).
const PROBE_RESULT_SUCCESSFUL: &str = "successful";
const PROBE_RESULT_FAILED: &str = "failed";
const PROBE_RESULT_UNKNOWN: &str = "unknown";

/// What a worker needs besides its own state.
#[derive(Clone)]
pub(crate) struct Env {
    pub runtime: Arc<dyn Runtime>,
    pub cache: PodCache,
    /// The startup results (liveness and readiness wait for the container to be started).
    pub startup: ResultsManager,
    /// When the manager was created: workers started within one period of it jitter their
    /// first run (upstream `probeManager.start`).
    pub manager_start: Instant,
    /// The node's IPs: the pod IP of `hostNetwork` pods.
    pub host_ips: Vec<String>,
    /// Where `Unhealthy` events go.
    pub events: Arc<dyn EventRecorder>,
    /// Where each probe's result is counted (`prober_probe_total`).
    pub metrics: KubeletMetrics,
}

pub(crate) struct Worker {
    pub kind: ProbeKind,
    pub pod_uid: PodUid,
    pub pod_name: String,
    pub restart_never: bool,
    pub host_network: bool,
    pub container: Container,
    pub probe: Probe,
    pub timing: Timing,
    pub has_startup_probe: bool,
    pub results: ResultsManager,
    pub env: Arc<Env>,
    /// The container's reference, for events.
    pub object: ObjectReference,
    /// The container instance being probed.
    container_id: Option<String>,
    /// When the current instance's initial delay is over.
    eligible_at: Option<Instant>,
    /// A liveness or startup failure was reported for this instance: wait for a new one.
    on_hold: bool,
    last_result: ProbeResult,
    result_run: u32,
    /// The last probe error, to log each new one once.
    last_error: Option<String>,
    /// When the current run was due ([`Schedule::due`]).
    due: Instant,
}

impl Worker {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        kind: ProbeKind,
        pod_uid: PodUid,
        pod_name: String,
        restart_never: bool,
        host_network: bool,
        container: Container,
        probe: Probe,
        has_startup_probe: bool,
        results: ResultsManager,
        env: Arc<Env>,
        object: ObjectReference,
    ) -> Self {
        Self {
            timing: Timing::of(&probe),
            kind,
            pod_uid,
            pod_name,
            restart_never,
            host_network,
            container,
            probe,
            has_startup_probe,
            results,
            env,
            object,
            container_id: None,
            eligible_at: None,
            on_hold: false,
            last_result: ProbeResult::Unknown,
            result_run: 0,
            last_error: None,
            due: Instant::now(),
        }
    }

    /// The result a new container instance starts with (upstream `initialValue`).
    fn initial_value(&self) -> ProbeResult {
        match self.kind {
            ProbeKind::Readiness => ProbeResult::Failure,
            ProbeKind::Liveness => ProbeResult::Success,
            ProbeKind::Startup => ProbeResult::Unknown,
        }
    }

    /// Probes until `stop` is cancelled or the container is done for good (upstream
    /// `worker.run`). Forgets the result of the last instance on the way out.
    ///
    /// Runs are paced by a [`Schedule`]: Go's `time.Ticker` semantics, as upstream's
    /// `probeTicker` (a late tick is run at once, not skipped), and a notification on `trigger`
    /// runs one at once and restarts the period (upstream `manualTriggerCh`).
    pub(crate) async fn run(mut self, stop: CancellationToken, trigger: Arc<Notify>) {
        let period = self.timing.period;
        // After a kubelet (re)start, spread the first runs over one period.
        if period > self.env.manager_start.elapsed() {
            let jitter = period.mul_f64(rand::random::<f64>());
            tokio::select! {
                biased;
                _ = stop.cancelled() => return self.finish(),
                _ = tokio::time::sleep(jitter) => {}
            }
        }
        let mut schedule = Schedule::new(period);
        loop {
            self.due = schedule.due();
            let keep_going = tokio::select! {
                biased;
                _ = stop.cancelled() => false,
                more = self.do_probe() => more,
            };
            if !keep_going {
                break;
            }
            match schedule.next(&stop, &trigger).await {
                None => break,
                Some(Wake::Tick) => {}
                Some(Wake::Manual) => {
                    debug!(pod = %self.pod_name, container = %self.container.name, probe = %self.kind, "probe triggered manually");
                }
            }
        }
        self.finish();
    }

    fn finish(&self) {
        if let Some(id) = &self.container_id {
            self.results.remove(id);
        }
        // Upstream deletes the worker's series when it stops.
        for result in [
            PROBE_RESULT_SUCCESSFUL,
            PROBE_RESULT_FAILED,
            PROBE_RESULT_UNKNOWN,
        ] {
            self.env.metrics.remove_probe(&self.probe_labels(result));
        }
    }

    /// The labels of this worker's `prober_probe_total` series with `result`.
    fn probe_labels(&self, result: &'static str) -> ProbeLabels {
        ProbeLabels {
            probe_type: self.kind.as_str(),
            result,
            container: self.container.name.clone(),
            pod: self.object.name.clone().unwrap_or_default(),
            namespace: self.object.namespace.clone().unwrap_or_default(),
            pod_uid: self.pod_uid.to_string(),
        }
    }

    /// One probe (upstream `doProbe`); `false` stops the worker.
    async fn do_probe(&mut self) -> bool {
        // Upstream times the whole `doProbe`, from before the status lookup.
        let probe_start = Instant::now();
        let Some((status, _)) = self.env.cache.get(&self.pod_uid) else {
            return true; // no status yet
        };
        let Some(c) = status.container(&self.container.name) else {
            return true; // not created yet
        };
        if c.id.is_empty() {
            return true;
        }
        if self.container_id.as_deref() != Some(c.id.as_str()) {
            if let Some(old) = self.container_id.take() {
                self.results.remove(&old);
            }
            self.container_id = Some(c.id.clone());
            self.results.set(&c.id, self.initial_value(), &self.pod_uid);
            self.on_hold = false;
            self.last_result = ProbeResult::Unknown;
            self.result_run = 0;
            // The initial delay counts from the container's start (wall clock), measured
            // from here on tokio time.
            let since_start = c
                .started_at
                .map(|t| {
                    let now = kubelet_core::time::now();
                    std::time::Duration::try_from(now.duration_since(t)).unwrap_or_default()
                })
                .unwrap_or_default();
            self.eligible_at =
                Some(Instant::now() + self.timing.initial_delay.saturating_sub(since_start));
        }
        let id = c.id.clone();
        if self.on_hold {
            return true;
        }
        if c.state == ContainerState::Created {
            // Created, not started yet: wait for it to run. The runtime cache shows a container
            // between CreateContainer and StartContainer (seconds on a loaded node), which
            // upstream's status manager, written once per sync, never does; a liveness or
            // startup Failure set here would kill the container as soon as it runs.
            return true;
        }
        if c.state != ContainerState::Running {
            self.results.set(&id, ProbeResult::Failure, &self.pod_uid);
            return !(c.state == ContainerState::Exited && self.restart_never);
        }
        if self.eligible_at.is_some_and(|t| Instant::now() < t) {
            return true;
        }
        let started =
            !self.has_startup_probe || self.env.startup.get(&id) == Some(ProbeResult::Success);
        if started == (self.kind == ProbeKind::Startup) {
            // Startup probes stop once started; the others wait for it.
            return true;
        }
        let pod_ip = status.ips.first().or_else(|| {
            self.host_network
                .then(|| self.env.host_ips.first())
                .flatten()
        });
        // The start of each run and how late it is behind its tick, for `cargo xtask bench
        // --probes` (upstream logs its ticks at V(3)-V(4)).
        trace!(pod = %self.pod_name, container = %self.container.name, probe = %self.kind, late_us = self.due.elapsed().as_micros(), "probe running");
        let outcome = match prober::run(
            self.env.runtime.as_ref(),
            &self.probe,
            &self.container,
            &id,
            pod_ip.map(String::as_str),
        )
        .await
        {
            Ok(o) => o,
            Err(e) => {
                // Upstream records a warning event each time; log each new error once.
                let e = e.to_string();
                self.env.events.event(
                    &self.object,
                    EventType::Warning,
                    reasons::CONTAINER_UNHEALTHY,
                    &format!(
                        "{} probe errored and resulted in unknown state: {e}",
                        self.kind
                    ),
                );
                if self.last_error.as_deref() != Some(e.as_str()) {
                    info!(pod = %self.pod_name, container = %self.container.name, probe = %self.kind, error = %e, "probe errored");
                } else {
                    debug!(pod = %self.pod_name, container = %self.container.name, probe = %self.kind, error = %e, "probe errored");
                }
                self.last_error = Some(e);
                return true;
            }
        };
        self.last_error = None;
        // Upstream counts every probe that ran, before the thresholds apply; errored probes
        // (above) are not counted.
        // `prober_probe_duration_seconds` times successful probes only, as upstream.
        let (counted, took) = if outcome.success {
            (PROBE_RESULT_SUCCESSFUL, Some(probe_start.elapsed()))
        } else {
            (PROBE_RESULT_FAILED, None)
        };
        self.env
            .metrics
            .record_probe(&self.probe_labels(counted), took);
        let result = if outcome.success {
            ProbeResult::Success
        } else {
            debug!(pod = %self.pod_name, container = %self.container.name, kind = %self.kind, output = %outcome.output, "probe failed");
            self.env.events.event(
                &self.object,
                EventType::Warning,
                reasons::CONTAINER_UNHEALTHY,
                &format!("{} probe failed: {}", self.kind, outcome.output),
            );
            ProbeResult::Failure
        };
        if self.last_result == result {
            self.result_run += 1;
        } else {
            self.last_result = result;
            self.result_run = 1;
        }
        if (result == ProbeResult::Failure && self.result_run < self.timing.failure_threshold)
            || (result == ProbeResult::Success && self.result_run < self.timing.success_threshold)
        {
            return true;
        }
        if result == ProbeResult::Failure && self.results.get(&id) != Some(result) {
            info!(pod = %self.pod_name, container = %self.container.name, probe = %self.kind, output = %outcome.output, "probe failed");
        }
        self.results.set(&id, result, &self.pod_uid);
        if matches!(self.kind, ProbeKind::Liveness | ProbeKind::Startup)
            && result == ProbeResult::Failure
        {
            // The container will be restarted: stop probing this instance.
            self.on_hold = true;
            self.result_run = 0;
        }
        true
    }
}
