//! Reads from the controllers' watch caches (reflector stores) shared with reconciles: an
//! object the cache holds costs no API request.

use std::sync::OnceLock;

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};

/// Object `name` of `namespace` from `store`, when the store is shared, has its initial list and
/// holds the object; None otherwise (the caller reads it from the API server).
pub fn cached<K>(store: &OnceLock<Store<K>>, namespace: &str, name: &str) -> Option<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    use futures::FutureExt;
    let store = store.get()?;
    store.wait_until_ready().now_or_never()?.ok()?;
    store
        .get(&ObjectRef::new(name).within(namespace))
        .map(|o| o.as_ref().clone())
}
