//! Checks the apiserver cannot make at admission (regex syntax, duration bounds, secrets hidden
//! in property maps). The operator runs them and reports failures as a condition.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::client_properties::{Client, allowed, is_secret, refusal};
use crate::duration::parse_duration;
use crate::filter::Selector;
use crate::v1alpha1::{
    ClusterMirrorSpec, FetcherPodTemplate, KafkaConnection, MirrorTopicSpec, reserved_annotation,
    reserved_label,
};

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

/// Whether `value` is a valid label value: at most 63 characters of `[A-Za-z0-9._-]`, starting
/// and ending alphanumeric (or empty).
fn label_value_ok(value: &str) -> bool {
    let edge = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && edge(value.chars().next())
        && edge(value.chars().last())
}

/// Whether `key` is a valid label or annotation key: an optional DNS-subdomain prefix and `/`,
/// then a name like a label value, not empty.
fn label_key_ok(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    prefix_ok && !name.is_empty() && label_value_ok(name)
}

/// `spec.fetcher.template`: kmirror's own label and annotation keys are refused (the CRD refuses
/// them at admission too; this catches objects stored before), and labels must be labels.
fn check_template(template: &FetcherPodTemplate, out: &mut Vec<Invalid>) {
    const FIELD: &str = "spec.fetcher.template";
    for (key, value) in &template.labels {
        if reserved_label(key) {
            out.push(invalid(
                format!("{FIELD}.labels.{key}"),
                "kmirror's own label (kmirror.io/*, app.kubernetes.io/name, \
                 app.kubernetes.io/managed-by): the operator selects its pods by it",
            ));
        } else if !label_key_ok(key) || !label_value_ok(value) {
            out.push(invalid(
                format!("{FIELD}.labels.{key}"),
                format!("{key:?}: {value:?} is not a valid Kubernetes label"),
            ));
        }
    }
    for key in template.annotations.keys() {
        if reserved_annotation(key) {
            out.push(invalid(
                format!("{FIELD}.annotations.{key}"),
                "kmirror.io/* annotations are the operator's record of what a pod runs",
            ));
        } else if !label_key_ok(key) {
            out.push(invalid(
                format!("{FIELD}.annotations.{key}"),
                format!("{key:?} is not a valid annotation key"),
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
    check_template(&spec.fetcher.template, &mut out);
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

    #[test]
    fn template_labels_and_annotations_are_the_tenants_own_and_valid() {
        let mut s = spec();
        s.fetcher.template = serde_json::from_value(serde_json::json!({
            "labels": {"team": "payments", "example.com/tier": "gold",
                       "kmirror.io/mirror": "other", "app.kubernetes.io/name": "x",
                       "bad key": "v", "ok": "-bad-value"},
            "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true",
                            "kmirror.io/spec-hash": "0", "Bad.Prefix/x": "v"}
        }))
        .unwrap();
        let fields: Vec<_> = cluster_mirror(&s).into_iter().map(|p| p.field).collect();
        assert_eq!(
            fields,
            vec![
                "spec.fetcher.template.labels.app.kubernetes.io/name",
                "spec.fetcher.template.labels.bad key",
                "spec.fetcher.template.labels.kmirror.io/mirror",
                "spec.fetcher.template.labels.ok",
                "spec.fetcher.template.annotations.Bad.Prefix/x",
                "spec.fetcher.template.annotations.kmirror.io/spec-hash",
            ]
        );
        for (key, ok) in [
            ("a", true),
            ("example.com/a.b_c-d", true),
            ("/a", false),
            ("example.com/", false),
            ("-a", false),
            (&"x".repeat(64), false),
        ] {
            assert_eq!(label_key_ok(key), ok, "{key}");
        }
    }
}
