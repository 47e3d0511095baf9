//! What the browser reads: the sources overview, a source's reason groups and a page of
//! records. Every read is a reading command's read (a queue is read and given back, never
//! changed), and each one ends with the messages back in their queue before the screen
//! shows it, so an action started from that screen finds them.

use crate::endpoints::Endpoints;
use crate::group::{Group, GroupKey, group};
use crate::model::DeadLetter;
use crate::output::Printer;
use crate::select::{Selected, Selection};
use crate::source::overview::{Overview, OverviewOptions};
use crate::source::queue::Parts;
use crate::source::{self, SourceChoice};
use anyhow::Result;
use std::future::Future;
use std::pin::Pin;

/// Messages read at most for a source's groups: a million-message DLQ is grouped by its head.
pub(super) const GROUP_READ: u64 = 20_000;
/// Records read per page; the next page is read when the cursor reaches the end.
pub(super) const PAGE: u64 = 200;

/// A source as the browser names it and reads it.
#[derive(Debug, Clone)]
pub(super) struct SourceRef {
    /// `table` or `queue`.
    pub(super) kind: &'static str,
    pub(super) label: String,
    pub(super) choice: SourceChoice,
}

pub(super) enum Kind {
    Sources,
    Groups(SourceRef),
    Records {
        source: SourceRef,
        selection: Box<Selection>,
        want: u64,
    },
}

pub(super) enum Loaded {
    Sources(Result<Overview>),
    Groups(Result<Groups>),
    Records(Result<Page>),
}

pub(super) type Pending<'a> = Pin<Box<dyn Future<Output = Loaded> + 'a>>;

/// One reason group; `fingerprint` `None` is the whole source.
#[derive(Debug, Clone)]
pub(super) struct GroupRow {
    pub(super) fingerprint: Option<String>,
    pub(super) group: Group,
}

pub(super) struct Groups {
    pub(super) rows: Vec<GroupRow>,
    /// Read fewer than the source holds (`GROUP_READ`).
    pub(super) capped: bool,
}

pub(super) struct Page {
    pub(super) rows: Vec<DeadLetter>,
    pub(super) more: bool,
}

pub(super) fn start<'a>(
    endpoints: &'a Endpoints,
    printer: &'a Printer,
    overview: &'a OverviewOptions,
    kind: Kind,
) -> Pending<'a> {
    match kind {
        Kind::Sources => {
            Box::pin(
                async move { Loaded::Sources(source::overview::gather(endpoints, overview).await) },
            )
        }
        Kind::Groups(src) => {
            Box::pin(async move { Loaded::Groups(groups(endpoints, printer, &src.choice).await) })
        }
        Kind::Records {
            source,
            selection,
            want,
        } => Box::pin(async move {
            Loaded::Records(page(endpoints, printer, &source.choice, *selection, want).await)
        }),
    }
}

/// The source's pending dead letters by reason fingerprint, largest group first, after one
/// row for them all.
async fn groups(endpoints: &Endpoints, printer: &Printer, choice: &SourceChoice) -> Result<Groups> {
    let sel = Selection {
        limit: Some(GROUP_READ),
        ..Default::default()
    };
    let parts = Parts::for_selection(&sel);
    let rx = source::open_stream(endpoints, printer, choice, &sel, parts).await?;
    let mut selected = Selected::new(rx, &sel);
    let by = group(&mut selected, GroupKey::Motivo).await?;
    let capped = selected.has_more().await?;
    drop(selected);
    source::settle().await;
    let mut all = Group {
        example: format!("all reasons ({} groups)", by.len()),
        ..Group::default()
    };
    let mut rows: Vec<GroupRow> = by
        .into_iter()
        .map(|(fp, g)| {
            all.merge(&g);
            GroupRow {
                fingerprint: Some(fp),
                group: g,
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        (b.group.count.cmp(&a.group.count)).then(a.fingerprint.cmp(&b.fingerprint))
    });
    rows.insert(
        0,
        GroupRow {
            fingerprint: None,
            group: all,
        },
    );
    Ok(Groups { rows, capped })
}

/// The first `want` records of a selection (`want` grows a page at a time), and whether
/// more match.
async fn page(
    endpoints: &Endpoints,
    printer: &Printer,
    choice: &SourceChoice,
    mut selection: Selection,
    want: u64,
) -> Result<Page> {
    selection.limit = Some(want);
    let rx = source::open_stream(endpoints, printer, choice, &selection, Parts::ALL).await?;
    let mut selected = Selected::new(rx, &selection);
    let mut rows = Vec::new();
    while let Some(rec) = selected.next().await {
        rows.push(rec?);
    }
    let more = selected.has_more().await?;
    drop(selected);
    source::settle().await;
    Ok(Page { rows, more })
}
