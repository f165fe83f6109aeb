//! The wire client (kmirror-wire) connects to every listener of the bed with every mechanism,
//! and says clearly what is wrong when credentials, certificates or protocols are.

use kmirror_e2e::Testbed;
use kmirror_e2e::kafka::{
    DestUser, TestRecord, create_topic, mixed_records, produce_all, unique_name,
};
use kmirror_e2e::wire::{client, wire_config};
use kmirror_wire::{
    Client, FetchOptions, FetchPartition, Isolation, KafkaCode, OffsetSpec, RawEntry, WireError,
};
use rdkafka::ClientConfig;

fn records(n: usize, seed: u64) -> Vec<TestRecord> {
    mixed_records(n, 1, 0, seed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_connects_to_every_listener() {
    let bed = Testbed::get();
    let mut listeners: Vec<(&str, ClientConfig, ClientConfig)> = vec![
        ("source PLAINTEXT", bed.source_config(), bed.source_config()),
        (
            "source SASL_SSL SCRAM-SHA-512",
            bed.source_sasl_ssl_config(),
            bed.source_config(),
        ),
        ("source mTLS", bed.source_mtls_config(), bed.source_config()),
        (
            "destination PLAIN",
            bed.dest_config_with(DestUser::Mirror, "PLAIN"),
            bed.dest_config(DestUser::Admin),
        ),
        (
            "destination SCRAM-SHA-256",
            bed.dest_config_with(DestUser::Mirror, "SCRAM-SHA-256"),
            bed.dest_config(DestUser::Admin),
        ),
        (
            "destination SCRAM-SHA-512",
            bed.dest_config_with(DestUser::Mirror, "SCRAM-SHA-512"),
            bed.dest_config(DestUser::Admin),
        ),
        (
            "destination OAUTHBEARER",
            bed.dest_oauth_config(DestUser::Mirror),
            bed.dest_config(DestUser::Admin),
        ),
    ];
    for var in [
        "KMIRROR_COMPAT39_BOOTSTRAP",
        "KMIRROR_COMPAT28_BOOTSTRAP",
        "KMIRROR_COMPAT21_BOOTSTRAP",
    ] {
        match bed.opt_var(var) {
            Some(bootstrap) => {
                let mut c = ClientConfig::new();
                c.set("bootstrap.servers", bootstrap);
                listeners.push((var, c.clone(), c));
            }
            None => eprintln!("{var} is not running; skipped"),
        }
    }
    for (name, wire, admin) in listeners {
        let topic = unique_name("wire-listener");
        create_topic(&admin, &topic, 2, &[]).await.expect(name);
        produce_all(&admin, &topic, &records(7, 1), &[]).expect(name);
        let c = client(&wire).await;
        assert!(
            c.cluster_id().is_some() || name.contains("28") || name.contains("21"),
            "{name}: cluster id"
        );
        let t = c
            .topic(&topic)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(t.partitions.len(), 2, "{name}");
        assert!(
            t.partitions.values().all(|p| p.leader >= 0),
            "{name}: leaders"
        );
        let offsets = c
            .list_offsets(
                &topic,
                &[(0, OffsetSpec::Earliest), (0, OffsetSpec::Latest)],
                Isolation::ReadCommitted,
            )
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let found: Vec<(KafkaCode, i64)> = offsets.iter().map(|o| (o.error, o.offset)).collect();
        assert_eq!(
            found,
            vec![(KafkaCode::NONE, 0), (KafkaCode::NONE, 7)],
            "{name}: earliest and latest"
        );
        let fetched = c
            .fetch(
                &topic,
                &[FetchPartition::new(0, 0)],
                &FetchOptions::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let count: i32 = fetched[0]
            .batches()
            .map(|b| match b.expect(name) {
                RawEntry::Batch(b) => b.header.record_count,
                RawEntry::Legacy(_) => 1,
            })
            .sum();
        assert_eq!(count, 7, "{name}: fetched records");
        eprintln!("{name}: ok ({} brokers)", c.metadata().brokers.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_reports_wrong_credentials_clearly() {
    let bed = Testbed::get();
    let wrong = "not-the-password-42";
    for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let mut c = bed.dest_config_with(DestUser::Mirror, mechanism);
        c.set("sasl.password", wrong);
        let err = Client::connect(wire_config(&c))
            .await
            .err()
            .expect(mechanism);
        let text = err.to_string();
        assert!(
            matches!(err, WireError::SaslAuthenticate { .. }),
            "{mechanism}: {text}"
        );
        assert!(
            text.contains(mechanism) && text.contains("mirror"),
            "{text}"
        );
        assert!(!text.contains(wrong), "the password leaked: {text}");
        eprintln!("{mechanism}: {text}");
    }
    let mut c = bed.source_sasl_ssl_config();
    c.set("sasl.password", wrong);
    let err = Client::connect(wire_config(&c))
        .await
        .err()
        .expect("SASL_SSL");
    assert!(matches!(err, WireError::SaslAuthenticate { .. }), "{err}");

    let mut c = bed.dest_oauth_config(DestUser::Mirror);
    c.set("sasl.oauthbearer.client.secret", wrong);
    let err = Client::connect(wire_config(&c)).await.err().expect("OAuth");
    let text = err.to_string();
    assert!(matches!(err, WireError::OAuthToken { .. }), "{text}");
    assert!(
        text.contains("401") && text.contains("invalid_client"),
        "{text}"
    );
    assert!(!text.contains(wrong), "{text}");
    eprintln!("OAUTHBEARER: {text}");

    // A CA that did not sign the broker's certificate (the system store).
    let mut c = bed.source_mtls_config();
    c.remove("ssl.ca.location");
    let err = Client::connect(wire_config(&c))
        .await
        .err()
        .expect("unknown CA");
    assert!(matches!(err, WireError::Tls { .. }), "{err}");
    eprintln!("unknown CA: {err}");

    // mTLS listener without a client certificate.
    let mut c = bed.source_mtls_config();
    c.remove("ssl.certificate.location")
        .remove("ssl.key.location");
    let err = Client::connect(wire_config(&c))
        .await
        .err()
        .expect("no client cert");
    eprintln!("no client certificate: {err}");
    assert!(matches!(err, WireError::Tls { .. }), "{err}");
    assert!(err.to_string().contains("client certificate"), "{err}");

    // Plaintext client on the TLS listener.
    let mut c = ClientConfig::new();
    c.set(
        "bootstrap.servers",
        bed.var("KMIRROR_SOURCE_MTLS_BOOTSTRAP"),
    )
    .set("socket.connection.setup.timeout.ms", "5000");
    let err = Client::connect(wire_config(&c))
        .await
        .err()
        .expect("wrong protocol");
    eprintln!("PLAINTEXT on the TLS port: {err}");
    assert!(matches!(err, WireError::ApiVersions { .. }), "{err}");
    assert!(err.to_string().contains("SSL"), "names the fix: {err}");

    // A SASL mechanism the listener does not offer.
    let mut c = bed.source_sasl_ssl_config();
    c.set("sasl.mechanism", "PLAIN");
    let err = Client::connect(wire_config(&c))
        .await
        .err()
        .expect("mechanism");
    let text = err.to_string();
    assert!(matches!(err, WireError::SaslHandshake { .. }), "{text}");
    assert!(
        text.contains("SCRAM-SHA-512"),
        "names what is offered: {text}"
    );
}
