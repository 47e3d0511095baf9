//! Completions and man pages are generated from the clap definition and committed;
//! this fails when they drift. `DLQ_BLESS=1 cargo test generated` rewrites them.

#[test]
fn completions_and_man_pages_match_the_cli() {
    let root = crate::common::repo_root();
    let bless = std::env::var_os("DLQ_BLESS").is_some();
    let mut stale = Vec::new();
    for (path, content) in dlq::generated::files() {
        let full = root.join(&path);
        if bless {
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(&full, &content).unwrap();
            continue;
        }
        match std::fs::read(&full) {
            Ok(on_disk) if on_disk == content => {}
            _ => stale.push(path.display().to_string()),
        }
    }
    assert!(
        stale.is_empty(),
        "generated files are stale: {stale:?}; run `DLQ_BLESS=1 cargo test generated` and commit"
    );
}

#[test]
fn completions_command_prints_a_script() {
    let out = crate::common::Dlq::new()
        .args(&["completions", "bash"])
        .run()
        .ok();
    assert!(out.contains("_dlq()"), "{out}");
}
