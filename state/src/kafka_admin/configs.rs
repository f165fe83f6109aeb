//! IncrementalAlterConfigs on topics.

use std::time::Duration;

use rdkafka::client::{Client, ClientContext};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka_sys as sys;

use super::AdminError;
use super::ffi::{Options, Queue, array, c_string, cstr, error_of};

/// One incremental change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOp {
    /// Set `name` to `value`.
    Set(String, String),
    /// Remove the dynamic value of `name`.
    Delete(String),
}

/// Applies incremental config changes to a topic.
pub fn alter_topic_configs<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    ops: &[ConfigOp],
    timeout: Duration,
) -> Result<(), AdminError> {
    if ops.is_empty() {
        return Ok(());
    }
    let name = c_string(topic)?;
    // SAFETY: `resource` is owned here and destroyed at the end; librdkafka copies strings.
    let resource = unsafe {
        sys::rd_kafka_ConfigResource_new(
            sys::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC,
            name.as_ptr(),
        )
    };
    if resource.is_null() {
        return Err(AdminError::InvalidArgument(format!(
            "config resource for {topic}"
        )));
    }
    struct Owned(*mut sys::rd_kafka_ConfigResource_t);
    impl Drop for Owned {
        fn drop(&mut self) {
            // SAFETY: we own the resource.
            unsafe { sys::rd_kafka_ConfigResource_destroy(self.0) }
        }
    }
    let owned = Owned(resource);
    for op in ops {
        let (key, value, kind) = match op {
            ConfigOp::Set(k, v) => (
                c_string(k)?,
                Some(c_string(v)?),
                sys::rd_kafka_AlterConfigOpType_t::RD_KAFKA_ALTER_CONFIG_OP_TYPE_SET,
            ),
            ConfigOp::Delete(k) => (
                c_string(k)?,
                None,
                sys::rd_kafka_AlterConfigOpType_t::RD_KAFKA_ALTER_CONFIG_OP_TYPE_DELETE,
            ),
        };
        // SAFETY: resource and strings live; the returned error (if any) is destroyed by us.
        unsafe {
            let err = sys::rd_kafka_ConfigResource_add_incremental_config(
                owned.0,
                key.as_ptr(),
                kind,
                value.as_ref().map_or(std::ptr::null(), |v| v.as_ptr()),
            );
            if !err.is_null() {
                let e = error_of(err);
                sys::rd_kafka_error_destroy(err);
                let (code, message) =
                    e.unwrap_or((RDKafkaErrorCode::InvalidConfig, "invalid config".into()));
                return Err(AdminError::Kafka { code, message });
            }
        }
    }
    let queue = Queue::new(client);
    let options = Options::new(
        client,
        sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_INCREMENTALALTERCONFIGS,
        timeout,
    )?;
    let mut resources = [owned.0];
    // SAFETY: handles live; librdkafka copies the resources.
    unsafe {
        sys::rd_kafka_IncrementalAlterConfigs(
            client.native_ptr(),
            resources.as_mut_ptr(),
            1,
            options.ptr(),
            queue.ptr(),
        )
    };
    let event = queue.poll(timeout + Duration::from_secs(5))?;
    event.check()?;
    // SAFETY: results owned by `event`.
    unsafe {
        let result = sys::rd_kafka_event_IncrementalAlterConfigs_result(event.ptr());
        let mut n = 0;
        for r in array(
            sys::rd_kafka_IncrementalAlterConfigs_result_resources(result, &mut n),
            n,
        ) {
            let code = sys::rd_kafka_ConfigResource_error(*r);
            if code != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                return Err(AdminError::Kafka {
                    code: RDKafkaErrorCode::from(code),
                    message: format!(
                        "topic {topic}: {}",
                        cstr(sys::rd_kafka_ConfigResource_error_string(*r))
                    ),
                });
            }
        }
    }
    Ok(())
}
