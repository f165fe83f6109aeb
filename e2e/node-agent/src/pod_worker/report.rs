//! The pod status as the worker publishes it.

use super::*;

impl PodWorker {
    pub(super) fn view(&self) -> PodView {
        let mut init_containers = Vec::new();
        let mut containers = Vec::new();
        for (idx, c) in self.containers.iter().enumerate() {
            let rec = self.rec(idx);
            let default_waiting = if !c.init && !self.record.init_done {
                "PodInitializing"
            } else {
                "ContainerCreating"
            };
            let mut state = c.current_state(&rec, default_waiting);
            if let (crate::status::CurrentState::Waiting { message, .. }, Some(err)) =
                (&mut state, &self.volume_error)
                && message.is_none()
                && rec.running.is_none()
                && rec.last.is_none()
            {
                *message = Some(err.clone());
            }
            let view = ContainerView {
                name: c.spec.name.clone(),
                image: c.spec.image.clone().unwrap_or_default(),
                image_id: rec.image_id.clone().unwrap_or_default(),
                container_id: rec
                    .running
                    .as_ref()
                    .map(|i| i.container_id.clone())
                    .or_else(|| rec.last.as_ref().and_then(|t| t.container_id.clone())),
                state,
                last_state: c.last_state(&rec),
                ready: c.ready(&rec),
                started: c.started(&rec),
                restart_count: rec.restart_count,
            };
            if c.init {
                init_containers.push(view);
            } else {
                containers.push(view);
            }
        }
        PodView {
            init_containers,
            containers,
            restart_policy: self.policy(),
            init_done: self.record.init_done,
            sandbox_ready: self.volumes.is_some(),
            pod_ip: Some(self.pod_ip().to_string()),
            host_ip: self.shared.config.host_ip.to_string(),
            start_time: self.record.start_time.clone(),
            observed_generation: self.pod.metadata.generation,
            deleting: self
                .stopping
                .as_ref()
                .is_some_and(|s| s.cause == StopCause::Deleted),
        }
    }

    pub(super) async fn publish_status(&mut self) {
        if self.dormant {
            return;
        }
        if let Some(s) = &self.stopping
            && s.cause != StopCause::Deleted
        {
            return;
        }
        let previous = self
            .pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let status = status::build(&self.view(), &previous, &now_time());
        let Ok(mut value) = serde_json::to_value(&status) else {
            return;
        };
        if self.last_published.as_ref() == Some(&value) {
            return;
        }
        let published = value.clone();
        if let Some(map) = value.as_object_mut() {
            for clear in ["reason", "message", "nominatedNodeName"] {
                map.entry(clear).or_insert(serde_json::Value::Null);
            }
        }
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &self.record.namespace);
        let patch = serde_json::json!({ "status": value });
        match api
            .patch_status(
                &self.record.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(pod) => {
                if pod.metadata.uid.as_deref() == Some(self.uid.as_str()) {
                    self.pod = Arc::new(pod);
                }
                self.last_published = Some(published);
                self.retry_status_at = None;
                tracing::debug!(pod = %self.label(), phase = ?status.phase, "published status");
            }
            Err(e) => {
                tracing::debug!(pod = %self.label(), "status update failed: {e}");
                self.retry_status_at = Some(Instant::now() + RETRY);
            }
        }
    }
}
