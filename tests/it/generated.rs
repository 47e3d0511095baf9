//! Completions, man pages and docs/reference.md are generated from the code
//! (`dlq::generated::files`) and committed; this fails when they drift.
//! `DLQ_BLESS=1 cargo test generated` rewrites them. Also checked here: the README's command
//! list against the subcommands, and the tests docs/RELIABILITY.md cites against tests/.

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

/// The README's command list (the block that starts `dlq [global options] <command>`) names
/// exactly the subcommands of the clap command.
#[test]
fn readme_command_list_names_every_subcommand() {
    let readme = std::fs::read_to_string(crate::common::repo_root().join("README.md")).unwrap();
    let start = readme
        .find("dlq [global options] <command>\n")
        .expect("README.md: no command list starting `dlq [global options] <command>`");
    let block = &readme[start..];
    let block = &block[..block
        .find("```")
        .expect("README.md: command list not closed")];
    let listed: std::collections::BTreeSet<&str> = block
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let cmd = dlq::cli::command();
    let real: std::collections::BTreeSet<&str> = cmd
        .get_subcommands()
        .map(|s| s.get_name())
        .filter(|n| *n != "help")
        .collect();
    assert_eq!(
        listed, real,
        "README.md's command list (left) vs dlq's subcommands (right)"
    );
}

/// Every test docs/RELIABILITY.md cites exists: `file::name` (optionally `::[pg|...]` or
/// `::*`, a test per database) is a `fn name` in tests/it/file.rs, `file::prefix_*` a `fn`
/// starting with the prefix; a bare `snake_case_name` is a `fn` in the source file its cell
/// names (`src/...rs`), else anywhere under tests/.
#[test]
fn reliability_cites_existing_tests() {
    let root = crate::common::repo_root();
    let doc = std::fs::read_to_string(root.join("docs/RELIABILITY.md")).unwrap();
    let fns_in = |text: &str| -> Vec<String> {
        text.split("fn ")
            .skip(1)
            .map(|rest| {
                rest.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect()
            })
            .collect()
    };
    let mut all_tests = Vec::new();
    let mut dirs = vec![root.join("tests")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                all_tests.extend(fns_in(&std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    let is_ident = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    let mut missing = Vec::new();
    let mut checked = 0;
    // The last column of each table row: the tests (or, for property tests, where they are).
    for line in doc.lines().filter(|l| l.starts_with('|')) {
        let Some(cell) = line.trim_end_matches('|').rsplit(" | ").next() else {
            continue;
        };
        let cited: Vec<&str> = cell.split('`').skip(1).step_by(2).collect();
        // A source file's unit tests may sit beside it, in `<stem>/tests.rs`.
        let src_file = cited
            .iter()
            .find(|c| c.starts_with("src/") && c.ends_with(".rs"))
            .map(|f| {
                let beside = root.join(f.trim_end_matches(".rs")).join("tests.rs");
                std::fs::read_to_string(root.join(f)).unwrap()
                    + &std::fs::read_to_string(beside).unwrap_or_default()
            });
        for c in &cited {
            let mut parts = c.split("::");
            let (file, name) = match (parts.next(), parts.next()) {
                (Some(file), Some(name))
                    if is_ident(file) && is_ident(name.trim_end_matches('*')) =>
                {
                    (Some(file), name)
                }
                (Some(name), None) if is_ident(name) && name.contains('_') => (None, *c),
                _ => continue,
            };
            let fns = match (file, &src_file) {
                (Some(file), _) => {
                    let path = root.join(format!("tests/it/{file}.rs"));
                    match std::fs::read_to_string(&path) {
                        Ok(text) => fns_in(&text),
                        Err(_) => {
                            missing.push(format!("{c} (no tests/it/{file}.rs)"));
                            continue;
                        }
                    }
                }
                (None, Some(src)) => fns_in(src),
                (None, None) => all_tests.clone(),
            };
            checked += 1;
            let found = match name.strip_suffix('*') {
                Some(prefix) => fns.iter().any(|f| f.starts_with(prefix)),
                None => fns.iter().any(|f| f == name),
            };
            if !found {
                missing.push(c.to_string());
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} test names found in docs/RELIABILITY.md"
    );
    assert!(
        missing.is_empty(),
        "docs/RELIABILITY.md cites tests that do not exist: {missing:?}"
    );
}
