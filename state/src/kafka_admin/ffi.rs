//! The unsafe plumbing of admin calls rdkafka's Rust API does not offer: an event queue per
//! call, admin options with a timeout, and owned C strings. Everything unsafe in kmirror lives
//! in this module and its siblings; each block states what it relies on.

use std::ffi::{CStr, CString, c_char};
use std::ptr::NonNull;
use std::time::Duration;

use rdkafka::client::Client;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka_sys as sys;

use super::AdminError;

/// An rd_kafka_queue_t owned by us.
pub(super) struct Queue(NonNull<sys::rd_kafka_queue_t>);

impl Queue {
    pub(super) fn new<C: rdkafka::ClientContext>(client: &Client<C>) -> Queue {
        // SAFETY: native_ptr is a live rd_kafka_t for the lifetime of `client`; the queue is
        // destroyed before the client can be dropped by the caller (it borrows the client).
        let ptr = unsafe { sys::rd_kafka_queue_new(client.native_ptr()) };
        Queue(NonNull::new(ptr).expect("rd_kafka_queue_new never returns null"))
    }

    pub(super) fn ptr(&self) -> *mut sys::rd_kafka_queue_t {
        self.0.as_ptr()
    }

    /// Waits for the one result event of an admin call.
    pub(super) fn poll(&self, timeout: Duration) -> Result<Event, AdminError> {
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: the queue is live; a returned event is owned by us and destroyed by Event.
        let ev = unsafe { sys::rd_kafka_queue_poll(self.ptr(), ms) };
        NonNull::new(ev).map(Event).ok_or(AdminError::Timeout)
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // SAFETY: we own the queue.
        unsafe { sys::rd_kafka_queue_destroy(self.0.as_ptr()) }
    }
}

/// An rd_kafka_event_t owned by us; result objects borrowed from it live as long as it does.
pub(super) struct Event(NonNull<sys::rd_kafka_event_t>);

impl Event {
    pub(super) fn ptr(&self) -> *mut sys::rd_kafka_event_t {
        self.0.as_ptr()
    }

    /// The request-level error, if any.
    pub(super) fn check(&self) -> Result<(), AdminError> {
        // SAFETY: the event is live.
        let code = unsafe { sys::rd_kafka_event_error(self.ptr()) };
        if code == sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Ok(());
        }
        // SAFETY: the error string is owned by the event and valid while it lives.
        let message = unsafe { cstr(sys::rd_kafka_event_error_string(self.ptr())) };
        Err(AdminError::Kafka {
            code: RDKafkaErrorCode::from(code),
            message,
        })
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: we own the event.
        unsafe { sys::rd_kafka_event_destroy(self.0.as_ptr()) }
    }
}

/// rd_kafka_AdminOptions_t with a request timeout.
pub(super) struct Options(NonNull<sys::rd_kafka_AdminOptions_t>);

impl Options {
    pub(super) fn new<C: rdkafka::ClientContext>(
        client: &Client<C>,
        op: sys::rd_kafka_admin_op_t,
        timeout: Duration,
    ) -> Result<Options, AdminError> {
        // SAFETY: native_ptr is live; the options are destroyed by Drop.
        let ptr = unsafe { sys::rd_kafka_AdminOptions_new(client.native_ptr(), op) };
        let options =
            Options(NonNull::new(ptr).ok_or_else(|| AdminError::Unsupported(format!("{op:?}")))?);
        let mut errstr = [0 as c_char; 256];
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: options live; errstr is a writable buffer of the given size.
        let err = unsafe {
            sys::rd_kafka_AdminOptions_set_request_timeout(
                options.ptr(),
                ms,
                errstr.as_mut_ptr(),
                errstr.len(),
            )
        };
        if err != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            // SAFETY: librdkafka NUL-terminates errstr.
            let message = unsafe { cstr(errstr.as_ptr()) };
            return Err(AdminError::Kafka {
                code: RDKafkaErrorCode::from(err),
                message,
            });
        }
        Ok(options)
    }

    pub(super) fn ptr(&self) -> *mut sys::rd_kafka_AdminOptions_t {
        self.0.as_ptr()
    }
}

impl Drop for Options {
    fn drop(&mut self) {
        // SAFETY: we own the options.
        unsafe { sys::rd_kafka_AdminOptions_destroy(self.0.as_ptr()) }
    }
}

/// Copies a C string; null becomes empty.
///
/// # Safety
/// `ptr` must be null or a valid NUL-terminated string.
pub(super) unsafe fn cstr(ptr: *const c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: guaranteed by the caller.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

/// A C string for an argument; interior NULs are an invalid argument.
pub(super) fn c_string(s: &str) -> Result<CString, AdminError> {
    CString::new(s).map_err(|_| AdminError::InvalidArgument(format!("{s:?} contains a NUL byte")))
}

/// The code and message of an rd_kafka_error_t (null: no error).
///
/// # Safety
/// `err` must be null or a valid error owned by a live result.
pub(super) unsafe fn error_of(
    err: *const sys::rd_kafka_error_t,
) -> Option<(RDKafkaErrorCode, String)> {
    if err.is_null() {
        return None;
    }
    // SAFETY: guaranteed by the caller.
    let code = unsafe { sys::rd_kafka_error_code(err) };
    if code == sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        return None;
    }
    // SAFETY: as above; the string is owned by the error.
    let message = unsafe { cstr(sys::rd_kafka_error_string(err)) };
    Some((RDKafkaErrorCode::from(code), message))
}

/// Turns a C array of `count` pointers into a slice.
///
/// # Safety
/// `ptr` must be null (count 0) or point to `count` valid pointers that outlive the slice.
pub(super) unsafe fn array<'a, T>(ptr: *mut *const T, count: usize) -> &'a [*const T] {
    if ptr.is_null() || count == 0 {
        return &[];
    }
    // SAFETY: guaranteed by the caller.
    unsafe { std::slice::from_raw_parts(ptr, count) }
}
