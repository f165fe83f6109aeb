//! Which ACLs the destination gets from the source's. Pure.
//!
//! - Bindings on mirrored topics (literal, `*`, or prefixed patterns that cover a mirrored topic)
//!   become literal bindings on the destination topic.
//! - While a topic mirrors, ALLOW WRITE is withheld (ALLOW ALL becomes READ, DESCRIBE and
//!   DESCRIBE_CONFIGS); DENY bindings are copied as they are. Once the topic is stopped
//!   (failed over), the source's bindings apply unchanged.
//! - Literal group bindings of included groups are copied.
//! - The fetcher principal may write to every mirrored topic that is not stopped.
//! - Once a topic is failed over, its destination bindings are frozen ([`freeze`]): the old
//!   source's later changes do not reach them, and deleting its `MirrorTopic` leaves them.

use std::collections::{BTreeMap, BTreeSet};

use kmirror_crds::filter::Selector;
use kmirror_crds::v1alpha1::PartitionState;
use kmirror_state::kafka_admin::{AclBinding, Operation, PatternType, Permission, ResourceType};
use kmirror_state::records::PartitionStateRecord;

/// A mirrored topic as the ACL plan sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedTopic {
    /// Destination topic name.
    pub destination: String,
    /// Stopped (failed over): the destination is writable.
    pub writable: bool,
}

fn covers(binding: &AclBinding, name: &str) -> bool {
    match binding.pattern {
        PatternType::Literal => binding.name == "*" || binding.name == name,
        PatternType::Prefixed => name.starts_with(&binding.name),
        _ => false,
    }
}

/// The bindings the destination must have.
pub fn plan(
    source: &[AclBinding],
    topics: &BTreeMap<String, PlannedTopic>,
    groups: &Selector,
    fetcher_principal: Option<&str>,
) -> BTreeSet<AclBinding> {
    let mut out = BTreeSet::new();
    for b in source {
        match b.resource_type {
            ResourceType::Topic => {
                for t in topics
                    .iter()
                    .filter(|(src, _)| covers(b, src))
                    .map(|(_, t)| t)
                {
                    let literal = |operation| AclBinding {
                        name: t.destination.clone(),
                        pattern: PatternType::Literal,
                        operation,
                        ..b.clone()
                    };
                    let withheld = !t.writable && b.permission == Permission::Allow;
                    match b.operation {
                        Operation::Write if withheld => {}
                        Operation::All if withheld => {
                            for op in [
                                Operation::Read,
                                Operation::Describe,
                                Operation::DescribeConfigs,
                            ] {
                                out.insert(literal(op));
                            }
                        }
                        op => {
                            out.insert(literal(op));
                        }
                    }
                }
            }
            ResourceType::Group if b.pattern == PatternType::Literal && groups.matches(&b.name) => {
                out.insert(b.clone());
            }
            _ => {}
        }
    }
    if let Some(principal) = fetcher_principal {
        for t in topics.values().filter(|t| !t.writable) {
            for op in [Operation::Write, Operation::Describe] {
                out.insert(AclBinding {
                    resource_type: ResourceType::Topic,
                    name: t.destination.clone(),
                    pattern: PatternType::Literal,
                    principal: principal.to_string(),
                    host: "*".into(),
                    operation: op,
                    permission: Permission::Allow,
                });
            }
        }
        if topics.values().any(|t| !t.writable) {
            out.insert(AclBinding {
                resource_type: ResourceType::Cluster,
                name: "kafka-cluster".into(),
                pattern: PatternType::Literal,
                principal: principal.to_string(),
                host: "*".into(),
                operation: Operation::IdempotentWrite,
                permission: Permission::Allow,
            });
        }
    }
    out
}

/// The source bindings [`plan`] reads for these topics and groups: kept in the state topic, so
/// that a failover with the source gone can still apply them.
pub fn relevant(
    source: &[AclBinding],
    topics: &BTreeMap<String, PlannedTopic>,
    groups: &Selector,
) -> Vec<AclBinding> {
    let wanted: BTreeSet<AclBinding> = source
        .iter()
        .filter(|b| match b.resource_type {
            ResourceType::Topic => topics.keys().any(|src| covers(b, src)),
            ResourceType::Group => b.pattern == PatternType::Literal && groups.matches(&b.name),
            _ => false,
        })
        .cloned()
        .collect();
    wanted.into_iter().collect()
}

/// Destination topics of the mirror that are failed over — every recorded partition STOPPED —
/// whether their `MirrorTopic` still exists or not (a deleted one keeps its STOPPED records).
pub fn failed_over(
    states: &BTreeMap<(String, i32), Option<PartitionStateRecord>>,
) -> BTreeSet<String> {
    let mut topics: BTreeMap<&str, (bool, Option<String>)> = BTreeMap::new();
    for ((topic, p), state) in states {
        if *p < 0 {
            continue;
        }
        let entry = topics.entry(topic.as_str()).or_insert((true, None));
        match state
            .as_ref()
            .filter(|s| s.state == PartitionState::Stopped)
        {
            Some(s) => entry.1 = entry.1.take().or(s.destination_topic.clone()),
            None => entry.0 = false,
        }
    }
    topics
        .into_iter()
        .filter(|(_, (stopped, _))| *stopped)
        .map(|(source, (_, destination))| destination.unwrap_or_else(|| source.to_string()))
        .collect()
}

/// Once failed over, a destination topic no longer follows the old source: its bindings stay
/// what kmirror made them when it failed over — none added, none removed, also when its
/// `MirrorTopic` is deleted (the applications rely on them).
pub fn freeze(
    wanted: BTreeSet<AclBinding>,
    created_before: &BTreeSet<AclBinding>,
    frozen: &BTreeSet<String>,
) -> BTreeSet<AclBinding> {
    let on_frozen = |b: &AclBinding| {
        b.resource_type == ResourceType::Topic
            && b.pattern == PatternType::Literal
            && frozen.contains(&b.name)
    };
    wanted
        .into_iter()
        .filter(|b| !on_frozen(b))
        .chain(created_before.iter().filter(|b| on_frozen(b)).cloned())
        .collect()
}

/// What to create and what to delete: create what is wanted and missing; delete only bindings
/// kmirror created earlier that are no longer wanted.
pub fn changes(
    wanted: &BTreeSet<AclBinding>,
    existing: &BTreeSet<AclBinding>,
    created_before: &BTreeSet<AclBinding>,
) -> (Vec<AclBinding>, Vec<AclBinding>) {
    let create = wanted.difference(existing).cloned().collect();
    let delete = created_before
        .difference(wanted)
        .filter(|b| existing.contains(*b))
        .cloned()
        .collect();
    (create, delete)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(
        rt: ResourceType,
        name: &str,
        pattern: PatternType,
        op: Operation,
        perm: Permission,
    ) -> AclBinding {
        AclBinding {
            resource_type: rt,
            name: name.into(),
            pattern,
            principal: "User:app".into(),
            host: "*".into(),
            operation: op,
            permission: perm,
        }
    }

    fn topics(writable: bool) -> BTreeMap<String, PlannedTopic> {
        BTreeMap::from([(
            "orders".to_string(),
            PlannedTopic {
                destination: "orders-dr".into(),
                writable,
            },
        )])
    }

    #[test]
    fn the_kept_source_set_is_what_the_plan_reads_and_plans_the_same() {
        let include = [kmirror_crds::v1alpha1::NameFilter {
            prefix: Some("app-".into()),
            ..Default::default()
        }];
        let groups = Selector::compile(&include, &[], "g", true).unwrap();
        let t = |name: &str, pattern, op| {
            acl(ResourceType::Topic, name, pattern, op, Permission::Allow)
        };
        let g = |name: &str, pattern| {
            acl(
                ResourceType::Group,
                name,
                pattern,
                Operation::Read,
                Permission::Allow,
            )
        };
        let source = vec![
            t("orders", PatternType::Literal, Operation::Write),
            t("ord", PatternType::Prefixed, Operation::Read),
            t("*", PatternType::Literal, Operation::Describe),
            t("payments", PatternType::Literal, Operation::Write),
            g("app-1", PatternType::Literal),
            g("app-", PatternType::Prefixed),
            g("other", PatternType::Literal),
            acl(
                ResourceType::Cluster,
                "kafka-cluster",
                PatternType::Literal,
                Operation::Create,
                Permission::Allow,
            ),
        ];
        let kept = relevant(&source, &topics(true), &groups);
        assert_eq!(
            kept.iter()
                .map(|b| b.name.as_str())
                .collect::<BTreeSet<_>>(),
            BTreeSet::from(["orders", "ord", "*", "app-1"]),
            "{kept:?}"
        );
        // Planning from the kept set gives what planning from the whole source gives.
        for writable in [false, true] {
            assert_eq!(
                plan(&kept, &topics(writable), &groups, Some("User:mirror")),
                plan(&source, &topics(writable), &groups, Some("User:mirror"))
            );
        }
    }

    #[test]
    fn write_is_withheld_while_mirroring() {
        let source = vec![
            acl(
                ResourceType::Topic,
                "orders",
                PatternType::Literal,
                Operation::Read,
                Permission::Allow,
            ),
            acl(
                ResourceType::Topic,
                "orders",
                PatternType::Literal,
                Operation::Write,
                Permission::Allow,
            ),
            acl(
                ResourceType::Topic,
                "ord",
                PatternType::Prefixed,
                Operation::All,
                Permission::Allow,
            ),
            acl(
                ResourceType::Topic,
                "orders",
                PatternType::Literal,
                Operation::Write,
                Permission::Deny,
            ),
            acl(
                ResourceType::Topic,
                "payments",
                PatternType::Literal,
                Operation::Read,
                Permission::Allow,
            ),
            acl(
                ResourceType::Group,
                "billing",
                PatternType::Literal,
                Operation::Read,
                Permission::Allow,
            ),
            acl(
                ResourceType::Group,
                "other",
                PatternType::Literal,
                Operation::Read,
                Permission::Allow,
            ),
        ];
        let groups = Selector::compile(
            &[kmirror_crds::v1alpha1::NameFilter {
                name: Some("billing".into()),
                ..Default::default()
            }],
            &[],
            "g",
            true,
        )
        .unwrap();
        let p = plan(&source, &topics(false), &groups, Some("User:mirror"));
        let app: Vec<_> = p
            .iter()
            .filter(|b| b.principal == "User:app")
            .map(|b| (b.resource_type, b.name.as_str(), b.operation, b.permission))
            .collect();
        assert!(app.contains(&(
            ResourceType::Topic,
            "orders-dr",
            Operation::Read,
            Permission::Allow
        )));
        assert!(app.contains(&(
            ResourceType::Topic,
            "orders-dr",
            Operation::Describe,
            Permission::Allow
        )));
        assert!(
            app.contains(&(
                ResourceType::Topic,
                "orders-dr",
                Operation::Write,
                Permission::Deny
            )),
            "deny is copied"
        );
        assert!(!app.contains(&(
            ResourceType::Topic,
            "orders-dr",
            Operation::Write,
            Permission::Allow
        )));
        assert!(
            !app.iter().any(|a| a.2 == Operation::All),
            "ALL is narrowed"
        );
        assert!(app.contains(&(
            ResourceType::Group,
            "billing",
            Operation::Read,
            Permission::Allow
        )));
        assert!(!app.iter().any(|a| a.1 == "payments" || a.1 == "other"));
        let mirror: Vec<_> = p
            .iter()
            .filter(|b| b.principal == "User:mirror")
            .map(|b| b.operation)
            .collect();
        assert_eq!(
            mirror,
            vec![
                Operation::Write,
                Operation::Describe,
                Operation::IdempotentWrite
            ]
        );
    }

    #[test]
    fn failed_over_topics_keep_their_bindings_whatever_the_source_does() {
        let at = |state, destination: Option<&str>| {
            Some(PartitionStateRecord {
                state,
                destination_topic: destination.map(Into::into),
                ..Default::default()
            })
        };
        let records: BTreeMap<(String, i32), Option<PartitionStateRecord>> = [
            (
                ("a".to_string(), 0),
                at(PartitionState::Stopped, Some("a-copy")),
            ),
            (
                ("a".to_string(), 1),
                at(PartitionState::Stopped, Some("a-copy")),
            ),
            (("b".to_string(), 0), at(PartitionState::Stopped, None)),
            (("b".to_string(), 1), at(PartitionState::Stopping, None)),
            (("c".to_string(), 0), at(PartitionState::Mirroring, None)),
            // The mirror's own records (ACLs) are no topic.
            ((String::new(), -1), None),
        ]
        .into_iter()
        .collect();
        let frozen = failed_over(&records);
        assert_eq!(frozen, BTreeSet::from(["a-copy".to_string()]));

        let write = |topic: &str| {
            acl(
                ResourceType::Topic,
                topic,
                PatternType::Literal,
                Operation::Write,
                Permission::Allow,
            )
        };
        let read = |topic: &str| {
            acl(
                ResourceType::Topic,
                topic,
                PatternType::Literal,
                Operation::Read,
                Permission::Allow,
            )
        };
        // The source dropped a-copy's WRITE and added a READ; c follows, a-copy does not.
        let wanted: BTreeSet<AclBinding> = [read("a-copy"), read("c")].into_iter().collect();
        let created_before: BTreeSet<AclBinding> =
            [write("a-copy"), write("c")].into_iter().collect();
        let frozen_plan = freeze(wanted, &created_before, &frozen);
        assert_eq!(
            frozen_plan,
            [write("a-copy"), read("c")]
                .into_iter()
                .collect::<BTreeSet<_>>()
        );
        // Its MirrorTopic deleted (not planned at all): the bindings stay wanted.
        let kept = freeze(BTreeSet::new(), &created_before, &frozen);
        assert!(kept.contains(&write("a-copy")) && !kept.contains(&write("c")));
    }

    #[test]
    fn stopped_topics_get_the_source_bindings() {
        let source = vec![
            acl(
                ResourceType::Topic,
                "orders",
                PatternType::Literal,
                Operation::Write,
                Permission::Allow,
            ),
            acl(
                ResourceType::Topic,
                "*",
                PatternType::Literal,
                Operation::All,
                Permission::Allow,
            ),
        ];
        let p = plan(
            &source,
            &topics(true),
            &Selector::default(),
            Some("User:mirror"),
        );
        let ops: BTreeSet<_> = p
            .iter()
            .map(|b| (b.principal.as_str(), b.operation))
            .collect();
        assert!(ops.contains(&("User:app", Operation::Write)));
        assert!(ops.contains(&("User:app", Operation::All)));
        assert!(
            !ops.iter().any(|(p, _)| *p == "User:mirror"),
            "the fetcher no longer writes"
        );
    }

    #[test]
    fn only_bindings_kmirror_created_are_deleted() {
        let a = acl(
            ResourceType::Topic,
            "t",
            PatternType::Literal,
            Operation::Read,
            Permission::Allow,
        );
        let b = acl(
            ResourceType::Topic,
            "t",
            PatternType::Literal,
            Operation::Describe,
            Permission::Allow,
        );
        let manual = acl(
            ResourceType::Topic,
            "t",
            PatternType::Literal,
            Operation::Alter,
            Permission::Allow,
        );
        let wanted = BTreeSet::from([a.clone()]);
        let existing = BTreeSet::from([b.clone(), manual.clone()]);
        let created = BTreeSet::from([b.clone()]);
        let (create, delete) = changes(&wanted, &existing, &created);
        assert_eq!(create, vec![a]);
        assert_eq!(delete, vec![b]);
    }
}
