//! Connects to a cluster with librdkafka-style properties and prints its brokers, e.g.
//! `cargo run -p kmirror-wire --example probe -- bootstrap.servers=127.0.0.1:19092`.

use std::collections::BTreeMap;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let properties: BTreeMap<String, String> = std::env::args()
        .skip(1)
        .filter_map(|a| {
            a.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    let config = match kmirror_wire::WireConfig::from_properties(&properties) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    match kmirror_wire::Client::connect(config).await {
        Ok(client) => {
            let meta = client.metadata();
            println!("cluster {:?}", meta.cluster_id);
            for b in meta.brokers.values() {
                println!("broker {} at {}", b.id, b.address());
            }
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
