//! dramatiq's dead letters (`<queue>.XQ`) read as dramatiq wrote them: the message id from the
//! body, the actor as the task, the last traceback as the reason, the retries; grouped by
//! actor, and replayed by actor back to the queue they died in. A stock dramatiq 2.2 worker
//! fails the tasks (tests/it/support/celery_worker.rs's venv has dramatiq).

use crate::broker::Broker;
use crate::celery_worker::python;
use serde_json::Value;
use std::process::Command;

/// Sends `charges` messages to an actor that fails after one retry and `shipments` to one
/// that fails at once, runs a stock worker until all are dead-lettered, and prints the ids.
const APP: &str = r#"
import json, sys, time
import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.middleware import AgeLimit, Callbacks, Pipelines, Retries, TimeLimit

url, charges, shipments = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
# No Prometheus middleware: its exposition port would collide between parallel tests.
broker = RabbitmqBroker(url=url, middleware=[
    AgeLimit(), TimeLimit(), Callbacks(), Pipelines(), Retries(min_backoff=10, max_backoff=50)])
dramatiq.set_broker(broker)

@dramatiq.actor(max_retries=1)
def charge(n):
    raise ValueError(f"card declined {n}")

@dramatiq.actor(max_retries=0)
def ship(n):
    raise KeyError("address")

ids = {"charge": [charge.send(i).message_id for i in range(charges)],
       "ship": [ship.send(i).message_id for i in range(shipments)]}
worker = dramatiq.Worker(broker, worker_threads=1)
worker.start()
deadline = time.time() + 60
while time.time() < deadline:
    xq = broker.channel.queue_declare("default.XQ", passive=True).method.message_count
    if xq == charges + shipments:
        break
    time.sleep(0.1)
worker.stop()
broker.close()
print(json.dumps(ids))
"#;

fn run_app(url: &str, charges: usize, shipments: usize) -> Value {
    let out = Command::new(python())
        .args(["-c", APP, url, &charges.to_string(), &shipments.to_string()])
        .output()
        .expect("python with dramatiq (pip install -r .ci/requirements.txt)");
    assert!(
        out.status.success(),
        "dramatiq app failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

#[tokio::test]
async fn dramatiq_dead_letters_show_actor_error_and_id_and_replay_by_actor() {
    let b = Broker::new("dramatiq").await;
    let ids = run_app(&b.amqp_url(), 4, 3);
    b.wait_depth("default.XQ", 7).await;

    let recs = b
        .run(&["inspect", "-Q", "default.XQ", "-o", "json", "--limit", "50"])
        .await
        .json();
    let recs = recs.as_array().unwrap();
    assert_eq!(recs.len(), 7);
    for r in recs {
        let task = r["task"].as_str().unwrap();
        let id = r["id"].as_str().unwrap();
        let sent: Vec<&str> = ids[task]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(
            sent.contains(&id),
            "{id} is not a {task} message id: {sent:?}"
        );
        assert_eq!(r["framework"], "dramatiq", "{r}");
        let motivo = r["motivo"].as_str().unwrap();
        match task {
            // Retried once: the retry carries the first attempt's traceback.
            "charge" => {
                assert!(motivo.contains("ValueError: card declined"), "{motivo}");
                assert_eq!(r["retries"], 1, "{r}");
            }
            // Failed at once: dramatiq kept no traceback; RabbitMQ's reason stays.
            _ => assert_eq!(motivo, "rejected", "{r}"),
        }
    }

    let groups = b
        .run(&[
            "filter",
            "-Q",
            "default.XQ",
            "--group-by",
            "task",
            "-o",
            "json",
        ])
        .await
        .json();
    let count = |t: &str| {
        groups
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["task"] == t)
            .map(|g| g["count"].as_u64().unwrap())
    };
    assert_eq!((count("charge"), count("ship")), (Some(4), Some(3)));

    // Replayed by actor: the shipments go back to the queue they died in, the charges stay.
    b.run(&["replay", "-Q", "default.XQ", "--task", "ship", "--yes"])
        .await
        .ok();
    b.wait_depth("default", 3).await;
    assert_eq!(b.depth("default.XQ").await, 4);
    b.delete().await;
}
