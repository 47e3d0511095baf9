//! Arbitrary archive files: verification refuses or accepts, never panics; an accepted file's
//! records all parse.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("dlq-fuzz-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("archive.ndjson");
    std::fs::write(&path, data).unwrap();
    if let Ok((_, trailer)) = dlq::archive::verify(&path) {
        let n = dlq::archive::records(&path).unwrap().map(|r| r.unwrap()).count();
        assert_eq!(n as u64, trailer.count);
    }
});
