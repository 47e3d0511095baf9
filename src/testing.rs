//! Test seam: what the integration tests (tests/it) need to set up failed-task tables,
//! without reaching into `source::table`'s internals. Not part of dlq's interface.

pub use crate::settings::Dialect;
pub use crate::source::table::testing::{Db, NewRow};
