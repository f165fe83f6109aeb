//! The Kafka half of the test bed works as documented: every listener and principal.

use std::time::Duration;

use kmirror_e2e::Testbed;
use kmirror_e2e::kafka::{DestUser, create_topic, unique_name};
use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;

/// Produces `n` keyed records and returns their offsets.
async fn produce(config: &ClientConfig, topic: &str, n: usize) -> Result<Vec<i64>, KafkaError> {
    let producer: FutureProducer = config.clone().set("message.timeout.ms", "15000").create()?;
    let mut offsets = Vec::new();
    for i in 0..n {
        let key = format!("k{i}");
        let value = format!("v{i}");
        let record = FutureRecord::to(topic).key(&key).payload(&value);
        let delivery = producer
            .send(record, Timeout::After(Duration::from_secs(15)))
            .await
            .map_err(|(e, _)| e)?;
        offsets.push(delivery.offset);
    }
    Ok(offsets)
}

/// Reads `n` records from partition 0 from the beginning and returns their values.
fn consume(config: &ClientConfig, topic: &str, n: usize) -> anyhow::Result<Vec<String>> {
    let consumer: BaseConsumer = config
        .clone()
        .set("group.id", unique_name("testbed-group"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()?;
    consumer.subscribe(&[topic])?;
    let mut values = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while values.len() < n && std::time::Instant::now() < deadline {
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message?;
            values
                .push(String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned());
        }
    }
    Ok(values)
}

async fn round_trip(config: ClientConfig, admin: ClientConfig) {
    let topic = unique_name("testbed");
    create_topic(&admin, &topic, 1, &[])
        .await
        .expect("create topic");
    let offsets = produce(&config, &topic, 5).await.expect("produce");
    assert_eq!(offsets, vec![0, 1, 2, 3, 4]);
    let values = consume(&config, &topic, 5).expect("consume");
    assert_eq!(values, vec!["v0", "v1", "v2", "v3", "v4"]);
}

#[tokio::test]
async fn source_plaintext_round_trip() {
    let bed = Testbed::get();
    round_trip(bed.source_config(), bed.source_config()).await;
}

#[tokio::test]
async fn source_sasl_ssl_scram_round_trip_verifies_the_ca() {
    let bed = Testbed::get();
    round_trip(bed.source_sasl_ssl_config(), bed.source_config()).await;

    // With the system trust store instead of the bed's CA, the broker certificate is refused.
    let mut untrusted = bed.source_sasl_ssl_config();
    untrusted.remove("ssl.ca.location");
    let consumer: BaseConsumer = untrusted.create().expect("client");
    assert!(
        consumer
            .fetch_metadata(None, Duration::from_secs(5))
            .is_err(),
        "a client that does not trust the bed's CA must not connect over TLS"
    );
}

#[tokio::test]
async fn source_mutual_tls_round_trip() {
    let bed = Testbed::get();
    round_trip(bed.source_mtls_config(), bed.source_config()).await;
}

#[tokio::test]
async fn destination_sasl_plain_and_scram_round_trip() {
    let bed = Testbed::get();
    let admin = bed.dest_config(DestUser::Admin);
    round_trip(bed.dest_config(DestUser::Admin), admin.clone()).await;
    round_trip(
        bed.dest_config_with(DestUser::Mirror, "SCRAM-SHA-512"),
        admin.clone(),
    )
    .await;
    round_trip(
        bed.dest_config_with(DestUser::Mirror, "SCRAM-SHA-256"),
        admin,
    )
    .await;
}

#[tokio::test]
async fn destination_oauthbearer_round_trip_with_tokens_from_the_identity_provider() {
    let bed = Testbed::get();
    let admin = bed.dest_config(DestUser::Admin);
    // The mirror client's token carries sub=mirror, which has the mirror principal's ACLs.
    round_trip(bed.dest_oauth_config(DestUser::Mirror), admin.clone()).await;

    // The app client's token makes it User:app, which has no ACL: its produce is refused.
    let topic = unique_name("oauth");
    create_topic(&admin, &topic, 1, &[])
        .await
        .expect("create topic");
    let err = produce(&bed.dest_oauth_config(DestUser::App), &topic, 1)
        .await
        .expect_err("app has no ACL");
    assert_eq!(
        err.rdkafka_error_code(),
        Some(RDKafkaErrorCode::TopicAuthorizationFailed),
        "unexpected error: {err}"
    );

    // A wrong client secret gets no token, so no connection.
    let mut wrong = bed.dest_oauth_config(DestUser::Mirror);
    wrong.set("sasl.oauthbearer.client.secret", "not-the-secret");
    let consumer: BaseConsumer = wrong.create().expect("client");
    assert!(
        consumer
            .fetch_metadata(None, Duration::from_secs(5))
            .is_err(),
        "a client without a valid token must not get metadata"
    );
}

#[tokio::test]
async fn app_needs_an_acl_to_produce_on_the_destination() {
    let bed = Testbed::get();
    let topic = unique_name("acl");
    create_topic(&bed.dest_config(DestUser::Admin), &topic, 1, &[])
        .await
        .expect("create topic");

    let app = bed.dest_config(DestUser::App);
    let err = produce(&app, &topic, 1)
        .await
        .expect_err("app has no ACL yet");
    assert_eq!(
        err.rdkafka_error_code(),
        Some(RDKafkaErrorCode::TopicAuthorizationFailed),
        "unexpected error: {err}"
    );

    bed.kafka_tool(
        "org.apache.kafka.tools.AclCommand",
        &[
            "--bootstrap-server",
            bed.dest_bootstrap(),
            "--command-config",
            bed.var("KMIRROR_DEST_ADMIN_PROPERTIES"),
            "--add",
            "--allow-principal",
            "User:app",
            "--operation",
            "Write",
            "--operation",
            "Describe",
            "--topic",
            &topic,
        ],
    )
    .expect("kafka-acls --add");

    // ACLs propagate through the metadata log; allow a moment.
    let mut last = None;
    for _ in 0..20 {
        match produce(&app, &topic, 1).await {
            Ok(offsets) => {
                assert_eq!(offsets, vec![0]);
                return;
            }
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("app still cannot produce after the ACL was added: {last:?}");
}
