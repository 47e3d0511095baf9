//! Row decoding: one record row (in `record_columns` order) into a `DeadLetter`, the same
//! code for every database.

use super::pool::scrubbed;
use super::schema::{IdKind, Layout, TimeKind};
use crate::model::{DeadLetter, RecordId, SourceKind};
use anyhow::{Result, anyhow};
use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
use sqlx::{ColumnIndex, Decode, Row, Type};

impl Layout {
    /// Display name for records' `location`.
    pub(super) fn location(&self) -> String {
        self.name.to_string()
    }

    /// Decodes one record row.
    pub(super) fn decode<'r, R>(&self, row: &'r R) -> Result<DeadLetter>
    where
        R: Row,
        usize: ColumnIndex<R>,
        i64: Decode<'r, R::Database> + Type<R::Database>,
        String: Decode<'r, R::Database> + Type<R::Database>,
        bool: Decode<'r, R::Database> + Type<R::Database>,
        Option<String>: Decode<'r, R::Database> + Type<R::Database>,
        Option<Vec<u8>>: Decode<'r, R::Database> + Type<R::Database>,
        Option<i64>: Decode<'r, R::Database> + Type<R::Database>,
        Option<DateTime<Utc>>: Decode<'r, R::Database> + Type<R::Database>,
        Option<NaiveDateTime>: Decode<'r, R::Database> + Type<R::Database>,
    {
        let id = match self.schema.id {
            IdKind::Int => RecordId::Int(row.try_get::<i64, _>(0).map_err(scrubbed)?),
            IdKind::Text => RecordId::Text(row.try_get::<String, _>(0).map_err(scrubbed)?),
        };
        let text = |i: usize| -> Result<Option<String>> {
            text_or_bytes(row, i).map_err(|e| {
                anyhow!(
                    "row id {id}: column {}: {}",
                    super::schema::REQUIRED_COLUMNS[i],
                    scrubbed(e)
                )
            })
        };
        let task = text(1)?;
        let args = text(2)?;
        let motivo = text(3)?;
        let mut unreadable_time = None;
        let created_at = match self.schema.created {
            TimeKind::Tz => row.try_get::<Option<DateTime<Utc>>, _>(4).ok().flatten(),
            TimeKind::Naive => row
                .try_get::<Option<NaiveDateTime>, _>(4)
                .ok()
                .flatten()
                .map(|n| Utc.from_utc_datetime(&n)),
            TimeKind::Text => match row.try_get::<Option<String>, _>(4) {
                Ok(Some(s)) => {
                    let t = crate::when::parse_stored_time(&s);
                    if t.is_none() && !s.trim().is_empty() {
                        unreadable_time = Some(s);
                    }
                    t
                }
                Ok(None) => None,
                Err(_) => row
                    .try_get::<Option<i64>, _>(4)
                    .ok()
                    .flatten()
                    .and_then(|secs| Utc.timestamp_opt(secs, 0).single()),
            },
        };
        let replayed: bool = row.try_get(5).map_err(scrubbed)?;
        let payload = match &args {
            Some(text) => crate::model::payload_from_bytes(text.as_bytes()),
            None => serde_json::Value::Null,
        };
        Ok(DeadLetter {
            source: SourceKind::Table,
            location: self.location(),
            id,
            task,
            motivo,
            created_at,
            replayed,
            payload,
            framework: None,
            retries: None,
            replay_count: 0,
            headers: None,
            death: None,
            properties: None,
            raw: None,
            payload_text: args,
            unreadable_time,
            origin: None,
        })
    }
}

/// A text column, read losslessly: Python's sqlite3 stores `bytes` as BLOB, and a text
/// column can hold bytes that are not UTF-8.
pub(super) fn text_or_bytes<'r, R: Row>(row: &'r R, i: usize) -> Result<Option<String>, sqlx::Error>
where
    usize: ColumnIndex<R>,
    Option<String>: Decode<'r, R::Database> + Type<R::Database>,
    Option<Vec<u8>>: Decode<'r, R::Database> + Type<R::Database>,
{
    match row.try_get::<Option<String>, _>(i) {
        Ok(t) => Ok(t),
        Err(_) => row
            .try_get::<Option<Vec<u8>>, _>(i)
            .map(|b| b.map(|b| escape_bytes(&b))),
    }
}

/// Bytes as text: valid UTF-8 as it is, every other byte as `\xNN` (lossless, and shown
/// escaped rather than as replacement characters).
fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_escaped_losslessly() {
        assert_eq!(escape_bytes(b"caf\xc3\xa9 \xff\x00ok"), "café \\xff\u{0}ok");
    }
}
