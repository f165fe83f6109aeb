//! `kubectl mirror failback`: create the reverse mirror and its topics.

use kmirror_crds::v1alpha1::{ClusterMirror, DivergencePolicy, MirrorTopic};
use serde_json::json;

use crate::cli::{DryRun, FailbackArgs};
use crate::client::Kube;
use crate::error::{Error, Result};
use crate::gitops;
use crate::reverse;
use crate::select::{object_name, select};
use crate::util::check_name;

use super::wait::{self, Job};
use super::{emit, line, wanted};

/// Builds, checks and creates the reverse mirror and topics; optionally follows them.
pub async fn run(kube: &Kube, args: &FailbackArgs) -> Result<()> {
    let ns = kube.namespace.as_str();
    let old = kube.mirror(ns, &args.mirror).await?;
    let topics = kube.topics_of(ns, &args.mirror).await?;
    let chosen = select(&topics, &args.mirror, ns, wanted(&args.selection))?;
    let name = match &args.name {
        Some(n) => {
            check_name(n).map_err(Error::Usage)?;
            n.clone()
        }
        None => reverse::default_name(&args.mirror),
    };
    if name == args.mirror {
        return Err(Error::Usage(
            "the reverse mirror needs a name of its own (--name)".into(),
        ));
    }

    let not_ready: Vec<String> = chosen
        .iter()
        .filter_map(|t| {
            reverse::not_failed_over(t).map(|why| format!("{}: {why}", t.spec.source_topic))
        })
        .collect();
    if !not_ready.is_empty() {
        let selection: Vec<String> = chosen
            .iter()
            .map(|t| format!("--topic {}", t.spec.source_topic))
            .collect();
        let message = format!(
            "not every selected topic is failed over (STOPPED): {}. Fail them over first: \
             `kubectl mirror failover {} -n {ns} {} --wait`{}",
            not_ready.join("; "),
            args.mirror,
            selection.join(" "),
            if args.force { "" } else { ", or pass --force" }
        );
        if args.force {
            eprintln!("warning: {message}");
        } else {
            return Err(Error::failed(message));
        }
    }

    let policy = args.divergence_policy.map(DivergencePolicy::from);
    let mirror = reverse::reverse_mirror(&old, &name);
    let reverse_topics: Vec<MirrorTopic> = chosen
        .iter()
        .map(|t| reverse::reverse_topic(t, &name, policy))
        .collect();

    if let Some(w) = gitops::creation_warning(
        &format!("ClusterMirror {ns}/{}", args.mirror),
        &old.metadata,
    ) {
        eprintln!("warning: {w}");
    }
    let change = &args.change;
    if change.print_patch || change.dry_run == Some(DryRun::Client) {
        if change.print_patch {
            emit(&format!(
                "# The reverse mirror of ClusterMirror {ns}/{}: commit these manifests to Git \
                 next to the mirror's.\n",
                args.mirror
            ));
        }
        emit(&serde_yaml::to_string(&with_kind(&mirror)).expect("serializes"));
        for t in &reverse_topics {
            emit("---\n");
            emit(&serde_yaml::to_string(&with_kind(t)).expect("serializes"));
        }
        return Ok(());
    }
    let dry_run = change.dry_run == Some(DryRun::Server);

    create_mirror(kube, &mirror, &reverse::key(&old), dry_run).await?;
    let mut created = Vec::new();
    for t in &reverse_topics {
        created.push(create_topic(kube, t, policy, dry_run).await?);
    }
    if !args.wait.wait || dry_run {
        return Ok(());
    }
    let job = Job {
        what: format!("the failback mirror {name:?}"),
        mirror: &name,
        divergence_of: Some(&name),
    };
    wait::follow(kube, &created, args.wait.timeout, &job).await?;
    line(&format!(
        "failback mirroring: every partition of the reverse mirror {name:?} is MIRRORING"
    ));
    Ok(())
}

/// The object as JSON with apiVersion and kind (what `kubectl apply` takes).
fn with_kind<K>(object: &K) -> serde_json::Value
where
    K: kube::Resource<DynamicType = ()> + serde::Serialize,
{
    let mut v = serde_json::to_value(object).expect("serializes");
    if let Some(map) = v.as_object_mut() {
        map.remove("status");
        let mut out = serde_json::Map::new();
        out.insert("apiVersion".into(), json!(K::api_version(&())));
        out.insert("kind".into(), json!(K::kind(&())));
        out.extend(map.clone());
        return serde_json::Value::Object(out);
    }
    v
}

/// " (server dry run)" after what a dry run reports.
fn dry(dry_run: bool) -> &'static str {
    if dry_run { " (server dry run)" } else { "" }
}

/// Creates the reverse mirror; an existing one is kept if it reverses the same mirror.
async fn create_mirror(
    kube: &Kube,
    mirror: &ClusterMirror,
    reverse_of: &str,
    dry_run: bool,
) -> Result<()> {
    let ns = kube.namespace.as_str();
    let name = mirror.metadata.name.clone().unwrap_or_default();
    if kube.create_mirror(ns, mirror, dry_run).await?.is_some() {
        line(&format!(
            "clustermirror.kmirror.io/{name} created{}",
            dry(dry_run)
        ));
        return Ok(());
    }
    let existing = kube.mirror(ns, &name).await?;
    if existing.spec.reverse_of.as_deref() != Some(reverse_of) {
        return Err(Error::failed(format!(
            "ClusterMirror {name:?} already exists in namespace {ns:?} and is not the reverse of \
             {reverse_of}: choose another name with --name"
        )));
    }
    line(&format!(
        "clustermirror.kmirror.io/{name} unchanged (exists, reverse of {reverse_of})"
    ));
    Ok(())
}

/// Creates a reverse topic; an existing one for the same mirror and topic is kept (with the
/// divergence policy updated when one is given).
async fn create_topic(
    kube: &Kube,
    topic: &MirrorTopic,
    policy: Option<DivergencePolicy>,
    dry_run: bool,
) -> Result<MirrorTopic> {
    let ns = kube.namespace.as_str();
    let name = object_name(topic).to_string();
    if let Some(t) = kube.create_topic(ns, topic, dry_run).await? {
        line(&format!(
            "mirrortopic.kmirror.io/{name} created{} ({} → {})",
            dry(dry_run),
            t.spec.source_topic,
            t.destination_topic()
        ));
        return Ok(t);
    }
    let existing = kube.topic_opt(ns, &name).await?.ok_or_else(|| {
        Error::failed(format!("MirrorTopic {name:?} vanished while being created"))
    })?;
    if existing.spec.mirror != topic.spec.mirror
        || existing.spec.source_topic != topic.spec.source_topic
    {
        return Err(Error::failed(format!(
            "MirrorTopic {name:?} already exists in namespace {ns:?} for mirror {:?}, topic {:?}",
            existing.spec.mirror, existing.spec.source_topic
        )));
    }
    match policy {
        Some(p) if existing.spec.divergence_policy != Some(p) => {
            let t = kube
                .patch_topic(
                    ns,
                    &name,
                    &json!({"spec": {"divergencePolicy": p}}),
                    dry_run,
                )
                .await?;
            line(&format!(
                "mirrortopic.kmirror.io/{name} configured{} (divergencePolicy {p:?})",
                dry(dry_run)
            ));
            Ok(t)
        }
        _ => {
            line(&format!("mirrortopic.kmirror.io/{name} unchanged (exists)"));
            Ok(existing)
        }
    }
}
