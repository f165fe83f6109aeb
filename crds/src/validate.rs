//! Checks the apiserver cannot make at admission (regex syntax, duration bounds, secrets hidden
//! in property maps). The operator runs them and reports failures as a condition.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::client_properties::{Client, allowed, is_secret, refusal};
use crate::duration::parse_duration;
use crate::filter::Selector;
use crate::v1alpha1::{ClusterMirrorSpec, KafkaConnection, MirrorTopicSpec};

/// One problem with a resource's spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// JSON path of the field, e.g. `spec.sync.interval`.
    pub field: String,
    /// What is wrong, for humans.
    pub message: String,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Joins problems into one message for a condition or event.
pub fn describe(problems: &[Invalid]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Shortest accepted sync interval.
pub const MIN_SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// The smallest `spec.fetcher.memoryBudget`: below it the process's own needs leave the Kafka
/// clients too little to copy at all.
pub const MIN_MEMORY_BUDGET: u64 = 32 << 20;

fn invalid(field: impl Into<String>, message: impl Into<String>) -> Invalid {
    Invalid {
        field: field.into(),
        message: message.into(),
    }
}

fn check_properties(
    field: &str,
    client: Client,
    properties: &BTreeMap<String, String>,
    out: &mut Vec<Invalid>,
) {
    for key in properties.keys() {
        if is_secret(key) {
            out.push(invalid(
                format!("{field}.{key}"),
                "secret values are never accepted inline; use a Secret reference",
            ));
        } else if !allowed(client, key) {
            out.push(invalid(format!("{field}.{key}"), refusal(client, field)));
        }
    }
}

fn check_connection(field: &str, connection: &KafkaConnection, out: &mut Vec<Invalid>) {
    check_properties(
        &format!("{field}.properties"),
        Client::Connection,
        &connection.properties,
        out,
    );
    if !connection.allow_insecure {
        for what in connection.insecure_settings() {
            out.push(invalid(
                field.to_string(),
                format!("{what}; set {field}.allowInsecure: true to accept that"),
            ));
        }
    }
    for server in connection.bootstrap_servers.split(',') {
        let port_ok = server
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse::<u16>().ok())
            .is_some_and(|p| p > 0);
        if !port_ok {
            out.push(invalid(
                format!("{field}.bootstrapServers"),
                format!("{server:?} is not host:port with a port in 1..65535"),
            ));
        }
    }
}

/// Validates a `ClusterMirror` spec beyond its schema.
pub fn cluster_mirror(spec: &ClusterMirrorSpec) -> Vec<Invalid> {
    let mut out = Vec::new();
    check_connection("spec.source", &spec.source, &mut out);
    check_connection("spec.destination", &spec.destination, &mut out);
    if let Err(e) = Selector::topics(&spec.topics) {
        out.push(invalid(e.field.clone(), e.to_string()));
    }
    let groups = &spec.sync.consumer_groups;
    if let Err(e) = Selector::compile(
        &groups.include,
        &groups.exclude,
        "spec.sync.consumerGroups",
        true,
    ) {
        out.push(invalid(e.field.clone(), e.to_string()));
    }
    match parse_duration(&spec.sync.interval) {
        Ok(d) if d < MIN_SYNC_INTERVAL => out.push(invalid(
            "spec.sync.interval",
            format!("{} is below the minimum of 1s", spec.sync.interval),
        )),
        Ok(_) => {}
        Err(e) => out.push(invalid("spec.sync.interval", e.to_string())),
    }
    if let Some(budget) = &spec.fetcher.memory_budget {
        match crate::bytes::parse_byte_size(budget) {
            Ok(b) if b < MIN_MEMORY_BUDGET => out.push(invalid(
                "spec.fetcher.memoryBudget",
                format!("{budget} is below the minimum of 32Mi"),
            )),
            Ok(_) => {}
            Err(e) => out.push(invalid("spec.fetcher.memoryBudget", e.to_string())),
        }
    }
    check_properties(
        "spec.fetcher.consumerProperties",
        Client::Consumer,
        &spec.fetcher.consumer_properties,
        &mut out,
    );
    check_properties(
        "spec.fetcher.producerProperties",
        Client::Producer,
        &spec.fetcher.producer_properties,
        &mut out,
    );
    out
}

/// Validates a `MirrorTopic` spec beyond its schema.
pub fn mirror_topic(spec: &MirrorTopicSpec) -> Vec<Invalid> {
    let mut out = Vec::new();
    if let Err(e) = parse_duration(&spec.failover.drain_timeout) {
        out.push(invalid("spec.failover.drainTimeout", e.to_string()));
    }
    for (field, topic) in [
        ("spec.sourceTopic", Some(spec.source_topic.as_str())),
        ("spec.destinationTopic", spec.destination_topic.as_deref()),
    ] {
        if matches!(topic, Some("." | "..")) {
            out.push(invalid(
                field,
                "\".\" and \"..\" are not valid Kafka topic names",
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1alpha1::{NameFilter, TopicSelection};

    fn spec() -> ClusterMirrorSpec {
        serde_json::from_value(serde_json::json!({
            "source": {"bootstrapServers": "a:9092"},
            "destination": {"bootstrapServers": "b:9092,c:9093"},
        }))
        .unwrap()
    }

    #[test]
    fn defaults_are_valid() {
        let s = spec();
        assert_eq!(cluster_mirror(&s), vec![]);
        assert_eq!(s.sync.interval, "30s");
        assert_eq!(s.fetcher.partitions_per_pod, 1);
        assert_eq!(s.state_topic, "__kmirror_state");
        assert!(
            s.sync
                .topic_configs
                .effective_exclude()
                .contains(&"min.insync.replicas".to_string())
        );
    }

    #[test]
    fn reports_each_problem_with_its_field() {
        let mut s = spec();
        s.topics = TopicSelection {
            include: vec![NameFilter {
                regex: Some("(".into()),
                ..Default::default()
            }],
            exclude: vec![],
        };
        s.sync.interval = "500ms".into();
        s.source
            .properties
            .insert("sasl.password".into(), "x".into());
        s.fetcher
            .producer_properties
            .insert("ssl.keystore.password".into(), "x".into());
        s.destination.bootstrap_servers = "b:0".into();
        s.fetcher.memory_budget = Some("16Mi".into());
        let problems = cluster_mirror(&s);
        let fields: Vec<_> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "spec.source.properties.sasl.password",
                "spec.destination.bootstrapServers",
                "spec.topics.include[0]",
                "spec.sync.interval",
                "spec.fetcher.memoryBudget",
                "spec.fetcher.producerProperties.ssl.keystore.password",
            ]
        );
        assert!(describe(&problems).contains("below the minimum"));
    }

    #[test]
    fn bad_group_regex_and_interval_syntax() {
        let mut s = spec();
        s.sync.consumer_groups.exclude = vec![NameFilter {
            regex: Some("[a-".into()),
            ..Default::default()
        }];
        s.sync.interval = "soon".into();
        let problems = cluster_mirror(&s);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(problems[0].field, "spec.sync.consumerGroups.exclude[0]");
        assert_eq!(problems[1].field, "spec.sync.interval");
    }

    #[test]
    fn mirror_topic_checks() {
        let mut t: MirrorTopicSpec = serde_json::from_value(serde_json::json!({
            "mirror": "m", "sourceTopic": "orders"
        }))
        .unwrap();
        assert_eq!(mirror_topic(&t), vec![]);
        t.failover.drain_timeout = "forever".into();
        t.destination_topic = Some("..".into());
        let fields: Vec<_> = mirror_topic(&t).into_iter().map(|p| p.field).collect();
        assert_eq!(
            fields,
            vec!["spec.failover.drainTimeout", "spec.destinationTopic"]
        );
    }
}
