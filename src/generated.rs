//! Files generated from the clap definition and committed: shell completions, man pages,
//! and the settings reference (`docs/reference.md`, from `reference::SETTINGS`). A test regenerates them and fails on drift (`DLQ_BLESS=1` rewrites them).

use clap_complete::Shell;
use std::path::PathBuf;

/// Every generated file: its path relative to the repository root and its content.
pub fn files() -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for shell in [
        Shell::Bash,
        Shell::Zsh,
        Shell::Fish,
        Shell::Elvish,
        Shell::PowerShell,
    ] {
        let mut cmd = crate::cli::command();
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut cmd, "dlq", &mut buf);
        let name = match shell {
            Shell::Bash => "dlq.bash",
            Shell::Zsh => "_dlq",
            Shell::Fish => "dlq.fish",
            Shell::Elvish => "dlq.elv",
            _ => "_dlq.ps1",
        };
        out.push((PathBuf::from("completions").join(name), buf));
    }
    let mut cmd = crate::cli::command();
    // Building propagates global options into each subcommand's page.
    cmd.build();
    out.push((PathBuf::from("man/dlq.1"), render_man(cmd.clone())));
    for sub in cmd.get_subcommands() {
        let name = format!("dlq-{}", sub.get_name());
        let page = sub.clone().name(name.clone());
        out.push((PathBuf::from(format!("man/{name}.1")), render_man(page)));
    }
    out.push((
        PathBuf::from("docs/reference.md"),
        crate::reference::markdown().into_bytes(),
    ));
    out
}

fn render_man(cmd: clap::Command) -> Vec<u8> {
    let mut buf = Vec::new();
    // A fixed date keeps the pages reproducible; the version is the crate's.
    clap_mangen::Man::new(cmd)
        .date("2026-11-30")
        .render(&mut buf)
        .expect("render man page to memory");
    buf
}
