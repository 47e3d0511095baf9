//! Dry-run preview: what one message would look like where it goes. Pure: it reads the
//! record and the prepared message, and touches nothing.

use super::route::Route;
use crate::model::{DeadLetter, RecordId};
use crate::output::ellipsize;
use serde_json::Value;

/// What a dry run shows for one message.
#[derive(serde::Serialize)]
pub(crate) struct MovePreview {
    id: RecordId,
    from: String,
    exchange: String,
    routing_key: String,
    properties: Value,
    headers: Option<Value>,
    payload: Box<serde_json::value::RawValue>,
    /// Times dlq replayed it before this run.
    #[serde(skip)]
    replays: i64,
}

impl MovePreview {
    pub(crate) fn new(
        rec: &DeadLetter,
        from: &str,
        route: &Route,
        props: &lapin::BasicProperties,
        body: &[u8],
        replays: i64,
    ) -> MovePreview {
        MovePreview {
            id: rec.id.clone(),
            from: from.to_string(),
            exchange: route.exchange.clone(),
            routing_key: route.routing_key.clone(),
            properties: crate::rabbit::codec::properties_to_json(props),
            headers: props
                .headers()
                .as_ref()
                .map(crate::rabbit::codec::table_to_json),
            payload: crate::model::exact_json(body),
            replays,
        }
    }
}

impl crate::output::Tabled for MovePreview {
    fn columns() -> &'static [&'static str] {
        &["id", "from", "to", "replays", "body"]
    }

    fn cells(&self) -> Vec<String> {
        let to = if self.exchange.is_empty() {
            self.routing_key.clone()
        } else {
            format!("{}/{}", self.exchange, self.routing_key)
        };
        vec![
            self.id.to_string(),
            self.from.clone(),
            to,
            self.replays.to_string(),
            ellipsize(self.payload.get(), 60),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SourceKind;
    use crate::output::Tabled;

    fn preview(route: &Route) -> MovePreview {
        let rec = DeadLetter::blank(SourceKind::Queue, "orders.dlq", RecordId::Int(7));
        let props = lapin::BasicProperties::default();
        MovePreview::new(&rec, "orders.dlq", route, &props, br#"{"a":1}"#, 2)
    }

    #[test]
    fn a_queue_destination_shows_as_the_queue() {
        let cells = preview(&Route::to_queue("orders")).cells();
        assert_eq!(cells, ["7", "orders.dlq", "orders", "2", r#"{"a":1}"#]);
    }

    #[test]
    fn an_exchange_destination_shows_exchange_and_key() {
        let route = Route {
            exchange: "events".into(),
            routing_key: "order.created".into(),
        };
        assert_eq!(preview(&route).cells()[2], "events/order.created");
    }
}
