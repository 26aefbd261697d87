//! [`CollectingRecorder`]: an [`EventRecorder`] that keeps what it is given, for assertions.

use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::ObjectReference;

use crate::events::{EventRecorder, EventType};

/// One recorded event.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedEvent {
    /// The object the event is about.
    pub object: ObjectReference,
    /// `Normal` or `Warning`.
    pub event_type: EventType,
    /// The reason.
    pub reason: String,
    /// The message.
    pub message: String,
}

/// Keeps every event in order. Clones share the list.
#[derive(Clone, Debug, Default)]
pub struct CollectingRecorder {
    events: Arc<Mutex<Vec<RecordedEvent>>>,
}

impl CollectingRecorder {
    /// The events so far.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The reasons of the events so far, in order.
    pub fn reasons(&self) -> Vec<String> {
        self.events().into_iter().map(|e| e.reason).collect()
    }

    /// `true` when an event with `reason` and exactly `message` was recorded.
    pub fn has(&self, reason: &str, message: &str) -> bool {
        self.events()
            .iter()
            .any(|e| e.reason == reason && e.message == message)
    }

    /// `(reason, message)` of the events about `field_path` (e.g. `spec.containers{app}`).
    pub fn for_field(&self, field_path: &str) -> Vec<(String, String)> {
        self.events()
            .into_iter()
            .filter(|e| e.object.field_path.as_deref() == Some(field_path))
            .map(|e| (e.reason, e.message))
            .collect()
    }
}

impl EventRecorder for CollectingRecorder {
    fn event(&self, object: &ObjectReference, event_type: EventType, reason: &str, message: &str) {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(RecordedEvent {
                object: object.clone(),
                event_type,
                reason: reason.to_owned(),
                message: message.to_owned(),
            });
    }
}
