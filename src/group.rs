//! Dead letters grouped by reason fingerprint, task or day, with each group's count, first
//! reason and time span: `dlq filter --group-by` and the browser's groups.

use crate::fingerprint;
use crate::model::DeadLetter;
use crate::select::Selected;
use anyhow::Result;
use chrono::{DateTime, Utc};
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupKey {
    Motivo,
    Task,
    Day,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Group {
    pub(crate) count: u64,
    /// The first record's reason, its headline.
    pub(crate) example: String,
    pub(crate) oldest: Option<DateTime<Utc>>,
    pub(crate) newest: Option<DateTime<Utc>>,
}

impl Group {
    /// Counts `rec` in, widening the time span.
    pub(crate) fn add(&mut self, rec: &DeadLetter) {
        if self.count == 0 {
            self.example = fingerprint::headline(rec.motivo.as_deref().unwrap_or("")).to_string();
        }
        self.count += 1;
        if let Some(t) = rec.created_at {
            self.widen(Some(t), Some(t));
        }
    }

    /// Counts another group in (its records, without their reasons).
    pub(crate) fn merge(&mut self, other: &Group) {
        self.count += other.count;
        self.widen(other.oldest, other.newest);
    }

    fn widen(&mut self, oldest: Option<DateTime<Utc>>, newest: Option<DateTime<Utc>>) {
        if let Some(t) = oldest {
            self.oldest = Some(self.oldest.map_or(t, |o| o.min(t)));
        }
        if let Some(t) = newest {
            self.newest = Some(self.newest.map_or(t, |o| o.max(t)));
        }
    }
}

impl GroupKey {
    fn of(self, rec: &DeadLetter) -> String {
        match self {
            GroupKey::Motivo => fingerprint::fingerprint(rec.motivo.as_deref().unwrap_or("")),
            GroupKey::Task => rec.task.clone().unwrap_or_else(|| "-".into()),
            GroupKey::Day => rec
                .created_at
                .map(|t| t.format("%Y-%m-%d").to_string())
                .unwrap_or_else(|| "-".into()),
        }
    }
}

/// The selected records by `key`.
pub(crate) async fn group(
    selected: &mut Selected<'_>,
    key: GroupKey,
) -> Result<HashMap<String, Group>> {
    let mut groups: HashMap<String, Group> = HashMap::new();
    while let Some(rec) = selected.next().await {
        let rec = rec?;
        groups.entry(key.of(&rec)).or_default().add(&rec);
    }
    Ok(groups)
}
