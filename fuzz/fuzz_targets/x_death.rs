//! Headers from a hostile producer: decoding, x-death parsing and reason text never panic,
//! and the typed encoding round-trips whatever table the bytes describe.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    if let Ok(table) = dlq::rabbit::codec::table_from_typed_json(&v) {
        let info = dlq::rabbit::death::parse_deaths(Some(&table));
        let _ = info.origin_queue();
        let _ = info.to_json();
        let _ = dlq::rabbit::death::reason_text(Some(&table), &info, &[]);
        let _ = dlq::rabbit::codec::table_to_json(&table);
        let again = dlq::rabbit::codec::table_from_typed_json(&dlq::rabbit::codec::table_to_typed_json(&table))
            .expect("typed encoding of a decoded table decodes");
        assert_eq!(format!("{again:?}"), format!("{table:?}"));
    }
});
