//! Consumer-group offsets through the admin API (ListConsumerGroupOffsets and
//! AlterConsumerGroupOffsets): read and written on the group coordinator by the client at hand,
//! without joining the group or creating a consumer per group.

use std::time::Duration;

use rdkafka::TopicPartitionList;
use rdkafka::client::{Client, ClientContext};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka_sys as sys;

use super::AdminError;
use super::ffi::{Event, Options, Queue, array, c_string, cstr, error_of};

/// One partition of a group's offsets as the coordinator answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffset {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The committed offset (None: the group has committed none for the partition).
    pub offset: Option<i64>,
    /// The partition's own error, if any.
    pub error: Option<(RDKafkaErrorCode, String)>,
}

/// The committed offsets of `group` on `partitions` (the offsets in `partitions` are ignored;
/// `None`: every partition the group committed — librdkafka matches each answered partition
/// against the asked list one by one, so asking thousands of partitions per group is quadratic).
pub fn list_group_offsets<C: ClientContext>(
    client: &Client<C>,
    group: &str,
    partitions: Option<&TopicPartitionList>,
    timeout: Duration,
) -> Result<Vec<GroupOffset>, AdminError> {
    let name = c_string(group)?;
    let list = partitions.map_or(std::ptr::null(), |p| p.ptr().cast_const());
    // SAFETY: group and list live for the call; librdkafka copies both into the request (a
    // null list: every partition the group committed).
    let request = unsafe { sys::rd_kafka_ListConsumerGroupOffsets_new(name.as_ptr(), list) };
    if request.is_null() {
        return Err(AdminError::InvalidArgument(format!(
            "offsets request for group {group}"
        )));
    }
    let queue = Queue::new(client);
    let options = match Options::new(
        client,
        sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS,
        timeout,
    ) {
        Ok(o) => o,
        Err(e) => {
            // SAFETY: the request is ours until handed to librdkafka.
            unsafe { sys::rd_kafka_ListConsumerGroupOffsets_destroy(request) };
            return Err(e);
        }
    };
    let mut requests = [request];
    // SAFETY: handles live; librdkafka copies the request, which we destroy right after.
    unsafe {
        sys::rd_kafka_ListConsumerGroupOffsets(
            client.native_ptr(),
            requests.as_mut_ptr(),
            1,
            options.ptr(),
            queue.ptr(),
        );
        sys::rd_kafka_ListConsumerGroupOffsets_destroy(request);
    }
    let event = queue.poll(timeout + Duration::from_secs(5))?;
    event.check()?;
    // SAFETY: the result and its groups are owned by `event`, which outlives this block.
    unsafe {
        let result = sys::rd_kafka_event_ListConsumerGroupOffsets_result(event.ptr());
        one_group(&event, group, || {
            let mut n = 0;
            array(
                sys::rd_kafka_ListConsumerGroupOffsets_result_groups(result, &mut n),
                n,
            )
            .to_vec()
        })
    }
}

/// Sets the committed offsets of `group` to those in `offsets` (the group must have no active
/// members; the coordinator refuses otherwise). Fails naming the first partition refused.
pub fn alter_group_offsets<C: ClientContext>(
    client: &Client<C>,
    group: &str,
    offsets: &TopicPartitionList,
    timeout: Duration,
) -> Result<(), AdminError> {
    let name = c_string(group)?;
    // SAFETY: group and list live for the call; librdkafka copies both into the request.
    let request =
        unsafe { sys::rd_kafka_AlterConsumerGroupOffsets_new(name.as_ptr(), offsets.ptr()) };
    if request.is_null() {
        return Err(AdminError::InvalidArgument(format!(
            "offsets change for group {group}"
        )));
    }
    let queue = Queue::new(client);
    let options = match Options::new(
        client,
        sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_ALTERCONSUMERGROUPOFFSETS,
        timeout,
    ) {
        Ok(o) => o,
        Err(e) => {
            // SAFETY: the request is ours until handed to librdkafka.
            unsafe { sys::rd_kafka_AlterConsumerGroupOffsets_destroy(request) };
            return Err(e);
        }
    };
    let mut requests = [request];
    // SAFETY: handles live; librdkafka copies the request, which we destroy right after.
    unsafe {
        sys::rd_kafka_AlterConsumerGroupOffsets(
            client.native_ptr(),
            requests.as_mut_ptr(),
            1,
            options.ptr(),
            queue.ptr(),
        );
        sys::rd_kafka_AlterConsumerGroupOffsets_destroy(request);
    }
    let event = queue.poll(timeout + Duration::from_secs(5))?;
    event.check()?;
    // SAFETY: the result and its groups are owned by `event`, which outlives this block.
    let partitions = unsafe {
        let result = sys::rd_kafka_event_AlterConsumerGroupOffsets_result(event.ptr());
        one_group(&event, group, || {
            let mut n = 0;
            array(
                sys::rd_kafka_AlterConsumerGroupOffsets_result_groups(result, &mut n),
                n,
            )
            .to_vec()
        })?
    };
    match partitions
        .into_iter()
        .find_map(|p| p.error.map(|e| (p.topic, p.partition, e)))
    {
        None => Ok(()),
        Some((topic, partition, (code, message))) => Err(AdminError::Kafka {
            code,
            message: format!("{topic}[{partition}]: {message}"),
        }),
    }
}

/// The partitions of the one group result of an offsets call, or its error.
///
/// # Safety
/// `groups` must return group results owned by `event`.
unsafe fn one_group(
    event: &Event,
    group: &str,
    groups: impl FnOnce() -> Vec<*const sys::rd_kafka_group_result_t>,
) -> Result<Vec<GroupOffset>, AdminError> {
    let _ = event;
    let groups = groups();
    let Some(&g) = groups.first() else {
        return Err(AdminError::Kafka {
            code: RDKafkaErrorCode::Fail,
            message: format!("no result for group {group}"),
        });
    };
    // SAFETY: `g` is a live group result owned by the event.
    unsafe {
        if let Some((code, message)) = error_of(sys::rd_kafka_group_result_error(g)) {
            return Err(AdminError::Kafka { code, message });
        }
        Ok(partitions_of(sys::rd_kafka_group_result_partitions(g)))
    }
}

/// Copies a C partition list.
///
/// # Safety
/// `list` must be null or a live partition list.
unsafe fn partitions_of(list: *const sys::rd_kafka_topic_partition_list_t) -> Vec<GroupOffset> {
    if list.is_null() {
        return Vec::new();
    }
    // SAFETY: guaranteed by the caller; `elems` holds `cnt` elements.
    unsafe {
        let list = &*list;
        let count = usize::try_from(list.cnt).unwrap_or(0);
        if list.elems.is_null() || count == 0 {
            return Vec::new();
        }
        std::slice::from_raw_parts(list.elems, count)
            .iter()
            .map(|e| GroupOffset {
                topic: cstr(e.topic),
                partition: e.partition,
                offset: (e.offset >= 0).then_some(e.offset),
                error: (e.err != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR).then(|| {
                    (
                        RDKafkaErrorCode::from(e.err),
                        format!("{}", RDKafkaErrorCode::from(e.err)),
                    )
                }),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_list_is_read_with_missing_offsets_and_errors() {
        let mut list = TopicPartitionList::new();
        list.add_partition_offset("orders", 0, rdkafka::Offset::Offset(42))
            .unwrap();
        // No committed offset: librdkafka's INVALID (-1001).
        list.add_partition("orders", 1);
        list.add_partition_offset("audit", 3, rdkafka::Offset::Offset(0))
            .unwrap();
        // SAFETY: the list is live; elems holds cnt elements.
        unsafe {
            let raw = &mut *list.ptr();
            let elems = std::slice::from_raw_parts_mut(raw.elems, raw.cnt as usize);
            elems[2].err = sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED;
        }
        // SAFETY: as above.
        let read = unsafe { partitions_of(list.ptr()) };
        assert_eq!(read.len(), 3);
        assert_eq!(
            (
                read[0].topic.as_str(),
                read[0].partition,
                read[0].offset,
                &read[0].error
            ),
            ("orders", 0, Some(42), &None)
        );
        assert_eq!(read[1].offset, None, "no committed offset");
        assert_eq!(
            read[2].error.as_ref().map(|e| e.0),
            Some(RDKafkaErrorCode::GroupAuthorizationFailed)
        );
        assert_eq!(read[2].offset, Some(0));
        // SAFETY: null is allowed.
        assert!(unsafe { partitions_of(std::ptr::null()) }.is_empty());
    }
}
