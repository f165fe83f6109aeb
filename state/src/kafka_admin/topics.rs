//! DescribeTopics: partition counts and topic IDs.

use std::ffi::c_char;
use std::time::Duration;

use rdkafka::client::{Client, ClientContext};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka_sys as sys;

use super::AdminError;
use super::ffi::{Options, Queue, array, c_string, cstr, error_of};

/// What the cluster reports about a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    /// Topic name.
    pub name: String,
    /// Topic ID (base64), or `None` when the cluster reports none (the all-zero UUID).
    pub topic_id: Option<String>,
    /// Number of partitions.
    pub partitions: usize,
    /// Replicas of its first partition (0: it has none).
    pub replication_factor: usize,
}

/// The all-zero topic ID, as base64, that brokers without topic IDs report.
const ZERO_UUID: &str = "AAAAAAAAAAAAAAAAAAAAAA";

/// Describes topics. A topic that does not exist yields `Ok(None)` in its slot; other per-topic
/// errors fail the call.
pub fn describe_topics<C: ClientContext>(
    client: &Client<C>,
    names: &[&str],
    timeout: Duration,
) -> Result<Vec<Option<TopicDescription>>, AdminError> {
    let c_names = names
        .iter()
        .map(|n| c_string(n))
        .collect::<Result<Vec<_>, _>>()?;
    let mut ptrs: Vec<*const c_char> = c_names.iter().map(|c| c.as_ptr()).collect();
    let queue = Queue::new(client);
    let options = Options::new(
        client,
        sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
        timeout,
    )?;
    // SAFETY: the name pointers outlive the collection, which librdkafka copies; the collection
    // is destroyed after the call has copied it.
    unsafe {
        let collection =
            sys::rd_kafka_TopicCollection_of_topic_names(ptrs.as_mut_ptr(), ptrs.len());
        sys::rd_kafka_DescribeTopics(client.native_ptr(), collection, options.ptr(), queue.ptr());
        sys::rd_kafka_TopicCollection_destroy(collection);
    }
    let event = queue.poll(timeout + Duration::from_secs(5))?;
    event.check()?;
    // SAFETY: the result and everything reached from it are owned by `event`, which outlives
    // this block; strings are copied out.
    unsafe {
        let result = sys::rd_kafka_event_DescribeTopics_result(event.ptr());
        if result.is_null() {
            return Err(AdminError::Unsupported(
                "DescribeTopics result missing".into(),
            ));
        }
        let mut count = 0usize;
        let descriptions = array(
            sys::rd_kafka_DescribeTopics_result_topics(result, &mut count),
            count,
        );
        let mut found = Vec::with_capacity(descriptions.len());
        for &d in descriptions {
            let name = cstr(sys::rd_kafka_TopicDescription_name(d));
            if let Some((code, message)) = error_of(sys::rd_kafka_TopicDescription_error(d)) {
                if code == RDKafkaErrorCode::UnknownTopicOrPartition {
                    found.push((name, None));
                    continue;
                }
                return Err(AdminError::Kafka {
                    code,
                    message: format!("topic {name}: {message}"),
                });
            }
            let uuid = sys::rd_kafka_TopicDescription_topic_id(d);
            let topic_id = if uuid.is_null() {
                None
            } else {
                Some(cstr(sys::rd_kafka_Uuid_base64str(uuid)))
                    .filter(|id| id != ZERO_UUID && !id.is_empty())
            };
            let mut partitions = 0usize;
            let infos = sys::rd_kafka_TopicDescription_partitions(d, &mut partitions);
            let mut replication_factor = 0usize;
            if let Some(&first) = array(infos, partitions).first() {
                sys::rd_kafka_TopicPartitionInfo_replicas(first, &mut replication_factor);
            }
            found.push((
                name.clone(),
                Some(TopicDescription {
                    name,
                    topic_id,
                    partitions,
                    replication_factor,
                }),
            ));
        }
        Ok(names
            .iter()
            .map(|n| {
                found
                    .iter()
                    .find(|(name, _)| name == n)
                    .and_then(|(_, d)| d.clone())
            })
            .collect())
    }
}
