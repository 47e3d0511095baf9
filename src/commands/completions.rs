//! `dlq completions SHELL`: the shell completion script, generated from the clap definition.

use crate::error::Exit;
use anyhow::Result;

pub(crate) fn run(shell: clap_complete::Shell) -> Result<Exit> {
    let mut cmd = crate::cli::command();
    clap_complete::generate(shell, &mut cmd, "dlq", &mut std::io::stdout());
    Ok(Exit::Ok)
}
