//! CreateTopics with the broker's error message (rdkafka's Rust API returns only the code).

use std::time::Duration;

use rdkafka::client::{Client, ClientContext};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka_sys as sys;

use super::AdminError;
use super::ffi::{Options, Queue, array, c_string, cstr};

/// Creates `topic` with `partitions`, `replication_factor` replicas (`None`: the cluster's
/// `default.replication.factor`) and `configs`, the broker waiting up to `timeout` for the
/// creation. A refusal is [`AdminError::Kafka`] with the broker's message (e.g.
/// `TopicAlreadyExists`, `InvalidReplicationFactor`, or `InvalidConfig` with `Unknown topic
/// config name: message.format.version`).
pub fn create_topic<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    partitions: i32,
    replication_factor: Option<i32>,
    configs: &[(&str, &str)],
    timeout: Duration,
) -> Result<(), AdminError> {
    let name = c_string(topic)?;
    let mut errstr = [0 as std::ffi::c_char; 512];
    // SAFETY: the name is copied; errstr is a writable buffer of the given size.
    let new = unsafe {
        sys::rd_kafka_NewTopic_new(
            name.as_ptr(),
            partitions,
            replication_factor.unwrap_or(-1),
            errstr.as_mut_ptr(),
            errstr.len(),
        )
    };
    if new.is_null() {
        // SAFETY: librdkafka NUL-terminates errstr.
        let message = unsafe { cstr(errstr.as_ptr()) };
        return Err(AdminError::InvalidArgument(format!(
            "topic {topic}: {message}"
        )));
    }
    struct Owned(*mut sys::rd_kafka_NewTopic_t);
    impl Drop for Owned {
        fn drop(&mut self) {
            // SAFETY: we own the NewTopic.
            unsafe { sys::rd_kafka_NewTopic_destroy(self.0) }
        }
    }
    let owned = Owned(new);
    for (k, v) in configs {
        let (key, value) = (c_string(k)?, c_string(v)?);
        // SAFETY: the NewTopic lives; librdkafka copies the strings.
        let err =
            unsafe { sys::rd_kafka_NewTopic_set_config(owned.0, key.as_ptr(), value.as_ptr()) };
        if err != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(AdminError::Kafka {
                code: RDKafkaErrorCode::from(err),
                message: format!("topic {topic}: config {k}"),
            });
        }
    }
    let queue = Queue::new(client);
    let options = Options::new(
        client,
        sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_CREATETOPICS,
        timeout,
    )?;
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: options live; errstr is a writable buffer.
    unsafe {
        sys::rd_kafka_AdminOptions_set_operation_timeout(
            options.ptr(),
            ms,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
    }
    let mut topics = [owned.0];
    // SAFETY: handles live; librdkafka copies the NewTopic.
    unsafe {
        sys::rd_kafka_CreateTopics(
            client.native_ptr(),
            topics.as_mut_ptr(),
            1,
            options.ptr(),
            queue.ptr(),
        )
    };
    let event = queue.poll(timeout + Duration::from_secs(5))?;
    event.check()?;
    // SAFETY: the results are owned by `event`; strings are copied out.
    unsafe {
        let result = sys::rd_kafka_event_CreateTopics_result(event.ptr());
        if result.is_null() {
            return Err(AdminError::Unsupported(
                "CreateTopics result missing".into(),
            ));
        }
        let mut n = 0;
        for r in array(sys::rd_kafka_CreateTopics_result_topics(result, &mut n), n) {
            let code = sys::rd_kafka_topic_result_error(*r);
            if code != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                let code = RDKafkaErrorCode::from(code);
                let text = cstr(sys::rd_kafka_topic_result_error_string(*r));
                let message = if text.is_empty() {
                    format!("{code:?}")
                } else {
                    text
                };
                return Err(AdminError::Kafka { code, message });
            }
        }
    }
    Ok(())
}
