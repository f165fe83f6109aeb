//! The Kubernetes half of the test bed behaves like a real control plane: CRDs become
//! established and validate custom resources, server-side apply tracks field managers, and the
//! garbage collector removes dependents of deleted owners.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kmirror_e2e::kafka::unique_name;
use kmirror_e2e::kube::{in_namespace, wait_for, wait_gone};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, PropagationPolicy,
};
use kube::{Api, Client};

const TIMEOUT: Duration = Duration::from_secs(30);

fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

async fn crd_round_trip(client: &Client, ns: &str, group: &str) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["size"],
                             "properties": {"size": {"type": "integer", "minimum": 1}}}
                }}}
            }]
        }
    }))?;
    crds.create(&PostParams::default(), &crd).await?;
    let name = format!("widgets.{group}");
    wait_for(&crds, &name, TIMEOUT, "Established", established).await?;

    let resource = ApiResource {
        group: group.to_string(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    let widget = |name: &str, size: i64| -> anyhow::Result<DynamicObject> {
        Ok(serde_json::from_value(serde_json::json!({
            "apiVersion": format!("{group}/v1"), "kind": "Widget",
            "metadata": {"name": name}, "spec": {"size": size}
        }))?)
    };
    // Serving may lag a moment behind the Established condition.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match widgets
            .create(&PostParams::default(), &widget("w1", 3)?)
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 404 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let stored = widgets.get("w1").await?;
    assert_eq!(stored.data["spec"]["size"], 3);
    assert_eq!(widgets.list(&Default::default()).await?.items.len(), 1);

    let invalid = widgets
        .create(&PostParams::default(), &widget("w0", 0)?)
        .await;
    match invalid {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 422, "{e:?}"),
        other => panic!("a widget violating the schema was not rejected: {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn custom_resource_definition_is_established_and_validates() {
    in_namespace("kube-crd", |client, ns| async move {
        let group = format!("{}.e2e.kmirror.io", unique_name("g"));
        let result = crd_round_trip(&client, &ns, &group).await;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let _ = crds
            .delete(&format!("widgets.{group}"), &DeleteParams::default())
            .await;
        result
    })
    .await;
}

fn managed_fields(cm: &ConfigMap, manager: &str) -> serde_json::Value {
    cm.metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|m| m.manager.as_deref() == Some(manager) && m.operation.as_deref() == Some("Apply"))
        .and_then(|m| m.fields_v1.as_ref())
        .map(|f| f.0.clone())
        .unwrap_or(serde_json::Value::Null)
}

#[tokio::test]
async fn server_side_apply_tracks_field_managers() {
    in_namespace("kube-ssa", |client, ns| async move {
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let config = |data: serde_json::Value| {
            serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "applied"}, "data": data
            })
        };
        let first = PatchParams::apply("e2e-first");
        let v1 = maps
            .patch(
                "applied",
                &first,
                &Patch::Apply(config(serde_json::json!({"a": "1"}))),
            )
            .await?;
        assert_eq!(
            managed_fields(&v1, "e2e-first")["f:data"],
            serde_json::json!({"f:a": {}})
        );

        let v2 = maps
            .patch(
                "applied",
                &first,
                &Patch::Apply(config(serde_json::json!({"a": "2", "b": "3"}))),
            )
            .await?;
        let data = v2.data.clone().unwrap_or_default();
        assert_eq!((data["a"].as_str(), data["b"].as_str()), ("2", "3"));
        assert_ne!(v1.metadata.resource_version, v2.metadata.resource_version);
        assert_eq!(
            managed_fields(&v2, "e2e-first")["f:data"],
            serde_json::json!({"f:a": {}, "f:b": {}})
        );

        // Another manager changing a field the first one owns conflicts unless it forces.
        let second = PatchParams::apply("e2e-second");
        let conflict = maps
            .patch(
                "applied",
                &second,
                &Patch::Apply(config(serde_json::json!({"a": "9"}))),
            )
            .await;
        match conflict {
            Err(kube::Error::Api(e)) => assert_eq!(e.code, 409, "{e:?}"),
            other => panic!("expected a conflict, got {other:?}"),
        }
        let v3 = maps
            .patch(
                "applied",
                &second.clone().force(),
                &Patch::Apply(config(serde_json::json!({"a": "9"}))),
            )
            .await?;
        assert_eq!(v3.data.clone().unwrap_or_default()["a"], "9");
        assert_eq!(
            managed_fields(&v3, "e2e-second")["f:data"],
            serde_json::json!({"f:a": {}})
        );
        assert_eq!(
            managed_fields(&v3, "e2e-first")["f:data"],
            serde_json::json!({"f:b": {}})
        );
        Ok(())
    })
    .await;
}

async fn config_map(
    maps: &Api<ConfigMap>,
    name: &str,
    owner: Option<&ConfigMap>,
) -> anyhow::Result<ConfigMap> {
    let owner_refs = owner.map(|o| {
        serde_json::json!([{
            "apiVersion": "v1", "kind": "ConfigMap",
            "name": o.metadata.name, "uid": o.metadata.uid
        }])
    });
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "ownerReferences": owner_refs},
        "data": {"k": "v"}
    }))?;
    Ok(maps.create(&PostParams::default(), &cm).await?)
}

#[tokio::test]
async fn garbage_collector_removes_dependents_of_deleted_owners() {
    in_namespace("kube-gc", |client, ns| async move {
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        for (owner, policy) in [
            ("owner-bg", PropagationPolicy::Background),
            ("owner-fg", PropagationPolicy::Foreground),
        ] {
            let parent = config_map(&maps, owner, None).await?;
            let child_name = format!("{owner}-child");
            config_map(&maps, &child_name, Some(&parent)).await?;
            let bystander = config_map(&maps, &format!("{owner}-bystander"), None).await?;

            let params = DeleteParams {
                propagation_policy: Some(policy),
                ..Default::default()
            };
            maps.delete(owner, &params).await?;
            wait_gone(&maps, &child_name, Duration::from_secs(60)).await?;
            wait_gone(&maps, owner, Duration::from_secs(60)).await?;
            // Objects without the owner reference stay.
            let still = maps
                .get(bystander.metadata.name.as_deref().unwrap_or(""))
                .await?;
            assert_eq!(still.metadata.uid, bystander.metadata.uid);
        }
        Ok(())
    })
    .await;
}
