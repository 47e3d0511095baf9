//! Test seam: what the integration tests (tests/it) need to set up failed-task tables,
//! without reaching into `source::table`'s internals. Not part of dlq's interface.

pub use crate::rabbit::codec::properties_to_typed_json;
pub use crate::source::table::testing::{Db, NewRow};
pub use crate::source::table::url::Dialect;
