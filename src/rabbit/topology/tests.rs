//! Unit tests of the dead-letter topology: discovery, hops, delivery limits, read verdicts.

use super::*;
use serde_json::json;

fn map(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

fn queue(name: &str, args: Value) -> ApiQueue {
    ApiQueue {
        name: name.into(),
        kind: Some("classic".into()),
        arguments: map(args),
        ..Default::default()
    }
}

fn binding(source: &str, dest: &str, key: &str) -> ApiBinding {
    ApiBinding {
        source: source.into(),
        destination: dest.into(),
        destination_type: "queue".into(),
        routing_key: key.into(),
    }
}

fn exchange(name: &str, kind: &str) -> ApiExchange {
    ApiExchange {
        name: name.into(),
        kind: kind.into(),
    }
}

#[test]
fn topic_matching() {
    assert!(topic_matches("a.*.c", "a.b.c"));
    assert!(!topic_matches("a.*.c", "a.b.b.c"));
    assert!(topic_matches("a.#", "a"));
    assert!(topic_matches("a.#", "a.b.c"));
    assert!(topic_matches("#", ""));
    assert!(topic_matches("#.dlq", "x.y.dlq"));
    assert!(!topic_matches("a.b", "a.c"));
    assert!(topic_matches("*", "x"));
    assert!(!topic_matches("*", "x.y"));
}

#[test]
fn hops_feed_work_queues_not_dlqs() {
    let with = |mut q: ApiQueue, consumers| {
        q.consumers = Some(consumers);
        q
    };
    let queues = vec![
        // Celery 5.7's delayed delivery, prefixed, into the work queue `celery` (no worker).
        with(
            queue(
                "app1_celery_delayed_0",
                json!({"x-message-ttl": 1000, "x-dead-letter-exchange": "app1_celery_delayed_delivery"}),
            ),
            0,
        ),
        with(queue("celery", json!({})), 0),
        // A TTL retry loop back into a consumed queue, and that queue's real DLQ.
        with(
            queue(
                "orders.wait",
                json!({"x-message-ttl": 5000, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders"}),
            ),
            0,
        ),
        with(
            queue(
                "orders",
                json!({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders.dlq"}),
            ),
            2,
        ),
        with(queue("orders.dlq", json!({})), 0),
        // A TTL queue expiring into an unconsumed queue: that one is a DLQ.
        with(
            queue(
                "offers",
                json!({"x-message-ttl": 5000, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "offers.expired"}),
            ),
            0,
        ),
        with(queue("offers.expired", json!({})), 0),
    ];
    let bindings = vec![binding(
        "app1_celery_delayed_delivery",
        "celery",
        "#.celery",
    )];
    let exchanges = vec![exchange("app1_celery_delayed_delivery", "topic")];
    let t = discover(
        &queues,
        &vec![Map::new(); queues.len()],
        &bindings,
        &exchanges,
    );
    let names: Vec<&str> = t.dlqs.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["offers.expired", "orders.dlq"]);
    assert_eq!(t.hops, ["app1_celery_delayed_0", "orders.wait"]);
}

#[test]
fn discovers_dlqs_and_feeders() {
    let queues = vec![
        queue(
            "matriculas.processar",
            json!({"x-dead-letter-exchange": "matriculas.dlx"}),
        ),
        queue(
            "pagamentos",
            json!({"x-dead-letter-exchange": "dlx.direct", "x-dead-letter-routing-key": "pag"}),
        ),
        queue("matriculas.dlq", json!({})),
        queue("pag.dlq", json!({})),
        queue("other.dlq", json!({})),
        queue("by.policy", json!({})),
        queue("to.missing", json!({"x-dead-letter-exchange": "nope"})),
        queue(
            "default.ex",
            json!({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "other.dlq"}),
        ),
    ];
    let mut policies = vec![Map::new(); queues.len()];
    policies[5] = map(json!({"dead-letter-exchange": "matriculas.dlx"}));
    let bindings = vec![
        binding("matriculas.dlx", "matriculas.dlq", ""),
        binding("dlx.direct", "pag.dlq", "pag"),
        binding("dlx.direct", "other.dlq", "other"),
    ];
    let exchanges = vec![
        exchange("matriculas.dlx", "fanout"),
        exchange("dlx.direct", "direct"),
    ];
    let t = discover(&queues, &policies, &bindings, &exchanges);
    assert_eq!(
        t.dlqs,
        vec![
            Dlq {
                name: "matriculas.dlq".into(),
                fed_by: vec!["by.policy".into(), "matriculas.processar".into()],
                via: vec!["matriculas.dlx".into()],
            },
            Dlq {
                name: "other.dlq".into(),
                fed_by: vec!["default.ex".into()],
                via: vec!["(default exchange)".into()],
            },
            Dlq {
                name: "pag.dlq".into(),
                fed_by: vec!["pagamentos".into()],
                via: vec!["dlx.direct".into()],
            },
        ]
    );
    assert_eq!(t.warnings.len(), 1);
    assert!(t.warnings[0].contains("to.missing"), "{:?}", t.warnings);
}

#[test]
fn argument_wins_over_policy_and_exchange_chains_are_followed() {
    let args = map(json!({"x-dead-letter-exchange": "a"}));
    let pol = map(json!({"dead-letter-exchange": "b", "dead-letter-routing-key": "k"}));
    assert_eq!(
        dead_letter_target(&args, &pol),
        Some(DeadLetterTarget {
            exchange: "a".into(),
            routing_key: Some("k".into())
        })
    );
    let queues = vec![queue("src", json!({"x-dead-letter-exchange": "e1"})), {
        let mut q = queue("dlq", json!({}));
        q.kind = Some("quorum".into());
        q
    }];
    let bindings = vec![
        ApiBinding {
            source: "e1".into(),
            destination: "e2".into(),
            destination_type: "exchange".into(),
            routing_key: "".into(),
        },
        binding("e2", "dlq", "#"),
    ];
    let exchanges = vec![exchange("e1", "fanout"), exchange("e2", "topic")];
    let t = discover(&queues, &[Map::new(), Map::new()], &bindings, &exchanges);
    assert_eq!(t.dlqs.len(), 1);
    assert_eq!(t.dlqs[0].fed_by, vec!["src".to_string()]);
}

#[test]
fn effective_policy_is_computed_when_the_api_has_none_yet() {
    let policies = vec![
        ApiPolicy {
            name: "low".into(),
            pattern: "^dl".into(),
            apply_to: "queues".into(),
            definition: map(json!({"delivery-limit": 50})),
            priority: 0,
        },
        ApiPolicy {
            name: "high".into(),
            pattern: "^dlq\\.".into(),
            apply_to: "quorum_queues".into(),
            definition: map(json!({"delivery-limit": 10, "dead-letter-exchange": "x"})),
            priority: 5,
        },
    ];
    let ops = vec![ApiPolicy {
        name: "op".into(),
        pattern: ".*".into(),
        apply_to: "queues".into(),
        definition: map(json!({"delivery-limit": 3})),
        priority: 0,
    }];
    let mut q = queue("dlq.a", json!({}));
    q.kind = Some("quorum".into());
    let mut w = Vec::new();
    let e = effective_policy(&q, &policies, &[], &mut w);
    assert_eq!(e.get("delivery-limit"), Some(&json!(10)));
    let e = effective_policy(&q, &policies, &ops, &mut w);
    assert_eq!(e.get("delivery-limit"), Some(&json!(3)));
    q.kind = Some("classic".into());
    let e = effective_policy(&q, &policies, &[], &mut w);
    assert_eq!(e.get("delivery-limit"), Some(&json!(50)));
    q.effective_policy_definition = Some(map(json!({"delivery-limit": 7})));
    let e = effective_policy(&q, &policies, &[], &mut w);
    assert_eq!(e.get("delivery-limit"), Some(&json!(7)));
    assert!(w.is_empty());
}

#[test]
fn delivery_limits_and_read_verdicts() {
    let v310 = Some(Version(3, 10, 8));
    let v41 = Some(Version(4, 1, 0));
    let v43 = Some(Version(4, 3, 0));
    let none = Map::new();
    let arg5 = map(json!({"x-delivery-limit": 5}));
    let pol3 = map(json!({"delivery-limit": 3}));
    assert_eq!(delivery_limit(&none, &none, v310), None);
    assert_eq!(delivery_limit(&none, &none, v41), Some(20));
    assert_eq!(delivery_limit(&none, &none, None), Some(20));
    assert_eq!(delivery_limit(&arg5, &none, v310), Some(5));
    assert_eq!(delivery_limit(&arg5, &pol3, v310), Some(3));
    let minus1 = map(json!({"x-delivery-limit": -1}));
    assert_eq!(delivery_limit(&minus1, &none, v41), None);
    assert_eq!(delivery_limit(&minus1, &none, v310), Some(0));
    let facts = |kind, limit, version| QueueFacts {
        kind,
        delivery_limit: limit,
        version,
        renew_blocker: None,
        consumer_timeout: None,
    };
    let close = ReadVerdict::Safe(GiveBack::Close);
    let renew = ReadVerdict::Safe(GiveBack::Renew);
    assert_eq!(
        read_verdict("q", &facts(QueueKind::Classic, None, v310), 0),
        close
    );
    assert_eq!(
        read_verdict("q", &facts(QueueKind::Quorum, None, v310), 0),
        close
    );
    // No limit on 4.0-4.2: a nack counts once, as a close does, and keeps the order.
    assert_eq!(
        read_verdict("q", &facts(QueueKind::Quorum, None, v41), 0),
        ReadVerdict::Safe(GiveBack::Nack)
    );
    assert_eq!(
        read_verdict("q", &facts(QueueKind::Quorum, None, None), 0),
        close
    );
    // Every return counts before 4.3: renewed, unless something else reads the queue.
    assert_eq!(
        read_verdict("q", &facts(QueueKind::Quorum, Some(5), v310), 0),
        renew
    );
    assert_eq!(
        read_verdict("q", &facts(QueueKind::Quorum, Some(20), v41), 0),
        renew
    );
    assert_eq!(
        read_verdict("q", &facts(QueueKind::Quorum, Some(20), None), 0),
        renew
    );
    assert!(matches!(
        read_verdict("q", &facts(QueueKind::Quorum, Some(5), v310), 2),
        ReadVerdict::Risky(m) if m.contains("delivery limit 5") && m.contains("3.10.8")
            && m.contains("2 consumer(s)")
    ));
    let mut ttl = facts(QueueKind::Quorum, Some(20), v41);
    ttl.renew_blocker = renew_blocker(&map(json!({"x-message-ttl": 1000})), &none);
    assert!(matches!(
        read_verdict("q", &ttl, 0),
        ReadVerdict::Risky(m) if m.contains("x-message-ttl")
    ));
    assert_eq!(
        renew_blocker(&none, &map(json!({"max-length": 10}))).as_deref(),
        Some("its policy sets max-length")
    );
    assert_eq!(renew_blocker(&arg5, &pol3), None);
    // 4.3 does not count a nack: every quorum queue is given back with one, limit or not.
    assert_eq!(
        read_verdict("q", &facts(QueueKind::Quorum, Some(20), v43), 3),
        ReadVerdict::Safe(GiveBack::Nack)
    );
    assert_eq!(
        read_verdict("q", &facts(QueueKind::Quorum, None, v43), 0),
        ReadVerdict::Safe(GiveBack::Nack)
    );
    assert_eq!(
        read_verdict("q", &facts(QueueKind::Classic, None, v43), 0),
        close
    );
    assert!(matches!(
        read_verdict("q", &facts(QueueKind::Unknown, None, None), 0),
        ReadVerdict::Risky(m) if m.contains("management API")
    ));
    assert_eq!(
        read_verdict("q", &facts(QueueKind::Stream, Some(1), v310), 0),
        close
    );
}

#[test]
fn versions() {
    assert_eq!(Version::parse("3.10.8"), Some(Version(3, 10, 8)));
    assert_eq!(Version::parse("4.3.0-rc.1"), Some(Version(4, 3, 0)));
    assert_eq!(Version::parse("4"), Some(Version(4, 0, 0)));
    assert_eq!(Version::parse("x"), None);
}

/// A quorum queue's management record as the API gives it a few seconds after a node was
/// lost (statistics may be missing), with `live` consumers on live channels.
fn after_a_lost_node(unacked: Option<u64>, live: usize) -> ApiQueue {
    ApiQueue {
        kind: Some("quorum".into()),
        messages_unacknowledged: unacked,
        consumer_details: Some(vec![json!({}); live]),
        leader: Some("rabbit@a".into()),
        ..queue("q.dlq", json!({}))
    }
}

#[test]
fn consumers_no_live_channel_owns_are_lost() {
    // Counted by the queue (passive declare) but not seen live: lost, with what they hold.
    let lost = lost_consumers(&after_a_lost_node(Some(300), 0), 1).unwrap();
    assert_eq!(
        (lost.consumers, lost.held, lost.any_live),
        (1, Some(300), false)
    );
    let w = lost.warning("q.dlq");
    assert!(w.contains("\"q.dlq\": 300 message(s) held unacknowledged by 1 consumer(s)"));
    assert!(
        w.contains("(rabbit@a)") && w.contains("forget_cluster_node"),
        "{w}"
    );
    assert!(!w.contains("by itself"), "{w}");
    // RabbitMQ 4.3 gives them back after its disconnected timeout: said first.
    let w = Lost {
        timed_out_back: true,
        ..lost.clone()
    }
    .warning("q.dlq");
    assert!(
        w.contains("gives them back by itself once the queue's consumer-disconnected timeout")
            && w.contains("each lost consumer's together but not in the DLQ's order")
            && w.contains("rebalance quorum"),
        "{w}"
    );
    // Beside a live consumer, only "up to": the live one may hold some.
    let lost = lost_consumers(&after_a_lost_node(Some(300), 1), 2).unwrap();
    assert!(lost.warning("q").contains("up to 300 message(s)"));
    // Holding nothing: said, and left out of the count.
    let lost = lost_consumers(&after_a_lost_node(Some(0), 0), 1).unwrap();
    assert!(lost.warning("q").contains("hold nothing"));
    // Statistics not there yet: "may be".
    let lost = lost_consumers(&after_a_lost_node(None, 0), 1).unwrap();
    assert!(
        lost.warning("q")
            .contains("any message may be unacknowledged")
    );
    // Every consumer live, none counted, a classic queue, no details: nothing to say.
    assert_eq!(lost_consumers(&after_a_lost_node(Some(5), 2), 2), None);
    assert_eq!(lost_consumers(&after_a_lost_node(Some(5), 0), 0), None);
    let classic = ApiQueue {
        kind: Some("classic".into()),
        ..after_a_lost_node(Some(5), 0)
    };
    assert_eq!(lost_consumers(&classic, 1), None);
    let no_details = ApiQueue {
        consumer_details: None,
        ..after_a_lost_node(Some(5), 0)
    };
    assert_eq!(lost_consumers(&no_details, 1), None);
}

#[test]
fn the_smaller_of_two_held_counts_is_quoted() {
    // The first look still counted what a dry run held a moment ago.
    assert_eq!(nearer_held(Some(1000), Some(300)), Some(300));
    assert_eq!(nearer_held(Some(300), Some(1000)), Some(300));
    assert_eq!(nearer_held(None, Some(300)), Some(300));
    assert_eq!(nearer_held(Some(300), None), None);
}

/// A queue of `kind` on a broker of `version`, without a limit or a timeout of its own.
fn facts(kind: QueueKind, version: Option<Version>) -> QueueFacts {
    QueueFacts {
        kind,
        delivery_limit: None,
        version,
        renew_blocker: None,
        consumer_timeout: None,
    }
}

#[test]
fn only_quorum_queues_from_4_3_take_back_with_the_channel_open() {
    let v = |major, minor| Some(Version(major, minor, 0));
    assert!(timeout_cancels(&facts(QueueKind::Quorum, v(4, 3))));
    assert!(timeout_cancels(&facts(QueueKind::Quorum, v(5, 0))));
    assert!(timeout_cancels(&facts(QueueKind::Quorum, None)));
    assert!(timeout_cancels(&facts(QueueKind::Unknown, v(4, 3))));
    assert!(timeout_cancels(&facts(QueueKind::Unknown, None)));
    // Before 4.3 the timeout closes the channel; classic queues and streams never cancel.
    assert!(!timeout_cancels(&facts(QueueKind::Quorum, v(4, 2))));
    assert!(!timeout_cancels(&facts(QueueKind::Quorum, v(3, 10))));
    assert!(!timeout_cancels(&facts(QueueKind::Unknown, v(4, 0))));
    assert!(!timeout_cancels(&facts(QueueKind::Classic, v(4, 3))));
    assert!(!timeout_cancels(&facts(QueueKind::Classic, None)));
    assert!(!timeout_cancels(&facts(QueueKind::Stream, v(4, 3))));
}

#[test]
fn a_queue_consumer_timeout_is_the_smaller_of_argument_and_policy() {
    let v = Some(Version(4, 3, 0));
    let none = map(json!({}));
    let arg = map(json!({"x-consumer-timeout": 2000}));
    let pol = map(json!({"consumer-timeout": 60000}));
    assert_eq!(consumer_timeout(&arg, &none, v), Some(2000));
    assert_eq!(consumer_timeout(&none, &pol, v), Some(60000));
    assert_eq!(consumer_timeout(&arg, &pol, v), Some(2000));
    let short = map(json!({"consumer-timeout": 500}));
    assert_eq!(consumer_timeout(&arg, &short, v), Some(500));
    assert_eq!(consumer_timeout(&none, &none, v), None);
    // Unknown version: taken as set; before 3.12 the broker ignores both.
    assert_eq!(consumer_timeout(&arg, &none, None), Some(2000));
    assert_eq!(consumer_timeout(&arg, &pol, Some(Version(3, 10, 0))), None);
    assert_eq!(
        consumer_timeout(&arg, &none, Some(Version(3, 12, 0))),
        Some(2000)
    );
    // Not a number, or 0: no timeout dlq can state.
    let text = map(json!({"x-consumer-timeout": "2000"}));
    assert_eq!(consumer_timeout(&text, &none, v), None);
    let zero = map(json!({"x-consumer-timeout": 0}));
    assert_eq!(consumer_timeout(&zero, &none, v), None);
}

#[test]
fn only_quorum_queues_from_4_3_give_back_a_lost_nodes_cancelled_consumers() {
    let v = |major, minor| Some(Version(major, minor, 0));
    assert!(cancelled_given_back(&facts(QueueKind::Quorum, v(4, 3))));
    assert!(cancelled_given_back(&facts(QueueKind::Quorum, v(5, 0))));
    // 4.0.5 strands them (read in its code), 3.10 too (#31's trials); an unknown version
    // or type is taken as the older broker.
    assert!(!cancelled_given_back(&facts(QueueKind::Quorum, v(4, 2))));
    assert!(!cancelled_given_back(&facts(QueueKind::Quorum, v(3, 10))));
    assert!(!cancelled_given_back(&facts(QueueKind::Quorum, None)));
    assert!(!cancelled_given_back(&facts(QueueKind::Unknown, v(4, 3))));
    assert!(!cancelled_given_back(&facts(QueueKind::Classic, v(4, 3))));
}
