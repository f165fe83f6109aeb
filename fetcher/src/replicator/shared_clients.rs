//! Clients the topics of one process share (the topics of a pool pod): the state-topic
//! producer and the source admin client, one per cluster configuration (the lease hub is keyed
//! the same way). Each topic keeps its
//! own copy path, whose failures must stay its own.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use kmirror_state::store::StateWriter;
use rdkafka::ClientConfig;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;

use super::stop::Stop;

/// A cluster configuration and a topic, as a key.
pub(super) type Key = (BTreeMap<String, String>, String);

pub(super) fn key(config: &ClientConfig, topic: &str) -> Key {
    (
        config
            .config_map()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        topic.to_string(),
    )
}

/// A writer of state topic `topic` on `destination`: the process's one producer for it, with
/// this writer's own account of failed deliveries.
pub(super) fn state_writer(destination: &ClientConfig, topic: &str) -> Result<StateWriter, Stop> {
    static WRITERS: OnceLock<Mutex<HashMap<Key, StateWriter>>> = OnceLock::new();
    let mut writers = WRITERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let key = key(destination, topic);
    if let Some(w) = writers.get(&key) {
        return Ok(w.share());
    }
    let writer = StateWriter::new(destination, topic).map_err(Stop::WriteState)?;
    let own = writer.share();
    writers.insert(key, writer);
    Ok(own)
}

/// The process's admin client of the source cluster `source`.
pub(super) fn source_admin(
    source: &ClientConfig,
) -> Result<Arc<AdminClient<DefaultClientContext>>, Stop> {
    static ADMINS: OnceLock<Mutex<HashMap<Key, Arc<AdminClient<DefaultClientContext>>>>> =
        OnceLock::new();
    let mut admins = ADMINS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let key = key(source, "");
    if let Some(a) = admins.get(&key) {
        return Ok(a.clone());
    }
    let admin: Arc<AdminClient<DefaultClientContext>> =
        Arc::new(source.create().map_err(|source| Stop::CreateClient {
            client: "source admin client",
            source,
        })?);
    admins.insert(key, admin.clone());
    Ok(admin)
}
