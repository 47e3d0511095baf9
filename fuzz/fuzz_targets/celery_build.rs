//! Arbitrary stored args: build either refuses with a reason or returns a message that passes
//! the worker-side validation. Never a panic, never an invalid message.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let origin = dlq::celery::ReplayOrigin {
        table: "t".into(),
        row_id: "1".into(),
        replay_id: "r".into(),
        host: "h".into(),
    };
    if let Ok(msg) = dlq::celery::build("task", Some(text), &origin) {
        dlq::celery::validate(&msg).expect("a built message validates");
    }
});
