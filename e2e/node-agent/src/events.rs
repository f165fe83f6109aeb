//! Kubernetes Events about pods (Scheduled, Started, Killing, BackOff, Unhealthy...), published
//! in the background so that a slow API server never holds up a pod.

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Publishes events as the node agent.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl Events {
    /// A publisher reporting as `component` on node `node`.
    pub fn new(client: Client, component: &str, node: &str) -> Events {
        let reporter = Reporter {
            controller: component.to_string(),
            instance: Some(node.to_string()),
        };
        Events {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// Publishes a `Normal` event about `pod`.
    pub fn normal(&self, pod: &Pod, reason: &str, note: String) {
        self.publish(pod, EventType::Normal, reason, note);
    }

    /// Publishes a `Warning` event about `pod`.
    pub fn warning(&self, pod: &Pod, reason: &str, note: String) {
        self.publish(pod, EventType::Warning, reason, note);
    }

    fn publish(&self, pod: &Pod, type_: EventType, reason: &str, note: String) {
        let recorder = self.recorder.clone();
        let reference = pod.object_ref(&());
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note.chars().take(1000).collect()),
            action: reason.to_string(),
            secondary: None,
        };
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&event, &reference).await {
                tracing::debug!("event {} not published: {e}", event.reason);
            }
        });
    }
}
