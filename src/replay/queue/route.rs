//! Routes: where a replayed message goes (an exchange and a routing key), how that is
//! chosen and how it reads in a plan. Pure: it touches neither the broker nor the DLQs.

use crate::rabbit::publish::Outgoing;
use crate::replay::Target;
use crate::replay::requeue::Refusal;
use std::collections::HashMap;

/// An exchange and a routing key; the empty exchange is the default one, which reaches
/// exactly the queue the routing key names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Route {
    pub(crate) exchange: String,
    pub(crate) routing_key: String,
}

impl Route {
    /// The default exchange to `queue`.
    pub(crate) fn to_queue(queue: &str) -> Route {
        Route {
            exchange: String::new(),
            routing_key: queue.to_string(),
        }
    }

    pub(crate) fn of_target(target: &Target) -> Route {
        let (exchange, routing_key) = target.route();
        Route {
            exchange,
            routing_key,
        }
    }

    /// The queue it reaches through the default exchange; `None` through a named one
    /// (which queues that reaches is the broker's business).
    pub(crate) fn queue(&self) -> Option<&str> {
        self.exchange
            .is_empty()
            .then_some(self.routing_key.as_str())
    }

    /// How the plan names it.
    pub(crate) fn describe(&self) -> String {
        match self.queue() {
            Some(q) => format!("queue {q}"),
            None => format!("exchange {} / {}", self.exchange, self.routing_key),
        }
    }

    /// One message to publish along it.
    pub(crate) fn outgoing(self, body: Vec<u8>, properties: lapin::BasicProperties) -> Outgoing {
        Outgoing {
            exchange: self.exchange,
            routing_key: self.routing_key,
            body,
            properties,
        }
    }
}

/// Routes of held messages, each stored once: a held message keeps a `u32` instead.
#[derive(Default)]
pub(crate) struct Routes {
    list: Vec<Route>,
    index: HashMap<Route, u32>,
}

impl Routes {
    pub(crate) fn intern(&mut self, route: Route) -> u32 {
        if let Some(&i) = self.index.get(&route) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(route.clone());
        self.index.insert(route, i);
        i
    }

    pub(crate) fn get(&self, i: u32) -> &Route {
        &self.list[i as usize]
    }
}

/// Where a message goes: the explicit target, else the default exchange to its origin queue.
pub(crate) fn destination(
    target: &Option<Target>,
    origin: Option<&str>,
    from: &str,
) -> Result<Route, Refusal> {
    match target {
        Some(t) => Ok(Route::of_target(t)),
        None => {
            let q = origin.filter(|q| !q.is_empty()).ok_or(Refusal::NoOrigin)?;
            if q == from {
                // Back into the DLQ it is read from: it would never leave.
                return Err(Refusal::NoOrigin);
            }
            Ok(Route::to_queue(q))
        }
    }
}

/// Where a message goes, unless it was replayed `max_replays` times already (the loop
/// guard, checked cheaply here; `requeue::prepare` checks it again). A missing destination
/// is refused before the loop guard.
pub(crate) fn guarded_route(
    target: &Option<Target>,
    max_replays: u32,
    origin: Option<&str>,
    from: &str,
    replays: i64,
) -> Result<Route, Refusal> {
    let route = destination(target, origin, from)?;
    if replays >= i64::from(max_replays) {
        return Err(Refusal::LoopGuard {
            count: replays,
            max: max_replays,
        });
    }
    Ok(route)
}

pub(crate) fn describe_target(target: &Option<Target>) -> String {
    match target {
        Some(t) => t.describe(),
        None => "back to the queue where a consumer last gave up on each message (its last rejected x-death entry, else its last death that was not a delay hop; default exchange)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange() -> Option<Target> {
        Some(Target::Exchange {
            exchange: "events".into(),
            routing_key: "order.created".into(),
        })
    }

    #[test]
    fn an_explicit_target_wins_over_the_origin() {
        let to = Some(Target::Queue("fixed".into()));
        let r = destination(&to, Some("orders"), "orders.dlq").unwrap();
        assert_eq!(r, Route::to_queue("fixed"));
        let r = destination(&exchange(), None, "orders.dlq").unwrap();
        assert_eq!(r.exchange, "events");
        assert_eq!(r.routing_key, "order.created");
    }

    #[test]
    fn without_a_target_the_message_goes_back_to_its_origin_queue() {
        let r = destination(&None, Some("orders"), "orders.dlq").unwrap();
        assert_eq!(r, Route::to_queue("orders"));
        assert_eq!(r.queue(), Some("orders"));
    }

    #[test]
    fn a_missing_or_empty_origin_is_refused() {
        assert!(matches!(
            destination(&None, None, "orders.dlq"),
            Err(Refusal::NoOrigin)
        ));
        assert!(matches!(
            destination(&None, Some(""), "orders.dlq"),
            Err(Refusal::NoOrigin)
        ));
    }

    #[test]
    fn an_origin_that_is_the_dlq_itself_is_refused() {
        assert!(matches!(
            destination(&None, Some("orders.dlq"), "orders.dlq"),
            Err(Refusal::NoOrigin)
        ));
    }

    #[test]
    fn the_loop_guard_refuses_at_max_replays() {
        let r = guarded_route(&None, 3, Some("orders"), "orders.dlq", 2).unwrap();
        assert_eq!(r, Route::to_queue("orders"));
        assert!(matches!(
            guarded_route(&None, 3, Some("orders"), "orders.dlq", 3),
            Err(Refusal::LoopGuard { count: 3, max: 3 })
        ));
        assert!(matches!(
            guarded_route(&exchange(), 0, None, "orders.dlq", 0),
            Err(Refusal::LoopGuard { count: 0, max: 0 })
        ));
    }

    #[test]
    fn no_destination_is_reported_before_the_loop_guard() {
        assert!(matches!(
            guarded_route(&None, 3, None, "orders.dlq", 9),
            Err(Refusal::NoOrigin)
        ));
    }

    #[test]
    fn descriptions() {
        assert_eq!(Route::to_queue("orders").describe(), "queue orders");
        let r = destination(&exchange(), None, "x").unwrap();
        assert_eq!(r.queue(), None);
        assert_eq!(r.describe(), "exchange events / order.created");
        assert!(describe_target(&None).starts_with("back to the queue where a consumer"));
        assert_eq!(
            describe_target(&Some(Target::Queue("fixed".into()))),
            "to queue \"fixed\" (default exchange)"
        );
    }

    #[test]
    fn routes_are_interned_once() {
        let mut routes = Routes::default();
        let a = routes.intern(Route::to_queue("a"));
        let b = routes.intern(Route::to_queue("b"));
        assert_eq!(routes.intern(Route::to_queue("a")), a);
        assert_ne!(a, b);
        assert_eq!(routes.get(b), &Route::to_queue("b"));
    }

    #[test]
    fn a_route_becomes_an_outgoing_message() {
        let out = Route::to_queue("orders").outgoing(b"{}".to_vec(), Default::default());
        assert_eq!(out.exchange, "");
        assert_eq!(out.routing_key, "orders");
        assert_eq!(out.body, b"{}");
    }
}
