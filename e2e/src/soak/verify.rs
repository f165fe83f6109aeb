//! Running `kmirror-verify` for the soak: one topic of a mirror compared record by record
//! through the offset map the mirror recorded, the admin password passed in a file.

use std::process::Command;

use serde::Deserialize;

use crate::Testbed;

/// One line of `kmirror-verify`'s output.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VerifyReport {
    /// Partition.
    pub partition: i32,
    /// Source records examined.
    pub source_records: u64,
    /// Found on the destination, same content.
    pub matched: u64,
    /// Absent from the destination.
    pub missing: u64,
    /// Present, different content.
    pub different: u64,
    /// Destination records no source record maps to.
    pub extra: u64,
    /// Destination records after the copy of the last source record.
    pub trailing: u64,
    /// Every matched record at its own source offset.
    pub offsets_identical: bool,
    /// First mismatches: (source offset, destination offset, what).
    #[serde(default)]
    pub examples: Vec<(i64, i64, String)>,
}

/// The verification of one partition, or why there is none.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionCheck {
    /// Source topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The verifier's report.
    pub report: Result<VerifyReport, String>,
}

/// A file holding the bed's admin password, for `--…-property-file` (never on a command line).
fn password_file(bed: &Testbed) -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = std::env::temp_dir().join(format!("kmirror-soak-{}.secret", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)?;
    std::io::Write::write_all(&mut f, bed.var("KMIRROR_ADMIN_PASSWORD").as_bytes())?;
    Ok(path)
}

/// Runs `kmirror-verify` for one topic of `mirror` (`reverse`: the replicated destination is the
/// source). One check per partition the state topic knows, or one failed check for the topic.
pub fn verify_topic(
    bed: &Testbed,
    ns: &str,
    mirror: &str,
    topic: &str,
    reverse: bool,
) -> Vec<PartitionCheck> {
    let failed = |why: String| {
        vec![PartitionCheck {
            topic: topic.to_string(),
            partition: -1,
            report: Err(why),
        }]
    };
    let secret = match password_file(bed) {
        Ok(p) => p,
        Err(e) => return failed(format!("cannot write the password file: {e}")),
    };
    // The replicated destination (SASL) is the verifier's destination, or its source when
    // verifying the reverse mirror; the replicated source (PLAINTEXT) is the other side.
    let (sasl_side, plain_side) = if reverse {
        ("source", "destination")
    } else {
        ("destination", "source")
    };
    let mut cmd = Command::new(crate::fetcher::binary("kmirror-verify"));
    cmd.args([
        "--mirror",
        &format!("{ns}/{mirror}"),
        "--source-topic",
        topic,
    ])
    .arg(format!("--{plain_side}-bootstrap"))
    .arg(bed.var("KMIRROR_R_SOURCE_BOOTSTRAP"))
    .arg(format!("--{sasl_side}-bootstrap"))
    .arg(bed.var("KMIRROR_R_DEST_BOOTSTRAP"))
    .env("RUST_LOG", "warn");
    for p in [
        "security.protocol=SASL_PLAINTEXT",
        "sasl.mechanism=PLAIN",
        &format!("sasl.username={}", bed.var("KMIRROR_ADMIN_USER")),
    ] {
        cmd.arg(format!("--{sasl_side}-property")).arg(p);
    }
    cmd.arg(format!("--{sasl_side}-property-file"))
        .arg(format!("sasl.password={}", secret.display()));
    let out = cmd.output();
    let _ = std::fs::remove_file(&secret);
    let out = match out {
        Ok(o) => o,
        Err(e) => return failed(format!("cannot run kmirror-verify: {e}")),
    };
    let mut checks: Vec<PartitionCheck> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<VerifyReport>(l).ok())
        .map(|r| PartitionCheck {
            topic: topic.to_string(),
            partition: r.partition,
            report: Ok(r),
        })
        .collect();
    if checks.is_empty() || out.status.code() == Some(2) {
        let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
        checks.extend(failed(format!("kmirror-verify failed: {why}")));
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_verifier_output() {
        let line = r#"{"partition":2,"sourceRecords":10,"matched":9,"missing":1,"different":0,"extra":0,"trailing":0,"offsetsIdentical":true,"examples":[[5,5,"missing on the destination"]]}"#;
        let r: VerifyReport = serde_json::from_str(line).unwrap();
        assert_eq!(r.partition, 2);
        assert_eq!(r.source_records, 10);
        assert!(r.offsets_identical);
        assert_eq!(
            r.examples,
            vec![(5, 5, "missing on the destination".to_string())]
        );
    }
}
