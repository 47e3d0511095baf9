//! Per-item outcomes of a bulk action (replay, archive) -> a summary and an exit code.

use crate::error::Exit;
use crate::model::RecordId;
use serde::Serialize;

/// At most this many failures/skips are listed one by one in the report (its JSON names each,
/// so a script can act on every id); all are counted. About 10 MB at most.
const LISTED: usize = 100_000;
/// Failures printed one by one on stderr; the JSON report has the rest.
pub(crate) const PRINTED: usize = 50;

#[derive(Debug, Clone, Serialize)]
pub(crate) struct ItemNote {
    pub(crate) id: RecordId,
    pub(crate) reason: String,
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct Report {
    /// What was done, e.g. "replay" or "archive".
    pub(crate) action: String,
    pub(crate) succeeded: u64,
    pub(crate) failed_count: u64,
    pub(crate) skipped_count: u64,
    pub(crate) failed: Vec<ItemNote>,
    pub(crate) skipped: Vec<ItemNote>,
    /// Why the run stopped early (connection lost, interrupted ...), if it did.
    pub(crate) stopped: Option<String>,
    /// Set once an item was counted but not listed: a reader of the JSON must know that
    /// `failed` / `skipped` are not every item.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) lists_cut: Option<String>,
    /// The run stopped because its canary failed again: running it again repeats the failure.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) canary_failed: bool,
    /// `--follow`: the task ids sent and confirmed, in order (what is followed).
    #[serde(skip)]
    pub(crate) sent_tasks: Vec<String>,
    /// `--follow`: what became of each sent task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) follow: Option<crate::replay::follow::Outcomes>,
}

impl Report {
    pub(crate) fn new(action: &str) -> Report {
        Report {
            action: action.to_string(),
            ..Default::default()
        }
    }

    pub(crate) fn success(&mut self) {
        self.succeeded += 1;
    }

    pub(crate) fn fail(&mut self, id: RecordId, reason: impl Into<String>) {
        self.failed_count += 1;
        if self.failed.len() < LISTED {
            self.failed.push(ItemNote {
                id,
                reason: reason.into(),
            });
        } else {
            self.cut();
        }
    }

    pub(crate) fn skip(&mut self, id: RecordId, reason: impl Into<String>) {
        self.skipped_count += 1;
        if self.skipped.len() < LISTED {
            self.skipped.push(ItemNote {
                id,
                reason: reason.into(),
            });
        } else {
            self.cut();
        }
    }

    fn cut(&mut self) {
        self.lists_cut.get_or_insert_with(|| {
            format!(
                "failed and skipped list at most {LISTED} items each; failed_count and skipped_count count every item"
            )
        });
    }

    /// Adds a later part of the same run (after a canary).
    pub(crate) fn absorb(&mut self, later: Report) {
        self.succeeded += later.succeeded;
        let unlisted_failed = later.failed_count.saturating_sub(later.failed.len() as u64);
        let unlisted_skipped = later
            .skipped_count
            .saturating_sub(later.skipped.len() as u64);
        for f in later.failed {
            self.fail(f.id, f.reason);
        }
        for s in later.skipped {
            self.skip(s.id, s.reason);
        }
        self.failed_count += unlisted_failed;
        self.skipped_count += unlisted_skipped;
        if unlisted_failed + unlisted_skipped > 0 {
            self.cut();
        }
        self.stopped = self.stopped.take().or(later.stopped);
        self.canary_failed |= later.canary_failed;
        self.sent_tasks.extend(later.sent_tasks);
    }

    /// 1 when the run stopped early, 3 when some items failed (or, followed, did not succeed),
    /// else 0.
    pub(crate) fn exit(&self) -> Exit {
        let unfinished = self.follow.as_ref().is_some_and(|f| !f.all_succeeded());
        if self.stopped.is_some() {
            Exit::Failure
        } else if self.failed_count > 0 || unfinished {
            Exit::Partial
        } else {
            Exit::Ok
        }
    }

    /// One line for humans and logs.
    pub(crate) fn summary(&self, verb_past: &str) -> String {
        let mut s = format!(
            "{}: {} {verb_past}, {} failed, {} skipped",
            self.action, self.succeeded, self.failed_count, self.skipped_count
        );
        if let Some(why) = &self.stopped {
            s.push_str(&format!("; STOPPED: {why}"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        let mut r = Report::new("replay");
        r.success();
        assert_eq!(r.exit(), Exit::Ok);
        r.skip(RecordId::Int(1), "already replayed");
        assert_eq!(r.exit(), Exit::Ok);
        r.fail(RecordId::Int(2), "bad args");
        assert_eq!(r.exit(), Exit::Partial);
        r.stopped = Some("broker connection lost".into());
        assert_eq!(r.exit(), Exit::Failure);
        assert_eq!(
            r.summary("replayed"),
            "replay: 1 replayed, 1 failed, 1 skipped; STOPPED: broker connection lost"
        );
    }

    #[test]
    fn every_failure_is_listed_far_past_what_stderr_prints() {
        let mut r = Report::new("replay");
        for i in 0..(PRINTED as i64 * 3) {
            r.fail(RecordId::Int(i), "outcome unknown");
        }
        assert_eq!(r.failed.len(), PRINTED * 3);
        assert!(r.lists_cut.is_none());
    }

    #[test]
    fn a_cut_list_says_so() {
        let mut r = Report::new("replay");
        for i in 0..LISTED as i64 {
            r.fail(RecordId::Int(i), "bad args");
        }
        assert!(r.lists_cut.is_none());
        let json = serde_json::to_value(&r).unwrap();
        assert!(json.get("lists_cut").is_none());
        r.fail(RecordId::Int(99), "bad args");
        assert_eq!(
            (r.failed.len(), r.failed_count),
            (LISTED, LISTED as u64 + 1)
        );
        let json = serde_json::to_value(&r).unwrap();
        assert!(
            json["lists_cut"]
                .as_str()
                .unwrap()
                .contains("at most 100000"),
            "{json}"
        );
        let mut total = Report::new("replay");
        total.absorb(r);
        assert!(total.lists_cut.is_some());
    }
}
