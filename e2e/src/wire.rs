//! Settings for the wire client (kmirror-wire) from the bed's rdkafka configurations.

use kmirror_wire::WireConfig;
use rdkafka::ClientConfig;

/// The same settings for the wire client. rdkafka's `config_map` masks secrets, so the values
/// come from `get`.
pub fn wire_config(c: &ClientConfig) -> WireConfig {
    let pairs = c
        .config_map()
        .into_keys()
        .map(|k| (k, c.get(k).unwrap_or_default()));
    WireConfig::from_pairs(pairs).expect("the bed's client settings parse")
}
