//! ACLs: describe, create, delete.

use std::ffi::c_char;
use std::fmt;
use std::ptr::NonNull;
use std::time::Duration;

use rdkafka::client::{Client, ClientContext};
use rdkafka_sys as sys;
use serde::{Deserialize, Serialize};

use super::AdminError;
use super::ffi::{Options, Queue, array, c_string, cstr, error_of};

/// Resource kinds ACLs apply to.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    /// Any (filters only).
    Any,
    /// A topic.
    Topic,
    /// A consumer group.
    Group,
    /// The cluster.
    Cluster,
    /// A transactional ID.
    TransactionalId,
}

/// How the resource name matches.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PatternType {
    /// Any (filters only).
    Any,
    /// Filters: every binding that would apply to the name.
    Match,
    /// The exact name (`*` for all).
    Literal,
    /// A name prefix.
    Prefixed,
}

/// ACL operations.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// Any (filters only).
    Any,
    /// Every operation.
    All,
    /// Read.
    Read,
    /// Write.
    Write,
    /// Create.
    Create,
    /// Delete.
    Delete,
    /// Alter.
    Alter,
    /// Describe.
    Describe,
    /// Cluster action.
    ClusterAction,
    /// Describe configs.
    DescribeConfigs,
    /// Alter configs.
    AlterConfigs,
    /// Idempotent write.
    IdempotentWrite,
}

/// Allow or deny.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Permission {
    /// Any (filters only).
    Any,
    /// Deny.
    Deny,
    /// Allow.
    Allow,
}

/// An ACL binding (or, with `Any`/`Match` values and empty strings, a filter).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct AclBinding {
    /// Resource kind.
    pub resource_type: ResourceType,
    /// Resource name (`kafka-cluster` for the cluster).
    pub name: String,
    /// Pattern type.
    pub pattern: PatternType,
    /// Principal, e.g. `User:app`.
    pub principal: String,
    /// Host, `*` for any.
    pub host: String,
    /// Operation.
    pub operation: Operation,
    /// Permission.
    pub permission: Permission,
}

impl fmt::Display for AclBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} {} {:?} on {:?}:{}({:?}) from {}",
            self.permission,
            self.principal,
            self.operation,
            self.resource_type,
            self.name,
            self.pattern,
            self.host
        )
    }
}

fn restype(r: ResourceType) -> sys::rd_kafka_ResourceType_t {
    use sys::rd_kafka_ResourceType_t::*;
    match r {
        ResourceType::Any => RD_KAFKA_RESOURCE_ANY,
        ResourceType::Topic => RD_KAFKA_RESOURCE_TOPIC,
        ResourceType::Group => RD_KAFKA_RESOURCE_GROUP,
        ResourceType::Cluster => RD_KAFKA_RESOURCE_BROKER,
        ResourceType::TransactionalId => RD_KAFKA_RESOURCE_TRANSACTIONAL_ID,
    }
}

fn from_restype(r: sys::rd_kafka_ResourceType_t) -> Option<ResourceType> {
    use sys::rd_kafka_ResourceType_t::*;
    Some(match r {
        RD_KAFKA_RESOURCE_TOPIC => ResourceType::Topic,
        RD_KAFKA_RESOURCE_GROUP => ResourceType::Group,
        RD_KAFKA_RESOURCE_BROKER => ResourceType::Cluster,
        RD_KAFKA_RESOURCE_TRANSACTIONAL_ID => ResourceType::TransactionalId,
        _ => return None,
    })
}

fn pattern(p: PatternType) -> sys::rd_kafka_ResourcePatternType_t {
    use sys::rd_kafka_ResourcePatternType_t::*;
    match p {
        PatternType::Any => RD_KAFKA_RESOURCE_PATTERN_ANY,
        PatternType::Match => RD_KAFKA_RESOURCE_PATTERN_MATCH,
        PatternType::Literal => RD_KAFKA_RESOURCE_PATTERN_LITERAL,
        PatternType::Prefixed => RD_KAFKA_RESOURCE_PATTERN_PREFIXED,
    }
}

fn from_pattern(p: sys::rd_kafka_ResourcePatternType_t) -> Option<PatternType> {
    use sys::rd_kafka_ResourcePatternType_t::*;
    Some(match p {
        RD_KAFKA_RESOURCE_PATTERN_LITERAL => PatternType::Literal,
        RD_KAFKA_RESOURCE_PATTERN_PREFIXED => PatternType::Prefixed,
        _ => return None,
    })
}

const OPERATIONS: [(Operation, sys::rd_kafka_AclOperation_t); 12] = {
    use sys::rd_kafka_AclOperation_t::*;
    [
        (Operation::Any, RD_KAFKA_ACL_OPERATION_ANY),
        (Operation::All, RD_KAFKA_ACL_OPERATION_ALL),
        (Operation::Read, RD_KAFKA_ACL_OPERATION_READ),
        (Operation::Write, RD_KAFKA_ACL_OPERATION_WRITE),
        (Operation::Create, RD_KAFKA_ACL_OPERATION_CREATE),
        (Operation::Delete, RD_KAFKA_ACL_OPERATION_DELETE),
        (Operation::Alter, RD_KAFKA_ACL_OPERATION_ALTER),
        (Operation::Describe, RD_KAFKA_ACL_OPERATION_DESCRIBE),
        (
            Operation::ClusterAction,
            RD_KAFKA_ACL_OPERATION_CLUSTER_ACTION,
        ),
        (
            Operation::DescribeConfigs,
            RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS,
        ),
        (
            Operation::AlterConfigs,
            RD_KAFKA_ACL_OPERATION_ALTER_CONFIGS,
        ),
        (
            Operation::IdempotentWrite,
            RD_KAFKA_ACL_OPERATION_IDEMPOTENT_WRITE,
        ),
    ]
};

fn operation(o: Operation) -> sys::rd_kafka_AclOperation_t {
    OPERATIONS
        .iter()
        .find(|(op, _)| *op == o)
        .map(|(_, c)| *c)
        .expect("every operation is mapped")
}

fn from_operation(o: sys::rd_kafka_AclOperation_t) -> Option<Operation> {
    OPERATIONS.iter().find(|(_, c)| *c == o).map(|(op, _)| *op)
}

fn permission(p: Permission) -> sys::rd_kafka_AclPermissionType_t {
    use sys::rd_kafka_AclPermissionType_t::*;
    match p {
        Permission::Any => RD_KAFKA_ACL_PERMISSION_TYPE_ANY,
        Permission::Deny => RD_KAFKA_ACL_PERMISSION_TYPE_DENY,
        Permission::Allow => RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW,
    }
}

fn from_permission(p: sys::rd_kafka_AclPermissionType_t) -> Option<Permission> {
    use sys::rd_kafka_AclPermissionType_t::*;
    Some(match p {
        RD_KAFKA_ACL_PERMISSION_TYPE_DENY => Permission::Deny,
        RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW => Permission::Allow,
        _ => return None,
    })
}

/// An owned rd_kafka_AclBinding_t (binding or filter).
struct NativeBinding(NonNull<sys::rd_kafka_AclBinding_t>);

impl NativeBinding {
    fn new(b: &AclBinding, filter: bool) -> Result<NativeBinding, AdminError> {
        let name = (!(filter && b.name.is_empty()))
            .then(|| c_string(&b.name))
            .transpose()?;
        let principal = (!(filter && b.principal.is_empty()))
            .then(|| c_string(&b.principal))
            .transpose()?;
        let host = (!(filter && b.host.is_empty()))
            .then(|| c_string(&b.host))
            .transpose()?;
        let ptr =
            |c: &Option<std::ffi::CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        let mut errstr = [0 as c_char; 512];
        // SAFETY: strings live across the call (librdkafka copies them); errstr is writable.
        let raw = unsafe {
            let f = if filter {
                sys::rd_kafka_AclBindingFilter_new
            } else {
                sys::rd_kafka_AclBinding_new
            };
            f(
                restype(b.resource_type),
                ptr(&name),
                pattern(b.pattern),
                ptr(&principal),
                ptr(&host),
                operation(b.operation),
                permission(b.permission),
                errstr.as_mut_ptr(),
                errstr.len(),
            )
        };
        // SAFETY: librdkafka NUL-terminates errstr.
        NonNull::new(raw)
            .map(NativeBinding)
            .ok_or_else(|| AdminError::InvalidArgument(unsafe { cstr(errstr.as_ptr()) }))
    }
}

impl Drop for NativeBinding {
    fn drop(&mut self) {
        // SAFETY: we own the binding.
        unsafe { sys::rd_kafka_AclBinding_destroy(self.0.as_ptr()) }
    }
}

/// Reads a binding owned by a result.
///
/// # Safety
/// `b` must be a valid binding.
unsafe fn read_binding(b: *const sys::rd_kafka_AclBinding_t) -> Option<AclBinding> {
    // SAFETY: guaranteed by the caller; strings are copied.
    unsafe {
        Some(AclBinding {
            resource_type: from_restype(sys::rd_kafka_AclBinding_restype(b))?,
            name: cstr(sys::rd_kafka_AclBinding_name(b)),
            pattern: from_pattern(sys::rd_kafka_AclBinding_resource_pattern_type(b))?,
            principal: cstr(sys::rd_kafka_AclBinding_principal(b)),
            host: cstr(sys::rd_kafka_AclBinding_host(b)),
            operation: from_operation(sys::rd_kafka_AclBinding_operation(b))?,
            permission: from_permission(sys::rd_kafka_AclBinding_permission_type(b))?,
        })
    }
}

/// Bindings matching `filter` (use `Any`/`Match` and empty strings as wildcards).
pub fn describe_acls<C: ClientContext>(
    client: &Client<C>,
    filter: &AclBinding,
    timeout: Duration,
) -> Result<Vec<AclBinding>, AdminError> {
    let native = NativeBinding::new(filter, true)?;
    let queue = Queue::new(client);
    let options = Options::new(
        client,
        sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBEACLS,
        timeout,
    )?;
    // SAFETY: all handles are live; librdkafka copies the filter.
    unsafe {
        sys::rd_kafka_DescribeAcls(
            client.native_ptr(),
            native.0.as_ptr(),
            options.ptr(),
            queue.ptr(),
        )
    };
    let event = queue.poll(timeout + Duration::from_secs(5))?;
    event.check()?;
    // SAFETY: results are owned by `event`, alive in this block.
    unsafe {
        let result = sys::rd_kafka_event_DescribeAcls_result(event.ptr());
        if result.is_null() {
            return Err(AdminError::Unsupported(
                "DescribeAcls result missing".into(),
            ));
        }
        let mut n = 0;
        let bindings = array(sys::rd_kafka_DescribeAcls_result_acls(result, &mut n), n);
        Ok(bindings.iter().filter_map(|b| read_binding(*b)).collect())
    }
}

/// Creates bindings; fails on the first per-binding error.
pub fn create_acls<C: ClientContext>(
    client: &Client<C>,
    bindings: &[AclBinding],
    timeout: Duration,
) -> Result<(), AdminError> {
    if bindings.is_empty() {
        return Ok(());
    }
    let natives = bindings
        .iter()
        .map(|b| NativeBinding::new(b, false))
        .collect::<Result<Vec<_>, _>>()?;
    let mut ptrs: Vec<*mut sys::rd_kafka_AclBinding_t> =
        natives.iter().map(|n| n.0.as_ptr()).collect();
    let queue = Queue::new(client);
    let options = Options::new(
        client,
        sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_CREATEACLS,
        timeout,
    )?;
    // SAFETY: handles live; librdkafka copies the bindings.
    unsafe {
        sys::rd_kafka_CreateAcls(
            client.native_ptr(),
            ptrs.as_mut_ptr(),
            ptrs.len(),
            options.ptr(),
            queue.ptr(),
        )
    };
    let event = queue.poll(timeout + Duration::from_secs(5))?;
    event.check()?;
    // SAFETY: results owned by `event`.
    unsafe {
        let result = sys::rd_kafka_event_CreateAcls_result(event.ptr());
        let mut n = 0;
        for r in array(sys::rd_kafka_CreateAcls_result_acls(result, &mut n), n) {
            if let Some((code, message)) = error_of(sys::rd_kafka_acl_result_error(*r)) {
                return Err(AdminError::Kafka { code, message });
            }
        }
    }
    Ok(())
}

/// Deletes bindings matching the filters; returns the deleted bindings.
pub fn delete_acls<C: ClientContext>(
    client: &Client<C>,
    filters: &[AclBinding],
    timeout: Duration,
) -> Result<Vec<AclBinding>, AdminError> {
    if filters.is_empty() {
        return Ok(Vec::new());
    }
    let natives = filters
        .iter()
        .map(|b| NativeBinding::new(b, true))
        .collect::<Result<Vec<_>, _>>()?;
    let mut ptrs: Vec<*mut sys::rd_kafka_AclBinding_t> =
        natives.iter().map(|n| n.0.as_ptr()).collect();
    let queue = Queue::new(client);
    let options = Options::new(
        client,
        sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DELETEACLS,
        timeout,
    )?;
    // SAFETY: handles live; librdkafka copies the filters.
    unsafe {
        sys::rd_kafka_DeleteAcls(
            client.native_ptr(),
            ptrs.as_mut_ptr(),
            ptrs.len(),
            options.ptr(),
            queue.ptr(),
        )
    };
    let event = queue.poll(timeout + Duration::from_secs(5))?;
    event.check()?;
    let mut deleted = Vec::new();
    // SAFETY: results owned by `event`.
    unsafe {
        let result = sys::rd_kafka_event_DeleteAcls_result(event.ptr());
        let mut n = 0;
        for r in array(sys::rd_kafka_DeleteAcls_result_responses(result, &mut n), n) {
            if let Some((code, message)) =
                error_of(sys::rd_kafka_DeleteAcls_result_response_error(*r))
            {
                return Err(AdminError::Kafka { code, message });
            }
            let mut m = 0;
            for b in array(
                sys::rd_kafka_DeleteAcls_result_response_matching_acls(*r, &mut m),
                m,
            ) {
                deleted.extend(read_binding(*b));
            }
        }
    }
    Ok(deleted)
}
