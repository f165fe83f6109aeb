//! The chart's alerts (the PrometheusRule of charts/kmirror) as shipped: rendered with `helm
//! template`, checked with `promtool check rules` and unit-tested with `promtool test rules`
//! (e2e/alerts/kmirror-alerts.test.yaml: a firing and a non-firing case for every alert);
//! promtool is built from its Go module and cached (e2e/bed/go-tools.sh). Also: the tests catch
//! a changed rule, every alert links a section of the README, and every metric a rule reads
//! exists with the labels it reads, as the operator and the fetcher encode them (a real scrape
//! of the FAILED and state-topic series is checked by e2e/tests/gitops_health.rs).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use kmirror_e2e::Testbed;
use kmirror_e2e::kafka::unique_name;
use kmirror_e2e::testbed::repo_root;
use serde::Deserialize;
use serde_json::Value;

fn helm() -> String {
    std::env::var("KMIRROR_HELM").unwrap_or_else(|_| Testbed::get().var("KMIRROR_HELM").to_string())
}

/// promtool, built once per machine (and found in the cache afterwards).
fn promtool() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let out = Command::new(repo_root().join("e2e/bed/go-tools.sh"))
            .arg("promtool")
            .output()
            .expect("run e2e/bed/go-tools.sh");
        assert!(
            out.status.success(),
            "building promtool failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The PrometheusRule rendered with `prometheusRule.enabled=true` and `extra` values; `None`
/// when the chart renders none.
fn render(extra: &[&str]) -> Option<Value> {
    let chart = repo_root().join("charts/kmirror");
    let mut args = vec![
        "template",
        "kmirror",
        chart.to_str().unwrap(),
        "--namespace",
        "kmirror",
    ];
    args.extend_from_slice(extra);
    let out = Command::new(helm()).args(&args).output().expect("run helm");
    assert!(
        out.status.success(),
        "helm template failed:\n{}",
        text(&out)
    );
    serde_yaml::Deserializer::from_str(&String::from_utf8_lossy(&out.stdout))
        .map(|d| Value::deserialize(d).expect("helm renders YAML"))
        .find(|o| o["kind"] == "PrometheusRule")
}

fn enabled(extra: &[&str]) -> Value {
    let mut args = vec!["--set", "prometheusRule.enabled=true"];
    args.extend_from_slice(extra);
    render(&args).expect("a PrometheusRule when prometheusRule.enabled")
}

/// Every rule of the PrometheusRule.
fn rules(rule: &Value) -> Vec<&Value> {
    rule["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules"))
        .collect()
}

/// A directory holding the rules file (the PrometheusRule's spec) and the unit tests.
fn workdir(rule: &Value) -> PathBuf {
    let dir = std::env::temp_dir().join(unique_name("kmirror-alerts"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("rules.yaml"),
        serde_yaml::to_string(&rule["spec"]).unwrap(),
    )
    .unwrap();
    std::fs::copy(
        repo_root().join("e2e/alerts/kmirror-alerts.test.yaml"),
        dir.join("kmirror-alerts.test.yaml"),
    )
    .unwrap();
    dir
}

fn promtool_run(dir: &Path, args: &[&str]) -> Output {
    Command::new(promtool())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run promtool")
}

#[test]
fn the_shipped_rules_pass_promtool_check_and_unit_tests() {
    assert!(
        render(&[]).is_none(),
        "the PrometheusRule is opt-in (prometheusRule.enabled)"
    );
    let chart = repo_root().join("charts/kmirror");
    let lint = Command::new(helm())
        .args(["lint", "--strict", chart.to_str().unwrap()])
        .args(["--set", "prometheusRule.enabled=true"])
        .args(["--set", "prometheusRule.alertLabels.team=data"])
        .output()
        .expect("run helm lint");
    assert!(lint.status.success(), "helm lint:\n{}", text(&lint));
    let rule = enabled(&[]);
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["name"], "kmirror-alerts");
    assert_eq!(rule["metadata"]["namespace"], "kmirror");
    let dir = workdir(&rule);
    let check = promtool_run(&dir, &["check", "rules", "--lint-fatal", "rules.yaml"]);
    assert!(
        check.status.success(),
        "promtool check rules:\n{}",
        text(&check)
    );
    let started = std::time::Instant::now();
    let test = promtool_run(&dir, &["test", "rules", "kmirror-alerts.test.yaml"]);
    eprintln!("promtool test rules took {:?}", started.elapsed());
    assert!(
        test.status.success(),
        "promtool test rules:\n{}",
        text(&test)
    );
    assert!(text(&test).contains("SUCCESS"), "{}", text(&test));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_alert_has_a_firing_and_a_non_firing_case() {
    let rule = enabled(&[]);
    let alerts: BTreeSet<String> = rules(&rule)
        .iter()
        .map(|r| {
            r["alert"]
                .as_str()
                .expect("only alerting rules")
                .to_string()
        })
        .collect();
    assert_eq!(alerts.len(), 14, "{alerts:?}");
    let tests: Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo_root().join("e2e/alerts/kmirror-alerts.test.yaml")).unwrap(),
    )
    .unwrap();
    let mut firing = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for case in tests["tests"].as_array().unwrap() {
        for t in case["alert_rule_test"].as_array().unwrap() {
            let name = t["alertname"].as_str().unwrap().to_string();
            assert!(
                alerts.contains(&name),
                "the tests name an unknown alert {name}"
            );
            let expected = t["exp_alerts"].as_array().map_or(0, Vec::len);
            if expected > 0 {
                firing.insert(name);
            } else {
                quiet.insert(name);
            }
        }
    }
    for a in &alerts {
        assert!(firing.contains(a), "{a} has no case where it fires");
        assert!(quiet.contains(a), "{a} has no case where it must not fire");
    }
}

#[test]
fn the_unit_tests_catch_a_changed_rule() {
    // A threshold of 50000 records: the case with 20000 records behind no longer fires.
    let rule = enabled(&["--set", "prometheusRule.lagRecords.threshold=50000"]);
    let dir = workdir(&rule);
    let test = promtool_run(&dir, &["test", "rules", "kmirror-alerts.test.yaml"]);
    assert!(!test.status.success(), "{}", text(&test));
    assert!(
        text(&test).contains("KmirrorLagRecordsHigh"),
        "{}",
        text(&test)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// GitHub's anchor of a Markdown heading.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_alert_links_its_section_of_the_readme_and_says_where() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let anchors: BTreeSet<String> = readme
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| anchor(h.trim_start_matches('#')))
        .collect();
    let rule = enabled(&[
        "--set",
        "prometheusRule.alertLabels.team=data",
        "--set",
        "prometheusRule.runbookUrl=https://wiki.example/kmirror",
    ]);
    for r in rules(&rule) {
        let alert = r["alert"].as_str().unwrap();
        let annotations = &r["annotations"];
        let url = annotations["runbook_url"].as_str().unwrap();
        let (base, fragment) = url.split_once('#').expect("an anchor");
        assert_eq!(base, "https://wiki.example/kmirror");
        assert_eq!(fragment, alert.to_lowercase());
        assert!(
            anchors.contains(fragment),
            "README.md has no heading for {alert} (anchor #{fragment})"
        );
        assert_eq!(r["labels"]["team"], "data");
        let severity = r["labels"]["severity"].as_str().unwrap();
        assert!(["warning", "critical"].contains(&severity), "{alert}");
        let description = annotations["description"].as_str().unwrap();
        assert!(!annotations["summary"].as_str().unwrap().is_empty());
        // Alerts about a partition say which one, in which topic of which mirror; alerts about
        // a mirror, which one.
        let expr = r["expr"].as_str().unwrap();
        if expr.contains("by (namespace, name") {
            for label in ["namespace", "name"] {
                assert!(
                    description.contains(&format!("$labels.{label}")),
                    "{alert}: the description does not name the mirror's {label}"
                );
            }
        }
        if expr.contains("partition)") || expr.contains("partition, reason)") {
            for label in ["namespace", "name", "topic", "partition"] {
                assert!(
                    description.contains(&format!("$labels.{label}")),
                    "{alert}: the description does not name the {label}"
                );
            }
        }
    }
    // The default runbook page is the README on the project's main branch.
    let default = enabled(&[]);
    assert!(rules(&default).iter().all(|r| {
        r["annotations"]["runbook_url"]
            .as_str()
            .unwrap()
            .starts_with("https://github.com/kmirror/kmirror/blob/main/README.md#")
    }));
}

#[test]
fn alerts_can_be_left_out_by_name() {
    let rule = enabled(&[
        "--set",
        "prometheusRule.disabled={KmirrorFetcherStalled,KmirrorFetcherMissing,KmirrorDataLoss}",
    ]);
    let names: BTreeSet<&str> = rules(&rule)
        .iter()
        .map(|r| r["alert"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 11, "{names:?}");
    for gone in [
        "KmirrorFetcherStalled",
        "KmirrorFetcherMissing",
        "KmirrorDataLoss",
    ] {
        assert!(!names.contains(gone));
    }
    // A misspelt name is refused by the values schema.
    let chart = repo_root().join("charts/kmirror");
    let out = Command::new(helm())
        .args([
            "template",
            "kmirror",
            chart.to_str().unwrap(),
            "--set",
            "prometheusRule.enabled=true",
            "--set",
            "prometheusRule.disabled={KmirrorLagHigh}",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out).contains("/prometheusRule/disabled/0"),
        "{}",
        text(&out)
    );
    // Scrape jobs of one's own.
    let rule = enabled(&["--set", "prometheusRule.operatorJob=kmirror"]);
    let down = rules(&rule)
        .into_iter()
        .find(|r| r["alert"] == "KmirrorOperatorDown")
        .unwrap();
    assert!(
        down["expr"]
            .as_str()
            .unwrap()
            .contains(r#"up{job="kmirror", namespace="kmirror"}"#),
        "{down}"
    );
}

/// Every series the operator and the fetcher expose today: name → label names.
fn exposed_series() -> BTreeMap<String, BTreeSet<String>> {
    use kmirror_fetcher::metrics as fm;
    use kmirror_operator::metrics as om;
    let op = om::Metrics::default();
    let partition = om::PartitionLabels::new("ns/m", "t", 0);
    let state = om::StateLabels::new("ns/m", "t", "MIRRORING");
    op.partitions.get_or_create(&state).set(1);
    op.lag.get_or_create(&partition).set(1);
    op.lag_seconds.get_or_create(&partition).set(1.0);
    op.sync_runs
        .get_or_create(&om::SyncLabels {
            namespace: "ns".into(),
            name: "m".into(),
            part: "consumerGroups".into(),
            result: "ok".into(),
        })
        .inc();
    op.leader.set(1);
    op.set_failed_partitions("ns/m", "t", &[(0, "ForeignWrite")]);
    op.state_topic_available
        .get_or_create(&om::StateTopicLabels {
            state_topic: "__kmirror_state".into(),
        })
        .set(1);
    op.group_sync_failures
        .get_or_create(&om::GroupLabels {
            namespace: "ns".into(),
            name: "m".into(),
            group: "g".into(),
        })
        .inc();
    op.group_sync_succeeded("ns/m", 1.0);
    let f = fm::FetcherMetrics::new();
    let labels = fm::PartitionLabels::new("ns/m", "t", 0);
    f.records.get_or_create(&labels).inc();
    f.lag_records.get_or_create(&labels).set(1);
    f.set_state(&labels, kmirror_crds::v1alpha1::PartitionState::Mirroring);
    f.data_loss_records.get_or_create(&labels).inc_by(5);
    f.transaction_open_seconds.get_or_create(&labels).set(1.0);
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in op.encode().lines().chain(f.encode().lines()) {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (name, rest) = match line.find('{') {
            Some(i) => (&line[..i], &line[i + 1..line.rfind('}').unwrap()]),
            None => (line.split(' ').next().unwrap(), ""),
        };
        let set = out.entry(name.to_string()).or_default();
        for pair in rest.split(',').filter(|p| !p.is_empty()) {
            set.insert(pair.split('=').next().unwrap().to_string());
        }
    }
    out
}

/// `kmirror_*` metric names in an expression, with the label names matched on right after.
fn selectors(expr: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = expr[at..].find("kmirror_") {
        let start = at + i;
        let end = expr[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(expr.len(), |e| start + e);
        let name = &expr[start..end];
        at = end;
        let mut labels = Vec::new();
        if expr[at..].starts_with('{') {
            let close = at + expr[at..].find('}').unwrap();
            for matcher in expr[at + 1..close].split(',') {
                let label: String = matcher
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                labels.push(label);
            }
            at = close;
        }
        out.push((name.to_string(), labels));
    }
    out
}

#[test]
fn rules_read_only_metrics_that_exist() {
    let known = exposed_series();
    // The series the alerts of a DR owner stand on, with exactly these labels.
    for (name, labels) in [
        (
            "kmirror_operator_partition_failed",
            &["namespace", "name", "topic", "partition", "reason"][..],
        ),
        (
            "kmirror_fetcher_data_loss_records_total",
            &["namespace", "name", "topic", "partition"],
        ),
        ("kmirror_operator_state_topic_available", &["state_topic"]),
        (
            "kmirror_operator_group_sync_failures_total",
            &["namespace", "name", "group"],
        ),
        (
            "kmirror_operator_group_sync_last_success_timestamp_seconds",
            &["namespace", "name"],
        ),
        (
            "kmirror_build_info",
            &["component", "version", "git_sha", "rustc"],
        ),
    ] {
        let exposed = known
            .get(name)
            .unwrap_or_else(|| panic!("{name} is not exposed; known: {:?}", known.keys()));
        let expected: BTreeSet<String> = labels.iter().map(|l| l.to_string()).collect();
        assert_eq!(exposed, &expected, "{name}");
    }
    let rule = enabled(&[]);
    let mut used = BTreeSet::new();
    // Labels Prometheus adds to every series of a scrape target.
    let target = ["job", "namespace"];
    for r in rules(&rule) {
        let expr = r["expr"].as_str().unwrap();
        for (name, labels) in selectors(expr) {
            let available = known.get(&name).unwrap_or_else(|| {
                panic!(
                    "{}: no metric {name}; known: {:?}",
                    r["alert"],
                    known.keys()
                )
            });
            for l in labels {
                assert!(
                    available.contains(&l) || target.contains(&l.as_str()),
                    "{}: {name} has no label {l}",
                    r["alert"]
                );
            }
            used.insert(name);
        }
        // Labels the rules group by exist on what they aggregate.
        let mut at = 0;
        while let Some(i) = expr[at..].find("by (") {
            let open = at + i + 4;
            let close = open + expr[open..].find(')').unwrap();
            for l in expr[open..close].split(',').map(str::trim) {
                assert!(
                    known.values().any(|set| set.contains(l)) || target.contains(&l),
                    "{}: grouping by unknown label {l}",
                    r["alert"]
                );
            }
            at = close;
        }
    }
    eprintln!("metrics the alerts read: {used:?}");
    for name in [
        "kmirror_operator_partition_failed",
        "kmirror_fetcher_data_loss_records_total",
        "kmirror_operator_state_topic_available",
        "kmirror_operator_group_sync_failures_total",
        "kmirror_fetcher_records_total",
        "kmirror_operator_sync_runs_total",
        "kmirror_operator_group_sync_last_success_timestamp_seconds",
    ] {
        assert!(used.contains(name), "no rule reads {name}");
    }
    // The checker catches a wrong name and a wrong label.
    assert!(!known.contains_key("kmirror_fetcher_records"));
    assert_eq!(
        selectors(r#"max by (a) (kmirror_x_total{mirror="m", y!="1"})"#),
        [(
            "kmirror_x_total".to_string(),
            vec!["mirror".to_string(), "y".to_string()]
        )]
    );
}
