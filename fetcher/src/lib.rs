//! The kmirror fetcher: copies source partitions to a destination cluster at identical offsets.
